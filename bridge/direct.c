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
 * address and port match); if there is one, the connecting socket is
 * bound to a port of its own, a segment is taken, and a pending entry
 * names the listener and that port. A port that several listeners share
 * with SO_REUSEPORT (a server on several GPUs) is taken when the kernel's
 * own list of its listeners (sock_diag) shows none but ours that could
 * take the connection: the pending entry names the address, whichever
 * of ours the kernel picks takes the segment, and both rings stay in the
 * segment (where the first goes is not known before). The listener's
 * worker accepts ahead of gaccept, as always, and looks the accepted
 * connection's peer up among the pending entries; the segment becomes
 * the accepting end's. Each end learns it from gs_sock.direct before its
 * gconnect or gaccept returns.
 *
 * A segment is held by each end and by its pending entry; the last to
 * let go frees it. An end that closes (or whose process dies) marks its
 * side closed, so the other end's sends fail once its ring fills; one
 * that closes with bytes unread resets the kernel connection, as TCP
 * does.
 *
 * A CPU program under the preload can be side 0 too: it asks over the
 * control socket before its connect(2) (br_direct_cpu_connect), with one
 * end of a socketpair whose other end stays its descriptor. It reads and
 * writes the rings itself; when it must wait, it sets a want bit and
 * sleeps on that descriptor, and the GPU side rings its doorbell on
 * seeing the bit: gsockd then writes a byte into the socketpair (bytes
 * to read) or takes back what the CPU side wrote into it to make it
 * unwritable (space to write). When every copy of the CPU side's
 * descriptor is closed, in whatever process, the socketpair says so
 * (EPOLLRDHUP) and its side is closed.
 *
 * Everything here is called by the worker that owns the socket it names
 * (or, for a CPU side's requests and socketpair, the control thread),
 * and takes br_direct's lock: it runs at connection setup and teardown,
 * and when a CPU side waits; a worker's wake-up of a CPU side takes its
 * segment's own lock instead (struct dcpu).
 */
#include <config.h>

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../devlib/gsock_arena.h"
#include "../devlib/gsock_ctl.h"
#include "bridge.h"
#include "log.h"

/*
 * An address as one key: IPv4 as IPv4-mapped IPv6, and the port. A unix
 * connecting end's is the tag of the abstract name gsockd bound it to
 * (unix_src), in a[0..3].
 */
struct dkey {
	uint8_t a[16];
	uint16_t port;
	bool any; /* the wildcard address */
	bool unx; /* AF_UNIX */
};

struct dlisten {
	struct br_sock *s;
	struct dkey k;
	bool v4_too; /* an IPv6 wildcard that takes IPv4 too */
	bool reuse; /* SO_REUSEPORT: the kernel picks among a port's group */
	uint64_t sino; /* the socket's inode, as sock_diag names it */
	uint64_t dev, ino; /* AF_UNIX (k.unx): its socket file */
};

/*
 * A preloaded CPU program's end of a segment (side: 0, the connecting
 * end, the only one a CPU program takes today). fd is
 * closed with both dp.lock and lk held, and used (wake-up bytes, spill
 * taken back) with either: a worker's kick takes lk alone, so the
 * control thread, whose doorbell watch every bridged byte of a sleeping
 * worker waits on, never queues behind workers' system calls on dp.lock
 * (a busy direct path stalled the watch for milliseconds).
 */
struct dcpu {
	struct br_ev ev; /* BR_EV_DIRECT, in the control thread's set */
	int fd; /* our end of its socketpair; -1: none */
	int seg;
	unsigned side; /* its side of the segment; it reads pipe side ^ 1 */
	bool ended; /* every descriptor of it closed: its side settled */
	pthread_mutex_t lk;
};

struct dpending {
	struct br_sock *ls; /* the listener the kernel hands it to, or NULL: */
	struct dkey dst; /* any SO_REUSEPORT listener of ours that covers dst */
	struct dkey src; /* the connecting end's address */
	int seg;
	uint64_t serial; /* which entry (dp.serial) */
	/*
	 * A gconnect (gs, held: br_direct_hold) to listeners of preloaded
	 * programs (struct dcls); ls is NULL. A preloaded accept of the
	 * connection from src takes it (br_direct_cpu_accept).
	 */
	struct br_sock *gs;
};

/*
 * A preloaded program's listener (gs_ctl_dlisten), by the inode the
 * kernel's sock_diag names it by. Entries are not told of closes: a
 * gconnect goes direct only where the kernel lists no listener on the
 * port but these, so one whose socket is gone is never used, and gives
 * its place to new ones (BR_CLS_MAX, oldest first).
 */
struct dcls {
	struct dkey k;
	bool v4_too;
	uint64_t sino;
	uid_t uid;
};

#define BR_CLS_MAX 1024

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
	struct dcls *cls; /* BR_CLS_MAX, allocated at the first */
	uint32_t ncls, cls_next; /* used; the next to give up when full */
	struct dpending *pend;
	uint32_t npend; /* at most nsegs */
	uint32_t npend_hint; /* atomic: npend, read without the lock */
	uint64_t serial; /* pending entries made so far */
	struct dcpu *cpu; /* per segment */
	/* receive pools (gsock_ctl.h), by index */
	struct br_app *peer_app[GS_MAX_PEERS]; /* its live owner, or NULL */
	uint32_t peer_gen[GS_MAX_PEERS]; /* uses of the index so far */
	uint32_t peer_segs[GS_MAX_PEERS]; /* segments with a ring in it */
	uint32_t next_peer; /* where the search for a free index starts */
	int8_t (*seg_pool)[2]; /* per segment, per pipe: its ring's pool, or -1 */
	uint32_t *seg_gen; /* per segment: its uses (gs_dseg.sgen) */
} dp = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

