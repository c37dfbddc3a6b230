/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock-preload.so: the socket calls of an unmodified program, routed.
 *
 * A TCP socket (AF_INET/AF_INET6, SOCK_STREAM) gets an entry in the fd
 * table when it is created; its route is chosen when it connects (client)
 * or listens (server), by GSOCK_TRANSPORT and the rules of gsock.conf.
 * Every interposed call on a descriptor looks up its entry: none (a plain
 * descriptor, or a socket whose route is the kernel's) goes straight to
 * the real call; an entry goes to its route's table of calls
 * (pl_route_calls). The kernel's table is the real one. A socket decided
 * for the kernel leaves the table, so from then on it costs one atomic
 * load per call.
 *
 * Calls the preload makes itself, and calls made before pl_init() has
 * finished in this thread, go to the real functions (pl_busy).
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <linux/kcmp.h>
#include <unistd.h>

#include "clock.h"
#include "direct.h"
#include "fdtab.h"
#include "real.h"
#include "route.h"
#include "rs.h"

struct pl_real pl_real;
__thread int pl_busy;
__thread struct pl_sock *pl_cur_sock;
unsigned pl_fork_gen;
pid_t pl_pid;

/* Each route's calls; the kernel's are the real ones. */
static const struct pl_real *pl_route_calls[] = {
	[GS_ROUTE_OS] = &pl_real,
#ifdef HAVE_RDMACM
	[GS_ROUTE_RSOCKET] = &pl_rs_calls,
#else
	[GS_ROUTE_RSOCKET] = &pl_real, /* never chosen without librdmacm */
#endif
	[GS_ROUTE_DIRECT] = &pl_direct_calls,
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int ready;

static void lock_table(void);
static void unlock_table(void);
static void forked(void);

static void init(void)
{
	pl_busy++;
#define PL_RESOLVE(ret, name, args)                                          \
	pl_real.name = (ret(*) args)dlsym(RTLD_NEXT, #name);
	PL_CALLS(PL_RESOLVE)
#undef PL_RESOLVE
	pthread_atfork(lock_table, unlock_table, forked);
	pl_pid = getpid();
	pl_route_init();
	__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
	pl_busy--;
}

void pl_init(void)
{
	/* A call made inside init() itself must not wait for init(). */
	if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE) && !pl_busy)
		pthread_once(&init_once, init);
}

/*
 * fork() must not copy the table's lock while another thread holds it:
 * the child would wait for ever at its first socket call (seen: 14 of
 * 200 children hung, t/preload-torture fork).
 */
static void lock_table(void)
{
	pl_fd_lock_all();
}

static void unlock_table(void)
{
	pl_fd_unlock_all();
}

/* In the child: rsockets made before now belong to the parent (rs.h). */
static void forked(void)
{
	pl_fork_gen++;
	pl_pid = getpid();
	pl_fd_forked();
}

/* An rsocket this process inherited: it may only be closed here. */
static int stale(const struct pl_sock *s)
{
#ifdef HAVE_RDMACM
	return s && pl_rs_stale(s);
#else
	(void)s;
	return 0;
#endif
}

/*
 * The calls for fd, with its entry's reference in *s (NULL for a plain
 * descriptor). Callers drop it with pl_sock_put(*s).
 */
static const struct pl_real *calls_for(int fd, struct pl_sock **s)
{
	*s = NULL;
	pl_init();
	if (pl_busy)
		return &pl_real;
	*s = pl_fd_get(fd);
#ifdef HAVE_RDMACM
	/* A non-blocking rsocket connect that failed: the kernel's from here. */
	if (*s && (*s)->connecting)
		pl_rs_connect_progress(fd, *s);
#endif
	/* A socket without its rsocket (yet) is the kernel's. */
	return *s && ((*s)->rs >= 0 || (*s)->route == GS_ROUTE_DIRECT) ?
		       pl_route_calls[(*s)->route] :
		       &pl_real;
}

/*
 * calls_for, for a call that moves data: in fork-safe mode, a connection
 * still on the kernel moves to its rsocket first (rs.h).
 */
static const struct pl_real *calls_for_io(int fd, struct pl_sock **s)
{
	const struct pl_real *calls = calls_for(fd, s);

#ifdef HAVE_RDMACM
	if (*s && ((*s)->fork == PL_FORK_CLIENT || (*s)->fork == PL_FORK_SERVER)) {
		pl_rs_fork_move(fd, *s);
		calls = (*s)->rs >= 0 ? pl_route_calls[(*s)->route] : &pl_real;
	}
#endif
	return calls;
}

/* The descriptor fd's route calls it by: its rsocket, or fd itself. */
static int route_fd(int fd, const struct pl_sock *s)
{
	return s && s->route == GS_ROUTE_RSOCKET && s->rs >= 0 ? s->rs : fd;
}

/* A call on one descriptor, forwarded to its route found by lookup. */
#define PL_LOOKUP_CALL(lookup, ret, name, params, args) \
	PL_LOOKUP_CALL_AS(name, lookup, ret, name, params, args)
#define PL_LOOKUP_CALL_AS(fname, lookup, ret, name, params, args)            \
	ret fname params                                                     \
	{                                                                    \
		struct pl_sock *s;                                           \
		const struct pl_real *calls_ = lookup(fd, &s);               \
		ret r;                                                       \
		int saved;                                                   \
                                                                             \
		if (stale(s)) {                                              \
			r = (ret)-1;                                         \
			errno = EOPNOTSUPP;                                  \
		} else {                                                     \
			/* librdmacm's own calls come back through here */ \
			struct pl_sock *outer_ = pl_cur_sock;                \
                                                                             \
			fd = route_fd(fd, s);                                \
			pl_cur_sock = s;                                     \
			r = calls_->name args;                               \
			pl_cur_sock = outer_;                                \
		}                                                            \
		saved = errno;                                               \
		pl_sock_put(s);                                              \
		errno = saved;                                               \
		return r;                                                    \
	}

/* Calls that move data, and the others. */
#define PL_IO_CALL(...) PL_LOOKUP_CALL(calls_for_io, __VA_ARGS__)
#define PL_FD_CALL(...) PL_LOOKUP_CALL(calls_for, __VA_ARGS__)

/* A call that needs no descriptor translated (or, without librdmacm, cannot). */
#define PL_MULTI_CALL(ret, name, params, args)                               \
	ret name params                                                      \
	{                                                                    \
		pl_init();                                                   \
		return pl_real.name args;                                    \
	}

PL_FD_CALL(int, bind, (int fd, const struct sockaddr *sa, socklen_t len),
	   (fd, sa, len))
PL_IO_CALL(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))
PL_IO_CALL(ssize_t, readv, (int fd, const struct iovec *iov, int n),
	   (fd, iov, n))
