/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device code the example g-call servers share, for both backends:
 *
 * the listening socket, shared by every block: block 0 opens it
 * (gsrv_listen) and publishes the descriptor, the other blocks wait for
 * it, and the host program waits (app_wait_listening) to say where it
 * listens. Bounded receives are the server layer's gsrv_recv_all.
 */
#ifndef GLISTENER_CUH
#define GLISTENER_CUH

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "gsock.cuh"
#include "gsock_server.cuh" /* gsrv_listen, gsrv_wait_word, gsrv_recv_all */

struct app_listener {
	struct sockaddr_storage addr; /* where to listen */
	uint32_t addrlen;
	int32_t reuseport; /* set SO_REUSEPORT: share the port with others */
	int32_t listen_fd; /* block 0 publishes it */
	int32_t ready; /* 0 not yet, 1 listening, < 0 -errno */
	struct sockaddr_storage bound; /* the address actually bound */
	uint32_t boundlen;
};

/* Every block: the listening descriptor, or a negative errno. */
GSOCK_DEVICE long app_get_listener(struct gsock_dev gs, struct app_listener *l)
{
	long lfd;

	if (gs_bid() == 0) {
		lfd = gsrv_listen(gs, &l->addr, l->addrlen, l->reuseport,
				  &l->bound, &l->boundlen);
		if (gs_tid() == 0) {
			l->listen_fd = (int32_t)lfd;
			gs_st32((uint32_t *)&l->ready,
				(uint32_t)(lfd < 0 ? lfd : 1));
		}
		return lfd;
	}
	lfd = (int32_t)gsrv_wait_word(gs, (const uint32_t *)&l->ready, 0);
	return lfd == 1 ? l->listen_fd : lfd;
}

#endif
