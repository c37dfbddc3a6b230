/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the rsocket route's files share: librdmacm's calls as loaded, the
 * guard to make them with, and the helpers one file gives the others:
 * rs.c (loading, exec rules, connect, accept, the I/O calls), rs_lq.c
 * (the listen queue), rs_wait.c (rpoll, poll, select, epoll), rs_fork.c
 * (fork).
 */
#ifndef PL_RS_INT_H
#define PL_RS_INT_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <poll.h>
#include <pthread.h>

#include "fdtab.h"

/* librdmacm's calls, as loaded (rs.c). */
struct pl_rdmacm {
	int (*rsocket)(int, int, int);
	int (*rbind)(int, const struct sockaddr *, socklen_t);
	int (*rlisten)(int, int);
	int (*raccept)(int, struct sockaddr *, socklen_t *);
	int (*rconnect)(int, const struct sockaddr *, socklen_t);
	int (*rshutdown)(int, int);
	int (*rclose)(int);
	ssize_t (*rrecv)(int, void *, size_t, int);
	ssize_t (*rrecvfrom)(int, void *, size_t, int, struct sockaddr *,
			     socklen_t *);
	ssize_t (*rrecvmsg)(int, struct msghdr *, int);
	ssize_t (*rsend)(int, const void *, size_t, int);
	ssize_t (*rsendto)(int, const void *, size_t, int,
			   const struct sockaddr *, socklen_t);
	ssize_t (*rsendmsg)(int, const struct msghdr *, int);
	ssize_t (*rread)(int, void *, size_t);
	ssize_t (*rreadv)(int, const struct iovec *, int);
	ssize_t (*rwrite)(int, const void *, size_t);
	ssize_t (*rwritev)(int, const struct iovec *, int);
	int (*rpoll)(struct pollfd *, nfds_t, int);
	int (*rgetpeername)(int, struct sockaddr *, socklen_t *);
	int (*rgetsockname)(int, struct sockaddr *, socklen_t *);
	int (*rsetsockopt)(int, int, int, const void *, socklen_t);
	int (*rgetsockopt)(int, int, int, void *, socklen_t *);
	int (*rfcntl)(int, int, ...);
};
extern struct pl_rdmacm pl_rdmacm;

/* Run a librdmacm call with the preload out of its way. */
#define RS(call)                     \
	({                           \
		__typeof__(call) r_; \
		int e_;              \
		pl_busy++;           \
		r_ = (call);         \
		e_ = errno;          \
		pl_busy--;           \
		errno = e_;          \
		r_;                  \
	})

/* rpoll for the preload's waits: a finite timeout without librdmacm's leak. */
int pl_rs_rpoll(struct pollfd *p, nfds_t n, int timeout);
/* CLOCK_MONOTONIC, in milliseconds. */
long long pl_now_ms(void);
/* Options the application set on kernel socket fd, set on rsocket r too. */
void pl_rs_replay_options(int fd, int r);
/* Make rsocket r's CM event channel (descriptor r) non-blocking (rs.c says why). */
void pl_rs_cm_nonblock(int r);
/* A descriptor that becomes readable when connected rsocket r's peer is gone. */
int pl_rs_watch_peer(int r);
/* Wait (up to a second) until accepted rsocket r is established: 0, else -1. */
int pl_rs_settle(int r);
/* s, a connection, is now an rsocket: kernel epoll sets let fd go. */
void pl_rs_ep_unwatch_kernel(int fd, struct pl_sock *s);
/* The reverse: a connection the kernel carries after all joins the kernel's sets. */
void pl_rs_ep_rewatch_kernel(int fd, struct pl_sock *s);
/* A thread of the preload's own, every signal blocked: 0 or an errno. */
int pl_rs_start_thread(pthread_t *t, int detached, void *(*fn)(void *),
		       void *arg);
/* Listening rsocket r's accepting thread and queue, or NULL (errno). */
struct pl_lq *pl_rs_lq_start(int r);
/* q's eventfd: readable while q holds connections (poll and epoll on it). */
int pl_rs_lq_fd(const struct pl_lq *q);
/* An accepted, established rsocket from q, or -1 (EAGAIN: none yet). */
int pl_rs_lq_take(struct pl_lq *q);
/* End q's thread, close what it queued and its eventfd. */
void pl_rs_lq_stop(struct pl_lq *q);

#endif