PL_IO_CALL(ssize_t, recv, (int fd, void *buf, size_t n, int flags),
	   (fd, buf, n, flags))
PL_IO_CALL(ssize_t, recvfrom,
	   (int fd, void *buf, size_t n, int flags, struct sockaddr *sa,
	    socklen_t *len),
	   (fd, buf, n, flags, sa, len))
PL_IO_CALL(ssize_t, recvmsg, (int fd, struct msghdr *msg, int flags),
	   (fd, msg, flags))
PL_IO_CALL(int, recvmmsg,
	   (int fd, struct mmsghdr *v, unsigned int n, int flags,
	    struct timespec *t),
	   (fd, v, n, flags, t))
PL_IO_CALL(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))
PL_IO_CALL(ssize_t, writev, (int fd, const struct iovec *iov, int n),
	   (fd, iov, n))
PL_IO_CALL(ssize_t, send, (int fd, const void *buf, size_t n, int flags),
	   (fd, buf, n, flags))
PL_IO_CALL(ssize_t, sendto,
	   (int fd, const void *buf, size_t n, int flags,
	    const struct sockaddr *sa, socklen_t len),
	   (fd, buf, n, flags, sa, len))
static PL_LOOKUP_CALL_AS(sendmsg_routed, calls_for_io, ssize_t, sendmsg,
			 (int fd, const struct msghdr *msg, int flags),
			 (fd, msg, flags))

/* A direct descriptor cannot be passed to another process. */
ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	pl_init();
	if (!pl_busy && msg && pl_direct_rights_check(msg, "sendmsg") < 0)
		return -1;
	return sendmsg_routed(fd, msg, flags);
}
static PL_LOOKUP_CALL_AS(sendmmsg_routed, calls_for_io, int, sendmmsg,
			 (int fd, struct mmsghdr *v, unsigned int n, int flags),
			 (fd, v, n, flags))

/*
 * The same for each message: the messages before the first that would
 * pass a direct descriptor go to the kernel, whose answer is returned
 * (their count, as for a sendmmsg that fails part way); a call whose
 * first message is refused fails. The kernel reads IOV_MAX at most.
 */
int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	unsigned int most = n < IOV_MAX ? n : IOV_MAX;

	pl_init();
	if (!pl_busy && v) {
		for (unsigned int i = 0; i < most; i++) {
			if (pl_direct_rights_check(&v[i].msg_hdr, "sendmmsg") < 0)
				return i ? sendmmsg_routed(fd, v, i, flags) : -1;
		}
	}
	return sendmmsg_routed(fd, v, n, flags);
}
PL_IO_CALL(ssize_t, sendfile, (int fd, int in, off_t *off, size_t n),
	   (fd, in, off, n))
PL_IO_CALL(ssize_t, sendfile64, (int fd, int in, off_t *off, size_t n),
	   (fd, in, off, n))
PL_IO_CALL(int, shutdown, (int fd, int how), (fd, how))
PL_FD_CALL(int, setsockopt,
	   (int fd, int level, int name, const void *v, socklen_t len),
	   (fd, level, name, v, len))
PL_FD_CALL(int, getsockopt,
	   (int fd, int level, int name, void *v, socklen_t *len),
	   (fd, level, name, v, len))
PL_FD_CALL(int, getsockname, (int fd, struct sockaddr *sa, socklen_t *len),
	   (fd, sa, len))
PL_FD_CALL(int, getpeername, (int fd, struct sockaddr *sa, socklen_t *len),
	   (fd, sa, len))
PL_IO_CALL(ssize_t, __read_chk, (int fd, void *buf, size_t n, size_t size),
	   (fd, buf, n, size))
PL_IO_CALL(ssize_t, __recv_chk,
	   (int fd, void *buf, size_t n, size_t size, int flags),
	   (fd, buf, n, size, flags))
PL_IO_CALL(ssize_t, __recvfrom_chk,
	   (int fd, void *buf, size_t n, size_t size, int flags,
	    struct sockaddr *sa, socklen_t *len),
	   (fd, buf, n, size, flags, sa, len))

/*
 * poll, select and epoll: one inner call each, which goes through rpoll
 * when rsocket descriptors may be in the set (rsocket route, an RDMA
 * device), else to the kernel with the signal mask of ppoll, pselect and
 * epoll_pwait. Around it, the direct route makes its descriptors' readiness
 * true of their rings first, and, while it has connections, waits in
 * slices (direct.h).
 */

#ifdef HAVE_RDMACM
/* An rsocket wait (call) under the signal mask m, if there is one. */
#define PL_RS_MASKED(m, call)                                                \
	({                                                                   \
		sigset_t old_;                                               \
		int r_;                                                      \
                                                                             \
		if (m)                                                       \
			pthread_sigmask(SIG_SETMASK, m, &old_);              \
		r_ = (call);                                                 \
		if (m)                                                       \
			pthread_sigmask(SIG_SETMASK, &old_, NULL);           \
		r_;                                                          \
	})
#endif