int br_direct_init(void)
{
	uint64_t stride = GS_DSEG_STRIDE((uint32_t)br.conf.direct_ring_size);

	if (!br.conf.direct)
		return 0;
	dp.nsegs = (uint32_t)br.conf.direct_conns;
	dp.dring = (uint32_t)br.conf.direct_ring_size;
	dp.stride = stride;
	dp.size = GS_DPOOL_SIZE(dp.nsegs, dp.dring);
	dp.refs = calloc(dp.nsegs, 1);
	dp.free_segs = calloc(dp.nsegs, sizeof(int));
	dp.pend = calloc(dp.nsegs, sizeof(*dp.pend));
	dp.cpu = calloc(dp.nsegs, sizeof(*dp.cpu));
	dp.seg_pool = malloc(dp.nsegs * sizeof(*dp.seg_pool));
	dp.seg_gen = calloc(dp.nsegs, sizeof(*dp.seg_gen));
	for (uint32_t i = 0; dp.cpu && i < dp.nsegs; i++) {
		dp.cpu[i].ev.kind = BR_EV_DIRECT;
		dp.cpu[i].fd = -1;
		dp.cpu[i].seg = (int)i;
		pthread_mutex_init(&dp.cpu[i].lk, NULL);
	}
	if (dp.seg_pool)
		memset(dp.seg_pool, -1, dp.nsegs * sizeof(*dp.seg_pool));
	dp.fd = memfd_create("gsock-direct", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (!dp.refs || !dp.free_segs || !dp.pend || !dp.cpu || !dp.seg_pool ||
	    !dp.seg_gen || dp.fd < 0 ||
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

/* Wake-up bytes cpu_token wrote (atomic): gsock-stat, and the log at the end. */
static uint64_t n_tokens;

uint64_t br_direct_wakeups(void)
{
	return __atomic_load_n(&n_tokens, __ATOMIC_RELAXED);
}

void br_direct_fini(void)
{
	if (dp.base) {
		/* preloaded programs name their listeners to the next gsockd */
		__atomic_store_n(&GS_DPOOL_OF(dp.base, dp.nsegs, dp.dring)->closed,
				 1, __ATOMIC_RELEASE);
		br_info("direct: %llu wake-ups written to CPU programs' descriptors",
			(unsigned long long)__atomic_load_n(&n_tokens,
							    __ATOMIC_RELAXED));
		munmap(dp.base, dp.size);
	}
	if (dp.fd >= 0)
		close(dp.fd);
	free(dp.refs);
	free(dp.free_segs);
	free(dp.pend);
	for (uint32_t i = 0; dp.cpu && i < dp.nsegs; i++) {
		if (dp.cpu[i].fd >= 0)
			close(dp.cpu[i].fd);
		pthread_mutex_destroy(&dp.cpu[i].lk);
	}
	free(dp.cpu);
	dp.cpu = NULL;
	free(dp.seg_pool);
	dp.seg_pool = NULL;
	free(dp.seg_gen);
	dp.seg_gen = NULL;
	free(dp.ls);
	free(dp.cls);
	dp.cls = NULL;
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

uint32_t br_direct_held(void)
{
	uint32_t n;

	pthread_mutex_lock(&dp.lock);
	n = dp.fd >= 0 ? dp.nsegs - dp.nfree : 0;
	pthread_mutex_unlock(&dp.lock);
	return n;
}

static struct gs_dseg *seg_at(int seg)
{
	return (struct gs_dseg *)(dp.base + (uint64_t)seg * dp.stride);
}

/*
 * Bytes in a pipe's ring its receiver has not taken. With lanes
 * (gsock_arena.h) the head may pass the tail for a moment: none then.
 */
static uint64_t pipe_unread(const struct gs_dpipe *p)
{
	uint64_t d = __atomic_load_n(&p->tail, __ATOMIC_ACQUIRE) -
		     __atomic_load_n(&p->head, __ATOMIC_ACQUIRE);

	return (int64_t)d > 0 ? d : 0;
}

static bool key_v4(const struct dkey *k)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0,
					    0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(k->a, mapped, 12);
}

/*
 * k->any from its address: 0.0.0.0, ::, or ::ffff:0.0.0.0 (an IPv6
 * socket's bind to every IPv4 address).
 */
static void key_any(struct dkey *k)
{
	static const uint8_t zero[16];

	k->any = !memcmp(k->a, zero, 16) ||
		 (key_v4(k) && !memcmp(k->a + 12, zero, 4));
}

static bool key_of(const struct sockaddr *sa, socklen_t len, struct dkey *k)
{
	memset(k, 0, sizeof(*k));
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;

		k->a[10] = k->a[11] = 0xff;
		memcpy(k->a + 12, &in->sin_addr, 4);
		k->port = ntohs(in->sin_port);
		key_any(k);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		memcpy(k->a, &in6->sin6_addr, 16);
		k->port = ntohs(in6->sin6_port);
		key_any(k);
		return true;
	}
	return false;
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

/* Whether listener l takes connections to dst (local: dst is this host's). */
static bool covers(const struct dlisten *l, const struct dkey *dst, bool local)
{
	if (l->k.unx || l->k.port != dst->port)
		return false;
	if (!l->k.any)
		return !memcmp(l->k.a, dst->a, 16);
	if (key_v4(&l->k) != key_v4(dst) && !l->v4_too)
		return false;
	return !(key_v4(&l->k) && !key_v4(dst)) && local;
}

/*
 * Caller holds the lock: the listener the kernel hands dst to, or NULL;
 * with SO_REUSEPORT, one of its group (l->reuse: the kernel picks).
 */
static struct dlisten *listener_for(const struct dkey *dst, bool *local)
{
	for (uint32_t i = 0; i < dp.nls; i++)
		if (covers(&dp.ls[i], dst, *local))
			return &dp.ls[i];
	return NULL;
}

/*
 * Send a sock_diag request on netlink socket fd for TCP sockets of family
 * in states: the one at id's exact addresses, or (id NULL) a dump.
 */
static bool diag_send(int fd, uint8_t family, uint32_t states,
		      const struct inet_diag_sockid *id)
{
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 r;
	} req = {
		.nh = { .nlmsg_len = sizeof(req),
			.nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST | (id ? 0 : NLM_F_DUMP) },
		.r = { .sdiag_family = family,
		       .sdiag_protocol = IPPROTO_TCP,
		       .idiag_states = states },
	};

	if (id)
		req.r.id = *id;
	return send(fd, &req, sizeof(req), 0) == (ssize_t)sizeof(req);
}

/* The most listeners a SO_REUSEPORT group may have for the direct path. */
#define BR_GROUP_MAX 64

/*
 * The inodes of the kernel's TCP listeners on dst's port that could take
 * a connection to dst (bound to its address, or to a wildcard of its
 * family, or to an IPv6 one that is not v6only), at most max. Returns how
 * many, or -1 where the kernel would not say (no sock_diag) or had more.
 */
static int kernel_listeners(const struct dkey *dst, uint64_t *ino, int max)
{
	static const uint8_t fams[2] = { AF_INET, AF_INET6 };
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC,
			NETLINK_SOCK_DIAG);
	int n = 0;

	if (fd < 0)
		return -1;
	for (int f = 0; f < 2 && n >= 0; f++) {
		bool done = false;

		if (!diag_send(fd, fams[f], 1u << TCP_LISTEN, NULL))
			n = -1;
		while (n >= 0 && !done) {
			uint64_t buf[8192 / 8];
			ssize_t got = recv(fd, buf, sizeof(buf), 0);
			int len = (int)got;
			struct nlmsghdr *h = (struct nlmsghdr *)buf;

			if (got <= 0) {
				n = -1;
				break;
			}
			for (; n >= 0 && NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
				const struct inet_diag_msg *m = NLMSG_DATA(h);
				const struct rtattr *at;
				struct dkey k = { .port = 0 };
				bool v6only = false;
				int alen;

				if (h->nlmsg_type == NLMSG_DONE) {
					done = true;
					break;
				}
				if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
				    h->nlmsg_len < NLMSG_LENGTH(sizeof(*m))) {
					n = -1;
					break;
				}
				if (ntohs(m->id.idiag_sport) != dst->port)
					continue;
				/* IPv6's: whether it takes IPv4 too */
				at = (const struct rtattr *)(m + 1);
				alen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
				for (; RTA_OK(at, alen); at = RTA_NEXT(at, alen))
					if (at->rta_type == INET_DIAG_SKV6ONLY &&
					    RTA_PAYLOAD(at) >= 1)
						v6only = *(const uint8_t *)RTA_DATA(at);
				if (m->idiag_family == AF_INET) {
					k.a[10] = k.a[11] = 0xff;
					memcpy(k.a + 12, m->id.idiag_src, 4);
				} else {
					memcpy(k.a, m->id.idiag_src, 16);
				}
				key_any(&k);
				/* a wildcard of the other family, or another address */
				if (k.any ? (key_v4(&k) && !key_v4(dst)) ||
						    (!key_v4(&k) && key_v4(dst) && v6only) :
					    memcmp(k.a, dst->a, 16) != 0)
					continue;
				if (n == max)
					n = -1;
				else
					ino[n++] = m->idiag_inode;
			}
		}
	}
	close(fd);
	return n;
}

/* What the kernel says of a TCP connection's end (kernel_conn). */
enum kconn {
	KC_UNKNOWN, /* it would not say */
	KC_NONE, /* no such socket, and no listener there */
	KC_LISTEN, /* no such connection: the lookup found a listener */
	KC_HERE, /* a socket of the connection (half-open or closing too) */
};

/*
 * The kernel's socket for the connection's end at local, its peer at
 * remote, asked through sock_diag by their exact addresses.
 */
static enum kconn kernel_conn(const struct dkey *local,
			      const struct dkey *remote)
{
	bool v4 = key_v4(local) && key_v4(remote);
	struct inet_diag_sockid id = {
		.idiag_sport = htons(local->port),
		.idiag_dport = htons(remote->port),
		.idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE },
	};
	uint64_t buf[1024 / 8];
	const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC,
			NETLINK_SOCK_DIAG);
	enum kconn r = KC_UNKNOWN;
	ssize_t got;

	if (fd < 0)
		return r;
	memcpy(id.idiag_src, v4 ? local->a + 12 : local->a, v4 ? 4 : 16);
	memcpy(id.idiag_dst, v4 ? remote->a + 12 : remote->a, v4 ? 4 : 16);
	if (diag_send(fd, v4 ? AF_INET : AF_INET6, ~0u, &id) &&
	    (got = recv(fd, buf, sizeof(buf), 0)) > 0 &&
	    NLMSG_OK(h, (int)got)) {
		const struct inet_diag_msg *m = NLMSG_DATA(h);
		const struct nlmsgerr *e = NLMSG_DATA(h);

		if (h->nlmsg_type == NLMSG_ERROR &&
		    h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)))
			r = e->error == -ENOENT ? KC_NONE : KC_UNKNOWN;
		else if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
			 h->nlmsg_len >= NLMSG_LENGTH(sizeof(*m)))
			r = m->idiag_state == TCP_LISTEN ? KC_LISTEN : KC_HERE;
	}
	close(fd);
	return r;
}

