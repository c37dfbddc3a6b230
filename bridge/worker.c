/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's workers: each is a thread with its own epoll set, its own
 * sockets and its own doorbell queue in every arena it serves, so the
 * data path takes no lock (bridge.h has the contract).
 *
 * A worker's CPU follows its traffic. It sleeps in epoll (or io_uring)
 * until a socket event, a message in its inbox, or the doorbell watch
 * (watch.c: it alone looks at sleeping workers' doorbell queues) wakes
 * it. Only while a socket's kernel owes it an answer (it put bytes in
 * the socket's rx ring) does it wait actively: it spins until the
 * answer's doorbell, busy_poll_us at most (not at all while most spins
 * end unanswered), then naps and looks itself, idle_sleep_us in all,
 * and then leaves the answer to the watch. So a trickle costs a wake-up
 * or two per request, not a spinning core, and traffic that keeps a
 * worker busy keeps it awake with no spin at all.
 */
#include <config.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "bridge.h"
#include "log.h"
#include "numa.h"

static __thread struct br_worker *self;

struct br_worker *br_self(void)
{
	return self;
}

/* A spin every this many debts whatever the miss rate; half of 256. */
#define BR_PROBE_EVERY 32u
#define BR_MISS_HALF 128u
/*
 * The spin the learnt nap aims to leave after it: the answers' spread.
 * A nap shorter than BR_NAP_MIN_NS costs more than the spin it saves (a
 * timer wake-up is a few microseconds of this core's time).
 */
#define BR_SPIN_MARGIN_NS 3000u
#define BR_NAP_MIN_NS 5000u

static uint64_t spin_ns(void)
{
	return (uint64_t)br.conf.busy_poll_us * 1000;
}

void br_worker_owe(struct br_sock *s)
{
	struct br_worker *w = self;

	if (!w || s->owed_in == w->period + 1)
		return; /* the control thread, or owed already */
	s->owed_in = w->period + 1;
	/* The turn's time is from before the sleep this request ended. */
	w->now_ns = br_now_ns();
	if (!w->owed++) {
		w->nap_ns = (uint64_t)br.conf.watch_min_us * 1000;
		w->napped_ns = 0;
	}
	if (w->miss_rate >= BR_MISS_HALF && ++w->owes % BR_PROBE_EVERY)
		return; /* slower than a spin: naps find the answer */
	if (!w->spin_armed) {
		uint64_t nap = br.conf.answer_nap ? w->answer_nap_ns : 0;

		w->spin_armed = true;
		w->spin_at = w->now_ns + (nap >= BR_NAP_MIN_NS ? nap : 0);
		w->spin_until = w->spin_at + spin_ns();
		w->spin_looks = 0;
		w->spin_learnt = false;
	}
}

/*
 * The first answer of a spin: what it says of the nap before spins
 * (bridge.h). Later answers of the same spin came after it, not after
 * their own debts, so they teach nothing.
 */
static void learn(struct br_worker *w, uint64_t now)
{
	uint64_t nap = w->answer_nap_ns;
	int on = br.conf.answer_nap;

	if (w->spin_learnt)
		return;
	w->spin_learnt = true;
	w->n_first_answers++;
	if (now < w->spin_at || w->spin_looks == 0) {
		/* There before the spin's first look: maybe napped too long. */
		w->n_paid_first_look++;
		if (on)
			w->answer_nap_ns = nap - nap / 8;
		return;
	}
	w->spun_ns += now - w->spin_at;
	if (on && now - w->spin_at > BR_SPIN_MARGIN_NS)
		w->answer_nap_ns =
			nap + (now - w->spin_at - BR_SPIN_MARGIN_NS) / 4;
	if (w->answer_nap_ns > (uint64_t)spin_ns())
		w->answer_nap_ns = spin_ns(); /* a slow answer: the naps' */
}

void br_worker_paid(struct br_sock *s)
{
	struct br_worker *w = self;

	if (!w || s->owed_in != w->period + 1)
		return;
	s->owed_in = 0;
	if (w->owed)
		w->owed--;
	if (w->spin_armed) {
		uint64_t now = br_now_ns();

		learn(w, now);
		w->n_paid_spinning++;
		w->miss_rate -= w->miss_rate / 8;
		/* Answers keep coming: wait busy_poll_us for the next. */
		if (now >= w->spin_at)
			w->spin_until = now + spin_ns();
	}
	if (!w->owed)
		w->spin_armed = false; /* the next debt starts a new spin */
}

/*
 * The worker goes to sleep: debts still owed lapse (their answers are
 * the watch's to find) and, if a spin waited for them, count as a miss.
 */
static void lapse(struct br_worker *w)
{
	if (!w->owed)
		return;
	w->n_lapsed++;
	if (w->spin_armed)
		w->miss_rate += (256 - w->miss_rate) / 8;
	w->owed = 0;
	w->spin_armed = false;
	w->period++;
	br_watch_hurry();
}