/* The timespec of a wait of ns nanoseconds; NULL for none (-1). */
static struct timespec *ns_ts(long long ns, struct timespec *ts)
{
	if (ns < 0)
		return NULL;
	ts->tv_sec = (time_t)(ns / 1000000000);
	ts->tv_nsec = (long)(ns % 1000000000);
	return ts;
}

/* Milliseconds of a wait of ns (-1: for ever), rounded up. */
static int ns_ms(long long ns)
{
	return ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
}

/*
 * Whether a wait can nap (a wait of nanoseconds, pl_direct_prewait):
 * not where rsocket's waits, which take milliseconds, may serve it.
 */
static int nap_ok(void)
{
#ifdef HAVE_RDMACM
	return !pl_route_rdma_possible();
#else
	return 1;
#endif
}

/* epoll_pwait2 failed with ENOSYS or EPERM once: epoll waits do not nap. */
static int pwait2_gone;

static int pwait2_ok(void)
{
	return pl_real.epoll_pwait2 &&
	       !__atomic_load_n(&pwait2_gone, __ATOMIC_RELAXED);
}

/* The inner waits: ns nanoseconds (-1: for ever). */
static int poll_inner(struct pollfd *fds, nfds_t n, long long ns,
		      const sigset_t *m)
{
	struct timespec ts;

#ifdef HAVE_RDMACM
	if (pl_route_rdma_possible()) {
		int done = 0, r = PL_RS_MASKED(m, pl_rs_poll(fds, n, ns_ms(ns),
							     &done));

		if (done)
			return r;
	}
#endif
	return pl_real.ppoll(fds, n, ns_ts(ns, &ts), m);
}

static int select_inner(int n, fd_set *rd, fd_set *wr, fd_set *ex,
			long long ns, const sigset_t *m)
{
	struct timespec ts;

#ifdef HAVE_RDMACM
	if (pl_route_rdma_possible()) {
		int done = 0, r = PL_RS_MASKED(m, pl_rs_select(n, rd, wr, ex,
							       ns_ms(ns), &done));

		if (done)
			return r;
	}
#endif
	return pl_real.pselect(n, rd, wr, ex, ns_ts(ns, &ts), m);
}

static int epoll_inner(int ep, struct epoll_event *e, int n, long long ns,
		       const sigset_t *m)
{
	struct timespec ts;

#ifdef HAVE_RDMACM
	if (pl_route_rdma_possible()) {
		int done = 0, r = PL_RS_MASKED(m, pl_rs_epoll_wait(ep, e, n,
								   ns_ms(ns), &done));

		if (done)
			return r;
	}
#endif
	if (ns > 0 && ns % 1000000 && pwait2_ok()) {
		int r = pl_real.epoll_pwait2(ep, e, n, ns_ts(ns, &ts), m);

		if (r >= 0 || (errno != ENOSYS && errno != EPERM))
			return r;
		/* a C library that has it over a kernel (or filter) that does not */
		__atomic_store_n(&pwait2_gone, 1, __ATOMIC_RELAXED);
		ns = 0; /* this nap: a look; no more naps */
	}
	return pl_real.epoll_pwait(ep, e, n, ns_ms(ns), m);
}

/*
 * The kernel's part of an epoll wait over sc, then the members the wait
 * reports itself (pl_direct_epoll_merge), with room kept for them.
 */
static int epoll_merged(struct pl_dscope *sc, int ep, struct epoll_event *e,
			int n, long long ns, const sigset_t *m)
{
	int k = pl_direct_epoll_room(sc, n), r;

	r = pl_direct_epoll_merge(sc, e, n, k ? epoll_inner(ep, e, k, ns, m) : 0);
	/* its turn given to members that went meanwhile: the kernel's after all */
	return !k && !r ? epoll_inner(ep, e, n, ns, m) : r;
}

/*
 * A nap of the calling thread: its timer slack (50 us unless the program
 * set it) would stretch a nap of tens of microseconds several times, so
 * the nap runs with 1 us; the thread's own slack is put back after.
 */
static unsigned long nap_slack_set(void)
{
	int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);

	if (old > 1000)
		prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
	return old > 1000 ? (unsigned long)old : 0;
}

static void nap_slack_put(unsigned long old)
{
	if (old)
		prctl(PR_SET_TIMERSLACK, old, 0, 0, 0);
}

/*
 * A wait of PL_WAIT as it stands, for a thread cancelled inside its kernel
 * wait (a cancellation point; the rest of the wait, which takes locks
 * and writes wake-up bytes, runs with cancellation disabled): its nap's
 * timer slack goes back, its sleep ends and its connections' references
 * go, as after any wait.
 * Otherwise they would stay for good: connections never freed, and naps
 * of other threads kept from taking those connections' answers.
 */
struct pl_wait_state {
	struct pl_dscope *sc;
	unsigned long slack;
};

static void pl_wait_cancelled(void *arg)
{
	struct pl_wait_state *w = arg;

	nap_slack_put(w->slack);
	pl_direct_sleep(w->sc, -1);
	pl_direct_scope_end(w->sc);
}

/*
 * Run call (a wait of ns_ nanoseconds, -1 for ever) for timeout ms: the
 * direct descriptors it covers (scope, filling sc_) made true first, a
 * nap and a look again while one owes an answer (can_nap: call takes
 * nanoseconds), and slices while it covers any. before runs ahead of
 * each try (select puts its sets back).
 */