/*
 * Whether a connection from src to dst is gone for good: the kernel
 * answers for dst's end with its listener (so sock_diag works, and holds
 * no socket of it there, queued, half-open or closing), and holds no
 * socket of it at src's end either. A client that closed with a FIN keeps
 * its end a while (FIN_WAIT): a connection the listener still takes (one
 * admitted by a SYN cookie, say, which no lookup shows before its accept)
 * is not taken for gone. Anything the kernel would not say is not gone,
 * nor is a link-local IPv6 connection (its entry waits for the listener).
 */
static bool kernel_conn_gone(const struct dkey *dst, const struct dkey *src)
{
	enum kconn c;

	/* IPv6 link-local: a lookup without the interface misses its sockets */
	if ((dst->a[0] == 0xfe && (dst->a[1] & 0xc0) == 0x80) ||
	    (src->a[0] == 0xfe && (src->a[1] & 0xc0) == 0x80))
		return false;
	if (kernel_conn(dst, src) != KC_LISTEN)
		return false;
	c = kernel_conn(src, dst);
	return c == KC_NONE || c == KC_LISTEN;
}

/*
 * Caller holds the lock: whether every one of the kernel's listeners in
 * ino[n] (kernel_listeners) is a listener of ours, of uid, that covers dst:
 * then a port shared with SO_REUSEPORT is ours whichever the kernel picks.
 */
static bool group_ours(const struct dkey *dst, const uint64_t *ino, int n,
		       uid_t uid)
{
	if (n <= 0)
		return false;
	for (int j = 0; j < n; j++) {
		uint32_t i = 0;

		while (i < dp.nls && (dp.ls[i].sino != ino[j] ||
				      !covers(&dp.ls[i], dst, true) ||
				      dp.ls[i].s->app->uid != uid))
			i++;
		if (i == dp.nls)
			return false;
	}
	return true;
}

/*
 * A unix socket's file (an absolute path; gsockd binds no other): its
 * device and inode, so that two spellings of one path meet.
 */
static bool unix_file(const struct sockaddr *sa, socklen_t len, uint64_t *dev,
		      uint64_t *ino)
{
	const struct sockaddr_un *un = (const void *)sa;
	size_t off = offsetof(struct sockaddr_un, sun_path);
	char path[sizeof(un->sun_path) + 1];
	struct stat st;

	if (sa->sa_family != AF_UNIX || len <= off ||
	    len - off > sizeof(un->sun_path) || un->sun_path[0] != '/')
		return false;
	memcpy(path, un->sun_path, len - off);
	path[len - off] = 0;
	if (stat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	*dev = st.st_dev;
	*ino = st.st_ino;
	return true;
}

/* Caller holds the lock: the unix listener of that file, or NULL. */
static struct dlisten *unix_listener_for(uint64_t dev, uint64_t ino)
{
	for (uint32_t i = 0; i < dp.nls; i++)
		if (dp.ls[i].k.unx && dp.ls[i].dev == dev && dp.ls[i].ino == ino)
			return &dp.ls[i];
	return NULL;
}

/*
 * A unix connecting end has no name the listener's accept could tell it
 * by: gsockd binds it to an abstract one of its own, "gsock-direct-PID-
 * TAG"; the key is the tag. -1 when the bind fails.
 */
static int unix_src(int fd, struct dkey *k)
{
	static uint32_t next;
	uint32_t tag = __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1,
			 "gsock-direct-%d-%u", (int)getpid(), tag);

	if (bind(fd, (struct sockaddr *)&un,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0)
		return -1;
	memset(k, 0, sizeof(*k));
	k->unx = true;
	memcpy(k->a, &tag, sizeof(tag));
	return 0;
}

/* An accepted unix connection's peer as unix_src named it, or false. */
static bool unix_peer_key(const struct sockaddr_storage *ss, socklen_t len,
			  struct dkey *k)
{
	const struct sockaddr_un *un = (const void *)ss;
	size_t off = offsetof(struct sockaddr_un, sun_path);
	char name[sizeof(un->sun_path)], again[sizeof(un->sun_path)];
	int pid;
	uint32_t tag;

	if (ss->ss_family != AF_UNIX || len <= off + 1 || un->sun_path[0])
		return false;
	memcpy(name, un->sun_path + 1, len - off - 1);
	name[len - off - 1] = 0;
	/* Exactly as unix_src wrote it: "-05" or "+5" is someone else's. */
	if (sscanf(name, "gsock-direct-%d-%u", &pid, &tag) != 2 ||
	    pid != (int)getpid() ||
	    snprintf(again, sizeof(again), "gsock-direct-%d-%u", pid, tag) !=
		    (int)(len - off - 1) ||
	    memcmp(again, name, len - off - 1))
		return false;
	memset(k, 0, sizeof(*k));
	k->unx = true;
	memcpy(k->a, &tag, sizeof(tag));
	return true;
}

/*
 * Caller holds the lock: the direct listeners changed; a preload told
 * that none listens at an address asks again.
 */
static void listeners_moved(void)
{
	__atomic_add_fetch(&GS_DPOOL_OF(dp.base, dp.nsegs, dp.dring)->listen_gen,
			   1, __ATOMIC_RELEASE);
}

void br_direct_listen(struct br_sock *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int reuse = 0, v6only = 1;
	socklen_t ol = sizeof(int);
	struct dkey k = { .unx = s->domain == AF_UNIX };
	uint64_t dev = 0, ino = 0;
	struct stat st;

	if (dp.fd < 0 || !s->app->direct ||
	    getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0 ||
	    (k.unx ? !unix_file((struct sockaddr *)&ss, len, &dev, &ino) :
		     !key_of((struct sockaddr *)&ss, len, &k)))
		return;
	/* A port shared with other listeners: the kernel picks (reuse). */
	if (!k.unx &&
	    getsockopt(s->fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &ol) < 0)
		return;
	if (fstat(s->fd, &st) < 0)
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
		.reuse = reuse != 0,
		.sino = st.st_ino,
		.dev = dev,
		.ino = ino,
	};
	s->dlisten = true;
	listeners_moved();
	pthread_mutex_unlock(&dp.lock);
}

static void peer_retire(uint32_t i);

/* Caller holds the lock: one holder of seg lets go. */
static void seg_put(int seg)
{
	if (--dp.refs[seg])
		return;
	for (int k = 0; k < 2; k++) {
		int i = dp.seg_pool[seg][k];

		dp.seg_pool[seg][k] = -1;
		if (i >= 0 && --dp.peer_segs[i] == 0)
			peer_retire((uint32_t)i);
	}
	dp.free_segs[dp.nfree++] = seg;
}

/*
 * Caller holds the lock, seg is new: each pipe whose receiver has a
 * receive pool that the sender mapped gets its ring there (a1 NULL: none
 * does). The pool's index stays busy (not given to another application)
 * while seg lives, so the sender's mapping of it stays the one the sender
 * writes into.
 */
