/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rsocket route's waits (see rs.h): rpoll kept clear of its timeout
 * bug, then poll, select and the epoll side table over descriptors of
 * which some are rsockets. rs.c holds the rest of the route.
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "route.h"
#include "rs.h"
#include "rs_int.h"

/*
 * rpoll, kept clear of its timeout. librdmacm's rpoll counts the threads
 * inside it (so that one can wake the others) and does not uncount one
 * that leaves because its time ran out; from then on the count never
 * drops to zero, the first wake-up it signals is never cleared, and every
 * later rpoll that has to wait spins forever in sched_yield (seen in
 * gsockd with a connect in flight: its loop stopped). So a finite wait
 * is a check without waiting, then an rpoll with no timeout over the
 * caller's descriptors and this thread's timerfd, armed to end it.
 */
static pthread_key_t timer_key;
static pthread_once_t timer_once = PTHREAD_ONCE_INIT;
static __thread int timer_fd = -1;
static __thread unsigned timer_gen; /* pl_fork_gen when timer_fd was made */

static void timer_drop(void *fd_plus_1)
{
	pl_real.close((int)(intptr_t)fd_plus_1 - 1);
}

static void timer_key_make(void)
{
	pthread_key_create(&timer_key, timer_drop); /* closed when the thread ends */
}

/* This thread's timerfd, armed to fire once in ms; -1 if there is none. */
static int timer_arm(int ms)
{
	struct itimerspec its = { { 0, 0 }, { ms / 1000, (ms % 1000) * 1000000L } };

	if (timer_fd >= 0 && timer_gen != pl_fork_gen) {
		pl_real.close(timer_fd); /* the parent's, shared since fork */
		timer_fd = -1;
	}
	if (timer_fd < 0) {
		pthread_once(&timer_once, timer_key_make);
		timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (timer_fd < 0)
			return -1;
		timer_gen = pl_fork_gen;
		pthread_setspecific(timer_key, (void *)(intptr_t)(timer_fd + 1));
	}
	/*
	 * Arming also clears an expiry left from an earlier wait. If it
	 * fails, the application closed our descriptor (and its number may
	 * be its own now): forget it, the next wait makes another.
	 */
	if (timerfd_settime(timer_fd, 0, &its, NULL) < 0) {
		timer_fd = -1;
		pthread_setspecific(timer_key, NULL);
		return -1;
	}
	return timer_fd;
}

int pl_rs_rpoll(struct pollfd *p, nfds_t n, int timeout)
{
	struct pollfd small[65], *q = small;
	int t, r = RS(pl_rdmacm.rpoll(p, n, timeout < 0 ? timeout : 0));

	if (r != 0 || timeout <= 0)
		return r;
	if (n + 1 > 65)
		q = malloc((n + 1) * sizeof(*q));
	t = q ? timer_arm(timeout) : -1;
	if (t < 0) {
		r = RS(pl_rdmacm.rpoll(p, n, timeout)); /* no timer to be had */
		goto out_free;
	}
	memcpy(q, p, n * sizeof(*q));
	q[n] = (struct pollfd){ t, POLLIN, 0 };
	r = RS(pl_rdmacm.rpoll(q, n + 1, -1));
	if (r > 0) {
		r -= q[n].revents != 0;
		for (nfds_t i = 0; i < n; i++)
			p[i].revents = q[i].revents;
	}
out_free:
	if (q != small)
		free(q);
	return r;
}

long long pl_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/*
 * What the watch descriptor of a socket firing means to a waiter for
 * events: a listener has a peer to accept; a connection's peer is gone,
 * which a reader learns by reading (the rest of the data, then a reset)
 * and a writer by writing (a reset), as with a kernel socket whose peer
 * reset it. No POLLHUP: some programs (netcat) take it to mean "stop
 * writing, quietly" and never learn that the peer is gone.
 */
static short watch_revents(const struct pl_sock *s, short events)
{
	if (s->listening)
		return events & POLLIN;
	return events & (POLLIN | POLLOUT) ? events & (POLLIN | POLLOUT) : POLLHUP;
}

