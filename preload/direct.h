/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The direct route of the preload: a client that connects to a listener
 * of a GPU application on this host moves its bytes through a segment
 * of gsockd's direct pool (gsock_arena.h, gs_dseg), not through the
 * kernel's TCP and gsockd.
 *
 * The kernel connection is made as always and stays (hidden, close-on-
 * exec), holding the ports, the addresses and the socket options, and
 * carrying FIN and RST. The application's descriptor becomes one end of
 * a socketpair whose other end gsockd holds: it is readable when the
 * ring has bytes (or the connection ended) and writable when the ring
 * has room, so poll, epoll and select work on it unchanged, and dup and
 * fork share it as they share any descriptor.
 */
#ifndef PL_DIRECT_H
#define PL_DIRECT_H

#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include "fdtab.h"
#include "real.h"

/* What pl_direct_connect returns when the connection takes another route. */
#define PL_DIRECT_NO (-2)

/*
 * Connect fd (s, an undecided TCP socket) to sa over the direct path if
 * a GPU application of this user's gsockd listens there; else
 * PL_DIRECT_NO and fd is untouched but for a bind to a port of its own
 * on the address sa is reached from. Otherwise connect(2)'s result.
 */
int pl_direct_connect(int fd, struct pl_sock *s, const struct sockaddr *sa,
		      socklen_t len);

/* The calls of a direct descriptor (the application's fd, pl_cur_sock). */
extern struct pl_real pl_direct_calls;

/*
 * listen(2) on fd succeeded: name the listener to gsockd, so that a GPU
 * application's gconnect to it may take the direct path.
 */
void pl_direct_listen(int fd);
/*
 * fd was accepted on listener lfd: if lfd was named to gsockd and a GPU
 * application's gconnect waits for this connection (gsockd says so), fd
 * becomes a direct connection's descriptor, carried by a new entry (*s,
 * one reference, for the caller to put in the table): 1. 0: fd is
 * untouched; -1 with errno ECONNABORTED: the connection is lost (the
 * peer sees it end), the caller closes fd.
 */
int pl_direct_accepted(int fd, int lfd, struct pl_sock **s);
/*
 * The named listeners' descriptors: whether any of lo..hi is one; lo..hi
 * are no longer (closed, or duplicated over); newfd is one if oldfd is.
 */
int pl_direct_named_in(int lo, int hi);
void pl_direct_named_gone(int lo, int hi);
void pl_direct_named_copy(int oldfd, int newfd);

/* s's last reference is gone: close the hidden descriptors. */
void pl_direct_release(struct pl_sock *s);
/* A's O_NONBLOCK was set (on) or cleared through fcntl in this process. */
void pl_direct_nonblock(struct pl_sock *s, int on);

/*
 * Threads in a wait that began while the process had no direct
 * connection (atomic): the preload does not know what they cover, so a
 * direct connection's wake-up requests are left alone while any lasts.
 */
extern int pl_plain_waits;

/* Whether this process holds a direct connection (a hint, no lock). */
int pl_direct_active(void);

/*
 * The direct connections one wait covers, held for the wait (a reference
 * each, so none is freed under it): those a poll or select names. An
 * epoll wait on a set this process made and nothing changed behind the
 * preload (exact: not duplicated, passed, nested or inherited by a fork)
 * covers the set's own direct members. Any other epoll wait covers every
 * direct connection of the process (all) before it may sleep: such sets
 * hide members from the preload.
 */
struct pl_dscope {
	struct pl_sock **s;
	int n, cap, all;
	int nlook; /* s[0..nlook) are looked at; the rest only armed (exact) */
	int hint; /* an epoll wait's members as epoll_ctl here named them */
	int exact; /* the members of an exact set: epfd, set_id */
	int epfd;
	unsigned long long set_id;
	/* pl_direct_prewait: wait this long (ns; -1: look, 0 ns), then again */
	long long nap_ns;
	int napped; /* the wait's nap for an owed answer is over */
	long long spin_until; /* and then its spin ends (ns), or 0 */
	long long nap_end; /* when the nap should have ended (ns), or 0 */
	long long spin_from; /* where the spin's time counts from (ns) */
	int asleep; /* counted as asleep on its connections: pl_direct_sleep */
	int looked; /* its last sleep was to look for a slow answer */
	/*
	 * An exact set's s[0..nlt) are its level-triggered members: one
	 * whose ring has bytes is reported by the wait itself
	 * (pl_direct_epoll_merge), with no wake-up byte; their serials in
	 * rdy[0..nrdy), where rdy holds n.
	 */
	int nlt, nrdy;
	uint64_t *rdy;
	struct pl_sock *here[32];
	uint64_t rdy_here[32];
};