#define PL_WAIT(timeout, can_nap, scope, before, call)                       \
	({                                                                   \
		int left_ = (timeout), r_;                                   \
		long long end_ = left_ > 0 ? pl_now_ns() + left_ * 1000000LL : 0; \
		struct pl_dscope sc_;                                        \
		struct pl_wait_state w_ = { &sc_, 0 };                       \
		int cs_;                                                     \
                                                                             \
		/* cancelled in the kernel wait only: see pl_wait_cancelled */ \
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs_);        \
		scope;                                                       \
		pthread_cleanup_push(pl_wait_cancelled, &w_);                \
		for (;;) {                                                   \
			int ms_ = pl_direct_prewait(&sc_, left_, (can_nap)); \
			long long ns_ = ms_ < 0 ? -1 : ms_ * 1000000LL;      \
			unsigned long slack_ = 0;                            \
                                                                             \
			if (sc_.nap_ns) {                                    \
				ns_ = sc_.nap_ns > 0 ? sc_.nap_ns : 0;       \
				if (ns_)                                     \
					slack_ = nap_slack_set();            \
			}                                                    \
			w_.slack = slack_;                                   \
			before;                                              \
			pthread_setcancelstate(cs_, NULL);                   \
			r_ = (call);                                         \
			pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL); \
			w_.slack = 0;                                        \
			if (sc_.asleep) {                                    \
				int e_ = errno;                              \
                                                                             \
				pl_direct_sleep(&sc_, -1);                   \
				errno = e_;                                  \
			}                                                    \
			if (slack_) {                                        \
				int e_ = errno;                              \
                                                                             \
				nap_slack_put(slack_);                       \
				errno = e_;                                  \
			}                                                    \
			if (r_ != 0 || (!sc_.nap_ns && ms_ == left_))        \
				break;                                       \
			if (!sc_.nap_ns)                                     \
				pl_direct_slice_over(&sc_);                  \
			if (left_ > 0) {                                     \
				long long d_ = end_ - pl_now_ns();          \
                                                                             \
				left_ = d_ > 0 ? ns_ms(d_) : 0;              \
			}                                                    \
		}                                                            \
		pthread_cleanup_pop(0);                                      \
		pl_direct_scope_end(&sc_);                                   \
		pthread_setcancelstate(cs_, NULL);                           \
		r_;                                                          \
	})

/*
 * Milliseconds of a timespec or timeval, rounded up as the kernel rounds
 * a wait (so a short one does not turn into a busy loop); -1 for none.
 */
#define TS_MS(t)                                                             \
	((t) ? (int)((t)->tv_sec * 1000 + ((t)->tv_nsec + 999999) / 1000000) : \
	       -1)
#define TV_MS(t)                                                             \
	((t) ? (int)((t)->tv_sec * 1000 + ((t)->tv_usec + 999) / 1000) : -1)

/* Neither rsocket nor direct descriptors: the real wait, as asked. */
static int plain_wait(void)
{
	if (pl_busy || pl_direct_active())
		return pl_busy;
#ifdef HAVE_RDMACM
	return !pl_route_rdma_possible();
#else
	return 1;
#endif
}

/*
 * A wait of the kernel's alone (no direct connection yet) that may still
 * sleep when one comes: counted while it lasts, so that the connection's
 * bookkeeping leaves its wake-up requests alone (pl_plain_waits).
 */
#define PLAIN(call)                                                          \
	({                                                                   \
		int counted_ = !pl_busy, r_;                                 \
                                                                             \
		if (counted_)                                                \
			__atomic_add_fetch(&pl_plain_waits, 1,               \
					   __ATOMIC_SEQ_CST);                \
		r_ = (call);                                                 \
		if (counted_) {                                              \
			int e_ = errno;                                      \
                                                                             \
			__atomic_sub_fetch(&pl_plain_waits, 1,               \
					   __ATOMIC_SEQ_CST);                \
			errno = e_;                                          \
		}                                                            \
		r_;                                                          \
	})

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t,
	  const sigset_t *m)
{
	pl_init();
	if (plain_wait())
		return PLAIN(pl_real.ppoll(fds, n, t, m));
	return PL_WAIT(TS_MS(t), nap_ok(), pl_direct_scope_poll(&sc_, fds, n),
		       (void)0, poll_inner(fds, n, ns_, m));
}

int poll(struct pollfd *fds, nfds_t n, int t)
{
	pl_init();
	if (plain_wait())
		return PLAIN(pl_real.poll(fds, n, t));
	return PL_WAIT(t, nap_ok(), pl_direct_scope_poll(&sc_, fds, n), (void)0,
		       poll_inner(fds, n, ns_, NULL));
}

int __poll_chk(struct pollfd *fds, nfds_t n, int t, size_t len)
{
	if (len / sizeof(*fds) < n)
		abort(); /* as glibc's __chk_fail */
	return poll(fds, n, t);
}

int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *t,
		const sigset_t *m, size_t len)
{
	if (len / sizeof(*fds) < n)
		abort();
	return ppoll(fds, n, t, m);
}

/* select's sets as given, put back before each slice. */
struct sets {
	fd_set *p[3];
	fd_set v[3];
};

static void sets_save(struct sets *s, fd_set *rd, fd_set *wr, fd_set *ex)
{
	s->p[0] = rd;
	s->p[1] = wr;
	s->p[2] = ex;
	for (int i = 0; i < 3; i++)
		if (s->p[i])
			s->v[i] = *s->p[i];
}

static void sets_put_back(const struct sets *s)
{
	for (int i = 0; i < 3; i++)
		if (s->p[i])
			*s->p[i] = s->v[i];
}

int pselect(int n, fd_set *rd, fd_set *wr, fd_set *ex,
	    const struct timespec *t, const sigset_t *m)
{
	struct sets sv;

	pl_init();
	if (plain_wait())
		return PLAIN(pl_real.pselect(n, rd, wr, ex, t, m));
	sets_save(&sv, rd, wr, ex);
	return PL_WAIT(TS_MS(t), nap_ok(), pl_direct_scope_select(&sc_, n, sv.p),
		       sets_put_back(&sv), select_inner(n, rd, wr, ex, ns_, m));
}

int select(int n, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *t)
{
	struct sets sv;
	int r;

	pl_init();
	if (plain_wait())
		return PLAIN(pl_real.select(n, rd, wr, ex, t));
	sets_save(&sv, rd, wr, ex);
	r = PL_WAIT(TV_MS(t), nap_ok(), pl_direct_scope_select(&sc_, n, sv.p),
		    sets_put_back(&sv), select_inner(n, rd, wr, ex, ns_, NULL));
	if (t && r == 0)
		t->tv_sec = t->tv_usec = 0; /* Linux says what is left */
	return r;
}