static void seg_place(int seg, struct br_app *a0, struct br_app *a1)
{
	struct gs_dseg *g = seg_at(seg);
	struct br_app *a[2] = { a0, a1 };

	/* 0 never: a fresh pool's zeroed counter copies are of no use */
	dp.seg_gen[seg] = dp.seg_gen[seg] % GS_SGEN_MASK + 1;
	g->sgen = dp.seg_gen[seg];
	for (unsigned k = 0; k < 2; k++) {
		struct br_app *rcv = a[k ^ 1];

		g->dpeer[k] = a[k] && a[k]->peer >= 0 ? (uint32_t)a[k]->peer + 1 : 0;
		/*
		 * An end not known yet (NULL: the listener the kernel picks
		 * from a SO_REUSEPORT group): both rings stay in the segment.
		 * One application's two ends: its two rings would be one.
		 */
		if (!a[k] || !rcv || rcv == a[k] || rcv->peer < 0 ||
		    dp.peer_app[rcv->peer] != rcv ||
		    !(a[k]->reach >> rcv->peer & 1))
			continue;
		g->dev |= GS_DC_SIDE(k);
		dp.seg_pool[seg][k] = (int8_t)rcv->peer;
		dp.peer_segs[rcv->peer]++;
	}
}

/*
 * Caller holds the lock: tell to of pool i's (its owner's descriptor
 * with it), or that the use gen of index i is over (drop).
 */
static void peer_tell(struct br_app *to, uint32_t i, bool drop)
{
	struct br_app *owner = dp.peer_app[i];
	struct gs_ctl_peer m = { .magic = GS_CTL_PEER_MAGIC,
				 .peer = i,
				 .gen = dp.peer_gen[i],
				 .drop = drop,
				 .size = owner ? owner->rx_size : 0,
				 .pid = owner ? owner->pid : 0 };

	/* not sent: to never maps it (its pipes keep host rings), or keeps it */
	if (br_send_fd(to->ctl_fd, &m, sizeof(m), drop ? -1 : owner->rx_fd) <
	    0)
		br_dbg("cannot tell pid %d of receive pool %u: %s",
		       (int)to->pid, i, strerror(errno));
}

/*
 * Caller holds the lock: index i has no owner and no segment with a ring
 * in its pool; everyone who mapped it lets go (the GPU memory of a dead
 * application is freed once no process maps it).
 */
static void peer_retire(uint32_t i)
{
	if (dp.peer_app[i] || dp.peer_segs[i] || !dp.peer_gen[i])
		return;
	for (uint32_t j = 0; j < GS_MAX_PEERS; j++)
		if (dp.peer_app[j] && (dp.peer_app[j]->reach >> i & 1))
			peer_tell(dp.peer_app[j], i, true);
	for (uint32_t j = 0; j < GS_MAX_PEERS; j++)
		if (dp.peer_app[j])
			dp.peer_app[j]->reach &= ~(1ull << i);
}

