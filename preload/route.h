/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Route decisions for preloaded sockets: GSOCK_TRANSPORT, the rules of
 * gsock.conf, and whether this host can take the rsocket route at all.
 * Also the preload's log (GSOCK_LOG).
 */
#ifndef PL_ROUTE_H
#define PL_ROUTE_H

#include <sys/socket.h>

#include "../conf/gsconf.h"

enum pl_log_level {
	PL_LOG_ERROR, /* the preload cannot do what it was asked */
	PL_LOG_WARN, /* a problem the program keeps running through */
	PL_LOG_INFO, /* a route other than the kernel's */
	PL_LOG_DEBUG, /* every decision */
};

/* Read GSOCK_LOG, GSOCK_TRANSPORT, RDMAV_FORK_SAFE and the rules; once, by pl_init. */
void pl_route_init(void);

/* The route for fd, a socket taking role towards sa; logged at debug. */
enum gs_route pl_route_decide(int fd, enum gs_role role,
			      const struct sockaddr *sa);

/* Whether this process can take the rsocket route at all (an RDMA device). */
int pl_route_rdma_possible(void);

/*
 * Fork-safe mode: RDMAV_FORK_SAFE is set (and not 0), as rsocket(7) asks
 * of programs that fork. rsocket-routed connections then start on the
 * kernel and move to rsocket at their first data call (rs_fork.c).
 */
int pl_route_fork_safe(void);

/*
 * Whether a client socket fd connecting to sa may ask gsockd for the
 * direct path: GSOCK_DIRECT, then the rules, then gsock.conf's direct.
 */
int pl_route_direct(int fd, const struct sockaddr *sa);

/* gsockd's control socket: GSOCK_CONTROL, gsock.conf's control, the default. */
const char *pl_route_control(void);

void pl_log(enum pl_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