void pl_direct_scope_poll(struct pl_dscope *sc, const struct pollfd *fds,
			  nfds_t n);
void pl_direct_scope_select(struct pl_dscope *sc, int n, fd_set *const sets[3]);
/*
 * An epoll wait on epfd: an exact set's direct members; else the set's
 * direct members that epoll_ctl in this process named (a hint, looked
 * at first; see pl_direct_prewait), else every direct connection.
 */
void pl_direct_scope_epoll(struct pl_dscope *sc, int epfd);
/* epoll_ctl(epfd, op, fd, ev) succeeded (s: fd's entry, or NULL): the hint. */
void pl_direct_epoll_ctl(int epfd, int op, int fd, const struct pl_sock *s,
			 const struct epoll_event *ev);
/* epoll_create made epfd here: an exact set until something hides members. */
void pl_direct_epoll_made(int epfd);
/* fd was duplicated or passed: were it an exact set, it is no longer. */
void pl_direct_epoll_taint(int fd);
/* Whether the preload keeps anything by epoll set number (no lock). */
int pl_direct_epoll_tracked(void);
/* Descriptors lo..hi were closed or now name something else: what was known of them goes. */
void pl_direct_fds_gone(int lo, int hi);
/* Descriptors lo..hi were closed or now name something else: no hints. */
void pl_direct_epoll_forget(int lo, int hi);
void pl_direct_scope_end(struct pl_dscope *sc);
/*
 * The kernel's epoll wait over sc gave r events in e (room for n): the
 * members that sc's last look found with bytes and reported no other
 * way are added (EPOLLIN, with the data the program registered). Returns
 * the new count.
 */
int pl_direct_epoll_merge(struct pl_dscope *sc, struct epoll_event *e, int n,
			  int r);
/*
 * How many of an epoll wait's n events the kernel may fill, so that the
 * members the wait reports itself are not always left out (0: none this
 * time, the wait reports one of them alone).
 */
int pl_direct_epoll_room(struct pl_dscope *sc, int n);

/*
 * Before the wait of timeout_ms (-1: for ever) over sc: make each of its
 * direct descriptors' readiness true of its ring. When the wait may
 * sleep and one of them owes an answer, sc->nap_ns says to wait that
 * long instead (-1: a wait of 0; can_nap: the caller's wait takes
 * nanoseconds), then call this again; a wait that cannot nap spins a
 * little on the rings, blind to the rest of the wait. An
 * epoll wait with a hint that finds a hinted member ready stops there;
 * otherwise it covers every direct connection before it may sleep.
 * Returns the timeout to wait now (0 with a nap): while the wait covers
 * direct connections, at most a slice, after which the caller calls
 * pl_direct_slice_over() and waits again.
 */
int pl_direct_prewait(struct pl_dscope *sc, int timeout_ms, int can_nap);
/*
 * A wait over sc is asleep on its connections (d = 1: pl_direct_prewait
 * counts it so before it arms them) or no longer (-1: the caller, after
 * the kernel wait, before pl_direct_slice_over), so that naps of other
 * threads leave their READER bits be.
 */
void pl_direct_sleep(struct pl_dscope *sc, int d);
/* A slice ran out: a connection whose gsockd died wakes its waiters. */
void pl_direct_slice_over(struct pl_dscope *sc);


/* exec: -1 (EOPNOTSUPP, said on stderr) if a direct fd would cross it. */
int pl_direct_exec_check(void);
/*
 * sendmsg, and each message of sendmmsg: -1 (EOPNOTSUPP, said on stderr
 * naming call) if msg passes a direct descriptor (SCM_RIGHTS); an exact
 * epoll set passed is one no longer.
 */
int pl_direct_rights_check(const struct msghdr *msg, const char *call);

#endif
