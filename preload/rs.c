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
#include <limits.h>
#include <link.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
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

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *load_error;

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
int pl_rs_start_thread(pthread_t *t, int detached, void *(*fn)(void *), void *arg)
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

	if (!gone || pl_rs_start_thread(&t, 1, rclose_run, (void *)(intptr_t)s->rs))
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
		pl_rs_lq_stop(s->lq); /* closes watch_fd, its eventfd */
	} else if (s->watch_fd >= 0) {
		struct pollfd p = { s->watch_fd, POLLIN, 0 };

		/* A call failed, or a CM event waits: the peer is gone. */
		gone = s->broken || pl_real.poll(&p, 1, 0) == 1;
		pl_real.close(s->watch_fd);
	}
	if (s->rs >= 0)
		close_rsocket(s, gone);
}

/*
 * Whether librdmacm h is a release with the connect service's stale
 * array (pl_rs_cm_nonblock): rdma-core before 53, but for the stable
 * releases that took the fix (44.7, 45.6, ... 52.1), named by its file
 * (librdmacm.so.1.3.44.0 is rdma-core 44.0); its release in *rel. False
 * where the name does not say.
 */
static bool rdmacm_stale_svc(void *h, int *rel)
{
	static const int fixed[] = { 7, 6, 5, 4, 3, 3, 2, 2, 1 }; /* 44..52 */
	struct link_map *lm = NULL;
	char path[PATH_MAX];
	const char *v;
	int minor = 0;

	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) || !lm || !lm->l_name ||
	    !realpath(lm->l_name, path))
		return false;
	v = strstr(path, "librdmacm.so.1.");
	if (!v || !(v = strchr(v + strlen("librdmacm.so.1."), '.')) ||
	    sscanf(v + 1, "%d.%d", rel, &minor) < 1 || *rel <= 0 || *rel >= 53)
		return false;
	return *rel < 44 || minor < fixed[*rel - 44];
}

static void load(void)
{
	void *h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
	int rel = 0;

	if (!h) {
		load_error = "librdmacm.so.1 cannot be loaded";
		return;
	}
	if (rdmacm_stale_svc(h, &rel))
		pl_log(PL_LOG_INFO,
		       "librdmacm of rdma-core %d: its connect service can stop a server's accepts and closes once several connections are open (fixed in rdma-core 53); the preload keeps most of it off (gsock-preload(8), NOTES)",
		       rel);
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
 * The CM event channel of connected rsocket r (its descriptor number)
 * made non-blocking. librdmacm's connect service, a thread that reads
 * the CM events of every accepted or connecting rsocket, keeps polling
 * its old descriptor array after a new rsocket made it grow the array
 * (rdma-core before 53; fixed there by 24061f015, "rsockets: Fix for
 * cm_svc_run thread"): an event at an old slot is handed to whichever
 * rsocket holds that slot now, and the service blocked reading that
 * one's channel until its peer went away. Every raccept and rclose waits
 * for the service under one lock, so a server with a few connections
 * open at once stopped for good (a preloaded redis-server, when one
 * redis-benchmark test's eight connections closed as the next's came).
 * On a non-blocking channel that read fails with EAGAIN and the service
 * goes on; it may then spin until its last rsocket closes.
 */
void pl_rs_cm_nonblock(int r)
{
	int fl = pl_real.fcntl(r, F_GETFL);

	if (fl >= 0 && !(fl & O_NONBLOCK))
		pl_real.fcntl(r, F_SETFL, fl | O_NONBLOCK);
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
	pl_rs_cm_nonblock(r);
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
	pl_rs_ep_rewatch_kernel(fd, s);
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
	s->lq = pl_rs_lq_start(r);
	if (!s->lq) {
		RS(pl_rdmacm.rclose(r));
		goto err_log;
	}
	s->watch_fd = pl_rs_lq_fd(s->lq);
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
		struct pollfd p[2] = { { pl_rs_lq_fd(s->lq), POLLIN, 0 },
				       { fd, POLLIN, 0 } };
		int r = pl_rs_lq_take(s->lq);

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

/*
 * rshutdown, like rclose (close_rsocket), waits, blocking, until every
 * send it posted completes, which with the peer gone takes until the
 * hardware gives up (minutes and more under Soft-RoCE). A peer that
 * closed in order said so in the stream (rpoll then reports POLLHUP and
 * rshutdown returns at once, 0, as the kernel's does after a FIN); one
 * that vanished left only its CM event, and rsocket still counts the
 * connection connected: that is a reset, and shutdown after a reset
 * fails at once with ENOTCONN, as the kernel's does. netcat, told that
 * its send failed, shut the connection down and hung there.
 */
static int rs_shutdown(int r, int how)
{
	struct pl_sock *s = pl_cur_sock;
	struct pollfd p = { r, POLLIN | POLLOUT, 0 };

	if (s && RS(pl_rdmacm.rpoll(&p, 1, 0)) >= 0 && !(p.revents & POLLHUP) &&
	    peer_gone(s)) {
		errno = ENOTCONN;
		return -1;
	}
	return RS(pl_rdmacm.rshutdown(r, how));
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
