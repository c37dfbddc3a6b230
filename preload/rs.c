/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rsocket route (see rs.h). librdmacm itself calls poll, read and
 * close on its own descriptors: every call into it runs with pl_busy set,
 * so those go straight to the kernel.
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

struct pl_rdmacm pl_rdmacm;

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

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *load_error;

static void lq_stop(struct pl_lq *q);

/*
 * pl_fd_find: a connection of this process on rsocket that exec would
 * keep. The entry's fields are read without its lock (atomically): a
 * socket changing route as exec starts is a race the program made.
 */
static int exec_would_carry(int fd, const struct pl_sock *s)
{
	struct stat st;
	int fl;

	if (__atomic_load_n(&s->route, __ATOMIC_RELAXED) != GS_ROUTE_RSOCKET ||
	    __atomic_load_n(&s->rs, __ATOMIC_RELAXED) < 0 ||
	    __atomic_load_n(&s->listening, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&s->gen, __ATOMIC_RELAXED) != pl_fork_gen)
		return 0;
	/* a descriptor closed behind our back (close_range) and reused */
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	fl = pl_real.fcntl(fd, F_GETFD);
	return fl >= 0 && !(fl & FD_CLOEXEC);
}

int pl_rs_exec_check(void)
{
	int fd;

	/* a vfork() or clone() child: the connections are its parent's */
	if (getpid() != pl_pid)
		return 0;
	fd = pl_fd_find(exec_would_carry);
	if (fd < 0)
		return 0;
	pl_log(PL_LOG_ERROR,
	       "exec refused: descriptor %d is an rsocket connection, which cannot cross exec (the new program would get a socket that is not connected); close it or set FD_CLOEXEC before exec, or run on the kernel route (route = \"os\")",
	       fd);
	errno = EOPNOTSUPP;
	return -1;
}

int pl_rs_stale(const struct pl_sock *s)
{
	static unsigned warned = ~0u;

	if (s->route != GS_ROUTE_RSOCKET || s->rs < 0 || s->gen == pl_fork_gen)
		return 0;
	if (__atomic_exchange_n(&warned, pl_fork_gen, __ATOMIC_RELAXED) != pl_fork_gen)
		pl_log(PL_LOG_WARN,
		       "an rsocket made before fork() is used in the child: rsockets do not survive fork (run forking programs with RDMAV_FORK_SAFE=1 on both ends, or on the kernel route: route = \"os\")");
	return 1;
}

/*
 * A thread of the preload's own: every signal blocked (signals are the
 * application's), detached if no one will join it. 0 or an errno.
 */