static int shares_parent_vm(void);

/*
 * Descriptors lo..hi no longer name a listener named to gsockd. Not in a
 * child that shares our memory (vfork): the bits are the parent's.
 */
static void named_gone(int lo, int hi)
{
	if (pl_direct_named_in(lo, hi) && !shares_parent_vm())
		pl_direct_named_gone(lo, hi);
}

/*
 * A set made here: exact while nothing hides members (pl_direct_epoll_made);
 * not one a child made in our memory (vfork), whose numbers are not ours.
 */
static int epoll_made(int r)
{
	int e = errno;

	if (r >= 0 && !pl_busy && !shares_parent_vm())
		pl_direct_epoll_made(r);
	errno = e;
	return r;
}

int epoll_create(int size)
{
	pl_init();
	return epoll_made(pl_real.epoll_create(size));
}

int epoll_create1(int flags)
{
	pl_init();
	return epoll_made(pl_real.epoll_create1(flags));
}

int epoll_ctl(int ep, int op, int fd, struct epoll_event *e)
{
	struct pl_sock *s;
	int r, saved;

	calls_for(fd, &s);
	/* Watched before its route is chosen: the direct path leaves it be. */
	if (s && s->state == PL_UNDECIDED && op == EPOLL_CTL_ADD)
		s->in_epoll = 1;
#ifdef HAVE_RDMACM
	/* A connection to move moves before it is watched. */
	if (s && (s->fork == PL_FORK_CLIENT || s->fork == PL_FORK_SERVER) &&
	    (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD)) {
		pl_rs_fork_move(fd, s);
		if (s->route != GS_ROUTE_RSOCKET) {
			pl_sock_put(s); /* a plain descriptor now */
			s = NULL;
		}
	}
	if (s && pl_route_rdma_possible()) {
		/*
		 * An undecided socket is watched by the kernel's set and
		 * remembered in ours, in case it becomes an rsocket. A
		 * listener's kernel half takes plain TCP clients, so it stays
		 * in the kernel's set as well; a connected rsocket's kernel
		 * socket never becomes ready and stays out.
		 */
		if (s->route != GS_ROUTE_RSOCKET || s->rs < 0 || s->listening) {
			r = pl_real.epoll_ctl(ep, op, fd, e);
			if (r == 0) {
				int saved = errno;

				pl_rs_epoll_ctl(ep, op, fd, s, e);
				pl_direct_epoll_ctl(ep, op, fd, s, e);
				errno = saved;
			}
		} else {
			r = pl_rs_epoll_ctl(ep, op, fd, s, e);
		}
		saved = errno;
		pl_sock_put(s);
		errno = saved;
		return r;
	}
#endif
	r = pl_real.epoll_ctl(ep, op, fd, e);
	saved = errno;
	if (r == 0)
		pl_direct_epoll_ctl(ep, op, fd, s, e);
	pl_sock_put(s); /* the last reference may close the connection */
	errno = saved;
	return r;
}

int epoll_pwait(int ep, struct epoll_event *e, int n, int t, const sigset_t *m)
{
	pl_init();
	if (plain_wait())
		return PLAIN(pl_real.epoll_pwait(ep, e, n, t, m));
	return PL_WAIT(t, nap_ok() && pwait2_ok(),
		       pl_direct_scope_epoll(&sc_, ep), (void)0,
		       epoll_merged(&sc_, ep, e, n, ns_, m));
}

int epoll_wait(int ep, struct epoll_event *e, int n, int t)
{
	return epoll_pwait(ep, e, n, t, NULL);
}

int epoll_pwait2(int ep, struct epoll_event *e, int n,
		 const struct timespec *t, const sigset_t *m)
{
	pl_init();
	if (!pl_real.epoll_pwait2) { /* an older C library */
		errno = ENOSYS;
		return -1;
	}
	if (plain_wait())
		return PLAIN(pl_real.epoll_pwait2(ep, e, n, t, m));
	return PL_WAIT(TS_MS(t), nap_ok() && pwait2_ok(),
		       pl_direct_scope_epoll(&sc_, ep), (void)0,
		       epoll_merged(&sc_, ep, e, n, ns_, m));
}
PL_MULTI_CALL(pid_t, fork, (void), ())

/*
 * exec: refused while it would carry one of this process's rsocket
 * connections (pl_rs_exec_check says why); otherwise the real call.
 */
static int exec_refused(void)
{
	pl_init();
	if (pl_direct_exec_check() < 0)
		return 1;
#ifdef HAVE_RDMACM
	return pl_rs_exec_check() < 0;
#else
	return 0;
#endif
}

#define PL_EXEC_CALL(name, params, args)                      \
	int name params                                       \
	{                                                     \
		if (exec_refused())                           \
			return -1;                            \
		if (!pl_real.name) { /* an older C library */ \
			errno = ENOSYS;                       \
			return -1;                            \
		}                                             \
		return pl_real.name args;                     \
	}

PL_EXEC_CALL(execve, (const char *path, char *const argv[], char *const envp[]),
	     (path, argv, envp))
PL_EXEC_CALL(execv, (const char *path, char *const argv[]), (path, argv))
PL_EXEC_CALL(execvp, (const char *file, char *const argv[]), (file, argv))
PL_EXEC_CALL(execvpe,
	     (const char *file, char *const argv[], char *const envp[]),
	     (file, argv, envp))
PL_EXEC_CALL(fexecve, (int fd, char *const argv[], char *const envp[]),
	     (fd, argv, envp))
PL_EXEC_CALL(execveat,
	     (int dirfd, const char *path, char *const argv[],
	      char *const envp[], int flags),
	     (dirfd, path, argv, envp, flags))