uint64_t br_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void br_wake(int eventfd)
{
	uint64_t one = 1;

	if (write(eventfd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is full, so a wake-up is pending. */
	}
}

void br_worker_post(struct br_worker *w, struct br_msg *m)
{
	m->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->inbox_tail == &w->inbox) /* read without the lock: atomic */
		__atomic_store_n(&w->inbox, m, __ATOMIC_RELEASE);
	else
		*w->inbox_tail = m;
	w->inbox_tail = &m->next;
	pthread_mutex_unlock(&w->lock);
	br_wake(w->wake_fd);
}

static int attach(struct br_worker *w, struct br_app *a)
{
	if (w->napps == w->apps_cap) {
		uint32_t cap = w->apps_cap ? 2 * w->apps_cap : 8;
		struct br_app **n = realloc(w->apps, cap * sizeof(*n));

		if (!n)
			return -1;
		w->apps = n;
		w->apps_cap = cap;
	}
	w->apps[w->napps++] = a;
	return 0;
}

/* Handle every message in the inbox; returns how many there were. */
static int drain_inbox(struct br_worker *w)
{
	struct br_msg *m, *next;
	int n = 0;

	if (!__atomic_load_n(&w->inbox, __ATOMIC_ACQUIRE))
		return 0; /* the usual turn: no lock taken */
	pthread_mutex_lock(&w->lock);
	m = w->inbox;
	__atomic_store_n(&w->inbox, NULL, __ATOMIC_RELAXED);
	w->inbox_tail = &w->inbox;
	pthread_mutex_unlock(&w->lock);
	for (; m; m = next, n++) {
		struct br_app *a = m->app;

		next = m->next;
		switch (m->kind) {
		case BR_MSG_ATTACH:
			if (attach(w, a) == 0) {
				a = NULL; /* the reference is the worker's now */
				break;
			}
			br_app_reject(a, "gsockd worker %u is out of memory",
				      w->idx);
			break;
		case BR_MSG_ADOPT:
			br_sock_adopt(a, m->id, m->gen);
			break;
		case BR_MSG_CMD:
			if (!br_app_dead(a))
				br_sock_command(a, m->slot, &m->req);
			break;
		case BR_MSG_CLAIMED:
			br_sock_claimed(a, m->id, m->gen);
			break;
		case BR_MSG_STAT:
			for (uint32_t i = 0; i < w->napps; i++)
				if (!br_app_dead(w->apps[i]))
					br_sock_stat(w->apps[i], m->stat);
			br_stat_done(m->stat);
			break;
		}
		if (a)
			br_app_put(a);
		free(m);
	}
	return n;
}

/* Serve every application's queues of ours; let go of dead ones. */
static int poll_apps(struct br_worker *w)
{
	int work = 0;

	for (uint32_t i = 0; i < w->napps; i++) {
		struct br_app *a = w->apps[i];

		if (br_app_dead(a)) {
			br_sock_close_owned(a);
			w->apps[i--] = w->apps[--w->napps];
			br_app_put(a);
			work = 1;
			continue;
		}
		work |= br_app_poll(w, a) > 0;
		if (w->nclosing || w->nheld)
			br_sock_tick(a);
	}
	return work;
}

static void place(struct br_worker *w)
{
	int node = br_numa_node();

	if (node >= 0 && br_numa_run_on(node) < 0)
		br_warn("%s: cannot run on NUMA node %d: %s", w->name, node,
			strerror(errno));
}

/*
 * Not epoll_pwait2: valgrind 3.19 does not know it, and under the preload
 * (transport rsocket) it would pass the preload's epoll wrapper by, which
 * waits for rsocket descriptors in the set too.
 */
int br_epoll_wait_ns(int epfd, int timer_fd, struct epoll_event *evs, int n,
		     int64_t ns)
{
	if (ns > 0 && ns % 1000000) {
		struct itimerspec t = { .it_value = { ns / 1000000000,
						      ns % 1000000000 } };

		if (timerfd_settime(timer_fd, 0, &t, NULL) == 0)
			ns = -1; /* the timer ends it */
		else
			ns += 1000000; /* whole milliseconds, rounded up */
	}
	return epoll_wait(epfd, evs, n, ns < 0 ? -1 : (int)(ns / 1000000));
}

