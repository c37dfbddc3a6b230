/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: gsockd's control protocol and arena registration, with
 * gsockd's own code (bridge/app.c and what it calls) in this process. One
 * input is one application connecting over a real SOCK_SEQPACKET pair:
 *
 *   byte 0      how it speaks: bit 0 send a hello at all, bit 1 pass the
 *               arena memfd with it, bit 2 seal the memfd, bit 3 pass a
 *               second descriptor, bit 4 close before the reply, bit 5
 *               once registered, let the worker serve the arena
 *   bytes 1-32  the hello (struct gs_ctl_hello, as sent)
 *   the rest    the arena's bytes (header, geometry, command slots,
 *               doorbells, socket table, rings)
 *
 * gsockd's side runs exactly what it runs for a real connection
 * (br_app_new, br_app_event, a worker's turns, br_reap) on this one
 * thread, with one worker driven by br_worker_turn(): a registered arena
 * is validated and mapped, its doorbells and commands served (real
 * sockets: loopback only, no unix paths, see t/fuzz_common.h), then
 * let go.
 * Anything gsockd does wrong with such input is a crash, a leak or a
 * sanitizer report here. t/fuzz.t runs it briefly on t/fuzz/ctl/.
 */
#define _GNU_SOURCE
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../bridge/bridge.h"
#include "../bridge/log.h"
#include "../devlib/gsock_ctl.h"
#include "fuzz_common.h"

enum {
	F_HELLO = 1,
	F_MEMFD = 2,
	F_SEAL = 4,
	F_EXTRA = 8,
	F_HANGUP = 16,
	F_SERVE = 32,
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_bridge_init(1);
	return 0;
}

/* The application's arena as a memfd holding the input's bytes. */
static int arena_fd(const uint8_t *data, size_t n, int seal)
{
	int fd = memfd_create("fuzz-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		abort();
	if (n && write(fd, data, n) != (ssize_t)n)
		abort();
	if (seal)
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ucred me = { getpid(), getuid(), getgid() };
	struct gs_ctl_hello hello = { 0 };
	char cbuf[CMSG_SPACE(2 * sizeof(int))] = { 0 }, msgbuf[512];
	struct iovec iov = { &hello, sizeof(hello) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	int sv[2], fds[2] = { -1, -1 }, nfds = 0;
	uint8_t how;
	struct br_app *a;

	if (size < 1 + sizeof(hello) || size > (1u << 20))
		return -1; /* not kept in the corpus */
	how = data[0];
	memcpy(&hello, data + 1, sizeof(hello));
	data += 1 + sizeof(hello);
	size -= 1 + sizeof(hello);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	a = br_app_new(sv[0], &me);
	if (!a)
		abort(); /* no limit is reached: every app is let go below */
	if (recv(sv[1], msgbuf, sizeof(msgbuf), MSG_DONTWAIT) !=
	    sizeof(struct gs_ctl_welcome))
		abort(); /* gsockd speaks first */
	if (how & F_MEMFD)
		fds[nfds++] = arena_fd(data, size, how & F_SEAL);
	if (how & F_EXTRA)
		fds[nfds++] = dup(sv[1]);
	if (nfds) {
		struct cmsghdr *cm;

		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	if (how & F_HELLO)
		sendmsg(sv[1], &msg, MSG_NOSIGNAL);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (how & F_HANGUP)
		shutdown(sv[1], SHUT_RDWR);
	br_app_event(a, (how & F_HANGUP) ? EPOLLIN | EPOLLRDHUP : EPOLLIN);
	/* registered: the worker takes it, and serves it if asked to */
	for (int turn = 0; turn < ((how & F_SERVE) ? 8 : 1); turn++)
		br_worker_turn(&br.workers[0]);
	/* a registered application's next event: its end */
	if (!br_app_dead(a)) {
		close(sv[1]);
		sv[1] = -1;
		br_app_event(a, EPOLLIN | EPOLLHUP);
	}
	if (!br_app_dead(a))
		abort(); /* its connection is gone: so must it be */
	br_worker_turn(&br.workers[0]); /* the worker lets go of it */
	br_reap();
	if (br.apps || br.napps || br.npending)
		abort(); /* nothing of it is left */
	if (sv[1] >= 0)
		close(sv[1]);
	return 0;
}
