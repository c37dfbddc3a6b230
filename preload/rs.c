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
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "route.h"
#include "rs.h"

/* librdmacm's calls, as loaded. */
static struct {
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
} rs;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *load_error;

/* Run a librdmacm call with the preload out of its way. */
#define RS(call)                                                             \
	({                                                                   \
		__typeof__(call) r_;                                         \
		int e_;                                                      \
		pl_busy++;                                                   \
		r_ = (call);                                                 \
		e_ = errno;                                                  \
		pl_busy--;                                                   \
		errno = e_;                                                  \
		r_;                                                          \
	})

static void release(struct pl_sock *s)
{
	if (s->rs >= 0)
		RS(rs.rclose(s->rs));
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
		*(void **)&rs.name = dlsym(h, #name);                        \
		if (!rs.name) {                                              \
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
static void replay_options(int fd, int r)
{
	static const int opts[][2] = { { IPPROTO_TCP, TCP_NODELAY },
				       { SOL_SOCKET, SO_REUSEADDR },
				       { SOL_SOCKET, SO_KEEPALIVE } };

	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		int v = 0;
		socklen_t len = sizeof(v);

		if (pl_real.getsockopt(fd, opts[i][0], opts[i][1], &v, &len) == 0 && v)
			RS(rs.rsetsockopt(r, opts[i][0], opts[i][1], &v, sizeof(v)));
	}
}

static int app_nonblocking(int fd)
{
	int fl = pl_real.fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

static void ep_unwatch_kernel(int fd, struct pl_sock *s);

int pl_rs_connect(int fd, struct pl_sock *s, const struct sockaddr *sa,
		  socklen_t len)
{
	int r = RS(rs.rsocket(s->domain, SOCK_STREAM, 0));

	if (r < 0) {
		pl_log(PL_LOG_WARN, "fd %d: rsocket() failed (%s); using the kernel",
		       fd, strerror(errno));
		return PL_RS_FALLBACK;
	}
	replay_options(fd, r);
	/* Blocking, so a refusal can still fall back to the kernel. */
	if (RS(rs.rconnect(r, sa, len)) < 0) {
		pl_log(PL_LOG_INFO, "fd %d: rsocket connect failed (%s); using the kernel",
		       fd, strerror(errno));
		RS(rs.rclose(r));
		return PL_RS_FALLBACK;
	}
	s->nonblock = app_nonblocking(fd);
	if (s->nonblock)
		RS(rs.rfcntl(r, F_SETFL, O_NONBLOCK));
	s->rs = r;
	ep_unwatch_kernel(fd, s);
	pl_log(PL_LOG_INFO, "fd %d: connected over rsocket", fd);
	return 0;
}

int pl_rs_listen(int fd, struct pl_sock *s, int backlog)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r, one = 1;

	if (pl_real.getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return PL_RS_FALLBACK;
	r = RS(rs.rsocket(s->domain, SOCK_STREAM, 0));
	if (r < 0)
		goto err_log;
	RS(rs.rsetsockopt(r, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	if (RS(rs.rbind(r, (struct sockaddr *)&ss, len)) < 0 ||
	    RS(rs.rlisten(r, backlog)) < 0 ||
	    RS(rs.rfcntl(r, F_SETFL, O_NONBLOCK)) < 0) {
		int e = errno;

		RS(rs.rclose(r));
		errno = e;
		goto err_log;
	}
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
		s->nonblock = (flags & SOCK_NONBLOCK) != 0;
	}
	if (fd < 0 || !s || pl_fd_set(fd, s)) {
		if (fd >= 0)
			pl_real.close(fd);
		if (s)
			s->rs = -1; /* closed just below, once */
		pl_sock_put(s);
		RS(rs.rclose(r));
		errno = e;
		return -1;
	}
	if (!s->nonblock)
		RS(rs.rfcntl(r, F_SETFL, 0));
	pl_sock_put(s);
	return fd;
}

int pl_rs_accept(int fd, struct pl_sock *s, struct sockaddr *sa,
		 socklen_t *len, int flags)
{
	for (;;) {
		struct pollfd p[2] = { { s->rs, POLLIN, 0 }, { fd, POLLIN, 0 } };
		int r = RS(rs.raccept(s->rs, sa, len));

		if (r >= 0)
			return adopt(s, r, flags);
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		/* The kernel side: accept only what is there, never wait in it. */
		if (pl_real.poll(&p[1], 1, 0) == 1)
			return pl_real.accept4(fd, sa, len, flags);
		if (s->nonblock) {
			errno = EAGAIN;
			return -1;
		}
		RS(rs.rpoll(p, 2, -1));
	}
}

void pl_rs_setfl(struct pl_sock *s, int flags)
{
	s->nonblock = (flags & O_NONBLOCK) != 0;
	if (s->rs >= 0)
		RS(rs.rfcntl(s->rs, F_SETFL, s->nonblock ? O_NONBLOCK : 0));
}

/* recvmmsg and sendmmsg, one message at a time. */
static int rs_recvmmsg(int r, struct mmsghdr *v, unsigned int n, int flags,
		       struct timespec *t)
{
	unsigned int i;

	(void)t;
	for (i = 0; i < n; i++) {
		ssize_t got = RS(rs.rrecvmsg(r, &v[i].msg_hdr, i ? flags | MSG_DONTWAIT : flags));

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
		ssize_t put = RS(rs.rsendmsg(r, &v[i].msg_hdr, flags));

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
		put = RS(rs.rwrite(r, buf, (size_t)got));
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
	if (req == FIONBIO)
		return RS(rs.rfcntl(r, F_SETFL, *arg ? O_NONBLOCK : 0));
	errno = EOPNOTSUPP;
	return -1;
}

/* Options rsocket refuses (SO_REUSEPORT, say) stay on the kernel socket only. */
static int rs_setsockopt(int r, int level, int name, const void *v, socklen_t len)
{
	int ret = RS(rs.rsetsockopt(r, level, name, v, len));

	if (ret < 0 && (errno == ENOPROTOOPT || errno == ENOTSUP || errno == EINVAL))
		return 0;
	return ret;
}

#define WRAP(ret, name, params, call)                                        \
	static ret name params                                               \
	{                                                                    \
		return RS(call);                                             \
	}
WRAP(int, rs_bind, (int r, const struct sockaddr *sa, socklen_t l), rs.rbind(r, sa, l))
WRAP(int, rs_listen, (int r, int b), rs.rlisten(r, b))
WRAP(int, rs_connect, (int r, const struct sockaddr *sa, socklen_t l), rs.rconnect(r, sa, l))
WRAP(ssize_t, rs_read, (int r, void *b, size_t n), rs.rread(r, b, n))
WRAP(ssize_t, rs_readv, (int r, const struct iovec *v, int n), rs.rreadv(r, v, n))
WRAP(ssize_t, rs_recv, (int r, void *b, size_t n, int f), rs.rrecv(r, b, n, f))
WRAP(ssize_t, rs_recvfrom, (int r, void *b, size_t n, int f, struct sockaddr *sa, socklen_t *l),
     rs.rrecvfrom(r, b, n, f, sa, l))
WRAP(ssize_t, rs_recvmsg, (int r, struct msghdr *m, int f), rs.rrecvmsg(r, m, f))
WRAP(ssize_t, rs_write, (int r, const void *b, size_t n), rs.rwrite(r, b, n))
WRAP(ssize_t, rs_writev, (int r, const struct iovec *v, int n), rs.rwritev(r, v, n))
WRAP(ssize_t, rs_send, (int r, const void *b, size_t n, int f), rs.rsend(r, b, n, f))
/* A connected stream socket ignores sendto's address, as the kernel's does. */
WRAP(ssize_t, rs_sendto, (int r, const void *b, size_t n, int f, const struct sockaddr *sa, socklen_t l),
     ((void)sa, (void)l, rs.rsend(r, b, n, f)))
WRAP(ssize_t, rs_sendmsg, (int r, const struct msghdr *m, int f), rs.rsendmsg(r, m, f))
WRAP(int, rs_shutdown, (int r, int how), rs.rshutdown(r, how))
WRAP(int, rs_getsockopt, (int r, int lv, int nm, void *v, socklen_t *l), rs.rgetsockopt(r, lv, nm, v, l))
WRAP(int, rs_getsockname, (int r, struct sockaddr *sa, socklen_t *l), rs.rgetsockname(r, sa, l))
WRAP(int, rs_getpeername, (int r, struct sockaddr *sa, socklen_t *l), rs.rgetpeername(r, sa, l))
WRAP(ssize_t, rs_read_chk, (int r, void *b, size_t n, size_t sz), rs.rread(r, b, n < sz ? n : sz))
WRAP(ssize_t, rs_recv_chk, (int r, void *b, size_t n, size_t sz, int f), rs.rrecv(r, b, n < sz ? n : sz, f))
WRAP(ssize_t, rs_recvfrom_chk, (int r, void *b, size_t n, size_t sz, int f, struct sockaddr *sa, socklen_t *l),
     rs.rrecvfrom(r, b, n < sz ? n : sz, f, sa, l))
#undef WRAP

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

int pl_rs_poll(struct pollfd *fds, nfds_t n, int timeout, int *done)
{
	struct pollfd small[64], *tr = n <= 64 ? small : calloc(n, sizeof(*tr));
	struct pl_sock *s;
	int any = 0, r;

	*done = 0;
	if (!tr)
		return 0;
	for (nfds_t i = 0; i < n; i++) {
		tr[i] = fds[i];
		s = pl_fd_get(fds[i].fd);
		if (s && s->route == GS_ROUTE_RSOCKET && s->rs >= 0) {
			tr[i].fd = s->rs;
			any = 1;
		}
		pl_sock_put(s);
	}
	if (!any)
		goto out_free;
	*done = 1;
	r = RS(rs.rpoll(tr, n, timeout));
	for (nfds_t i = 0; i < n; i++)
		fds[i].revents = tr[i].revents;
	if (tr != small)
		free(tr);
	return r;
out_free:
	if (tr != small)
		free(tr);
	return 0;
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
static void ep_unwatch_kernel(int fd, struct pl_sock *s)
{
	pthread_mutex_lock(&ep_lock);
	for (struct ep_set *e = ep_sets; e; e = e->next)
		for (int i = 0; i < e->n; i++)
			if (e->m[i].s == s)
				pl_real.epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
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

int pl_rs_epoll_wait(int epfd, struct epoll_event *out, int max, int timeout,
		     int *done)
{
	struct pollfd small[65], *p = small;
	struct ep_member *m = NULL;
	struct ep_set *e;
	int n = 0, got = 0;

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
		if (e->n + 1 > 65)
			p = malloc((size_t)(e->n + 1) * sizeof(*p));
		/* Members still undecided are watched by the kernel's set. */
		for (int i = 0; m && p && i < e->n; i++) {
			if (e->m[i].s->route != GS_ROUTE_RSOCKET || e->m[i].s->rs < 0)
				continue;
			m[n] = e->m[i];
			__atomic_add_fetch(&m[n++].s->refs, 1, __ATOMIC_ACQ_REL);
		}
	}
	pthread_mutex_unlock(&ep_lock);
	if (!n)
		goto out_free;
	*done = 1;
	if (p == small && n + 1 > 65)
		goto out_put; /* unreachable: p was sized for every member */
	p[0] = (struct pollfd){ epfd, POLLIN, 0 };
	for (int i = 0; i < n; i++)
		p[i + 1] = (struct pollfd){ m[i].s->rs, ep_to_poll(m[i].events), 0 };
	got = RS(rs.rpoll(p, n + 1, timeout));
	if (got <= 0)
		goto out_put;
	got = 0;
	if (p[0].revents)
		got = pl_real.epoll_wait(epfd, out, max, 0);
	if (got < 0)
		got = 0;
	for (int i = 0; i < n && got < max; i++) {
		uint32_t ev = poll_to_ep(p[i + 1].revents);

		if (!ev || !m[i].events)
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
	if (p != small)
		free(p);
	return got;
}