int br_timer_open(int epfd, struct br_ev *ev)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = ev };

	ev->kind = BR_EV_TIMER;
	if (fd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
		br_err("cannot set up a timer: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Wait up to timeout ns for epoll events and handle them; 1 if any. */
static int epoll_turn(struct br_worker *w, int64_t timeout)
{
	struct epoll_event evs[128];
	int n = br_epoll_wait_ns(w->epfd, w->timer_fd, evs, 128, timeout);
	int work = 0;

	for (int i = 0; i < n; i++) {
		struct br_ev *e = evs[i].data.ptr;
		uint64_t v;

		if (e->kind == BR_EV_SOCK) {
			br_sock_event((struct br_sock *)e, evs[i].events);
			work = 1;
		} else if (e->kind == BR_EV_TIMER) {
			/* a nap ended: no work in itself */
			if (read(w->timer_fd, &v, sizeof(v)) < 0) {
				/* EAGAIN: a nap other events ended first */
			}
		} else if (read(w->wake_fd, &v, sizeof(v)) == sizeof(v)) {
			work = 1; /* else EAGAIN: read by an earlier turn */
		}
	}
	/* io_uring: a full batch may leave more, with no new poll event. */
	if (w->ring && n == 128)
		w->ep_ready = true;
	return work;
}

/*
 * Wait up to timeout ns (-1: until something happens) for socket I/O,
 * socket events or a wake-up, and handle what came; 1 if anything did.
 */
static int io_turn(struct br_worker *w, int64_t timeout)
{
#ifdef HAVE_LIBURING
	if (w->ring) {
		int work = br_uring_turn(w, timeout) > 0;

		if (w->ep_ready) {
			w->ep_ready = false;
			work |= epoll_turn(w, 0);
		}
		return work;
	}
#endif
	return epoll_turn(w, timeout);
}

/* io_uring where gsockd chose it; a worker that cannot have it says so. */
static void open_ring(struct br_worker *w)
{
#ifdef HAVE_LIBURING
	int err = br.io_uring ? br_uring_open(w) : 0;

	if (err)
		br_warn("%s: cannot set up io_uring (%s): it uses epoll",
			w->name, strerror(-err));
#else
	(void)w;
#endif
}

/*
 * How long the worker may sleep (ns; -1: until woken) when it would
 * sleep for timeout. Owed an answer it naps, so that it finds the answer
 * itself: one timer wake-up, where the watch would take its own and then
 * the worker's. Naps grow by a quarter, idle_sleep_us in all; then the
 * debts lapse to the watch.
 */
static int64_t nap(struct br_worker *w, int64_t timeout)
{
	uint64_t nap = w->nap_ns;

	if (w->owed && w->napped_ns < (uint64_t)br.conf.idle_sleep_us * 1000) {
		if (w->spin_armed) /* the spin ended unanswered */
			w->miss_rate += (256 - w->miss_rate) / 8;
		w->spin_armed = false;
		w->napped_ns += nap;
		w->nap_ns = nap + nap / 4 + 1;
		w->n_naps++;
		return timeout >= 0 && timeout < (int64_t)nap ? timeout :
								(int64_t)nap;
	}
	lapse(w);
	w->napped_ns = 0;
	w->n_sleeps++;
	return timeout;
}

/* Owed an answer that is not due yet: sleep until the spin starts. */
static int64_t prenap(struct br_worker *w, int64_t timeout)
{
	int64_t left = (int64_t)(w->spin_at - w->now_ns);

	w->n_prenaps++;
	return timeout >= 0 && timeout < left ? timeout : left;
}

static void *worker_main(void *p)
{
	struct br_worker *w = p;
	const int64_t tick_ns = br.conf.idle_sleep_us * 1000;
	int work = 0;

	self = w;
	pthread_setname_np(pthread_self(), w->name);
	prctl(PR_SET_TIMERSLACK, 1000ul); /* naps of tens of microseconds */
	place(w);
	open_ring(w);
	while (!__atomic_load_n(&br.stopping, __ATOMIC_ACQUIRE)) {
		/* A turn that did work looks again at once; so does a spin. */
		int spin = w->spin_armed && w->now_ns >= w->spin_at &&
			   w->now_ns < w->spin_until;
		int awake = work || spin;
		/* Closing sockets have deadlines: look at them now and then. */
		int64_t timeout = awake			     ? 0 :
				  w->nclosing || w->nheld ? tick_ns :
							    -1;

		if (!awake) {
			/* The watch looks at our queues from now on. */
			__atomic_store_n(&w->sleeping, 1, __ATOMIC_SEQ_CST);
			if (poll_apps(w)) {
				__atomic_store_n(&w->sleeping, 0,
						 __ATOMIC_RELAXED);
				work = 1;
				continue;
			}
			timeout = w->spin_armed && w->now_ns < w->spin_at ?
					  prenap(w, timeout) :
					  nap(w, timeout);
			/* A nap ends by itself: the watch need not look. */
			if (w->napped_ns || w->spin_armed)
				__atomic_store_n(&w->sleeping, 2,
						 __ATOMIC_RELAXED);
		} else if (spin && !work) {
			w->spin_looks++;
		}
		work = io_turn(w, timeout);
		if (!awake)
			__atomic_store_n(&w->sleeping, 0, __ATOMIC_RELAXED);
		w->now_ns =
			br_now_ns(); /* this turn's time: it may have slept */
		work |= drain_inbox(w) > 0;
		work |= poll_apps(w);
	}
	br_info("%s: slept %llu times, napped %llu; %llu answers came while it spun, it slept owed an answer %llu times; miss rate %u/256",
		w->name, (unsigned long long)w->n_sleeps,
		(unsigned long long)w->n_naps,
		(unsigned long long)w->n_paid_spinning,
		(unsigned long long)w->n_lapsed, w->miss_rate);
	br_info("%s: napped %llu times before a spin (%.1f us learnt, answer_nap %s); of %llu spins' first answers %llu were there at the first look, the others took %.1f us of spin each",
		w->name, (unsigned long long)w->n_prenaps,
		(double)w->answer_nap_ns / 1e3,
		br.conf.answer_nap ? "learn" : "off",
		(unsigned long long)w->n_first_answers,
		(unsigned long long)w->n_paid_first_look,
		w->n_first_answers > w->n_paid_first_look ?
			(double)w->spun_ns / 1e3 /
				(double)(w->n_first_answers -
					 w->n_paid_first_look) :
			0.0);
	/* Stopping: close our sockets; the control thread frees the rest. */
	for (uint32_t i = 0; i < w->napps; i++) {
		br_sock_close_owned(w->apps[i]);
		br_app_put(w->apps[i]);
	}
	w->napps = 0;
#ifdef HAVE_LIBURING
	br_uring_close(w);
#endif
	return NULL;
}

/*
 * How many workers: the configured number, else a quarter of the cores
 * gsockd may run on (at least one, at most 8): the rest are for the
 * applications' host threads and the CPU programs they talk to.
 */
static uint32_t worker_count(void)
{
	cpu_set_t set;
	long n = br.conf.workers;

	if (n > 0)
		return (uint32_t)n;
	n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) :
							   sysconf(_SC_NPROCESSORS_ONLN);
	n /= 4;
	return n < 1 ? 1 : n > 8 ? 8 : (uint32_t)n;
}

int br_worker_init(struct br_worker *w, uint32_t i)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &w->wake_ev };

	w->idx = i;
	w->wake_ev.kind = BR_EV_WAKE;
	w->inbox_tail = &w->inbox;
	snprintf(w->name, sizeof(w->name), "gsockd-w%u", i % 100u);
	pthread_mutex_init(&w->lock, NULL);
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->epfd < 0 || w->wake_fd < 0 ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wake_fd, &ev) < 0) {
		br_err("cannot create worker %u's epoll set: %s", i,
		       strerror(errno));
		return -1;
	}
	w->timer_fd = br_timer_open(w->epfd, &w->timer_ev);
	return w->timer_fd < 0 ? -1 : 0;
}

