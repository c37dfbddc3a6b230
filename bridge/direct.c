/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The same-host direct path: connections whose two ends are applications
 * of this gsockd move their bytes through a segment of the direct pool
 * (gsock_arena.h, gs_dseg), not through gsockd and the kernel's TCP.
 *
 * The kernel connection is made as for any other: it holds the ports,
 * gives getsockname and getpeername their answers, goes through the
 * listener's accept queue, and carries FIN and RST, so EOF, reset and a
 * dead process reach the other end as they do over TCP. Only the bytes
 * go elsewhere. Before a gconnect's connect(2), gsockd looks for a
 * listener of its own that the kernel must hand the connection to (the
 * address and port match, and the listener shares its port with nobody:
 * no SO_REUSEPORT); if there is one, the connecting socket is bound to a
 * port of its own, a segment is taken, and a pending entry names the
 * listener and that port. The listener's worker accepts ahead of
 * gaccept, as always, and looks the accepted connection's peer up among
 * the pending entries; the segment becomes the accepting end's. Each end
 * learns it from gs_sock.direct before its gconnect or gaccept returns.
 *
 * A segment is held by each end and by its pending entry; the last to
 * let go frees it. An end that closes (or whose process dies) marks its
 * side closed, so the other end's sends fail once its ring fills; one
 * that closes with bytes unread resets the kernel connection, as TCP
 * does.
 *
 * Everything here is called by the worker that owns the socket it names,
 * and takes br_direct's one lock: it runs at connection setup and
 * teardown only.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../devlib/gsock_arena.h"
#include "bridge.h"
#include "log.h"

/* An address as one key: IPv4 as IPv4-mapped IPv6, and the port. */
struct dkey {
	uint8_t a[16];
	uint16_t port;
	bool any; /* the wildcard address */
};

struct dlisten {
	struct br_sock *s;
	struct dkey k;
	bool v4_too; /* an IPv6 wildcard that takes IPv4 too */
};

struct dpending {
	struct br_sock *ls; /* the listener the kernel hands it to */
	struct dkey src; /* the connecting end's address */
	int seg;
};

static struct {
	pthread_mutex_t lock;
	int fd; /* the pool's memfd, -1: direct off */
	uint8_t *base;
	uint64_t size, stride;
	uint32_t nsegs, dring;
	uint8_t *refs; /* per segment: 0 free, else holders */
	int *free_segs;
	uint32_t nfree;
	struct dlisten *ls;
	uint32_t nls, ls_cap;
	struct dpending *pend;
	uint32_t npend; /* at most nsegs */
	uint32_t npend_hint; /* atomic: npend, read without the lock */
} dp = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

