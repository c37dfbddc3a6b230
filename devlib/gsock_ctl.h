/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control socket protocol between libgsock and gsockd: an AF_UNIX
 * SOCK_SEQPACKET connection that lives as long as the application. Its
 * first message hands over the arena; its end, either way, ends the
 * application's registration.
 *
 *   bridge -> app   gs_ctl_welcome: the protocol version and how many
 *                   workers (doorbell queues) the arena should have;
 *                   or a gs_ctl_reply refusing the application
 *   app -> bridge   gs_ctl_hello, with the arena memfd in SCM_RIGHTS
 *   bridge -> app   gs_ctl_reply: status 0, or -errno and a sentence
 *
 * A reply and a welcome are told apart by their magic.
 */
#ifndef GSOCK_CTL_H
#define GSOCK_CTL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define GS_CTL_MAGIC 0x6c746367u /* "gctl" */
#define GS_CTL_WELCOME_MAGIC 0x6c657767u /* "gwel" */
#define GS_CTL_VERSION 3

struct gs_ctl_welcome {
	uint32_t magic; /* GS_CTL_WELCOME_MAGIC */
	uint32_t version; /* GS_CTL_VERSION */
	uint32_t workers; /* gsockd's workers: doorbell queues to make */
	uint32_t pad;
};

struct gs_ctl_hello {
	uint32_t magic; /* GS_CTL_MAGIC */
	uint32_t version; /* GS_CTL_VERSION */
	uint64_t arena_size; /* bytes of the memfd that comes with it */
};

struct gs_ctl_reply {
	uint32_t magic; /* GS_CTL_MAGIC */
	int32_t status; /* 0 accepted, else negative errno */
	char msg[248]; /* why, as a sentence, when status != 0 */
};

/*
 * The per-user default control socket path: $XDG_RUNTIME_DIR/gsockd.sock,
 * else /tmp/gsockd-UID.sock.
 */
static inline void gs_ctl_default_path(char *buf, size_t len)
{
	const char *dir = getenv("XDG_RUNTIME_DIR");

	if (dir && *dir)
		snprintf(buf, len, "%s/gsockd.sock", dir);
	else
		snprintf(buf, len, "/tmp/gsockd-%u.sock", (unsigned)getuid());
}

#endif /* GSOCK_CTL_H */