int br_worker_turn(struct br_worker *w)
{
	int work;

	self = w;
	w->now_ns = br_now_ns();
	work = io_turn(w, 0);
	work |= drain_inbox(w) > 0;
	work |= poll_apps(w);
	return work;
}

int br_workers_start(void)
{
	br.nworkers = worker_count();
	br.workers = aligned_alloc(_Alignof(struct br_worker),
				   br.nworkers * sizeof(*br.workers));
	if (!br.workers)
		return -1;
	memset(br.workers, 0, br.nworkers * sizeof(*br.workers));
	for (uint32_t i = 0; i < br.nworkers; i++) {
		struct br_worker *w = &br.workers[i];

		if (br_worker_init(w, i))
			return -1;
		errno = pthread_create(&w->thread, NULL, worker_main, w);
		if (errno) {
			br_err("cannot start worker %u: %s", i,
			       strerror(errno));
			return -1;
		}
		w->started = true;
	}
	return 0;
}

/* Stop and join every worker started; then drop what is left in inboxes. */
void br_workers_stop(void)
{
	__atomic_store_n(&br.stopping, 1, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < br.nworkers && br.workers; i++) {
		struct br_worker *w = &br.workers[i];

		if (!w->started)
			continue;
		br_wake(w->wake_fd);
		pthread_join(w->thread, NULL);
	}
	for (uint32_t i = 0; i < br.nworkers && br.workers; i++) {
		struct br_worker *w = &br.workers[i];

		/* Messages posted after their worker ended: as the worker. */
		self = w;
		drain_inbox(w);
		self = NULL;
		for (uint32_t k = 0; k < w->napps; k++)
			br_app_put(w->apps[k]); /* attached by that drain */
		if (w->epfd > 0)
			close(w->epfd);
		if (w->wake_fd > 0)
			close(w->wake_fd);
		if (w->timer_fd > 0)
			close(w->timer_fd);
		free(w->apps);
		pthread_mutex_destroy(&w->lock);
	}
	free(br.workers);
	br.workers = NULL;
}