int br_direct_init(void)
{
	uint64_t stride = GS_DSEG_STRIDE((uint32_t)br.conf.direct_ring_size);

	if (!br.conf.direct)
		return 0;
	dp.nsegs = (uint32_t)br.conf.direct_conns;
	dp.dring = (uint32_t)br.conf.direct_ring_size;
	dp.stride = stride;
	dp.size = stride * dp.nsegs;
	dp.refs = calloc(dp.nsegs, 1);
	dp.free_segs = calloc(dp.nsegs, sizeof(int));
	dp.pend = calloc(dp.nsegs, sizeof(*dp.pend));
	dp.fd = memfd_create("gsock-direct", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (!dp.refs || !dp.free_segs || !dp.pend || dp.fd < 0 ||
	    ftruncate(dp.fd, (off_t)dp.size) < 0 ||
	    fcntl(dp.fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		br_err("cannot make the direct pool (%llu MiB; direct_conns, direct_ring_size): %s",
		       (unsigned long long)(dp.size >> 20), strerror(errno));
		return -1;
	}
	dp.base = mmap(NULL, dp.size, PROT_READ | PROT_WRITE, MAP_SHARED,
		       dp.fd, 0);
	if (dp.base == MAP_FAILED) {
		br_err("cannot map the direct pool: %s", strerror(errno));
		dp.base = NULL;
		return -1;
	}
	for (uint32_t i = 0; i < dp.nsegs; i++)
		dp.free_segs[dp.nfree++] = (int)(dp.nsegs - 1 - i);
	br_info("direct pool: %u connections, %u-byte rings, %llu MiB",
		dp.nsegs, dp.dring, (unsigned long long)(dp.size >> 20));
	return 0;
}

void br_direct_fini(void)
{
	if (dp.base)
		munmap(dp.base, dp.size);
	if (dp.fd >= 0)
		close(dp.fd);
	free(dp.refs);
	free(dp.free_segs);
	free(dp.pend);
	free(dp.ls);
	dp.base = NULL;
	dp.fd = -1;
}

int br_direct_pool(uint32_t *nsegs, uint32_t *dring, uint64_t *size)
{
	*nsegs = dp.fd >= 0 ? dp.nsegs : 0;
	*dring = dp.dring;
	*size = dp.fd >= 0 ? dp.size : 0;
	return dp.fd;
}

static struct gs_dseg *seg_at(int seg)
{
	return (struct gs_dseg *)(dp.base + (uint64_t)seg * dp.stride);
}

static bool key_of(const struct sockaddr *sa, socklen_t len, struct dkey *k)
{
	static const uint8_t zero[16];

	memset(k, 0, sizeof(*k));
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;

		k->a[10] = k->a[11] = 0xff;
		memcpy(k->a + 12, &in->sin_addr, 4);
		k->port = ntohs(in->sin_port);
		k->any = in->sin_addr.s_addr == htonl(INADDR_ANY);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		memcpy(k->a, &in6->sin6_addr, 16);
		k->port = ntohs(in6->sin6_port);
		k->any = !memcmp(k->a, zero, 16);
		return true;
	}
	return false;
}

static bool key_v4(const struct dkey *k)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0,
					    0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(k->a, mapped, 12);
}

/* Whether k is one of this host's addresses (127/8 and ::1 included). */
static bool key_local(const struct dkey *k)
{
	static const uint8_t loop6[16] = { [15] = 1 };
	struct ifaddrs *ifs, *i;
	bool found = false;

	if ((key_v4(k) && k->a[12] == 127) || !memcmp(k->a, loop6, 16))
		return true;
	if (getifaddrs(&ifs) < 0)
		return false;
	for (i = ifs; i && !found; i = i->ifa_next) {
		struct dkey ik;

		if (i->ifa_addr &&
		    key_of(i->ifa_addr,
			   i->ifa_addr->sa_family == AF_INET ?
				   sizeof(struct sockaddr_in) :
				   sizeof(struct sockaddr_in6),
			   &ik) &&
		    (i->ifa_addr->sa_family == AF_INET ||
		     i->ifa_addr->sa_family == AF_INET6))
			found = !memcmp(ik.a, k->a, 16);
	}
	freeifaddrs(ifs);
	return found;
}

/* Caller holds the lock: the listener the kernel hands dst to, or NULL. */
static struct dlisten *listener_for(const struct dkey *dst, bool *local)
{
	for (uint32_t i = 0; i < dp.nls; i++) {
		struct dlisten *l = &dp.ls[i];

		if (l->k.port != dst->port)
			continue;
		if (!l->k.any) {
			if (!memcmp(l->k.a, dst->a, 16))
				return l;
			continue;
		}
		if (key_v4(&l->k) != key_v4(dst) && !l->v4_too)
			continue;
		if (key_v4(&l->k) && !key_v4(dst))
			continue;
		if (*local)
			return l;
	}
	return NULL;
}