/*
 * The pollfds an rsocket entry adds to a wait, at tr[*k] on: a
 * connection's rsocket goes in its own slot; its watch descriptor (and a
 * listener's, whose kernel half stays in its slot) after the others.
 * own[] remembers which slot each added one belongs to. Returns 1 if an
 * rsocket went in, so rpoll must do the wait.
 */
static int rs_arm(struct pl_sock *s, struct pollfd *slot, struct pollfd *tr,
		  int *own, nfds_t *k, int i)
{
	if (s->watch_fd >= 0) {
		tr[*k] = (struct pollfd){ s->watch_fd, POLLIN, 0 };
		own[(*k)++] = i;
	}
	if (s->listening)
		return 0;
	slot->fd = s->rs;
	return 1;
}

/* The wait itself: rpoll if an rsocket is in it, else the kernel's poll. */
static int rs_wait_all(struct pollfd *p, nfds_t n, int timeout, int any_rs)
{
	return any_rs ? pl_rs_rpoll(p, n, timeout) : pl_real.poll(p, n, timeout);
}

/*
 * One wait of pl_rs_poll. A non-blocking rsocket connect that fails in it
 * falls back to the kernel (*fell set) and is not reported: the kernel's
 * connect has just begun.
 */
static int poll_once(struct pollfd *fds, nfds_t n, int timeout, int *done,
		     int *fell)
{
	struct pollfd small[128], *tr = 2 * n <= 128 ? small : calloc(2 * n, sizeof(*tr));
	struct pl_sock *ss_small[64], **ss = n <= 64 ? ss_small : calloc(n, sizeof(*ss));
	int own_small[128], *own = 2 * n <= 128 ? own_small : calloc(2 * n, sizeof(*own));
	int any = 0, any_rs = 0, r = 0;
	nfds_t k = n;

	*done = 0;
	if (!tr || !ss || !own)
		goto out_free;
	for (nfds_t i = 0; i < n; i++) {
		struct pl_sock *s = pl_fd_get(fds[i].fd);

		tr[i] = fds[i];
		ss[i] = NULL;
		if (s && (s->fork == PL_FORK_CLIENT || s->fork == PL_FORK_SERVER))
			pl_rs_fork_move(fds[i].fd, s);
		if (s && s->connecting)
			pl_rs_connect_progress(fds[i].fd, s);
		if (s && s->route == GS_ROUTE_RSOCKET && s->rs >= 0 && !pl_rs_stale(s)) {
			any = 1;
			any_rs |= rs_arm(s, &tr[i], tr, own, &k, (int)i);
			ss[i] = s;
		} else {
			pl_sock_put(s);
		}
	}
	if (!any)
		goto out_put;
	*done = 1;
	r = rs_wait_all(tr, k, timeout, any_rs);
	if (r < 0)
		goto out_put;
	for (nfds_t i = 0; i < n; i++)
		fds[i].revents = tr[i].revents;
	for (nfds_t j = n; j < k; j++)
		if (tr[j].revents)
			fds[own[j]].revents |= watch_revents(ss[own[j]], fds[own[j]].events);
	for (nfds_t i = 0; i < n; i++)
		if (ss[i] && ss[i]->connecting && fds[i].revents &&
		    pl_rs_connect_progress(fds[i].fd, ss[i])) {
			fds[i].revents = 0;
			*fell = 1;
		}
	r = 0;
	for (nfds_t i = 0; i < n; i++)
		r += fds[i].revents != 0;
out_put:
	for (nfds_t i = 0; i < n && tr && ss && own; i++)
		pl_sock_put(ss[i]);
out_free:
	if (tr != small)
		free(tr);
	if (ss != ss_small)
		free(ss);
	if (own != own_small)
		free(own);
	return r;
}

/* What is left of a wait's timeout (-1: none) at deadline; 0 once spent. */
static int time_left(int timeout, long long deadline)
{
	long long left = deadline - pl_now_ms();

	if (timeout < 0)
		return -1;
	return left > 0 ? (int)left : 0;
}