static int start_thread(pthread_t *t, int detached, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	sigset_t all, old;
	int e = pthread_attr_init(&attr);

	if (e)
		return e;
	if (detached)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	e = pthread_create(t, &attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return e;
}

static void *rclose_run(void *arg)
{
	pl_busy++;
	pl_rdmacm.rclose((int)(intptr_t)arg);
	return NULL;
}

/*
 * rclose of a connection first waits, blocking, until every send it
 * posted completes; when the peer vanished that takes until the
 * hardware gives up retrying (tens of seconds and more under Soft-RoCE),
 * where the kernel's close returns at once. Such an rsocket is closed by
 * a detached thread instead.
 */
static void close_rsocket(struct pl_sock *s, int gone)
{
	pthread_t t;

	if (!gone || start_thread(&t, 1, rclose_run, (void *)(intptr_t)s->rs))
		RS(pl_rdmacm.rclose(s->rs));
}

static void release(struct pl_sock *s)
{
	int gone = 0;

	if (s->rs >= 0 && s->gen != pl_fork_gen) {
		/* The parent's: no librdmacm call, no thread to join here. */
		if (s->watch_fd >= 0)
			pl_real.close(s->watch_fd);
		return;
	}
	if (s->lq) {
		lq_stop(s->lq); /* closes watch_fd, its eventfd */
	} else if (s->watch_fd >= 0) {
		struct pollfd p = { s->watch_fd, POLLIN, 0 };

		/* A call failed, or a CM event waits: the peer is gone. */
		gone = s->broken || pl_real.poll(&p, 1, 0) == 1;
		pl_real.close(s->watch_fd);
	}
	if (s->rs >= 0)
		close_rsocket(s, gone);
}

static void load(void)
{
	void *h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		load_error = "librdmacm.so.1 cannot be loaded";
		return;
	}
#define LOAD(name)                                                           \
	do {                                                                 \
		*(void **)&pl_rdmacm.name = dlsym(h, #name);                        \
		if (!pl_rdmacm.name) {                                              \
			load_error = "librdmacm lacks " #name;               \
			return;                                              \
		}                                                            \
	} while (0)
	LOAD(rsocket);
	LOAD(rbind);
	LOAD(rlisten);
	LOAD(raccept);
	LOAD(rconnect);
	LOAD(rshutdown);
	LOAD(rclose);
	LOAD(rrecv);
	LOAD(rrecvfrom);
	LOAD(rrecvmsg);
	LOAD(rsend);
	LOAD(rsendto);
	LOAD(rsendmsg);
	LOAD(rread);
	LOAD(rreadv);
	LOAD(rwrite);
	LOAD(rwritev);
	LOAD(rpoll);
	LOAD(rgetpeername);
	LOAD(rgetsockname);
	LOAD(rsetsockopt);
	LOAD(rgetsockopt);
	LOAD(rfcntl);
#undef LOAD
	pl_sock_release = release;
}

int pl_rs_load(const char **why)
{
	pthread_once(&load_once, load);
	*why = load_error;
	return load_error ? -1 : 0;
}

/* Options the application set on the kernel socket before the route was chosen. */
void pl_rs_replay_options(int fd, int r)
{
	static const int opts[][2] = { { IPPROTO_TCP, TCP_NODELAY },
				       { SOL_SOCKET, SO_REUSEADDR },
				       { SOL_SOCKET, SO_KEEPALIVE } };

	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		int v = 0;
		socklen_t len = sizeof(v);

		if (pl_real.getsockopt(fd, opts[i][0], opts[i][1], &v, &len) == 0 && v)
			RS(pl_rdmacm.rsetsockopt(r, opts[i][0], opts[i][1], &v, sizeof(v)));
	}
}

static int app_nonblocking(int fd)
{
	int fl = pl_real.fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

/*
 * A connected rsocket's descriptor number is its CM event channel, where
 * the peer's disconnect arrives; rsocket reads it only when it closes.
 * A duplicate of it, which rpoll takes for a plain descriptor, becomes
 * readable when the peer goes away without a word (killed, say), which
 * rsocket's own calls would wait through forever.
 */
int pl_rs_watch_peer(int r)
{
	return pl_real.fcntl(r, F_DUPFD_CLOEXEC, 0);
}

/*
 * The peer of connected s is gone: a CM event waits on its channel. An
 * accepted rsocket's "established" event comes there too, until rsocket
 * takes it; rpoll on the rsocket takes it first.
 */
static int peer_gone(const struct pl_sock *s)
{
	struct pollfd r = { s->rs, POLLIN | POLLOUT, 0 };
	struct pollfd p = { s->watch_fd, POLLIN, 0 };

	if (s->watch_fd < 0 || pl_real.poll(&p, 1, 0) != 1)
		return 0;
	RS(pl_rdmacm.rpoll(&r, 1, 0));
	return pl_real.poll(&p, 1, 0) == 1;
}

/*
 * The accepting thread of a listener. What it accepts waits in q, and
 * the eventfd, readable while q holds some, is what poll, epoll and a
 * blocking accept wait on beside the kernel listener (rpoll over a
 * listening rsocket and other descriptors can sleep through a
 * connection). The thread never sleeps inside rpoll: librdmacm wakes
 * every thread blocked in rpoll on any rsocket event, which would put this
 * one on the path of every message the application's rpoll gets. It
 * checks without waiting and sleeps in between: 1 ms while peers arrive,
 * backing off to LQ_IDLE_US when none has for a while. It hands over
 * only connections that are established (pl_rs_settle).
 */
#define LQ_MAX 128
#define LQ_BUSY_US 1000
#define LQ_IDLE_US 10000

struct pl_lq {
	pthread_t thread;
	int r; /* the listening rsocket */
	int efd; /* eventfd, semaphore mode: one count per queued rsocket */
	int stop; /* atomic */
	pthread_mutex_t lock;
	int q[LQ_MAX], head, n; /* lock */
};

/*
 * An accepted rsocket may still be "accepting" (its established event
 * not taken); rsocket's readv then reads it as the end of the stream.
 * rpoll completes the accept; wait for that, up to a second (the peer is
 * connecting right now). Returns 0 once the rsocket is established.
 */
int pl_rs_settle(int r)
{
	struct pollfd p = { r, POLLOUT, 0 };
	int i, got = 0;

	for (i = 0; i < 50 && !got; i++)
		got = pl_rs_rpoll(&p, 1, 20);
	pl_log(PL_LOG_DEBUG, "rsocket %d accepted: rpoll %d, revents %#x after %d tries",
	       r, got, p.revents, i);
	return got == 1 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP)) ? 0 : -1;
}

