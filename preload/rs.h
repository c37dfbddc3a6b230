/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rsocket route of the preload: librdmacm's rsockets, loaded with
 * dlopen only when a socket is routed there. An rsocket-routed socket
 * keeps its kernel socket as the application's descriptor (so the number
 * stays the application's and the kernel port stays reserved); its
 * entry's rs is the rsocket the calls go to.
 */
#ifndef PL_RS_H
#define PL_RS_H

#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include "fdtab.h"
#include "real.h"

/* What pl_rs_connect and pl_rs_listen return when the kernel must do it. */
#define PL_RS_FALLBACK (-2)

#ifdef HAVE_RDMACM
/* 0 when librdmacm is loaded; else -1 and *why says why. */
int pl_rs_load(const char **why);

/* The calls of an rsocket-routed descriptor, called with its rsocket. */
extern struct pl_real pl_rs_calls;

/*
 * Connect s over rsocket; PL_RS_FALLBACK when the peer is not reachable
 * so. A non-blocking socket's connect returns -1 with EINPROGRESS, as the
 * kernel's does, and goes on (pl_rs_connect_progress).
 */
int pl_rs_connect(int fd, struct pl_sock *s, const struct sockaddr *sa,
		  socklen_t len);
/*
 * Where s's non-blocking rsocket connect stands: connected, still going,
 * or failed, and then the kernel connects fd instead (non-blocking) and
 * fd is a plain kernel descriptor from here on: returns 1 in that case.
 */
int pl_rs_connect_progress(int fd, struct pl_sock *s);
/* Listen on rsocket as well as on the kernel (fd, already listening). */
int pl_rs_listen(int fd, struct pl_sock *s, int backlog);
/* Accept on whichever of the rsocket and the kernel listener has a peer. */
int pl_rs_accept(int fd, struct pl_sock *s, struct sockaddr *sa,
		 socklen_t *len, int flags);
/*
 * s is an rsocket made before this process forked: its verbs resources
 * are the parent's, so here it may only be closed (which leaves the
 * parent's connection alone); every other call fails with EOPNOTSUPP and
 * the first says so on stderr. rsockets do not survive fork or exec; a
 * program that hands connections to children runs in fork-safe mode
 * (RDMAV_FORK_SAFE=1, as rsocket documents), or on the kernel route.
 */
int pl_rs_stale(const struct pl_sock *s);
/*
 * Before exec: an rsocket connection does not cross it (its queue pair
 * and memory are this image's), and its descriptor would reach the new
 * program as a kernel socket that is not connected. 0 when exec may go
 * on; -1 with EOPNOTSUPP, said on stderr, when one of this process's
 * rsocket connections lacks FD_CLOEXEC. A child's (fork, vfork, clone)
 * copies of its parent's rsockets do not count, nor do listeners (their
 * kernel half goes on taking TCP clients).
 */
int pl_rs_exec_check(void);
/*
 * Fork-safe mode (RDMAV_FORK_SAFE=1): move s, a kernel connection with
 * fork set, to an rsocket now if its peer takes part (rs_fork.c); else
 * it becomes a plain kernel descriptor. A client still connecting waits.
 * Called before the first data call, poll or epoll registration.
 */
void pl_rs_fork_move(int fd, struct pl_sock *s);
/* Fork-safe mode: offer the move to a just-accepted kernel connection; 0 if sent. */
int pl_rs_fork_offer(int fd);
/* The application changed its O_NONBLOCK. */
void pl_rs_setfl(struct pl_sock *s, int flags);
/* poll over descriptors of both routes; *done is 0 if none was rsocket. */
int pl_rs_poll(struct pollfd *fds, nfds_t n, int timeout, int *done);
/* select, by way of pl_rs_poll. */
int pl_rs_select(int n, fd_set *r, fd_set *w, fd_set *e, int timeout_ms,
		 int *done);
/* epoll_ctl of an rsocket-routed descriptor, kept beside the kernel set. */
int pl_rs_epoll_ctl(int epfd, int op, int fd, struct pl_sock *s,
		    struct epoll_event *ev);
/* epoll_wait over a set with rsocket members; *done is 0 if it has none. */
int pl_rs_epoll_wait(int epfd, struct epoll_event *out, int max, int timeout,
		     int *done);
/* Whether epfd is an epoll set with rsocket members. */
int pl_rs_epoll_has(int epfd);
/* The epoll descriptor epfd is closed. */
void pl_rs_epoll_forget(int epfd);
/* The same for every set numbered in [lo, hi] (close_range, closefrom). */
void pl_rs_epoll_forget_range(unsigned lo, unsigned hi);
#endif

#endif