int pl_rs_poll(struct pollfd *fds, nfds_t n, int timeout, int *done)
{
	long long deadline = pl_now_ms() + timeout;

	for (;;) {
		int fell = 0, r = poll_once(fds, n, timeout, done, &fell);

		if (r != 0 || !fell)
			return r;
		/* A connect moved to the kernel: wait on, for the time left. */
		timeout = time_left(timeout, deadline);
		if (timeout == 0)
			return 0;
		if (!*done) {
			*done = 1;
			return pl_real.poll(fds, n, timeout);
		}
	}
}

int pl_rs_select(int n, fd_set *rd, fd_set *wr, fd_set *ex, int timeout_ms,
		 int *done)
{
	struct pollfd p[FD_SETSIZE];
	nfds_t k = 0;
	int r;

	*done = 0;
	for (int fd = 0; fd < n && fd < FD_SETSIZE; fd++) {
		short ev = (rd && FD_ISSET(fd, rd) ? POLLIN : 0) |
			   (wr && FD_ISSET(fd, wr) ? POLLOUT : 0) |
			   (ex && FD_ISSET(fd, ex) ? POLLPRI : 0);

		if (ev)
			p[k++] = (struct pollfd){ fd, ev, 0 };
	}
	r = pl_rs_poll(p, k, timeout_ms, done);
	if (!*done || r < 0)
		return r;
	if (rd)
		FD_ZERO(rd);
	if (wr)
		FD_ZERO(wr);
	if (ex)
		FD_ZERO(ex);
	r = 0;
	for (nfds_t i = 0; i < k; i++) {
		short rev = p[i].revents;

		if (rd && (rev & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN)) {
			FD_SET(p[i].fd, rd);
			r++;
		}
		if (wr && (rev & (POLLOUT | POLLERR)) && (p[i].events & POLLOUT)) {
			FD_SET(p[i].fd, wr);
			r++;
		}
		if (ex && (rev & POLLPRI)) {
			FD_SET(p[i].fd, ex);
			r++;
		}
	}
	return r;
}

/*
 * epoll over rsocket descriptors. The kernel cannot watch an rsocket, so
 * each epoll set remembers its rsocket members here, and epoll_wait on a
 * set that has any becomes one rpoll over the set's own descriptor (ready
 * when a kernel member is) and the members' rsockets. Members are
 * reported level-triggered (EPOLLET readiness is a subset of that);
 * EPOLLONESHOT members go quiet once reported, until EPOLL_CTL_MOD.
 * A listening rsocket socket also stays in the kernel set: its kernel
 * half takes plain TCP clients.
 */
struct ep_member {
	int fd; /* the application's descriptor */
	struct pl_sock *s; /* a reference */
	uint32_t events; /* EPOLL*; 0 after a oneshot fired */
	epoll_data_t data;
};

struct ep_set {
	struct ep_set *next;
	int epfd;
	int n, cap;
	struct ep_member *m;
};

static pthread_mutex_t ep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ep_set *ep_sets; /* ep_lock */

static struct ep_set *ep_find(int epfd, int create)
{
	struct ep_set *e;

	for (e = ep_sets; e; e = e->next)
		if (e->epfd == epfd)
			return e;
	if (!create)
		return NULL;
	e = calloc(1, sizeof(*e));
	if (e) {
		e->epfd = epfd;
		e->next = ep_sets;
		ep_sets = e;
	}
	return e;
}

static void ep_drop(struct ep_set *e, int i)
{
	pl_sock_put(e->m[i].s);
	e->m[i] = e->m[--e->n];
}

int pl_rs_epoll_ctl(int epfd, int op, int fd, struct pl_sock *s,
		    struct epoll_event *ev)
{
	struct ep_set *e;
	int i, r = 0;

