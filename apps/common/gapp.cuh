/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device code the example g-call servers share, for both backends:
 *
 * - the listening socket, shared by every block: block 0 opens it and
 *   publishes the descriptor, the other blocks wait for it, and the host
 *   program waits (app_wait_listening) to say where it listens;
 * - a receive bounded by a timeout, for bytes a peer owes (the rest of
 *   a request, a store's reply), so that a stalled peer costs its
 *   connection, never the block.
 */
#ifndef GLISTENER_CUH
#define GLISTENER_CUH

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "gsock.cuh"

struct app_listener {
	struct sockaddr_storage addr; /* where to listen */
	uint32_t addrlen;
	int32_t reuseport; /* set SO_REUSEPORT: share the port with others */
	int32_t listen_fd; /* block 0 publishes it */
	int32_t ready; /* 0 not yet, 1 listening, < 0 -errno */
	struct sockaddr_storage bound; /* the address actually bound */
	uint32_t boundlen;
};

/* Thread 0 of a block other than 0: wait until block 0 published. */
GSOCK_DEVICE int32_t app_wait_ready_t0(struct gsock_dev gs,
				       struct app_listener *l)
{
	unsigned i = 0;

	for (;;) {
		int32_t r = (int32_t)gs_ld32((const uint32_t *)&l->ready);

		if (r)
			return r;
		r = gs_wait_turn(gs, &i);
		if (r)
			return r;
	}
}

GSOCK_DEVICE int app_open_listener(struct gsock_dev gs, struct app_listener *l)
{
	int family = ((struct sockaddr *)&l->addr)->sa_family;
	int one = 1, fd, r = 0;
	socklen_t blen = sizeof(l->bound);

	fd = gsocket(gs, family, SOCK_STREAM, 0);
	if (fd < 0)
		return fd;
	if (family != AF_UNIX)
		gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof(one));
	if (l->reuseport)
		r = gsetsockopt(gs, fd, SOL_SOCKET, SO_REUSEPORT, &one,
				sizeof(one));
	if (r == 0)
		r = gbind(gs, fd, (struct sockaddr *)&l->addr, l->addrlen);
	if (r == 0)
		r = glisten(gs, fd, 1024);
	if (r == 0)
		r = ggetsockname(gs, fd, (struct sockaddr *)&l->bound, &blen);
	if (r < 0) {
		gclose(gs, fd);
		return r;
	}
	if (gs_tid() == 0)
		l->boundlen = blen;
	return fd;
}

/* Every block: the listening descriptor, or a negative errno. */
GSOCK_DEVICE long app_get_listener(struct gsock_dev gs, struct app_listener *l)
{
	long lfd;

	if (gs_bid() == 0) {
		lfd = app_open_listener(gs, l);
		if (gs_tid() == 0) {
			l->listen_fd = (int32_t)lfd;
			gs_st32((uint32_t *)&l->ready,
				(uint32_t)(lfd < 0 ? lfd : 1));
		}
		return lfd;
	}
	lfd = 0;
	if (gs_tid() == 0) {
		lfd = app_wait_ready_t0(gs, l);
		if (lfd > 0)
			lfd = l->listen_fd;
	}
	return gs_bcast(lfd);
}

/*
 * Receive n bytes (all, or with all == 0 at least one) within timeout_ms
 * of quiet: the count received (short at EOF), or a negative errno.
 */
GSOCK_DEVICE long app_recv_timed(struct gsock_dev gs, int fd, uint8_t *buf,
				 uint64_t n, int all, int timeout_ms)
{
	GS_SHARED struct gpollfd pfd;
	uint64_t got = 0;

	while (got < n && (all || got == 0)) {
		long r = grecv(gs, fd, buf + got, n - got, MSG_DONTWAIT);

		if (r > 0) {
			got += (uint64_t)r;
			continue;
		}
		if (r == 0)
			break;
		if (r != -EAGAIN)
			return r;
		if (gs_tid() == 0)
			pfd = (struct gpollfd){ fd, POLLIN, 0 };
		gs_sync();
		r = gpoll(gs, &pfd, 1, timeout_ms * 1000L); /* microseconds */
		if (r < 0)
			return r;
		if (r == 0)
			return -ETIMEDOUT;
	}
	return (long)got;
}

#endif