/*
 * execl, execlp, execle: the list from arg0 to its NULL as an array, on
 * the stack (no malloc between vfork and exec), then execv, execvp or
 * execve (how: 'l', 'p' or 'e', whose envp follows the NULL). The C
 * library's own do the same, then exec without coming back through here.
 */
static int exec_list(char how, const char *file, const char *arg0, va_list *ap)
{
	va_list again;
	size_t n = 2, i = 0;

	va_copy(again, *ap);
	while (va_arg(again, const char *))
		n++;
	va_end(again);

	const char *argv[n];

	argv[0] = arg0;
	while (argv[i])
		argv[++i] = va_arg(*ap, const char *);
	if (how == 'e')
		return execve(file, (char *const *)argv,
			      va_arg(*ap, char *const *));
	return how == 'p' ? execvp(file, (char *const *)argv) :
			    execv(file, (char *const *)argv);
}

#define PL_EXEC_LIST(name, how)                           \
	int name(const char *file, const char *arg0, ...) \
	{                                                 \
		va_list ap;                               \
		int r;                                    \
                                                          \
		va_start(ap, arg0);                       \
		r = exec_list(how, file, arg0, &ap);      \
		va_end(ap);                               \
		return r;                                 \
	}

PL_EXEC_LIST(execl, 'l')
PL_EXEC_LIST(execlp, 'p')
PL_EXEC_LIST(execle, 'e')

/* A new TCP socket gets an entry: its route is chosen later. */
int socket(int domain, int type, int protocol)
{
	struct pl_sock *s;
	int fd;

	pl_init();
	fd = pl_real.socket(domain, type, protocol);
	if (fd < 0 || pl_busy)
		return fd;
	pl_direct_fds_gone(fd, fd); /* its number may have been closed behind us */
	named_gone(fd, fd);
	if ((domain != AF_INET && domain != AF_INET6) ||
	    (type & 0xf) != SOCK_STREAM) {
		pl_fd_clear(fd); /* a stale entry of a descriptor closed behind our back */
		return fd;
	}
	s = pl_sock_new(domain);
	if (s) {
		pl_fd_set(fd, s);
		pl_sock_put(s);
	}
	return fd;
}

/*
 * Choose fd's route now (role towards sa) unless it is chosen already;
 * a socket routed to the kernel leaves the table. Returns its calls.
 */
static const struct pl_real *decide(int fd, struct pl_sock *s,
				    enum gs_role role,
				    const struct sockaddr *sa)
{
	enum gs_route route;

	pthread_mutex_lock(&s->lock);
	if (s->state == PL_UNDECIDED) {
		s->route = pl_route_decide(fd, role, sa);
		s->state = PL_DECIDED;
	}
	route = s->route;
	pthread_mutex_unlock(&s->lock);
	if (route == GS_ROUTE_OS)
		pl_fd_clear(fd);
	return pl_route_calls[route];
}

/* The rsocket route could not take fd: the kernel carries it after all. */
static __attribute__((unused)) const struct pl_real *to_kernel(int fd,
								struct pl_sock *s)
{
	s->route = GS_ROUTE_OS;
	pl_fd_clear(fd);
	return &pl_real;
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct pl_sock *s;
	const struct pl_real *calls = calls_for(fd, &s);
	int r, saved;

	if (stale(s)) {
		r = -1;
		errno = EOPNOTSUPP;
		goto out_put;
	}
	/* A GPU application's listener on this host: the direct path. */
	if (s && sa && s->state == PL_UNDECIDED &&
	    len >= sizeof(sa_family_t) &&
	    (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)) {
		r = pl_direct_connect(fd, s, sa, len);
		if (r != PL_DIRECT_NO)
			goto out_put;
	}
	if (s && sa && len >= sizeof(sa_family_t) &&
	    (sa->sa_family == AF_INET || sa->sa_family == AF_INET6))
		calls = decide(fd, s, GS_ROLE_CLIENT, sa);
#ifdef HAVE_RDMACM
	if (s && s->route == GS_ROUTE_RSOCKET && s->rs < 0 && pl_route_fork_safe()) {
		/* On the kernel first; it moves at its first data call. */
		r = pl_real.connect(fd, sa, len);
		saved = errno;
		if (r == 0 || errno == EINPROGRESS) {
			pthread_mutex_lock(&s->lock);
			s->fork = PL_FORK_CLIENT;
			pthread_mutex_unlock(&s->lock);
		} else {
			to_kernel(fd, s);
		}
		errno = saved;
		goto out_put;
	}
	if (s && s->route == GS_ROUTE_RSOCKET && s->rs < 0) {
		r = pl_rs_connect(fd, s, sa, len);
		if (r != PL_RS_FALLBACK)
			goto out_put;
		calls = to_kernel(fd, s); /* a refused rsocket connect */
	}
#endif
	r = calls->connect(route_fd(fd, s), sa, len);
out_put:
	saved = errno;
	pl_sock_put(s);
	errno = saved;
	return r;
}

int listen(int fd, int backlog)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct pl_sock *s;
	int r, saved;

	calls_for(fd, &s);
	if (s && pl_real.getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		decide(fd, s, GS_ROLE_SERVER, (struct sockaddr *)&ss);
	/* The kernel always listens: plain TCP clients reach every server. */
	r = pl_real.listen(fd, backlog);
	/* GPU applications' gconnects to it may take the direct path. */
	if (r == 0 && !pl_busy && (!s || s->route == GS_ROUTE_OS))
		pl_direct_listen(fd);
#ifdef HAVE_RDMACM
	/* Fork-safe mode: the kernel alone accepts; connections move later. */
	if (r == 0 && s && s->route == GS_ROUTE_RSOCKET && s->rs < 0 &&
	    pl_route_fork_safe())
		s->fork = PL_FORK_LISTENER;
	else if (r == 0 && s && s->route == GS_ROUTE_RSOCKET && s->rs < 0 &&
		 pl_rs_listen(fd, s, backlog) == PL_RS_FALLBACK)
		to_kernel(fd, s);
#endif
	saved = errno;
	pl_sock_put(s);
	errno = saved;
	return r;
}