	pthread_mutex_lock(&ep_lock);
	e = ep_find(epfd, op == EPOLL_CTL_ADD);
	for (i = 0; e && i < e->n && e->m[i].fd != fd; i++)
		;
	if (!e || (op != EPOLL_CTL_ADD && i == e->n)) {
		errno = e ? ENOENT : ENOMEM;
		r = -1;
	} else if (op == EPOLL_CTL_ADD && i < e->n) {
		errno = EEXIST;
		r = -1;
	} else if (op == EPOLL_CTL_DEL) {
		ep_drop(e, i);
	} else {
		if (op == EPOLL_CTL_ADD) {
			if (e->n == e->cap) {
				int cap = e->cap ? 2 * e->cap : 8;
				struct ep_member *m = realloc(e->m, cap * sizeof(*m));

				if (!m) {
					errno = ENOMEM;
					r = -1;
					goto out_unlock;
				}
				e->m = m;
				e->cap = cap;
			}
			__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
			e->m[e->n++] = (struct ep_member){ fd, s, 0, { 0 } };
		}
		e->m[i].events = ev->events;
		e->m[i].data = ev->data;
	}
out_unlock:
	pthread_mutex_unlock(&ep_lock);
	return r;
}

/*
 * A socket registered while undecided became a connected rsocket: its
 * kernel socket would only ever report a spurious hang-up, so the
 * kernel's sets let it go; ours keep it.
 */
void pl_rs_ep_unwatch_kernel(int fd, struct pl_sock *s)
{
	pthread_mutex_lock(&ep_lock);
	for (struct ep_set *e = ep_sets; e; e = e->next)
		for (int i = 0; i < e->n; i++)
			if (e->m[i].s == s)
				pl_real.epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_unlock(&ep_lock);
}

/* The reverse: a connection the kernel carries after all joins the kernel's sets. */
void pl_rs_ep_rewatch_kernel(int fd, struct pl_sock *s)
{
	pthread_mutex_lock(&ep_lock);
	for (struct ep_set *e = ep_sets; e; e = e->next)
		for (int i = 0; i < e->n; i++) {
			struct epoll_event ev = { e->m[i].events, e->m[i].data };

			if (e->m[i].s == s &&
			    pl_real.epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 &&
			    errno == EEXIST)
				pl_real.epoll_ctl(e->epfd, EPOLL_CTL_MOD, fd, &ev);
		}
	pthread_mutex_unlock(&ep_lock);
}

int pl_rs_epoll_has(int epfd)
{
	struct ep_set *e;

	pthread_mutex_lock(&ep_lock);
	for (e = ep_sets; e && e->epfd != epfd; e = e->next)
		;
	pthread_mutex_unlock(&ep_lock);
	return e != NULL;
}

void pl_rs_epoll_forget(int epfd)
{
	pl_rs_epoll_forget_range((unsigned)epfd, (unsigned)epfd);
}

void pl_rs_epoll_forget_range(unsigned lo, unsigned hi)
{
	struct ep_set **pp, *e;

	pthread_mutex_lock(&ep_lock);
	for (pp = &ep_sets; *pp;) {
		e = *pp;
		if (e->epfd < 0 || (unsigned)e->epfd < lo || (unsigned)e->epfd > hi) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		while (e->n)
			ep_drop(e, 0);
		free(e->m);
		free(e);
	}
	pthread_mutex_unlock(&ep_lock);
}

static short ep_to_poll(uint32_t ev)
{
	return (short)(((ev & EPOLLIN) ? POLLIN : 0) | ((ev & EPOLLOUT) ? POLLOUT : 0) |
		       ((ev & EPOLLPRI) ? POLLPRI : 0));
}

static uint32_t poll_to_ep(short rev)
{
	return ((rev & POLLIN) ? EPOLLIN : 0) | ((rev & POLLOUT) ? EPOLLOUT : 0) |
	       ((rev & POLLPRI) ? EPOLLPRI : 0) | ((rev & POLLERR) ? EPOLLERR : 0) |
	       ((rev & POLLHUP) ? EPOLLHUP : 0);
}

