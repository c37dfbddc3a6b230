/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who listens at a control socket, for the project's own programs
 * (libgsock, gsock-stat, gsockd): not in the installed gsock_ctl.h, since
 * struct ucred needs _GNU_SOURCE before the first system header.
 */
#ifndef GSOCK_CTL_PEER_H
#define GSOCK_CTL_PEER_H

#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

/*
 * Whether the listener at the other end of control connection fd belongs
 * to this user or to root, as the kernel says (SO_PEERCRED: who made the
 * listening socket). Anyone may bind a path in /tmp first; an application
 * that handed its arena to another user's process would give it every
 * byte of its traffic. Else 0 and why in buf, naming path.
 */
static inline int gs_ctl_peer_ok(int fd, const char *path, char *buf,
				 size_t len)
{
	struct ucred c;
	socklen_t clen = sizeof(c);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &clen) < 0) {
		snprintf(buf, len, "cannot ask who listens at %s", path);
		return 0;
	}
	if (c.uid != geteuid() && c.uid != 0) {
		snprintf(
			buf, len,
			"%s is held by uid %u (pid %d), not by this user (uid %u) or root: not this user's gsockd",
			path, (unsigned)c.uid, (int)c.pid, (unsigned)geteuid());
		return 0;
	}
	return 1;
}

#endif /* GSOCK_CTL_PEER_H */