/*
 * A connection accepted on the kernel is a plain descriptor, unless its
 * listener is in fork-safe mode: then it is offered the move to rsocket
 * now, and moves at its first data call (rs_fork.c); or a GPU
 * application's gconnect on this host waits for it: then it takes the
 * direct path (direct.c).
 */
static int accepted(int fd, int lfd, const struct pl_sock *ls)
{
	struct pl_sock *s;
	int offered = 0;

	if (fd < 0 || pl_busy)
		return fd;
#ifdef HAVE_RDMACM
	offered = ls && ls->fork == PL_FORK_LISTENER && pl_rs_fork_offer(fd) == 0;
#endif
	if (!offered) {
		int d, e;

		pl_fd_clear(fd);
		pl_direct_fds_gone(fd, fd);
		named_gone(fd, fd);
		/* A GPU application's gconnect that waits for this accept. */
		d = pl_direct_accepted(fd, lfd, &s);
		if (d > 0 && pl_fd_set(fd, s) < 0) {
			pl_direct_release(s);
			pl_sock_put(s);
			errno = ECONNABORTED;
			d = -1;
		}
		if (d > 0)
			pl_sock_put(s);
		if (d < 0) {
			e = errno;
			pl_real.close(fd);
			errno = e;
			return -1;
		}
		return fd;
	}
	s = pl_sock_new(ls->domain);
	if (s) {
		/* Complete before the table publishes it. */
		s->route = GS_ROUTE_RSOCKET;
		s->state = PL_DECIDED;
		s->fork = PL_FORK_SERVER;
	}
	if (!s || pl_fd_set(fd, s) < 0)
		pl_fd_clear(fd); /* it stays on TCP */
	pl_sock_put(s);
	return fd;
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct pl_sock *s;
	int r, saved;

	calls_for(fd, &s);
#ifdef HAVE_RDMACM
	if (stale(s)) {
		r = -1;
		errno = EOPNOTSUPP;
		goto out_put;
	}
	if (s && s->route == GS_ROUTE_RSOCKET && s->rs >= 0) {
		r = pl_rs_accept(fd, s, sa, len, flags);
		goto out_put;
	}
#endif
	r = accepted(pl_real.accept4(fd, sa, len, flags), fd, s);
out_put: __attribute__((unused));
	saved = errno;
	pl_sock_put(s);
	errno = saved;
	return r;
}

int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return accept4(fd, sa, len, 0);
}

/*
 * Whether this process shares its memory with the process whose table
 * this is (pl_pid): a vfork or CLONE_VM child, whose close closes only
 * its own copy of a descriptor while the table stays its parent's
 * (python's subprocess close_range's in one before every exec). A fork
 * child has its own pl_pid (the atfork handler); one forked around the
 * handlers (_Fork, a fork system call) is told apart by kcmp(KCMP_VM).
 * Where kcmp cannot tell (not built in, not allowed, the parent gone),
 * the table stays: the parent's connections first.
 */
static int shares_parent_vm(void)
{
	pid_t me = getpid();
	long r;

	if (me == pl_pid)
		return 0;
	r = syscall(SYS_kcmp, me, pl_pid, KCMP_VM, 0, 0);
	return r != 1 && r != 2 && r != 3;
}

/*
 * Descriptors lo..hi no longer name what they named: their epoll sets'
 * hints go. Not in a child that shares our memory (vfork, posix_spawn):
 * its closes are its own, and the hints are the parent's.
 */
static void forget_sets(int lo, int hi)
{
	int e = errno;

	pl_direct_fds_gone(lo, hi);
	if (!pl_busy && pl_direct_epoll_tracked() && !shares_parent_vm())
		pl_direct_epoll_forget(lo, hi);
	errno = e;
}

int close(int fd)
{
	struct pl_sock *s = NULL;
	int r;

	pl_init();
	if (!pl_busy) {
		int mine = pl_fd_has(fd);

#ifdef HAVE_RDMACM
		/* an epoll set of ours */
		mine = mine || (pl_route_rdma_possible() && pl_rs_epoll_has(fd));
#endif
		/* getpid only then: close is called often (shares_parent_vm) */
		if (mine && !shares_parent_vm()) {
			s = pl_fd_take(fd);
#ifdef HAVE_RDMACM
			if (pl_route_rdma_possible())
				pl_rs_epoll_forget(fd);
#endif
		}
	}
	named_gone(fd, fd); /* before: the number may be taken at once */
	r = pl_real.close(fd);
	forget_sets(fd, fd); /* were it an epoll set */
	/*
	 * Its entry goes after the descriptor (the number cannot be taken
	 * meanwhile: it is still ours until then): a direct connection's
	 * kernel socket then says FIN only once the program's end is shut,
	 * so gsockd sees the hang-up with any unread bytes first.
	 */
	if (s) {
		int saved = errno;

		pl_sock_put(s);
		errno = saved;
	}
	return r;
}

/*
 * close_range and closefrom close many descriptors without close(): the
 * entries among them go as close's do, after the kernel's descriptors
 * (and back if the kernel closed nothing). Missed, a number the program
 * takes again (a file, a pipe) would still be routed as the socket it
 * was. CLOSE_RANGE_CLOEXEC closes nothing (exec's checks read the flag
 * itself).
 */
static int forget_range(unsigned lo, unsigned hi, struct pl_fd_taken **taken)
{
	int n;

	*taken = NULL;
	if (pl_busy || lo > hi || shares_parent_vm())
		return 0;
	n = pl_fd_take_range(lo, hi, taken);
	if (n < 0) { /* no memory for the list: one at a time, now */
		for (unsigned fd = lo; fd <= hi && fd < PL_FD_MAX; fd++)
			pl_fd_clear((int)fd);
		n = 0;
	}
	return n;
}