/* One wait of pl_rs_epoll_wait; *fell as in poll_once. */
static int epoll_once(int epfd, struct epoll_event *out, int max, int timeout,
		      int *done, int *fell)
{
	struct pollfd small[65], *p = small;
	int own_small[65], *own = own_small, *slot = NULL;
	struct ep_member *m = NULL;
	struct ep_set *e;
	int n = 0, got = 0, any_rs = 0, kernel = 0;
	nfds_t k = 1;

	*done = 0;
	pthread_mutex_lock(&ep_lock);
	e = ep_find(epfd, 0);
	/* Forget members whose descriptor was closed or now names another socket. */
	for (int i = 0; e && i < e->n;) {
		struct pl_sock *now = pl_fd_get(e->m[i].fd);

		pl_sock_put(now);
		if (now != e->m[i].s)
			ep_drop(e, i);
		else
			i++;
	}
	if (e && e->n > 0) {
		m = malloc((size_t)e->n * sizeof(*m));
		slot = malloc((size_t)e->n * sizeof(*slot));
		if (2 * e->n + 1 > 65) {
			p = malloc((size_t)(2 * e->n + 1) * sizeof(*p));
			own = malloc((size_t)(2 * e->n + 1) * sizeof(*own));
		}
		/* Members still undecided are watched by the kernel's set. */
		for (int i = 0; m && slot && p && own && i < e->n; i++) {
			if (e->m[i].s->route != GS_ROUTE_RSOCKET || e->m[i].s->rs < 0 ||
			    pl_rs_stale(e->m[i].s))
				continue;
			m[n] = e->m[i];
			__atomic_add_fetch(&m[n++].s->refs, 1, __ATOMIC_ACQ_REL);
		}
	}
	pthread_mutex_unlock(&ep_lock);
	if (!n)
		goto out_free;
	*done = 1;
	p[0] = (struct pollfd){ epfd, POLLIN, 0 };
	for (int i = 0; i < n; i++) {
		struct pollfd mine = { -1, ep_to_poll(m[i].events), 0 };

		slot[i] = -1;
		if (!m[i].events)
			continue; /* a oneshot that fired */
		if (m[i].s->connecting && pl_rs_connect_progress(m[i].fd, m[i].s))
			continue; /* the kernel's set has it now */
		if (rs_arm(m[i].s, &mine, p, own, &k, i)) {
			any_rs = 1;
			slot[i] = (int)k;
			p[k] = mine;
			own[k++] = -1;
		}
	}
	got = rs_wait_all(p, k, timeout, any_rs);
	if (got <= 0)
		goto out_put;
	got = 0;
	if (p[0].revents)
		got = pl_real.epoll_wait(epfd, out, max, 0);
	if (got < 0)
		got = 0;
	kernel = got;
	for (int i = 0; i < n && got < max; i++) {
		short rev = slot[i] >= 0 ? p[slot[i]].revents : 0;
		uint32_t ev;
		int dup = 0;

		for (nfds_t j = 1; j < k; j++)
			if (own[j] == i && p[j].revents)
				rev |= watch_revents(m[i].s, ep_to_poll(m[i].events));
		if (rev && m[i].s->connecting && pl_rs_connect_progress(m[i].fd, m[i].s)) {
			*fell = 1;
			continue;
		}
		ev = poll_to_ep(rev);
		if (!ev || !m[i].events)
			continue;
		/* A listener's kernel half may have reported it already. */
		for (int j = 0; j < kernel && !dup; j++)
			dup = out[j].data.u64 == m[i].data.u64;
		if (dup)
			continue;
		out[got].events = ev;
		out[got++].data = m[i].data;
		if (m[i].events & EPOLLONESHOT) {
			struct epoll_event quiet = { 0, m[i].data };

			pl_rs_epoll_ctl(epfd, EPOLL_CTL_MOD, m[i].fd, m[i].s, &quiet);
		}
	}
out_put:
	for (int i = 0; i < n; i++)
		pl_sock_put(m[i].s);
out_free:
	free(m);
	free(slot);
	if (p != small)
		free(p);
	if (own != own_small)
		free(own);
	return got;
}

int pl_rs_epoll_wait(int epfd, struct epoll_event *out, int max, int timeout,
		     int *done)
{
	long long deadline = pl_now_ms() + timeout;

	for (;;) {
		int fell = 0, r = epoll_once(epfd, out, max, timeout, done, &fell);

		if (r != 0 || !fell)
			return r;
		/* A connect moved to the kernel: wait on, for the time left. */
		timeout = time_left(timeout, deadline);
		if (timeout == 0)
			return 0;
		if (!*done) {
			*done = 1;
			return pl_real.epoll_wait(epfd, out, max, timeout);
		}
	}
}