void br_direct_app_joined(struct br_app *a)
{
	uint32_t i, n;

	if (dp.fd < 0 || a->rx_fd < 0 || !a->direct || !br.conf.direct_device)
		return;
	pthread_mutex_lock(&dp.lock);
	/* killed since its reply (by a worker): br_direct_app_gone has run */
	if (br_app_dead(a)) {
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	for (n = 0; n < GS_MAX_PEERS; n++) {
		i = (dp.next_peer + n) % GS_MAX_PEERS;
		if (!dp.peer_app[i] && !dp.peer_segs[i])
			break;
	}
	if (n == GS_MAX_PEERS) {
		pthread_mutex_unlock(&dp.lock);
		br_info("application pid %d: %d receive pools are in use; its direct rings stay in host memory",
			(int)a->pid, GS_MAX_PEERS);
		return;
	}
	dp.next_peer = (i + 1) % GS_MAX_PEERS;
	dp.peer_app[i] = a;
	dp.peer_gen[i]++;
	a->peer = (int)i;
	a->reach = 0;
	for (uint32_t j = 0; j < GS_MAX_PEERS; j++) {
		if (j == i || !dp.peer_app[j])
			continue;
		peer_tell(a, j, false);
		peer_tell(dp.peer_app[j], i, false);
	}
	pthread_mutex_unlock(&dp.lock);
}

void br_direct_peer_ack(struct br_app *a, const struct gs_ctl_peer_ack *k)
{
	pthread_mutex_lock(&dp.lock);
	/* mapped after its owner went and its use ended: let it go again */
	if (k->peer < GS_MAX_PEERS && !k->status && !dp.peer_app[k->peer] &&
	    !dp.peer_segs[k->peer] && dp.peer_gen[k->peer] == k->gen &&
	    !br_app_dead(a))
		peer_tell(a, k->peer, true);
	if (k->peer < GS_MAX_PEERS && dp.peer_app[k->peer] &&
	    dp.peer_app[k->peer] != a && dp.peer_gen[k->peer] == k->gen &&
	    a->peer >= 0 && dp.peer_app[a->peer] == a) {
		if (!k->status)
			a->reach |= 1ull << k->peer;
		else
			br_info("application pid %d cannot reach pid %d's receive pool (%s): the rings between them stay in host memory",
				(int)a->pid, (int)dp.peer_app[k->peer]->pid,
				strerror(-k->status));
	}
	pthread_mutex_unlock(&dp.lock);
}

void br_direct_app_gone(struct br_app *a)
{
	pthread_mutex_lock(&dp.lock);
	/* no new ring goes into its pool (seg_place looks at the owner) */
	if (a->peer >= 0 && dp.peer_app[a->peer] == a) {
		dp.peer_app[a->peer] = NULL;
		peer_retire((uint32_t)a->peer);
	}
	pthread_mutex_unlock(&dp.lock);
}

/* Caller holds the lock: whether seg's side k is a CPU program. */
static bool cpu_side(int seg, unsigned k)
{
	return __atomic_load_n(&seg_at(seg)->cpu, __ATOMIC_ACQUIRE) &
	       GS_DC_SIDE(k);
}

/*
 * Caller holds the lock or seg's lk (struct dcpu): make seg's CPU side
 * readable (one byte into its socketpair); pipe is the one it reads. A
 * full socketpair is readable already.
 */
static void cpu_token(int seg, unsigned pipe)
{
	struct dcpu *c = &dp.cpu[seg];

	if (c->fd < 0)
		return;
	/* a count of the bytes in the descriptor or on their way (preload/direct.c) */
	__atomic_fetch_add(&seg_at(seg)->tokens[pipe], 1, __ATOMIC_ACQ_REL);
	if (send(c->fd, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) {
		__atomic_fetch_add(&n_tokens, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_fetch_sub(&seg_at(seg)->tokens[pipe], 1, __ATOMIC_ACQ_REL);
	if (errno != EAGAIN) /* EAGAIN: full of them, readable */
		br_dbg("direct segment %d: cannot wake its CPU side: %s", seg,
		       strerror(errno));
}

/*
 * Caller holds the lock or seg's lk: take back what seg's CPU side wrote
 * into its socketpair to make it unwritable (pipe is the one it writes),
 * so it is writable again.
 */
static void cpu_unspill(int seg, unsigned pipe)
{
	struct gs_dseg *d = seg_at(seg);
	struct dcpu *c = &dp.cpu[seg];
	char buf[4096];
	ssize_t n;

	if (c->fd < 0)
		return;
	while ((n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		__atomic_add_fetch(&d->spill_out[pipe], (uint64_t)n,
				   __ATOMIC_RELEASE);
}

/*
 * Caller holds the lock: side k of seg is gone (closed, or reset with
 * rst); a CPU peer learns it from its socketpair.
 */
static void side_gone(int seg, unsigned k, bool rst)
{
	struct gs_dseg *d = seg_at(seg);

	if (rst)
		__atomic_or_fetch(&d->reset, GS_DC_SIDE(k), __ATOMIC_RELEASE);
	__atomic_or_fetch(&d->closed, GS_DC_SIDE(k), __ATOMIC_RELEASE);
	if (cpu_side(seg, k ^ 1)) {
		cpu_token(seg, k); /* a reader sees the end */
		cpu_unspill(seg, k ^ 1); /* a writer sees EPIPE */
	}
}

/* Caller holds the lock: a held gconnect's entry to dst comes (d 1) or goes (-1). */
static void cpu_pend_add(const struct dkey *dst, int d)
{
	struct gs_dpool *pool = GS_DPOOL_OF(dp.base, dp.nsegs, dp.dring);

	__atomic_add_fetch(&pool->pend_port[dst->port % GS_PEND_PORTS],
			   (uint16_t)d, __ATOMIC_RELEASE);
	__atomic_add_fetch(&pool->cpu_pend, (uint32_t)d, __ATOMIC_RELEASE);
}

static void pend_remove(uint32_t i)
{
	if (dp.pend[i].gs)
		cpu_pend_add(&dp.pend[i].dst, -1);
	dp.pend[i] = dp.pend[--dp.npend];
	__atomic_store_n(&dp.npend_hint, dp.npend, __ATOMIC_RELAXED);
}

/* Caller holds the lock: listener s's entry, or NULL. */
static struct dlisten *listen_of(const struct br_sock *s)
{
	for (uint32_t i = 0; i < dp.nls; i++)
		if (dp.ls[i].s == s)
			return &dp.ls[i];
	return NULL;
}

/* Caller holds the lock: the pending entry of seg, or NULL. */
static struct dpending *pend_of(int seg)
{
	for (uint32_t i = 0; i < dp.npend; i++)
		if (dp.pend[i].seg == seg)
			return &dp.pend[i];
	return NULL;
}

void br_direct_unlisten(struct br_sock *s)
{
	struct dlisten *l;
	bool local = true, reuse;
	int fd;

	if (!s->dlisten)
		return;
	/*
	 * A SO_REUSEPORT listener: connections still in its kernel queue
	 * are those the kernel resets when it closes (unless it moves them
	 * to another listener of the group: tcp_migrate_req), and only the
	 * queue knows which pending entries of the group they were. Taken
	 * and reset here, their segments go with them (one that comes
	 * between this and the close waits for the group's last listener,
	 * or for its client's end, pend_stale).
	 */
	pthread_mutex_lock(&dp.lock);
	l = listen_of(s);
	/* where the kernel moves the queue to another of the group: not */
	reuse = l && l->reuse &&
		br_proc_int("/proc/sys/net/ipv4/tcp_migrate_req", 0) != 1;
	pthread_mutex_unlock(&dp.lock);
	for (uint32_t n = 0; reuse && n < 2 * br.conf.accept_queue + 16 &&
			     (fd = accept4(s->fd, NULL, NULL,
					   SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;
	     n++) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		br_direct_drop(br_direct_accepted(s, fd));
		/* a reset, as the kernel's close of the listener gives */
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
	}
	pthread_mutex_lock(&dp.lock);
	l = listen_of(s);
	if (l)
		*l = dp.ls[--dp.nls];
	/*
	 * Connections the kernel now resets: their segments' pending hold.
	 * Those to a SO_REUSEPORT group (not in our queue, above) wait for
	 * another of its listeners, and go with the group's last.
	 */
	for (uint32_t i = 0; i < dp.npend;)
		if (!dp.pend[i].gs &&
		    (dp.pend[i].ls == s ||
		     (!dp.pend[i].ls &&
		      !listener_for(&dp.pend[i].dst, &local)))) {
			side_gone(dp.pend[i].seg, 1, true);
			seg_put(dp.pend[i].seg);
			pend_remove(i);
		} else {
			i++;
		}
	s->dlisten = false;
	listeners_moved();
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

/*
 * Caller holds the lock: whether every one of the kernel's listeners in
 * ino[n] (kernel_listeners) is a preloaded program's of uid that covers
 * dst (ino NULL: whether any entry of uid covers dst).
 */
static bool cls_all(const struct dkey *dst, const uint64_t *ino, int n,
		    uid_t uid)
{
	for (int j = 0; j < (ino ? n : 1); j++) {
		uint32_t i;

		for (i = 0; i < dp.ncls; i++) {
			const struct dcls *c = &dp.cls[i];
			struct dlisten l = { .k = c->k, .v4_too = c->v4_too };

			if ((!ino || c->sino == ino[j]) && c->uid == uid &&
			    covers(&l, dst, true))
				break;
		}
		if (i == dp.ncls)
			return false;
	}
	return ino ? n > 0 : true;
}

/* Whether a preloaded program's listener was named on port. */
static bool cls_port(uint16_t port)
{
	bool found = false;

	pthread_mutex_lock(&dp.lock);
	for (uint32_t i = 0; i < dp.ncls && !found; i++)
		found = dp.cls[i].k.port == port;
	pthread_mutex_unlock(&dp.lock);
	return found;
}

/*
 * br_direct_connect where no listener of ours takes dst (local, not
 * unix): one of a preloaded program may. If the kernel lists none on
 * the port but such, s takes a segment (side 0) and a pending entry
 * that the program's accept claims; its connect is held (s->dhold).
 */
static void connect_cpu(struct br_sock *s, const struct sockaddr *dst,
			socklen_t dlen, const struct dkey *dk)
{
	uint64_t kino[BR_GROUP_MAX];
	uid_t uid = s->app->uid;
	struct dkey src;
	bool ok;
	int n, seg;

	if (!br.conf.direct_accept_ms)
		return;
	pthread_mutex_lock(&dp.lock);
	ok = cls_all(dk, NULL, 0, uid);
	pthread_mutex_unlock(&dp.lock);
	if (!ok)
		return;
	n = kernel_listeners(dk, kino, BR_GROUP_MAX);
	pthread_mutex_lock(&dp.lock);
	ok = cls_all(dk, kino, n, uid);
	pthread_mutex_unlock(&dp.lock);
	if (!ok || bind_source(s, dst, dlen, &src) < 0)
		return;
	pthread_mutex_lock(&dp.lock);
	/*
	 * At most half the pool (rounded up: a pool of one holds one)
	 * waits for accepts: a program that accepts slowly or never leaves
	 * the rest to connections that move bytes.
	 */
	if (!dp.nfree || !cls_all(dk, kino, n, uid) ||
	    2 * (uint64_t)__atomic_load_n(
			&GS_DPOOL_OF(dp.base, dp.nsegs, dp.dring)->cpu_pend,
			__ATOMIC_RELAXED) >= (uint64_t)dp.nsegs) {
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	seg = dp.free_segs[--dp.nfree];
	dp.refs[seg] = 2; /* this end, and the pending entry */
	memset(seg_at(seg), 0, sizeof(struct gs_dseg));
	dp.pend[dp.npend++] = (struct dpending){ .dst = *dk,
						 .src = src,
						 .seg = seg,
						 .serial = ++dp.serial,
						 .gs = s };
	__atomic_store_n(&dp.npend_hint, dp.npend, __ATOMIC_RELAXED);
	cpu_pend_add(dk, 1);
	pthread_mutex_unlock(&dp.lock);
	s->dseg = seg;
	s->dside = 0;
	s->dhold = true;
}

bool br_direct_hold(struct br_sock *s, bool give_up)
{
	struct dpending *p;
	bool held;

	if (s->dseg < 0)
		return false;
	pthread_mutex_lock(&dp.lock);
	p = pend_of(s->dseg);
	held = p && p->gs == s;
	if (held && give_up) {
		/* No accept took it: no side saw it, and nothing moved. */
		seg_put(s->dseg);
		pend_remove((uint32_t)(p - dp.pend));
		seg_put(s->dseg);
		s->dseg = -1;
		held = false;
	}
	pthread_mutex_unlock(&dp.lock);
	return held;
}

void br_direct_connect(struct br_sock *s, const struct sockaddr *dst,
		       socklen_t dlen)
{
	struct dkey dk = { .unx = s->domain == AF_UNIX }, src;
	struct dlisten *l;
	uint64_t dev = 0, ino = 0, kino[BR_GROUP_MAX];
	bool local = true; /* a unix socket's file is on this host */
	bool group;
	int seg, n = -1;

	s->dseg = -1;
	if (dp.fd < 0 || !s->app->direct ||
	    (!__atomic_load_n(&dp.nls, __ATOMIC_RELAXED) &&
	     !__atomic_load_n(&dp.ncls, __ATOMIC_RELAXED)) ||
	    (dk.unx ? !unix_file(dst, dlen, &dev, &ino) :
		      !key_of(dst, dlen, &dk)))
		return;
	/* Only preloaded programs' listeners: none on the port, no look. */
	if (!__atomic_load_n(&dp.nls, __ATOMIC_RELAXED) &&
	    (dk.unx || !cls_port(dk.port)))
		return;
	if (!dk.unx)
		local = key_local(&dk);
	pthread_mutex_lock(&dp.lock);
	l = dk.unx ? unix_listener_for(dev, ino) : listener_for(&dk, &local);
	if (!l && !dk.unx && local) {
		pthread_mutex_unlock(&dp.lock);
		connect_cpu(s, dst, dlen, &dk);
		return;
	}
	if (!l || !dp.nfree || l->s->app->uid != s->app->uid) {
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	group = l->reuse;
	pthread_mutex_unlock(&dp.lock);
	/* A SO_REUSEPORT group: the kernel's list, asked without the lock. */
	if (group && local)
		n = kernel_listeners(&dk, kino, BR_GROUP_MAX);
	if ((dk.unx ? unix_src(s->fd, &src) : bind_source(s, dst, dlen, &src)) <
	    0)
		return;
	pthread_mutex_lock(&dp.lock);
	/* Looked up again: the lock was let go for the bind. */
	l = dk.unx ? unix_listener_for(dev, ino) : listener_for(&dk, &local);
	if (!l || !dp.nfree ||
	    (l->reuse && !group_ours(&dk, kino, n, s->app->uid))) {
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	seg = dp.free_segs[--dp.nfree];
	dp.refs[seg] = 2; /* this end, and the pending entry */
	memset(seg_at(seg), 0, sizeof(struct gs_dseg));
	/*
	 * A group's: the rings stay in the segment, as the receiver of the
	 * first is not known until the kernel hands the connection over.
	 */
	seg_place(seg, s->app, l->reuse ? NULL : l->s->app);
	dp.pend[dp.npend++] = (struct dpending){
		.ls = l->reuse ? NULL : l->s, .dst = dk, .src = src, .seg = seg,
		.serial = ++dp.serial
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
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct dlisten *l;
	int seg = -1;

	if (!ls->dlisten || !__atomic_load_n(&dp.npend_hint, __ATOMIC_RELAXED) ||
	    getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ls->domain == AF_UNIX) {
		/* The connecting end is gsockd's own, named by unix_src. */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
		    cred.pid != getpid() || !unix_peer_key(&ss, len, &k))
			return -1;
	} else if (!key_of((struct sockaddr *)&ss, len, &k)) {
		return -1;
	}
	pthread_mutex_lock(&dp.lock);
	l = listen_of(ls);
	for (uint32_t i = 0; i < dp.npend; i++) {
		struct dpending *p = &dp.pend[i];

		if (!p->gs &&
		    (p->ls == ls ||
		     (!p->ls && l && l->reuse && covers(l, &p->dst, true))) &&
		    p->src.port == k.port &&
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
	/* Closed unaccepted: a FIN, or a reset over bytes it never read. */
	side_gone(seg, 1, pipe_unread(&seg_at(seg)->pipe[0]) > 0);
	seg_put(seg);
	pthread_mutex_unlock(&dp.lock);
}

/* A connect that failed: its segment and pending entry go. */
void br_direct_abandon(struct br_sock *s)
{
	struct dpending *p;

	if (s->dseg < 0)
		return;
	pthread_mutex_lock(&dp.lock);
	p = pend_of(s->dseg);
	if (p) {
		seg_put(s->dseg);
		pend_remove((uint32_t)(p - dp.pend));
	}
	seg_put(s->dseg);
	pthread_mutex_unlock(&dp.lock);
	s->dseg = -1;
}

void br_direct_connected(struct br_sock *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint64_t dev, ino;
	bool same = true;

	if (s->dseg < 0 || s->domain != AF_UNIX)
		return;
	/*
	 * The socket file may have been replaced between the look and the
	 * connect: then the kernel handed the connection to a listener that
	 * knows nothing of the segment, and the bytes would wait for nobody.
	 * The listener's name is the path the file is at now.
	 */
	if (getpeername(s->fd, (struct sockaddr *)&ss, &len) < 0 ||
	    !unix_file((struct sockaddr *)&ss, len, &dev, &ino)) {
		same = false;
	} else {
		struct dpending *p;
		struct dlisten *l;

		pthread_mutex_lock(&dp.lock);
		p = pend_of(s->dseg); /* none: the listener took it already */
		l = p ? listen_of(p->ls) : NULL;
		same = !p || (l && l->dev == dev && l->ino == ino);
		pthread_mutex_unlock(&dp.lock);
	}
	if (!same)
		br_direct_abandon(s); /* the bridge carries it */
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
	bool unread;

	if (s->dseg < 0)
		return;
	d = seg_at(s->dseg);
	in = &d->pipe[s->dside ^ 1];
	/* Bytes it never read: the kernel would reset; so do we. */
	unread = pipe_unread(in) > 0;
	if (s->fd >= 0 && unread)
		setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
	pthread_mutex_lock(&dp.lock);
	side_gone(s->dseg, s->dside, unread);
	seg_put(s->dseg);
	pthread_mutex_unlock(&dp.lock);
	s->dseg = -1;
}

int br_direct_counts(const struct br_sock *s, uint64_t *rx, uint64_t *tx,
		     uint64_t *rxq, uint64_t *txq)
{
	const struct gs_dseg *d;
	const struct gs_dpipe *in, *out;
	bool devmem;

	if (s->dseg < 0)
		return 0;
	pthread_mutex_lock(&dp.lock);
	devmem = dp.seg_pool[s->dseg][0] >= 0 || dp.seg_pool[s->dseg][1] >= 0;
	pthread_mutex_unlock(&dp.lock);
	d = seg_at(s->dseg);
	in = &d->pipe[s->dside ^ 1];
	out = &d->pipe[s->dside];
	*rx = __atomic_load_n(&in->tail, __ATOMIC_RELAXED);
	*rxq = pipe_unread(in);
	*tx = __atomic_load_n(&out->tail, __ATOMIC_RELAXED);
	*txq = pipe_unread(out);
	return devmem ? 2 : 1;
}

void br_direct_shutdown(struct br_sock *s, int how)
{
	if (s->dseg < 0 || how == SHUT_RD)
		return;
	pthread_mutex_lock(&dp.lock);
	__atomic_or_fetch(&seg_at(s->dseg)->eof, GS_DC_SIDE(s->dside),
			  __ATOMIC_RELEASE);
	if (cpu_side(s->dseg, s->dside ^ 1))
		cpu_token(s->dseg, s->dside);
	pthread_mutex_unlock(&dp.lock);
}

/* Clear bit of *want; whether this call is the one that cleared it. */
static bool took(uint32_t *want, uint32_t bit)
{
	return (__atomic_load_n(want, __ATOMIC_ACQUIRE) & bit) &&
	       (__atomic_fetch_and(want, ~bit, __ATOMIC_ACQ_REL) & bit);
}

void br_direct_kick(struct br_sock *s)
{
	struct gs_dseg *d;
	unsigned out, in;
	bool wake, room;

	if (s->dseg < 0)
		return;
	d = seg_at(s->dseg);
	out = s->dside;
	in = s->dside ^ 1;
	if (!(__atomic_load_n(&d->cpu, __ATOMIC_ACQUIRE) & GS_DC_SIDE(in)))
		return;
	/*
	 * A reader is woken for bytes or an end it has not taken: the
	 * preload may have taken them already (a wait that looked at the
	 * ring itself), and a byte written now would land on its next wait
	 * as readiness with nothing to read. Its READER stays for the next
	 * bytes, whose publish rings again.
	 */
	wake = (pipe_unread(&d->pipe[out]) ||
		((__atomic_load_n(&d->eof, __ATOMIC_ACQUIRE) |
		  __atomic_load_n(&d->closed, __ATOMIC_ACQUIRE)) &
		 GS_DC_SIDE(out))) &&
	       took(&d->want[out], GS_DW_READER);
	room = took(&d->want[in], GS_DW_WRITER);
	if (!wake && !room)
		return;
	pthread_mutex_lock(&dp.cpu[s->dseg].lk);
	if (wake)
		cpu_token(s->dseg, out);
	if (room)
		cpu_unspill(s->dseg, in);
	pthread_mutex_unlock(&dp.cpu[s->dseg].lk);
}

/*
 * Caller holds the lock: a pending entry of seg (its CPU side gone, or
 * its source port taken by a new request) whose connection the kernel no
 * longer holds (reset in the listener's queue, never completed) would
 * wait for the listener's close, and be handed to a later connection from
 * the same port. It goes now. The lock is let go while the kernel is
 * asked (kernel_conn_gone).
 */
static bool pend_stale(int seg)
{
	struct dpending *p = pend_of(seg);
	struct dkey src, dst;
	uint64_t serial;

	if (!p || p->src.unx)
		return false;
	src = p->src;
	dst = p->dst;
	serial = p->serial;
	pthread_mutex_unlock(&dp.lock);
	if (!kernel_conn_gone(&dst, &src)) {
		pthread_mutex_lock(&dp.lock);
		return false;
	}
	pthread_mutex_lock(&dp.lock);
	p = pend_of(seg); /* still the same entry? */
	if (!p || p->serial != serial)
		return false;
	side_gone(seg, 1, true);
	seg_put(seg);
	pend_remove((uint32_t)(p - dp.pend));
	return true;
}

/*
 * Caller holds the lock (let go and taken again), about to add an entry
 * from src: an older one from the same address and port (that
 * connection's socket let the port go) is asked after (pend_stale).
 */
static void pend_sweep(const struct dkey *src)
{
	for (uint32_t i = 0; i < dp.npend; i++)
		if (!dp.pend[i].gs && dp.pend[i].src.port == src->port &&
		    !memcmp(dp.pend[i].src.a, src->a, 16)) {
			pend_stale(dp.pend[i].seg);
			break; /* a port is one socket's at a time */
		}
}

void br_direct_sweep(uint64_t now)
{
	static uint64_t last;
	static uint32_t next;

	/*
	 * Every 100 ms, a few entries whose CPU side is gone are asked after
	 * again: the kernel may have held their connection when that side
	 * went (a reset not yet through, a half-open end) and dropped it since.
	 */
	if (now - last < 100000000ull ||
	    !__atomic_load_n(&dp.npend_hint, __ATOMIC_RELAXED))
		return;
	last = now;
	pthread_mutex_lock(&dp.lock);
	for (uint32_t k = 0, n = dp.npend < 8 ? dp.npend : 8; k < n && dp.npend;
	     k++) {
		int seg = dp.pend[next++ % dp.npend].seg;

		if (cpu_side(seg, dp.cpu[seg].side) && dp.cpu[seg].ended)
			pend_stale(seg);
	}
	pthread_mutex_unlock(&dp.lock);
}

static void dreply(struct gs_ctl_dreply *rep, int status, const char *why)
{
	rep->status = status;
	snprintf(rep->msg, sizeof(rep->msg), "%s", why);
}

/*
 * A preloaded program's connect or accept request: its addresses as
 * keys, or false with the reply filled (the direct path off, another
 * user, malformed addresses).
 */
static bool cpu_request(const struct gs_ctl_dconnect *req, uid_t uid,
			struct gs_ctl_dreply *rep, struct dkey *dk,
			struct dkey *src)
{
	memset(rep, 0, sizeof(*rep));
	rep->magic = GS_CTL_DCONN_MAGIC;
	if (dp.fd < 0) {
		dreply(rep, -EOPNOTSUPP, "the direct path is off (direct in gsock.conf)");
		return false;
	}
	if (uid != br.uid) {
		dreply(rep, -EPERM, "the direct pool is gsockd's own user's");
		return false;
	}
	if (req->dst_len > sizeof(req->dst) || req->src_len > sizeof(req->src) ||
	    !key_of((const struct sockaddr *)req->dst, req->dst_len, dk) ||
	    !key_of((const struct sockaddr *)req->src, req->src_len, src) ||
	    !src->port || src->any) {
		dreply(rep, -EINVAL, "malformed addresses");
		return false;
	}
	return true;
}

void br_direct_cpu_connect(const struct gs_ctl_dconnect *req, int pair_fd,
			   uid_t uid, struct gs_ctl_dreply *rep)
{
	struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLIN | EPOLLET };
	struct dkey dk, src;
	struct dlisten *l;
	uint64_t ino[BR_GROUP_MAX];
	bool local;
	int seg, n;

	if (!cpu_request(req, uid, rep, &dk, &src))
		goto err_close;
	local = key_local(&dk);
	pthread_mutex_lock(&dp.lock);
	pend_sweep(&src);
	l = listener_for(&dk, &local);
	if (l && l->reuse) {
		/* the kernel's list, asked without the lock, then ours again */
		pthread_mutex_unlock(&dp.lock);
		n = local ? kernel_listeners(&dk, ino, BR_GROUP_MAX) : -1;
		pthread_mutex_lock(&dp.lock);
		l = listener_for(&dk, &local);
		if (l && l->reuse && !group_ours(&dk, ino, n, uid)) {
			pthread_mutex_unlock(&dp.lock);
			dreply(rep, -ENOENT,
			       "a port shared (SO_REUSEPORT) with a listener that is not a gsock application's");
			goto err_close;
		}
	}
	if (!l || l->s->app->uid != uid) {
		pthread_mutex_unlock(&dp.lock);
		dreply(rep, -ENOENT, "no listener of a gsock application there");
		goto err_close;
	}
	if (!dp.nfree) {
		pthread_mutex_unlock(&dp.lock);
		dreply(rep, -EAGAIN, "every direct segment is taken (direct_conns)");
		goto err_close;
	}
	seg = dp.free_segs[--dp.nfree];
	ev.data.ptr = &dp.cpu[seg].ev;
	if (epoll_ctl(br.epfd, EPOLL_CTL_ADD, pair_fd, &ev) < 0) {
		dp.free_segs[dp.nfree++] = seg;
		pthread_mutex_unlock(&dp.lock);
		dreply(rep, -errno, "epoll");
		goto err_close;
	}
	dp.refs[seg] = 2; /* the CPU end, and the pending entry */
	memset(seg_at(seg), 0, sizeof(struct gs_dseg));
	dp.cpu[seg].side = 0; /* it connects */
	__atomic_store_n(&seg_at(seg)->cpu, GS_DC_SIDE(dp.cpu[seg].side),
			 __ATOMIC_RELEASE);
	dp.cpu[seg].fd = pair_fd;
	dp.cpu[seg].ended = false;
	dp.pend[dp.npend++] = (struct dpending){
		.ls = l->reuse ? NULL : l->s, .dst = dk, .src = src, .seg = seg,
		.serial = ++dp.serial
	};
	__atomic_store_n(&dp.npend_hint, dp.npend, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&dp.lock);
	rep->seg = (uint32_t)seg;
	rep->side = dp.cpu[seg].side;
	dreply(rep, 0, "ok");
	return;
err_close:
	close(pair_fd);
}

/*
 * Caller holds the lock (let go and taken again), the table full: the
 * place of an entry whose listener the kernel no longer lists (of the
 * next few from the oldest), else the oldest's.
 */
static uint32_t cls_free_place(void)
{
	/* The control thread is the table's only writer: i stays its own. */
	uint64_t ino[BR_GROUP_MAX];

	for (uint32_t k = 0; k < 8; k++) {
		uint32_t i = (dp.cls_next + k) % BR_CLS_MAX;
		struct dcls c = dp.cls[i];
		bool listed = false;
		int n;

		pthread_mutex_unlock(&dp.lock);
		n = kernel_listeners(&c.k, ino, BR_GROUP_MAX);
		pthread_mutex_lock(&dp.lock);
		for (int j = 0; j < n && !listed; j++)
			listed = ino[j] == c.sino;
		if (n >= 0 && !listed && dp.cls[i].sino == c.sino)
			return i;
	}
	dp.cls_next = (dp.cls_next + 1) % BR_CLS_MAX;
	return (dp.cls_next + BR_CLS_MAX - 1) % BR_CLS_MAX;
}

void br_direct_cpu_listen(const struct gs_ctl_dconnect *req, uid_t uid,
			  struct gs_ctl_dreply *rep)
{
	struct dkey k;
	uint32_t i;

	memset(rep, 0, sizeof(*rep));
	rep->magic = GS_CTL_DCONN_MAGIC;
	if (dp.fd < 0 || !br.conf.direct_accept_ms) {
		dreply(rep, -EOPNOTSUPP,
		       dp.fd < 0 ? "the direct path is off (direct in gsock.conf)" :
				   "gconnects do not wait for accepts (direct_accept_ms = 0)");
		return;
	}
	if (uid != br.uid) {
		dreply(rep, -EPERM, "the direct pool is gsockd's own user's");
		return;
	}
	if (req->dst_len > sizeof(req->dst) ||
	    !key_of((const struct sockaddr *)req->dst, req->dst_len, &k) ||
	    !k.port || !req->ino) {
		dreply(rep, -EINVAL, "malformed listener");
		return;
	}
	pthread_mutex_lock(&dp.lock);
	if (!dp.cls)
		dp.cls = calloc(BR_CLS_MAX, sizeof(*dp.cls));
	if (!dp.cls) {
		pthread_mutex_unlock(&dp.lock);
		dreply(rep, -ENOMEM, "out of memory");
		return;
	}
	for (i = 0; i < dp.ncls && dp.cls[i].sino != req->ino; i++)
		;
	if (i == dp.ncls && dp.ncls < BR_CLS_MAX) {
		i = dp.ncls;
		__atomic_store_n(&dp.ncls, dp.ncls + 1, __ATOMIC_RELAXED);
	} else if (i == dp.ncls) {
		i = cls_free_place();
	}
	dp.cls[i] = (struct dcls){ .k = k,
				   .v4_too = (req->flags & GS_DL_V4_TOO) != 0,
				   .sino = req->ino,
				   .uid = uid };
	pthread_mutex_unlock(&dp.lock);
	dreply(rep, 0, "ok");
}

void br_direct_cpu_accept(const struct gs_ctl_dconnect *req, int pair_fd,
			  uid_t uid, struct gs_ctl_dreply *rep)
{
	struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLIN | EPOLLET };
	struct dkey dk, src;
	struct br_sock *gs;
	struct br_msg *m;
	uint32_t i;
	int seg, owner;

	if (!cpu_request(req, uid, rep, &dk, &src))
		goto err_close;
	m = calloc(1, sizeof(*m));
	if (!m) {
		dreply(rep, -ENOMEM, "out of memory");
		goto err_close;
	}
	pthread_mutex_lock(&dp.lock);
	for (i = 0; i < dp.npend; i++)
		if (dp.pend[i].gs && dp.pend[i].src.port == src.port &&
		    (dp.pend[i].src.any || !memcmp(dp.pend[i].src.a, src.a, 16)) &&
		    dp.pend[i].dst.port == dk.port)
			break;
	if (i == dp.npend) {
		pthread_mutex_unlock(&dp.lock);
		free(m);
		dreply(rep, -ENOENT, "no gconnect waits for this connection");
		goto err_close;
	}
	seg = dp.pend[i].seg;
	ev.data.ptr = &dp.cpu[seg].ev;
	if (epoll_ctl(br.epfd, EPOLL_CTL_ADD, pair_fd, &ev) < 0) {
		int e = errno;

		pthread_mutex_unlock(&dp.lock);
		free(m);
		dreply(rep, -e, "epoll");
		goto err_close;
	}
	dp.cpu[seg].side = 1; /* it accepted */
	dp.cpu[seg].fd = pair_fd;
	dp.cpu[seg].ended = false;
	__atomic_store_n(&seg_at(seg)->cpu, GS_DC_SIDE(dp.cpu[seg].side),
			 __ATOMIC_RELEASE);
	/*
	 * The gconnect's worker completes it. The app is alive: gs's entry
	 * exists, and its worker removes it (sock_free, under the lock)
	 * before it lets go of the app.
	 */
	gs = dp.pend[i].gs;
	m->kind = BR_MSG_CLAIMED;
	m->app = gs->app;
	m->id = gs->id;
	m->gen = __atomic_load_n(&gs->gen, __ATOMIC_RELAXED);
	br_app_get(gs->app);
	owner = __atomic_load_n(&gs->owner, __ATOMIC_ACQUIRE);
	pend_remove(i); /* the entry's hold becomes the CPU end's */
	pthread_mutex_unlock(&dp.lock);
	if (owner >= 0) {
		br_worker_post(&br.workers[owner], m);
	} else {
		br_app_put(m->app);
		free(m);
	}
	rep->seg = (uint32_t)seg;
	rep->side = 1;
	dreply(rep, 0, "ok");
	return;
err_close:
	close(pair_fd);
}

/*
 * Caller holds the lock: every descriptor of seg's CPU side is closed.
 * With bytes of the GPU side it never read, TCP would reset the
 * connection; so do we (a killed process's kernel socket only says FIN).
 */
static void cpu_ended(int seg)
{
	unsigned side = dp.cpu[seg].side;
	struct gs_dpipe *in = &seg_at(seg)->pipe[side ^ 1];

	if (dp.cpu[seg].ended)
		return;
	dp.cpu[seg].ended = true;
	side_gone(seg, side, pipe_unread(in) > 0);
}

void br_direct_peer_fin(struct br_sock *s)
{
	int seg = s->dseg;
	struct pollfd p;

	if (seg < 0)
		return;
	pthread_mutex_lock(&dp.lock);
	/*
	 * The control thread may not have seen the socketpair's hang-up
	 * yet; the GPU side must learn of a reset before this FIN's EOF.
	 * The control thread still closes the socketpair when it does.
	 */
	if (cpu_side(seg, s->dside ^ 1) && dp.cpu[seg].fd >= 0) {
		p = (struct pollfd){ .fd = dp.cpu[seg].fd, .events = POLLRDHUP };
		if (poll(&p, 1, 0) == 1 &&
		    (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			cpu_ended(seg);
	}
	pthread_mutex_unlock(&dp.lock);
}

void br_direct_event(struct br_ev *e, uint32_t events)
{
	struct dcpu *c = (struct dcpu *)e;
	struct gs_dseg *d;
	uint64_t out;
	int queued = 0;

	if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		int seg = c->seg;

		pthread_mutex_lock(&dp.lock);
		pthread_mutex_lock(&c->lk);
		if (c->fd < 0) {
			pthread_mutex_unlock(&c->lk);
			pthread_mutex_unlock(&dp.lock);
			return;
		}
		/* Every copy of its descriptor is closed, in every process. */
		cpu_ended(seg);
		close(c->fd);
		c->fd = -1;
		pthread_mutex_unlock(&c->lk);
		seg_put(seg);
		pend_stale(seg);
		pthread_mutex_unlock(&dp.lock);
		return;
	}
	pthread_mutex_lock(&c->lk);
	if (c->fd < 0)
		goto out;
	d = seg_at(c->seg);
	/*
	 * Bytes in the socketpair beyond what the preload wrote there to
	 * make it unwritable were written around the preload (stdio on the
	 * descriptor, splice): they cannot reach the peer in order. Say so
	 * loudly, and reset the connection rather than lose them quietly.
	 */
	/*
	 * In this order: spill_out grows after bytes are read, spill_in
	 * before they are written, so queued <= in - out however the CPU
	 * side and a worker move meanwhile.
	 */
	out = __atomic_load_n(&d->spill_out[c->side], __ATOMIC_SEQ_CST);
	if (ioctl(c->fd, FIONREAD, &queued) == 0 && queued > 0 &&
	    (uint64_t)queued >
		    __atomic_load_n(&d->spill_in[c->side], __ATOMIC_SEQ_CST) -
			    out &&
	    !(__atomic_load_n(&d->reset, __ATOMIC_ACQUIRE) &
	      GS_DC_SIDE(c->side))) {
		br_warn("direct segment %d: its CPU side wrote %d bytes around the preload (stdio or splice on the descriptor?); resetting the connection",
			c->seg, queued);
		__atomic_or_fetch(&d->reset, GS_DC_SIDE(c->side),
				  __ATOMIC_RELEASE);
		__atomic_or_fetch(&d->closed, GS_DC_SIDE(c->side),
				  __ATOMIC_RELEASE);
		/* A reader asleep on it wakes to its ECONNRESET. */
		cpu_token(c->seg, c->side ^ 1);
	}
out:
	pthread_mutex_unlock(&c->lk);
}
