/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The preload's fd table: which application descriptors are sockets the
 * preload still has to route, and where their calls go.
 *
 * Locking contract:
 * - A slot holds a struct pl_sock pointer or NULL. Reading NULL needs no
 *   lock (a plain kernel descriptor: the common case costs one atomic
 *   load). Taking a non-NULL entry goes through pl_fd_get(), which holds
 *   the table's read lock while it adds a reference; the caller drops it
 *   with pl_sock_put().
 * - pl_fd_set() and pl_fd_clear() take the write lock; each slot owns one
 *   reference to its entry. The entry is freed when its last reference
 *   goes, so a call in flight on a descriptor another thread closes never
 *   sees freed memory.
 * - An entry's own fields (state, route) change under its mutex.
 */
#ifndef PL_FDTAB_H
#define PL_FDTAB_H

#include <pthread.h>
#include <sys/socket.h>

#include "../conf/gsconf.h"

struct pl_lq;
struct pl_dconn;

/* The fork-safe mode's part in a socket (rs_fork.c). */
enum pl_fork {
	PL_FORK_NONE, /* none, or its move is over */
	PL_FORK_CLIENT, /* a kernel connection to move, as the connecting end */
	PL_FORK_SERVER, /* a kernel connection to move, as the accepting end */
	PL_FORK_LISTENER, /* a kernel listener: its connections are PL_FORK_SERVER */
};

/* Where a routed socket stands. */
enum pl_state {
	PL_UNDECIDED, /* created; its route is chosen at connect or listen */
	PL_DECIDED, /* route chosen */
};

struct pl_sock {
	int refs; /* atomic: one per slot, one per call in flight */
	pthread_mutex_t lock; /* state and route */
	enum pl_state state;
	enum gs_route route;
	int domain; /* AF_INET or AF_INET6 */
	int rs; /* GS_ROUTE_RSOCKET: the rsocket; else -1 */
	int nonblock; /* the application asked for O_NONBLOCK */
	int listening; /* a listener: rsocket and kernel both take peers */
	/*
	 * GS_ROUTE_RSOCKET: a kernel descriptor that is readable when the
	 * rsocket needs the application: a listener's accepted rsockets are
	 * waiting (an eventfd), a connection's peer is gone (a duplicate of
	 * its CM event channel). -1 until then.
	 */
	int watch_fd;
	struct pl_lq *lq; /* a listener's accepting thread */
	unsigned gen; /* pl_fork_gen when its rsocket was made */
	int broken; /* a call saw the connection fail: close without rsocket's drain */
	enum pl_fork fork; /* under lock */
	/*
	 * GS_ROUTE_RSOCKET: rs is connecting without blocking (the
	 * application's socket is non-blocking); peer is where to, for the
	 * kernel to connect to instead if rsocket's connect fails. Under lock.
	 */
	int connecting;
	struct sockaddr_storage peer;
	socklen_t peer_len;
	int in_epoll; /* added to an epoll set before its route was chosen */
	struct pl_dconn *dc; /* GS_ROUTE_DIRECT: the connection (direct.c) */
};

/* Called when an entry's last reference goes (set by the rsocket route). */
extern void (*pl_sock_release)(struct pl_sock *s);
/* The same, first, for an entry of the direct route (set by direct.c). */
extern void (*pl_sock_release_direct)(struct pl_sock *s);

/* fds the table covers: [0, PL_FD_MAX). Larger ones are never routed. */
#define PL_FD_MAX (1 << 20)

struct pl_sock *pl_sock_new(int domain);
void pl_sock_put(struct pl_sock *s);

/* The entry of fd with a reference taken, or NULL for a plain fd. */
struct pl_sock *pl_fd_get(int fd);
/*
 * The entries of fds[0..n) that keep() says yes to (it runs under the
 * table's read lock and must not change the table), a reference taken on
 * each, into out: how many, or -1 (none taken) when more than max.
 */
int pl_fd_get_each(const int *fds, int n, int (*keep)(const struct pl_sock *s),
		   struct pl_sock **out, int max);
/*
 * For each fds[i]: its entry, a reference taken, into out[i] when
 * keep(s, i, arg) says yes (under the table's read lock, as above), else
 * NULL. How many were taken.
 */
int pl_fd_get_at(const int *fds, int n,
		 int (*keep)(const struct pl_sock *s, int i, const void *arg),
		 const void *arg, struct pl_sock **out);
/* Make fd name s (taking a reference); 0, or -1 if fd is out of range. */
int pl_fd_set(int fd, struct pl_sock *s);
/* Forget fd, dropping its reference. */
void pl_fd_clear(int fd);
/* Forget fd; its reference is the caller's to drop (NULL: a plain fd). */
struct pl_sock *pl_fd_take(int fd);
/* Whether fd has an entry (no lock, no reference: a hint for close). */
int pl_fd_has(int fd);
/* An entry pl_fd_take_range took: the fd it was at, and its reference. */
struct pl_fd_taken {
	int fd;
	struct pl_sock *s;
};
/*
 * Forget every fd in [lo, hi] (close_range, closefrom): what they held
 * goes into *out (malloc'd, NULL when none), the caller's to drop (or
 * put back) and to free; how many, or -1 when out of memory (nothing
 * forgotten).
 */
int pl_fd_take_range(unsigned lo, unsigned hi, struct pl_fd_taken **out);
/*
 * The lowest fd whose entry match() says yes to, or -1 (also when a
 * writer holds the table: it never waits); match runs with the table's
 * read lock held (it must not change the table).
 */
int pl_fd_find(int (*match)(int fd, const struct pl_sock *s));
/*
 * fork(): the forking thread holds the table's lock across the fork
 * (pthread_atfork), so the child never inherits it held by a thread it
 * does not have; then the parent lets it go and the child starts it
 * afresh (pl_fd_forked).
 */
void pl_fd_lock_all(void);
void pl_fd_unlock_all(void);
void pl_fd_forked(void);

#endif