/* After the kernel's call: closed (forget them for good) or not (put back). */
static void range_done(unsigned lo, unsigned hi, struct pl_fd_taken *taken,
		       int n, int closed)
{
	int saved = errno;

#ifdef HAVE_RDMACM
	if (closed && !pl_busy && pl_route_rdma_possible() && !shares_parent_vm())
		pl_rs_epoll_forget_range(lo, hi);
#else
	(void)lo, (void)hi; /* only rsocket's epoll sets keep descriptors */
#endif
	for (int i = 0; i < n; i++) {
		if (!closed)
			pl_fd_set(taken[i].fd, taken[i].s);
		pl_sock_put(taken[i].s);
	}
	free(taken);
	errno = saved;
}

int close_range(unsigned int first, unsigned int last, int flags)
{
	struct pl_fd_taken *taken = NULL;
	int n = 0, r, closing;

	pl_init();
	closing = !(flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) &&
		  !(flags & CLOSE_RANGE_CLOEXEC) && first <= last;
	if (closing) {
		n = forget_range(first, last, &taken);
		named_gone((int)(first > INT_MAX ? INT_MAX : first),
			   (int)(last > INT_MAX ? INT_MAX : last));
	}
	if (pl_real.close_range)
		r = pl_real.close_range(first, last, flags);
	else
		r = (int)syscall(SYS_close_range, first, last, flags);
	if (closing)
		range_done(first, last, taken, n, r == 0);
	if (closing && r == 0)
		forget_sets((int)(first > INT_MAX ? INT_MAX : first),
			    (int)(last > INT_MAX ? INT_MAX : last));
	return r;
}

/* glibc closes from 0 when lowfd is negative. */
void closefrom(int lowfd)
{
	unsigned lo = lowfd < 0 ? 0 : (unsigned)lowfd;
	struct pl_fd_taken *taken = NULL;
	int n;

	pl_init();
	n = forget_range(lo, ~0u, &taken);
	named_gone((int)(lo > INT_MAX ? INT_MAX : lo), INT_MAX);
	if (pl_real.closefrom)
		pl_real.closefrom(lowfd);
	else
		syscall(SYS_close_range, lo, ~0u, 0);
	range_done(lo, ~0u, taken, n, 1);
	forget_sets((int)(lo > INT_MAX ? INT_MAX : lo), INT_MAX);
}

/* newfd now names what oldfd names. */
static int duplicated(int oldfd, int newfd)
{
	struct pl_sock *s;

	if (newfd < 0 || pl_busy)
		return newfd;
	forget_sets(newfd, newfd); /* dup2 over an epoll set */
	/* A named listener's new number asks too (not a vfork child's). */
	if (oldfd != newfd &&
	    (pl_direct_named_in(oldfd, oldfd) ||
	     pl_direct_named_in(newfd, newfd)) &&
	    !shares_parent_vm()) {
		pl_direct_named_gone(newfd, newfd);
		pl_direct_named_copy(oldfd, newfd);
	}
	/* Two names for one set: epoll_ctl through the other goes unseen. */
	pl_direct_epoll_taint(oldfd);
	s = pl_fd_get(oldfd);
	if (s) {
		pl_fd_set(newfd, s);
		pl_sock_put(s);
	} else {
		pl_fd_clear(newfd);
	}
	return newfd;
}

int dup(int fd)
{
	pl_init();
	return duplicated(fd, pl_real.dup(fd));
}

int dup2(int fd, int newfd)
{
	pl_init();
	return duplicated(fd, pl_real.dup2(fd, newfd));
}

int dup3(int fd, int newfd, int flags)
{
	pl_init();
	return duplicated(fd, pl_real.dup3(fd, newfd, flags));
}

/* fcntl and fcntl64: F_DUPFD makes a new name for the same socket. */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd,
			void *arg)
{
	int r = real(fd, cmd, arg);

	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		return duplicated(fd, r);
	if (cmd == F_SETFL && r == 0 && !pl_busy && pl_direct_active()) {
		int saved = errno;
		struct pl_sock *s = pl_fd_get(fd);

		if (s)
			pl_direct_nonblock(s, ((int)(long)arg & O_NONBLOCK) != 0);
		pl_sock_put(s);
		errno = saved;
	}
#ifdef HAVE_RDMACM
	if (cmd == F_SETFL && r == 0 && !pl_busy) {
		struct pl_sock *s = pl_fd_get(fd);

		if (s && s->route == GS_ROUTE_RSOCKET)
			pl_rs_setfl(s, (int)(long)arg);
		pl_sock_put(s);
	}
#endif
	return r;
}

/* fcntl's third argument, whatever it is, fits in a pointer. */
#define PL_FCNTL(name, real)                                                 \
	int name(int fd, int cmd, ...)                                       \
	{                                                                    \
		va_list ap;                                                  \
		void *arg;                                                   \
                                                                             \
		va_start(ap, cmd);                                           \
		arg = va_arg(ap, void *);                                    \
		va_end(ap);                                                  \
		pl_init();                                                   \
		return fcntl_common(real, fd, cmd, arg);                     \
	}

PL_FCNTL(fcntl, pl_real.fcntl)
PL_FCNTL(fcntl64, pl_real.fcntl64 ? pl_real.fcntl64 : pl_real.fcntl)

int ioctl(int fd, unsigned long req, ...)
{
	const struct pl_real *calls;
	struct pl_sock *s, *outer;
	va_list ap;
	void *arg;
	int r, saved;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	calls = calls_for(fd, &s);
	outer = pl_cur_sock;
	pl_cur_sock = s;
	r = calls->ioctl(route_fd(fd, s), req, arg);
	pl_cur_sock = outer;
	/* The kernel socket's flag too, so F_GETFL keeps telling the truth. */
	if (r == 0 && s && calls != &pl_real && req == FIONBIO)
		pl_real.ioctl(fd, req, arg);
	saved = errno;
	pl_sock_put(s);
	errno = saved;
	return r;
}