static void *lq_run(void *arg)
{
	struct pl_lq *q = arg;
	unsigned idle = 0;
	uint64_t one = 1;

	pl_busy++; /* librdmacm's own descriptors are not ours */
	while (!__atomic_load_n(&q->stop, __ATOMIC_ACQUIRE)) {
		int c = pl_rdmacm.raccept(q->r, NULL, NULL); /* non-blocking */

		if (c < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				pl_log(PL_LOG_DEBUG, "raccept: %s", strerror(errno));
			usleep(idle++ < 1000 ? LQ_BUSY_US : LQ_IDLE_US);
			continue;
		}
		idle = 0;
		if (pl_rs_settle(c) < 0) {
			pl_rdmacm.rclose(c); /* never completed its connection */
			continue;
		}
		pthread_mutex_lock(&q->lock);
		if (q->n == LQ_MAX) {
			pthread_mutex_unlock(&q->lock);
			pl_rdmacm.rclose(c); /* the backlog is full: refuse, as the kernel would */
			continue;
		}
		q->q[(q->head + q->n++) % LQ_MAX] = c;
		pthread_mutex_unlock(&q->lock);
		if (write(q->efd, &one, sizeof(one)) != sizeof(one))
			pl_log(PL_LOG_WARN, "listener eventfd: %s", strerror(errno));
	}
	return NULL;
}

static struct pl_lq *lq_start(int r)
{
	struct pl_lq *q = calloc(1, sizeof(*q));
	int e;

	if (!q)
		return NULL;
	q->r = r;
	q->efd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&q->lock, NULL);
	if (q->efd < 0)
		goto err_free;
	e = start_thread(&q->thread, 0, lq_run, q);
	if (e == 0)
		return q;
	errno = e;
	pl_real.close(q->efd);
err_free:
	pthread_mutex_destroy(&q->lock);
	free(q);
	return NULL;
}

/* An accepted rsocket from q, or -1 (EAGAIN) when none waits. */
static int lq_take(struct pl_lq *q)
{
	uint64_t one;
	int c;

	if (pl_real.read(q->efd, &one, sizeof(one)) != sizeof(one)) {
		errno = EAGAIN;
		return -1;
	}
	pthread_mutex_lock(&q->lock);
	c = q->q[q->head];
	q->head = (q->head + 1) % LQ_MAX;
	q->n--;
	pthread_mutex_unlock(&q->lock);
	return c;
}