void br_direct_listen(struct br_sock *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int reuse = 0, v6only = 1;
	socklen_t ol = sizeof(int);
	struct dkey k;

	if (dp.fd < 0 || !s->app->direct || s->domain == AF_UNIX ||
	    getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0 ||
	    !key_of((struct sockaddr *)&ss, len, &k))
		return;
	/* A port shared with other listeners: the kernel picks, not us. */
	if (getsockopt(s->fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &ol) < 0 ||
	    reuse)
		return;
	ol = sizeof(int);
	if (s->domain == AF_INET6 &&
	    getsockopt(s->fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) < 0)
		v6only = 1;
	pthread_mutex_lock(&dp.lock);
	if (dp.nls == dp.ls_cap) {
		uint32_t cap = dp.ls_cap ? 2 * dp.ls_cap : 16;
		struct dlisten *n = realloc(dp.ls, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&dp.lock);
			return;
		}
		dp.ls = n;
		dp.ls_cap = cap;
	}
	dp.ls[dp.nls++] = (struct dlisten){
		.s = s,
		.k = k,
		.v4_too = s->domain == AF_INET6 && k.any && !v6only,
	};
	s->dlisten = true;
	pthread_mutex_unlock(&dp.lock);
}

/* Caller holds the lock: one holder of seg lets go. */
static void seg_put(int seg)
{
	if (--dp.refs[seg] == 0)
		dp.free_segs[dp.nfree++] = seg;
}

static void pend_remove(uint32_t i)
{
	dp.pend[i] = dp.pend[--dp.npend];
	__atomic_store_n(&dp.npend_hint, dp.npend, __ATOMIC_RELAXED);
}

void br_direct_unlisten(struct br_sock *s)
{
	if (!s->dlisten)
		return;
	pthread_mutex_lock(&dp.lock);
	for (uint32_t i = 0; i < dp.nls; i++)
		if (dp.ls[i].s == s) {
			dp.ls[i] = dp.ls[--dp.nls];
			break;
		}
	/* Connections the kernel now resets: their segments' pending hold. */
	for (uint32_t i = 0; i < dp.npend;)
		if (dp.pend[i].ls == s) {
			seg_put(dp.pend[i].seg);
			pend_remove(i);
		} else {
			i++;
		}
	s->dlisten = false;
	pthread_mutex_unlock(&dp.lock);
}

/* Bind s to a port of its own on the address dst is reached from. */
static int bind_source(struct br_sock *s, const struct sockaddr *dst,
		       socklen_t dlen, struct dkey *src)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0 ||
	    !key_of((struct sockaddr *)&ss, len, src))
		return -1;
	if (src->port)
		return 0; /* the application bound it: its choice stands */
	/* A local destination is its own source address. */
	memcpy(&ss, dst, dlen);
	if (dst->sa_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	if (bind(s->fd, (struct sockaddr *)&ss, dlen) < 0)
		return -1;
	len = sizeof(ss);
	if (getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0 ||
	    !key_of((struct sockaddr *)&ss, len, src))
		return -1;
	return 0;
}