static void lq_stop(struct pl_lq *q)
{
	__atomic_store_n(&q->stop, 1, __ATOMIC_RELEASE);
	pthread_join(q->thread, NULL);
	while (q->n) {
		RS(pl_rdmacm.rclose(q->q[q->head]));
		q->head = (q->head + 1) % LQ_MAX;
		q->n--;
	}
	pl_real.close(q->efd);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

/*
 * A connect the application made non-blocking is non-blocking over
 * rsocket too (its answer comes later: pl_rs_connect_progress); a
 * blocking one waits here. Either way, a peer that refuses rsocket (a
 * plain TCP server) gets the kernel's connect instead.
 */
int pl_rs_connect(int fd, struct pl_sock *s, const struct sockaddr *sa,
		  socklen_t len)
{
	int r = RS(pl_rdmacm.rsocket(s->domain, SOCK_STREAM, 0));
	int nonblock = app_nonblocking(fd), ret;

	if (r < 0 || len > sizeof(s->peer)) {
		pl_log(PL_LOG_WARN, "fd %d: rsocket() failed (%s); using the kernel",
		       fd, r < 0 ? strerror(errno) : "address too long");
		if (r >= 0)
			RS(pl_rdmacm.rclose(r));
		return PL_RS_FALLBACK;
	}
	pl_rs_replay_options(fd, r);
	if (nonblock)
		RS(pl_rdmacm.rfcntl(r, F_SETFL, O_NONBLOCK));
	ret = RS(pl_rdmacm.rconnect(r, sa, len));
	if (ret < 0 && !(nonblock && errno == EINPROGRESS)) {
		pl_log(PL_LOG_INFO, "fd %d: rsocket connect failed (%s); using the kernel",
		       fd, strerror(errno));
		RS(pl_rdmacm.rclose(r));
		return PL_RS_FALLBACK;
	}
	s->nonblock = nonblock;
	RS(pl_rdmacm.rfcntl(r, F_SETFL, O_NONBLOCK)); /* blocking is done by RS_IO */
	s->gen = pl_fork_gen;
	s->rs = r;
	pl_rs_ep_unwatch_kernel(fd, s);
	if (ret < 0) {
		pthread_mutex_lock(&s->lock);
		memcpy(&s->peer, sa, len);
		s->peer_len = len;
		s->connecting = 1;
		pthread_mutex_unlock(&s->lock);
		pl_log(PL_LOG_DEBUG, "fd %d: connecting over rsocket", fd);
		errno = EINPROGRESS;
		return -1;
	}
	s->watch_fd = pl_rs_watch_peer(r);
	pl_log(PL_LOG_INFO, "fd %d: connected over rsocket", fd);
	return 0;
}

static void ep_rewatch_kernel(int fd, struct pl_sock *s);

int pl_rs_connect_progress(int fd, struct pl_sock *s)
{
	struct pollfd p = { -1, POLLOUT, 0 };
	int err = 0, fell_back = 0;
	socklen_t len = sizeof(err);

	pthread_mutex_lock(&s->lock);
	if (!s->connecting)
		goto out_unlock;
	p.fd = s->rs;
	if (RS(pl_rdmacm.rpoll(&p, 1, 0)) <= 0)
		goto out_unlock; /* still connecting */
	if (RS(pl_rdmacm.rgetsockopt(s->rs, SOL_SOCKET, SO_ERROR, &err, &len)) < 0)
		err = errno;
	s->connecting = 0;
	if (!err && !(p.revents & (POLLERR | POLLHUP))) {
		s->watch_fd = pl_rs_watch_peer(s->rs);
		pl_log(PL_LOG_INFO, "fd %d: connected over rsocket", fd);
		goto out_unlock;
	}
	pl_log(PL_LOG_INFO, "fd %d: rsocket connect failed (%s); using the kernel",
	       fd, strerror(err ? err : ECONNREFUSED));
	RS(pl_rdmacm.rclose(s->rs));
	s->rs = -1;
	s->route = GS_ROUTE_OS;
	/* Non-blocking as the application asked: its wait goes on in the kernel. */
	if (pl_real.connect(fd, (struct sockaddr *)&s->peer, s->peer_len) < 0 &&
	    errno != EINPROGRESS)
		pl_log(PL_LOG_WARN, "fd %d: the kernel's connect failed too: %s", fd,
		       strerror(errno));
	ep_rewatch_kernel(fd, s);
	fell_back = 1;
out_unlock:
	pthread_mutex_unlock(&s->lock);
	if (fell_back)
		pl_fd_clear(fd); /* a plain kernel descriptor from now on */
	return fell_back;
}

int pl_rs_listen(int fd, struct pl_sock *s, int backlog)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r, one = 1;

	if (pl_real.getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return PL_RS_FALLBACK;
	r = RS(pl_rdmacm.rsocket(s->domain, SOCK_STREAM, 0));
	if (r < 0)
		goto err_log;
	RS(pl_rdmacm.rsetsockopt(r, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	if (RS(pl_rdmacm.rbind(r, (struct sockaddr *)&ss, len)) < 0 ||
	    RS(pl_rdmacm.rlisten(r, backlog)) < 0 ||
	    RS(pl_rdmacm.rfcntl(r, F_SETFL, O_NONBLOCK)) < 0) {
		int e = errno;

		RS(pl_rdmacm.rclose(r));
		errno = e;
		goto err_log;
	}
	s->lq = lq_start(r);
	if (!s->lq) {
		RS(pl_rdmacm.rclose(r));
		goto err_log;
	}
	s->watch_fd = s->lq->efd;
	s->gen = pl_fork_gen;
	s->rs = r;
	s->nonblock = app_nonblocking(fd);
	s->listening = 1;
	pl_log(PL_LOG_INFO, "fd %d: listening on rsocket and on the kernel", fd);
	return 0;
err_log:
	pl_log(PL_LOG_WARN, "fd %d: cannot listen on rsocket (%s); the kernel only",
	       fd, strerror(errno));
	return PL_RS_FALLBACK;
}

/* A new application descriptor for an accepted rsocket. */
static int adopt(struct pl_sock *ls, int r, int flags)
{
	struct pl_sock *s = pl_sock_new(ls->domain);
	int fd = pl_real.socket(ls->domain, SOCK_STREAM | (flags & SOCK_CLOEXEC), 0);
	int e = fd < 0 ? errno : EMFILE;

	if (s) {
		/* Complete before the table publishes it. */
		s->route = GS_ROUTE_RSOCKET;
		s->state = PL_DECIDED;
		s->rs = r;
		s->gen = pl_fork_gen;
		s->watch_fd = pl_rs_watch_peer(r);
		s->nonblock = (flags & SOCK_NONBLOCK) != 0;
	}
	if (fd < 0 || !s || pl_fd_set(fd, s)) {
		if (fd >= 0)
			pl_real.close(fd);
		if (s)
			s->rs = -1; /* closed just below, once */
		pl_sock_put(s);
		RS(pl_rdmacm.rclose(r));
		errno = e;
		return -1;
	}
	RS(pl_rdmacm.rfcntl(r, F_SETFL, O_NONBLOCK)); /* blocking is done here */
	pl_sock_put(s);
	return fd;
}

int pl_rs_accept(int fd, struct pl_sock *s, struct sockaddr *sa,
		 socklen_t *len, int flags)
{
	for (;;) {
		struct pollfd p[2] = { { s->lq->efd, POLLIN, 0 }, { fd, POLLIN, 0 } };
		int r = lq_take(s->lq);

		if (r >= 0) {
			if (sa && len)
				RS(pl_rdmacm.rgetpeername(r, sa, len));
			return adopt(s, r, flags);
		}
		/* The kernel side: accept only what is there, never wait in it. */
		if (pl_real.poll(&p[1], 1, 0) == 1)
			return pl_real.accept4(fd, sa, len, flags);
		if (s->nonblock) {
			errno = EAGAIN;
			return -1;
		}
		if (pl_real.poll(p, 2, -1) < 0 && errno == EINTR)
			return -1;
	}
}

/* The rsocket itself stays non-blocking; the preload waits for blocking callers. */
void pl_rs_setfl(struct pl_sock *s, int flags)
{
	s->nonblock = (flags & O_NONBLOCK) != 0;
}

/*
 * Wait until r is ready for ev or its peer is gone. No timeout of ours
 * (it would cost a timer per wait: pl_rs_rpoll); rpoll itself re-checks
 * the rsocket's state every few seconds.
 */
static void rs_wait(struct pl_sock *s, short ev)
{
	struct pollfd p[2] = { { s->rs, ev, 0 }, { s->watch_fd, POLLIN, 0 } };

	pl_rs_rpoll(p, s->watch_fd >= 0 ? 2 : 1, -1);
}

/*
 * What a call gets once the peer vanished without rsocket's orderly
 * disconnect (which reads as the end of the stream before we get here):
 * a reset, as from a kernel peer that died with data unread.
 */
static ssize_t rs_gone(void)
{
	errno = ECONNRESET;
	return -1;
}

/*
 * An rsocket call made for the application: it blocks if the application
 * asked for that (and not dontwait), by waiting here; a peer that
 * vanished is a reset, for reads and writes.
 */
#define RS_IO(ev, dontwait, call)                                            \
	({                                                                   \
		struct pl_sock *s_ = pl_cur_sock;                            \
		ssize_t r_;                                                  \
                                                                             \
		while ((r_ = RS(call)) < 0 && s_ &&                          \
		       (errno == EAGAIN || errno == EWOULDBLOCK)) {          \
			/* Once more: data that came before the end is read. */ \
			if (peer_gone(s_) && (r_ = RS(call)) < 0 &&          \
			    (errno == EAGAIN || errno == EWOULDBLOCK) &&     \
			    peer_gone(s_)) {                                 \
				pl_log(PL_LOG_DEBUG, "rsocket %d: the peer is gone", s_->rs); \
				r_ = rs_gone();                            \
				break;                                       \
			}                                                    \
			if (r_ >= 0)                                         \
				break;                                       \
			if (s_->nonblock || (dontwait)) {                    \
				errno = EAGAIN;                              \
				break;                                       \
			}                                                    \
			rs_wait(s_, ev);                                     \
		}                                                            \
		if (r_ < 0 && s_ && errno != EAGAIN && errno != EWOULDBLOCK && \
		    errno != EINTR)                                          \
			s_->broken = 1;                                      \
		r_;                                                          \
	})

/* A blocking send sends it all, as the kernel's does. */
static ssize_t rs_send_all(int r, const void *b, size_t n, int f)
{
	const struct pl_sock *s = pl_cur_sock;
	size_t done = 0;

	do {
		ssize_t put = RS_IO(POLLOUT, f & MSG_DONTWAIT,
				    pl_rdmacm.rsend(r, (const char *)b + done, n - done, f));

		if (put < 0)
			return done ? (ssize_t)done : put;
		done += (size_t)put;
	} while (done < n && s && !s->nonblock && !(f & MSG_DONTWAIT));
	return (ssize_t)done;
}

/* recvmmsg and sendmmsg, one message at a time. */
static int rs_recvmmsg(int r, struct mmsghdr *v, unsigned int n, int flags,
		       struct timespec *t)
{
	unsigned int i;

	(void)t;
	for (i = 0; i < n; i++) {
		int f = i ? flags | MSG_DONTWAIT : flags;
		ssize_t got = RS_IO(POLLIN, f & MSG_DONTWAIT, pl_rdmacm.rrecvmsg(r, &v[i].msg_hdr, f));

		if (got < 0)
			break;
		v[i].msg_len = (unsigned int)got;
		if (!got)
			break;
	}
	return i ? (int)i : -1;
}

static int rs_sendmmsg(int r, struct mmsghdr *v, unsigned int n, int flags)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		ssize_t put = RS_IO(POLLOUT, flags & MSG_DONTWAIT,
				    pl_rdmacm.rsendmsg(r, &v[i].msg_hdr, flags));

		if (put < 0)
			break;
		v[i].msg_len = (unsigned int)put;
	}
	return i ? (int)i : -1;
}

/* sendfile to an rsocket: through a buffer. */
static ssize_t rs_sendfile(int r, int in, off_t *off, size_t n)
{
	char buf[65536];
	size_t done = 0;

	while (done < n) {
		size_t want = n - done < sizeof(buf) ? n - done : sizeof(buf);
		ssize_t got = off ? pread(in, buf, want, *off) : pl_real.read(in, buf, want);
		ssize_t put;

		if (got <= 0)
			break;
		put = rs_send_all(r, buf, (size_t)got, 0);
		if (put <= 0)
			return done ? (ssize_t)done : put;
		if (off)
			*off += put;
		else if (put < got)
			lseek(in, put - got, SEEK_CUR);
		done += (size_t)put;
		if (put < got)
			break;
	}
	return (ssize_t)done;
}

static int rs_ioctl(int r, unsigned long req, ...)
{
	va_list ap;
	int *arg;

	va_start(ap, req);
	arg = va_arg(ap, int *);
	va_end(ap);
	(void)r;
	if (req == FIONBIO && pl_cur_sock) {
		pl_cur_sock->nonblock = *arg != 0;
		return 0;
	}
	errno = EOPNOTSUPP;
	return -1;
}

/* Options rsocket refuses (SO_REUSEPORT, say) stay on the kernel socket only. */
static int rs_setsockopt(int r, int level, int name, const void *v, socklen_t len)
{
	int ret = RS(pl_rdmacm.rsetsockopt(r, level, name, v, len));

	if (ret < 0 && (errno == ENOPROTOOPT || errno == ENOTSUP || errno == EINVAL))
		return 0;
	return ret;
}

#define WRAP(ret, name, params, call)                                        \
	static ret name params                                               \
	{                                                                    \
		return RS(call);                                             \
	}
/* The same for calls that go through RS_IO, which steps aside itself. */
#define WRAP_IO(ret, name, params, call)                                     \
	static ret name params                                               \
	{                                                                    \
		return call;                                                 \
	}
WRAP(int, rs_bind, (int r, const struct sockaddr *sa, socklen_t l), pl_rdmacm.rbind(r, sa, l))
WRAP(int, rs_listen, (int r, int b), pl_rdmacm.rlisten(r, b))
WRAP(int, rs_connect, (int r, const struct sockaddr *sa, socklen_t l), pl_rdmacm.rconnect(r, sa, l))
#define RD(call) RS_IO(POLLIN, 0, call)
#define RDF(f, call) RS_IO(POLLIN, (f) & MSG_DONTWAIT, call)
#define WR(call) RS_IO(POLLOUT, 0, call)
#define WRF(f, call) RS_IO(POLLOUT, (f) & MSG_DONTWAIT, call)
WRAP_IO(ssize_t, rs_read, (int r, void *b, size_t n), RD(pl_rdmacm.rread(r, b, n)))
WRAP_IO(ssize_t, rs_readv, (int r, const struct iovec *v, int n), RD(pl_rdmacm.rreadv(r, v, n)))
WRAP_IO(ssize_t, rs_recv, (int r, void *b, size_t n, int f), RDF(f, pl_rdmacm.rrecv(r, b, n, f)))
WRAP_IO(ssize_t, rs_recvfrom, (int r, void *b, size_t n, int f, struct sockaddr *sa, socklen_t *l),
     RDF(f, pl_rdmacm.rrecvfrom(r, b, n, f, sa, l)))
WRAP_IO(ssize_t, rs_recvmsg, (int r, struct msghdr *m, int f), RDF(f, pl_rdmacm.rrecvmsg(r, m, f)))
WRAP_IO(ssize_t, rs_write, (int r, const void *b, size_t n), rs_send_all(r, b, n, 0))
WRAP_IO(ssize_t, rs_writev, (int r, const struct iovec *v, int n), WR(pl_rdmacm.rwritev(r, v, n)))
WRAP_IO(ssize_t, rs_send, (int r, const void *b, size_t n, int f), rs_send_all(r, b, n, f))
/* A connected stream socket ignores sendto's address, as the kernel's does. */
WRAP_IO(ssize_t, rs_sendto, (int r, const void *b, size_t n, int f, const struct sockaddr *sa, socklen_t l),
     ((void)sa, (void)l, rs_send_all(r, b, n, f)))
WRAP_IO(ssize_t, rs_sendmsg, (int r, const struct msghdr *m, int f), WRF(f, pl_rdmacm.rsendmsg(r, m, f)))
WRAP(int, rs_shutdown, (int r, int how), pl_rdmacm.rshutdown(r, how))
WRAP(int, rs_getsockopt, (int r, int lv, int nm, void *v, socklen_t *l), pl_rdmacm.rgetsockopt(r, lv, nm, v, l))
WRAP(int, rs_getsockname, (int r, struct sockaddr *sa, socklen_t *l), pl_rdmacm.rgetsockname(r, sa, l))
WRAP(int, rs_getpeername, (int r, struct sockaddr *sa, socklen_t *l), pl_rdmacm.rgetpeername(r, sa, l))
WRAP_IO(ssize_t, rs_read_chk, (int r, void *b, size_t n, size_t sz), RD(pl_rdmacm.rread(r, b, n < sz ? n : sz)))
WRAP_IO(ssize_t, rs_recv_chk, (int r, void *b, size_t n, size_t sz, int f),
     RDF(f, pl_rdmacm.rrecv(r, b, n < sz ? n : sz, f)))
WRAP_IO(ssize_t, rs_recvfrom_chk, (int r, void *b, size_t n, size_t sz, int f, struct sockaddr *sa, socklen_t *l),
     RDF(f, pl_rdmacm.rrecvfrom(r, b, n < sz ? n : sz, f, sa, l)))
#undef RD
#undef RDF
#undef WR
#undef WRF
#undef WRAP
#undef WRAP_IO

/* The table PL_FD_CALL dispatches to; entries not here never reach it. */
struct pl_real pl_rs_calls = {
	.bind = rs_bind,
	.listen = rs_listen,
	.connect = rs_connect,
	.read = rs_read,
	.readv = rs_readv,
	.recv = rs_recv,
	.recvfrom = rs_recvfrom,
	.recvmsg = rs_recvmsg,
	.recvmmsg = rs_recvmmsg,
	.write = rs_write,
	.writev = rs_writev,
	.send = rs_send,
	.sendto = rs_sendto,
	.sendmsg = rs_sendmsg,
	.sendmmsg = rs_sendmmsg,
	.sendfile = rs_sendfile,
	.sendfile64 = rs_sendfile,
	.shutdown = rs_shutdown,
	.setsockopt = rs_setsockopt,
	.getsockopt = rs_getsockopt,
	.getsockname = rs_getsockname,
	.getpeername = rs_getpeername,
	.ioctl = rs_ioctl,
	.__read_chk = rs_read_chk,
	.__recv_chk = rs_recv_chk,
	.__recvfrom_chk = rs_recvfrom_chk,
};

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
static void ep_rewatch_kernel(int fd, struct pl_sock *s)
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

void pl_rs_epoll_forget(int epfd)
{
	struct ep_set **pp, *e;

	pthread_mutex_lock(&ep_lock);
	for (pp = &ep_sets; *pp && (*pp)->epfd != epfd; pp = &(*pp)->next)
		;
	e = *pp;
	if (e) {
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