void br_direct_connect(struct br_sock *s, const struct sockaddr *dst,
		       socklen_t dlen)
{
	struct dkey dk, src;
	struct dlisten *l;
	bool local;
	int seg;

	s->dseg = -1;
	if (dp.fd < 0 || !s->app->direct || s->domain == AF_UNIX ||
	    !key_of(dst, dlen, &dk) || !__atomic_load_n(&dp.nls,
							 __ATOMIC_RELAXED))
		return;
	local = key_local(&dk);
	pthread_mutex_lock(&dp.lock);
	l = listener_for(&dk, &local);
	if (!l || !dp.nfree || l->s->app->uid != s->app->uid) {
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	pthread_mutex_unlock(&dp.lock);
	if (bind_source(s, dst, dlen, &src) < 0)
		return;
	pthread_mutex_lock(&dp.lock);
	/* Looked up again: the lock was let go for the bind. */
	l = listener_for(&dk, &local);
	if (!l || !dp.nfree) {
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	seg = dp.free_segs[--dp.nfree];
	dp.refs[seg] = 2; /* this end, and the pending entry */
	memset(seg_at(seg), 0, sizeof(struct gs_dseg));
	dp.pend[dp.npend++] = (struct dpending){
		.ls = l->s, .src = src, .seg = seg
	};
	__atomic_store_n(&dp.npend_hint, dp.npend, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&dp.lock);
	s->dseg = seg;
	s->dside = 0;
}

int br_direct_accepted(struct br_sock *ls, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct dkey k;
	int seg = -1;

	if (!ls->dlisten || !__atomic_load_n(&dp.npend_hint, __ATOMIC_RELAXED) ||
	    getpeername(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    !key_of((struct sockaddr *)&ss, len, &k))
		return -1;
	pthread_mutex_lock(&dp.lock);
	for (uint32_t i = 0; i < dp.npend; i++) {
		struct dpending *p = &dp.pend[i];

		if (p->ls == ls && p->src.port == k.port &&
		    (p->src.any || !memcmp(p->src.a, k.a, 16))) {
			seg = p->seg; /* the entry's hold becomes this end's */
			pend_remove(i);
			break;
		}
	}
	pthread_mutex_unlock(&dp.lock);
	return seg;
}

/* The segment a connection made through a listener was given, undone. */
void br_direct_drop(int seg)
{
	if (seg < 0)
		return;
	pthread_mutex_lock(&dp.lock);
	seg_put(seg);
	pthread_mutex_unlock(&dp.lock);
}

/* A connect that failed: its segment and pending entry go. */
void br_direct_abandon(struct br_sock *s)
{
	if (s->dseg < 0)
		return;
	pthread_mutex_lock(&dp.lock);
	for (uint32_t i = 0; i < dp.npend; i++)
		if (dp.pend[i].seg == s->dseg) {
			seg_put(s->dseg);
			pend_remove(i);
			break;
		}
	seg_put(s->dseg);
	pthread_mutex_unlock(&dp.lock);
	s->dseg = -1;
}

void br_direct_publish(struct br_sock *s)
{
	__atomic_store_n(&s->app->socks[s->id].direct,
			 s->dseg < 0 ? 0 :
				       1 + ((uint32_t)s->dseg << 1 | s->dside),
			 __ATOMIC_RELEASE);
}

void br_direct_close(struct br_sock *s)
{
	struct gs_dseg *d;
	struct gs_dpipe *in;
	struct linger rst = { 1, 0 };

	if (s->dseg < 0)
		return;
	d = seg_at(s->dseg);
	in = &d->pipe[s->dside ^ 1];
	/* Bytes it never read: the kernel would reset; so do we. */
	if (s->fd >= 0 && __atomic_load_n(&in->tail, __ATOMIC_ACQUIRE) !=
				  __atomic_load_n(&in->head, __ATOMIC_ACQUIRE))
		setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
	pthread_mutex_lock(&dp.lock);
	__atomic_or_fetch(&d->closed, GS_DC_SIDE(s->dside), __ATOMIC_RELEASE);
	seg_put(s->dseg);
	pthread_mutex_unlock(&dp.lock);
	s->dseg = -1;
}

bool br_direct_counts(const struct br_sock *s, uint64_t *rx, uint64_t *tx,
		      uint64_t *rxq, uint64_t *txq)
{
	const struct gs_dseg *d;
	const struct gs_dpipe *in, *out;

	if (s->dseg < 0)
		return false;
	d = seg_at(s->dseg);
	in = &d->pipe[s->dside ^ 1];
	out = &d->pipe[s->dside];
	*rx = __atomic_load_n(&in->tail, __ATOMIC_RELAXED);
	*rxq = *rx - __atomic_load_n(&in->head, __ATOMIC_RELAXED);
	*tx = __atomic_load_n(&out->tail, __ATOMIC_RELAXED);
	*txq = *tx - __atomic_load_n(&out->head, __ATOMIC_RELAXED);
	return true;
}
