/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock: the host runtime of a GPU application. It creates the arena
 * (a memfd), makes it reachable from the device (mapped pinned memory on
 * cuda), hands it to gsockd over the control socket, watches that socket
 * so kernels learn at once when gsockd dies, and launches kernels with
 * their own command slots. This file is the control client, the arena
 * and the watcher thread; what the device needs is a backend's
 * (backend_cuda.c, backend_host.c: libgsock_int.h says what).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_peer.h"
#include "gsock_ctl.h"
#include "libgsock_int.h"

#define DEFAULT_SLOTS 256
#define DEFAULT_SOCKS 128
#define DEFAULT_RING (64u << 10)
#define GS_CTL_WAIT_MS 10000 /* to connect, for the welcome, for the verdict */

void gs_say(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

const char *gsock_backend(void)
{
	return gs_be_name();
}

static uint32_t pow2_at_least(uint64_t x)
{
	uint32_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

/* Make the device see world |= bits. Watcher thread only. */
static void gs_world_set(struct gsock_ctx *ctx, uint32_t bits)
{
	__atomic_fetch_or(&ctx->world, bits, __ATOMIC_SEQ_CST);
	gs_be_world_push(ctx);
}

/*
 * One message of gsockd's into buf (len bytes), without waiting: its
 * length, 0 at the end, or -1 with errno. The first descriptor that came
 * with it goes to *fd (close-on-exec), any others are closed.
 */
static ssize_t gs_recv_fd(int sock, void *buf, size_t len, int *fd)
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { buf, len };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	for (cm = CMSG_FIRSTHDR(&msg); n >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0;
			     i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			     i++) {
				int got;

				memcpy(&got, CMSG_DATA(cm) + i * sizeof(int),
				       sizeof(int));
				if (*fd < 0)
					*fd = got;
				else
					close(got);
			}
	return n;
}

/* Unmap peer i's pool, if one is mapped there. */
static void gs_peer_drop(struct gsock_ctx *ctx, uint32_t i)
{
	void *view = (void *)(uintptr_t)ctx->peers[i];

	__atomic_store_n(&ctx->peers[i], 0, __ATOMIC_SEQ_CST);
	if (view)
		gs_be_peer_unmap(view, ctx->peer_size[i], ctx->peer_be[i]);
}

/*
 * A gs_ctl_peer: map the pool it names where the index says, then tell
 * gsockd; or, with drop, let go of what that use of the index mapped.
 * gsockd reuses or drops an index only once no segment has a ring in
 * its pool, so no kernel still writes into what is unmapped here.
 */
static void gs_peer_map(struct gsock_ctx *ctx, const struct gs_ctl_peer *m,
			int fd)
{
	struct gs_ctl_peer_ack ack = { GS_CTL_PEER_MAGIC, m->peer, m->gen,
				       -EINVAL };
	char why[160] = "no receive pool here";
	void *view = NULL;

	if (m->peer >= GS_MAX_PEERS)
		return;
	if (m->drop) {
		if (ctx->peers && ctx->peer_gen[m->peer] == m->gen)
			gs_peer_drop(ctx, m->peer);
		return;
	}
	if (ctx->peers) {
		gs_peer_drop(ctx, m->peer);
		if (fd >= 0)
			view = gs_be_peer_map(ctx, fd, m->size,
					      &ctx->peer_be[m->peer], why,
					      sizeof(why));
		else
			snprintf(why, sizeof(why), "no descriptor came with it");
	}
	if (view) {
		ctx->peer_size[m->peer] = m->size;
		ctx->peer_gen[m->peer] = m->gen;
		__atomic_store_n(&ctx->peers[m->peer], (uint64_t)(uintptr_t)view,
				 __ATOMIC_SEQ_CST);
		ack.status = 0;
	} else if (ctx->peers) {
		fprintf(stderr,
			"libgsock: cannot map the receive pool of pid %d: %s; connections to it keep their rings in host memory\n",
			(int)m->pid, why);
	}
	if (send(ctx->ctl_fd, &ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT) <
	    0)
		fprintf(stderr,
			"libgsock: cannot answer gsockd about a receive pool: %s\n",
			strerror(errno));
}

/*
 * A message from gsockd after the reply: 0, or -1 when the control
 * socket ended. Messages of no known kind are ignored.
 */
static int gs_ctl_read(struct gsock_ctx *ctx)
{
	union {
		struct gs_ctl_peer m;
		char longer[sizeof(struct gs_ctl_peer) + 1]; /* told apart */
	} u;
	int fd = -1;
	ssize_t n = gs_recv_fd(ctx->ctl_fd, &u, sizeof(u), &fd);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return -1;
	if (n == (ssize_t)sizeof(u.m) && u.m.magic == GS_CTL_PEER_MAGIC)
		gs_peer_map(ctx, &u.m, fd);
	if (fd >= 0)
		close(fd);
	return 0;
}

/*
 * Watch gsockd's end of the control socket and the stop requests; tell
 * every kernel through the world word.
 */
static void *gs_watch(void *p)
{
	struct gsock_ctx *ctx = p;
	struct pollfd pfd[2] = { { ctx->ctl_fd, POLLIN, 0 },
				 { ctx->wake_fd[0], POLLIN, 0 } };
	char buf[64];

	gs_be_use(ctx);
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents) {
			ssize_t n = read(ctx->wake_fd[0], buf, sizeof(buf));

			if (n > 0 && memchr(buf, 's', (size_t)n))
				gs_world_set(ctx, GS_WORLD_STOP);
			if (n <= 0 || memchr(buf, 'q', (size_t)n))
				return NULL;
		}
		if (pfd[0].revents && gs_ctl_read(ctx) < 0)
			break;
	}
	gs_world_set(ctx, GS_WORLD_BRIDGE_GONE);
	return NULL;
}

/* Milliseconds left of ms since t0 (CLOCK_MONOTONIC), 0 when none. */
static int gs_ms_left(const struct timespec *t0, int ms)
{
	struct timespec t;
	long long used;

	clock_gettime(CLOCK_MONOTONIC, &t);
	used = (long long)(t.tv_sec - t0->tv_sec) * 1000 +
	       (t.tv_nsec - t0->tv_nsec) / 1000000;
	return used >= ms ? 0 : (int)(ms - used);
}

/*
 * Connect to the control socket within ms milliseconds in all. A full
 * listen queue (a stuck gsockd, or any listener at that path that never
 * accepts) would hold a blocking connect for ever: SO_SNDTIMEO bounds each
 * try (and, left set, the hello's sendmsg), and a signal's EINTR starts a
 * try with only what is left. ETIMEDOUT when the time is up.
 */
static int gs_ctl_connect(int fd, const struct sockaddr_un *sa, int ms)
{
	struct timespec t0;
	int left, r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct timeval tv;

		left = gs_ms_left(&t0, ms);
		if (!left) {
			errno = ETIMEDOUT;
			return -1;
		}
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	} while (r < 0 && errno == EINTR);
	if (r < 0 && errno == EAGAIN) /* SO_SNDTIMEO ran out */
		errno = ETIMEDOUT;
	return r;
}

/*
 * Wait at most ms milliseconds in all, signals or not, for gsockd's end of
 * the control socket to have something to read (or to close). A stuck or
 * stopped peer must not hold gsock_init forever; an application's timer
 * that interrupts poll() must not restart the wait either.
 */
static bool gs_ctl_wait(int fd, int ms)
{
	struct pollfd pfd = { fd, POLLIN, 0 };
	struct timespec t0;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((r = poll(&pfd, 1, gs_ms_left(&t0, ms))) < 0 && errno == EINTR)
		;
	return r > 0;
}

static int gs_connect_control(const struct gsock_opts *o, char *err, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = o->control ? o->control : getenv("GSOCK_CONTROL");
	char def[sizeof(sa.sun_path)], why[256];
	int fd;

	if (!path || !*path) {
		gs_ctl_default_path(def, sizeof(def));
		path = def;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		gs_say(err, len, "control socket path %s is too long", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		gs_say(err, len, "cannot create a control socket: %s",
		    strerror(errno));
		return -1;
	}
	if (gs_ctl_connect(fd, &sa, GS_CTL_WAIT_MS) < 0) {
		if (errno == ETIMEDOUT)
			gs_say(err, len,
			    "cannot reach gsockd at %s: its listen queue stayed full for 10 s (gsockd stuck or stopped?)",
			    path);
		else
			gs_say(err, len,
			    "cannot reach gsockd at %s: %s (is gsockd running? start it or set GSOCK_CONTROL)",
			    path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!gs_ctl_peer_ok(fd, path, why, sizeof(why))) {
		gs_say(err, len, "refusing to hand the arena over: %s", why);
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * gsockd speaks first: its welcome says how many doorbell queues the
 * arena needs (one per worker), or a reply says why it will not serve
 * us. Bounded, so an older gsockd that waits for our hello is named.
 */
static int gs_welcome(struct gsock_ctx *ctx, uint32_t *workers, char *err,
		      size_t len)
{
	union {
		struct gs_ctl_welcome w;
		struct gs_ctl_reply r;
	} m;
	ssize_t n;

	if (!gs_ctl_wait(ctx->ctl_fd, GS_CTL_WAIT_MS)) {
		gs_say(err, len,
		    "gsockd did not greet within 10 s (an older gsockd? this libgsock speaks protocol %u)",
		    GS_CTL_VERSION);
		return -1;
	}
	n = gs_recv_fd(ctx->ctl_fd, &m, sizeof(m), &ctx->pool_fd);
	if (n == (ssize_t)sizeof(m.r) && m.r.magic == GS_CTL_MAGIC &&
	    m.r.status) {
		m.r.msg[sizeof(m.r.msg) - 1] = 0;
		gs_say(err, len, "gsockd refused the application: %s", m.r.msg);
		return -1;
	}
	if (n != (ssize_t)sizeof(m.w) || m.w.magic != GS_CTL_WELCOME_MAGIC) {
		gs_say(err, len,
		    "gsockd sent no welcome (%zd bytes): closed, or not a gsockd of protocol %u",
		    n, GS_CTL_VERSION);
		return -1;
	}
	if (m.w.version != GS_CTL_VERSION) {
		gs_say(err, len,
		    "gsockd speaks protocol %u, this libgsock %u: use the gsockd of the same release",
		    m.w.version, GS_CTL_VERSION);
		return -1;
	}
	*workers = m.w.workers;
	if (ctx->pool_fd >= 0 && m.w.dsegs &&
	    gs_pow2(m.w.dring_size) && m.w.dring_size >= GS_MIN_RING &&
	    m.w.dring_size <= GS_MAX_RING &&
	    m.w.pool_size == GS_DPOOL_SIZE(m.w.dsegs, m.w.dring_size)) {
		ctx->dsegs = m.w.dsegs;
		ctx->dring_size = m.w.dring_size;
		ctx->pool_size = m.w.pool_size;
		ctx->rx_wanted = m.w.rx_pools == 1;
	}
	return 0;
}

/*
 * The receive pool (gsock_ctl.h), where gsockd asked for one: without
 * it the direct rings stay in the shared pool, which is said on stderr.
 */
static void gs_rx_make(struct gsock_ctx *ctx)
{
	uint64_t size = GS_RXPOOL_SIZE(ctx->dsegs, ctx->dring_size);
	char why[160];

	ctx->peers = gs_be_alloc(GS_MAX_PEERS * sizeof(*ctx->peers));
	if (!ctx->peers) {
		snprintf(why, sizeof(why), "out of memory");
	} else if (!gs_be_rx_make(ctx, size, why, sizeof(why))) {
		return;
	} else {
		gs_be_free(ctx->peers);
		ctx->peers = NULL;
	}
	fprintf(stderr,
		"libgsock: no receive pool in device memory (%llu MiB): %s; direct connections keep their rings in host memory\n",
		(unsigned long long)(size >> 20), why);
}

/*
 * Map the direct pool where gsockd offered one, and make it reachable
 * from the device. Without it every connection takes the bridge: a pool
 * that cannot be had is said on stderr, not fatal.
 */
static void gs_pool_map(struct gsock_ctx *ctx)
{
	void *p;

	if (!ctx->pool_size)
		return;
	p = mmap(NULL, ctx->pool_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 ctx->pool_fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr,
			"libgsock: cannot map gsockd's direct pool (%llu MiB): %s; connections take the bridge\n",
			(unsigned long long)(ctx->pool_size >> 20),
			strerror(errno));
		return;
	}
	ctx->pool = p;
	gs_be_map_pool(ctx);
	if (ctx->dev_pool && ctx->rx_wanted)
		gs_rx_make(ctx);
}

/* Send the hello with the memfd; read gsockd's verdict. */
static int gs_register(struct gsock_ctx *ctx, char *err, size_t len)
{
	struct gs_ctl_hello hello = { GS_CTL_MAGIC, GS_CTL_VERSION,
				      ctx->layout.size, ctx->dev_pool != NULL,
				      0, ctx->rx_fd >= 0 ? ctx->rx_size : 0 };
	struct gs_ctl_reply reply;
	int fds[2] = { ctx->memfd, ctx->rx_fd };
	unsigned nfds = ctx->rx_fd >= 0 ? 2 : 1;
	char cbuf[CMSG_SPACE(2 * sizeof(int))] = { 0 };
	struct iovec iov = { &hello, sizeof(hello) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	ssize_t n;

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	/* the application's signals must not read as gsockd's refusal */
	while ((n = sendmsg(ctx->ctl_fd, &msg, MSG_NOSIGNAL)) < 0 &&
	       errno == EINTR)
		;
	if (n < 0) {
		int e = errno;

		/* gsockd may have said why before it closed */
		n = recv(ctx->ctl_fd, &reply, sizeof(reply), MSG_DONTWAIT);
		if (n == (ssize_t)sizeof(reply) &&
		    reply.magic == GS_CTL_MAGIC && reply.status) {
			reply.msg[sizeof(reply.msg) - 1] = 0;
			gs_say(err, len, "gsockd refused the arena: %s",
			    reply.msg);
		} else {
			gs_say(err, len, "cannot send the arena to gsockd: %s",
			    strerror(e));
		}
		return -1;
	}
	if (!gs_ctl_wait(ctx->ctl_fd, GS_CTL_WAIT_MS)) {
		gs_say(err, len,
		    "gsockd did not answer the arena within 10 s (stopped, or stuck?)");
		return -1;
	}
	n = recv(ctx->ctl_fd, &reply, sizeof(reply), MSG_DONTWAIT);
	if (n != (ssize_t)sizeof(reply) || reply.magic != GS_CTL_MAGIC) {
		gs_say(err, len,
		    "gsockd closed the control socket without a reply");
		return -1;
	}
	if (reply.status) {
		reply.msg[sizeof(reply.msg) - 1] = 0;
		gs_say(err, len, "gsockd refused the arena: %s", reply.msg);
		return -1;
	}
	return 0;
}

/* Bytes of device-memory state: gs_local, then one gs_lsock per socket. */
size_t gs_local_size(const struct gsock_ctx *ctx)
{
	return sizeof(struct gs_local) +
	       ctx->hdr->nsocks * sizeof(struct gs_lsock);
}

/*
 * workers: gsockd's, one doorbell queue each. A queue holds a cell per
 * slot and socket twice over, divided among the queues (sockets spread
 * over workers), at least 1024.
 */
static int gs_arena_create(struct gsock_ctx *ctx, const struct gsock_opts *o,
			   uint32_t workers, char *err, size_t len)
{
	uint32_t nslots = o->nslots ? o->nslots : DEFAULT_SLOTS;
	uint32_t nsocks = o->nsocks ? o->nsocks : DEFAULT_SOCKS;
	uint32_t ring = o->ring_size ? o->ring_size : DEFAULT_RING;
	uint32_t nq = workers < 1 ? 1 :
		      workers > GS_MAX_QUEUES ? GS_MAX_QUEUES :
						workers;
	uint64_t cells = 2 * (uint64_t)(nslots + nsocks) / nq;
	uint32_t db = pow2_at_least(cells < 1024 ? 1024 :
				    cells > GS_MAX_DB ? GS_MAX_DB :
							cells);
	struct gs_arena_hdr *h;

	if (gs_arena_layout(nslots, nsocks, ring, db, nq, &ctx->layout)) {
		gs_say(err, len,
		    "arena geometry out of range: slots %u (1..%u), sockets %u (1..%u), ring %u (a power of two, %u..%u)",
		    nslots, GS_MAX_SLOTS, nsocks, GS_MAX_SOCKS, ring,
		    GS_MIN_RING, GS_MAX_RING);
		return -1;
	}
	ctx->memfd =
		memfd_create("gsock-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	/* Sealed, so gsockd knows the pages it maps cannot vanish under it. */
	if (ctx->memfd < 0 || ftruncate(ctx->memfd, ctx->layout.size) < 0 ||
	    fcntl(ctx->memfd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		gs_say(err, len, "cannot create a %llu-byte arena: %s",
		    (unsigned long long)ctx->layout.size, strerror(errno));
		return -1;
	}
	ctx->base = mmap(NULL, ctx->layout.size, PROT_READ | PROT_WRITE,
			 MAP_SHARED, ctx->memfd, 0);
	if (ctx->base == MAP_FAILED) {
		ctx->base = NULL;
		gs_say(err, len, "cannot map the arena: %s", strerror(errno));
		return -1;
	}
	h = ctx->hdr = (struct gs_arena_hdr *)ctx->base;
	h->magic = GS_ARENA_MAGIC;
	h->version = GS_ARENA_VERSION;
	h->hdr_size = sizeof(*h);
	h->arena_size = ctx->layout.size;
	h->nslots = nslots;
	h->nsocks = nsocks;
	h->ring_size = ring;
	h->db_size = db;
	h->nqueues = nq;
	h->slots_off = ctx->layout.slots_off;
	h->socks_off = ctx->layout.socks_off;
	h->dbq_off = ctx->layout.dbq_off;
	gs_be_label(ctx->device, h->device, sizeof(h->device));
	h->db_off = ctx->layout.db_off;
	h->rings_off = ctx->layout.rings_off;
	return 0;
}

/* $GSOCK_POLL_NS: nanoseconds, 0 to 1000000; anything else is ignored. */
static uint32_t env_poll_ns(void)
{
	const char *s = getenv("GSOCK_POLL_NS");
	char *end;
	unsigned long v;

	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 1000000) {
		fprintf(stderr,
			"libgsock: GSOCK_POLL_NS=%s is not 0 to 1000000 nanoseconds; ignored\n",
			s);
		return 0;
	}
	return (uint32_t)v;
}

/* $GSOCK_DIRECT_LANE: on (unset too) or off; anything else is said, and on. */
static uint32_t env_lane(void)
{
	const char *s = getenv("GSOCK_DIRECT_LANE");

	if (!s || !*s || !strcmp(s, "on"))
		return 1;
	if (!strcmp(s, "off"))
		return 0;
	fprintf(stderr,
		"libgsock: GSOCK_DIRECT_LANE=%s is not on or off; on\n", s);
	return 1;
}

struct gsock_ctx *gsock_init(const struct gsock_opts *opts, char *err,
			     size_t errlen)
{
	struct gsock_opts none = { 0 };
	struct gsock_ctx *ctx = calloc(1, sizeof(*ctx));
	uint32_t workers = 1;

	if (!ctx) {
		gs_say(err, errlen, "out of memory");
		return NULL;
	}
	ctx->memfd = ctx->ctl_fd = ctx->pool_fd = ctx->rx_fd = -1;
	ctx->wake_fd[0] = ctx->wake_fd[1] = -1;
	pthread_mutex_init(&ctx->lock, NULL);
	if (pipe2(ctx->wake_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
		gs_say(err, errlen, "cannot create a pipe: %s", strerror(errno));
		goto err_free;
	}
	ctx->device = opts ? opts->device : 0;
	if (gs_be_open(ctx->device, err, errlen))
		goto err_free;
	ctx->ctl_fd = gs_connect_control(opts ? opts : &none, err, errlen);
	if (ctx->ctl_fd < 0)
		goto err_free;
	if (gs_welcome(ctx, &workers, err, errlen) ||
	    gs_arena_create(ctx, opts ? opts : &none, workers, err, errlen) ||
	    gs_be_map(ctx, err, errlen))
		goto err_free;
	gs_pool_map(ctx);
	if (gs_register(ctx, err, errlen))
		goto err_free;
	if (ctx->rx_fd >= 0) { /* gsockd holds it now */
		close(ctx->rx_fd);
		ctx->rx_fd = -1;
	}
	if (pthread_create(&ctx->watcher, NULL, gs_watch, ctx)) {
		gs_say(err, errlen, "cannot start the watcher thread");
		goto err_free;
	}
	ctx->watching = 1;
	ctx->poll_ns = opts && opts->poll_ns ? opts->poll_ns : env_poll_ns();
	ctx->lane = env_lane();
	return ctx;
err_free:
	gsock_fini(ctx);
	return NULL;
}

int gsock_device(const struct gsock_ctx *ctx)
{
	return ctx->device;
}

int gsock_max_threads(struct gsock_ctx *ctx, const void *kernel)
{
	gs_be_use(ctx);
	return gs_be_max_threads(kernel);
}

static struct gsock_dev gs_dev_view(struct gsock_ctx *ctx, uint32_t base)
{
	struct gsock_dev d;
	const struct gs_arena_hdr *h = ctx->hdr;

	d.arena = (struct gs_arena_hdr *)ctx->dev_base;
	d.slots = (struct gs_cmd *)(ctx->dev_base + h->slots_off);
	d.socks = (struct gs_sock *)(ctx->dev_base + h->socks_off);
	d.dbq = (struct gs_dbq *)(ctx->dev_base + h->dbq_off);
	d.db = (uint64_t *)(ctx->dev_base + h->db_off);
	d.rings = ctx->dev_base + h->rings_off;
	d.local = ctx->local;
	d.lsock = (struct gs_lsock *)(ctx->local + 1);
	d.slot_base = base;
	d.nsocks = h->nsocks;
	d.ring_size = h->ring_size;
	d.db_size = h->db_size;
	d.nqueues = h->nqueues;
	d.poll_ns = ctx->poll_ns;
	d.pool = ctx->dev_pool;
	d.dsegs = ctx->dev_pool ? ctx->dsegs : 0;
	d.dring_size = ctx->dring_size;
	d.rxpool = ctx->peers ? ctx->rx_dev : NULL;
	d.peers = ctx->peers;
	d.lane = ctx->lane;
	return d;
}

int gsock_launch(struct gsock_ctx *ctx, const void *kernel, unsigned blocks,
		 unsigned threads, void *arg)
{
	struct gs_launch *l;
	int r = -ENOSPC;

	if (!blocks || !threads)
		return -EINVAL;
	gs_be_use(ctx);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->lock);
	if ((uint64_t)ctx->next_slot + blocks > ctx->hdr->nslots)
		goto out_unlock;
	r = gs_be_start(l, kernel, gs_dev_view(ctx, ctx->next_slot), blocks,
			threads, arg);
	/*
	 * Blocks that started before the launch failed run on: they stay a
	 * launch, with their slots, for gsock_stop() and gsock_wait() to
	 * end (waiting for them here could wait for ever).
	 */
	if (r && !gs_be_started_some(l))
		goto out_unlock;
	ctx->next_slot += blocks;
	l->next = ctx->launches;
	ctx->launches = l;
	l = NULL;
out_unlock:
	pthread_mutex_unlock(&ctx->lock);
	free(l);
	return r;
}

int gsock_launch_stream(struct gsock_ctx *ctx, void *stream, unsigned slot,
			const void *kernel, unsigned blocks, unsigned threads,
			void *arg)
{
	if (!blocks || !threads)
		return -EINVAL;
	if ((uint64_t)slot + blocks > ctx->hdr->nslots)
		return -ENOSPC;
	gs_be_use(ctx);
	return gs_be_start_on(stream, kernel, gs_dev_view(ctx, slot), blocks,
			      threads, arg);
}

int gsock_wait(struct gsock_ctx *ctx)
{
	struct gs_launch *l, *next;
	int r = 0;

	gs_be_use(ctx);
	pthread_mutex_lock(&ctx->lock);
	l = ctx->launches;
	ctx->launches = NULL;
	pthread_mutex_unlock(&ctx->lock);
	for (; l; l = next) {
		next = l->next;
		r = gs_be_finish(l) ?: r;
		free(l);
	}
	pthread_mutex_lock(&ctx->lock);
	if (!ctx->launches)
		ctx->next_slot = 0;
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

void gsock_stop(struct gsock_ctx *ctx)
{
	int saved = errno;

	if (write(ctx->wake_fd[1], "s", 1) < 0) {
		/* A full pipe already holds a request the watcher will read. */
	}
	errno = saved;
}

int gsock_bridge_gone(struct gsock_ctx *ctx)
{
	return (__atomic_load_n(&ctx->world, __ATOMIC_ACQUIRE) &
		GS_WORLD_BRIDGE_GONE) != 0;
}

void *gsock_alloc(struct gsock_ctx *ctx, size_t size)
{
	gs_be_use(ctx);
	return gs_be_alloc(size);
}

void gsock_free(struct gsock_ctx *ctx, void *p)
{
	gs_be_use(ctx);
	gs_be_free(p);
}

void *gsock_dev_alloc(struct gsock_ctx *ctx, size_t size)
{
	gs_be_use(ctx);
	return gs_be_dev_alloc(size);
}

void gsock_dev_free(struct gsock_ctx *ctx, void *p)
{
	gs_be_use(ctx);
	gs_be_dev_free(p);
}

int gsock_memcpy(struct gsock_ctx *ctx, void *dst, const void *src, size_t n)
{
	gs_be_use(ctx);
	return gs_be_memcpy(dst, src, n);
}

void gsock_fini(struct gsock_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->dev_base) /* not when the device itself was refused */
		gs_be_use(ctx);
	if (ctx->watching) {
		if (write(ctx->wake_fd[1], "q", 1) < 0)
			shutdown(ctx->ctl_fd, SHUT_RDWR);
		pthread_join(ctx->watcher, NULL);
	}
	for (int i = 0; ctx->peers && i < GS_MAX_PEERS; i++)
		gs_peer_drop(ctx, (uint32_t)i);
	gs_be_rx_free(ctx);
	if (ctx->rx_fd >= 0)
		close(ctx->rx_fd);
	gs_be_free(ctx->peers);
	gs_be_unmap(ctx);
	if (ctx->base)
		munmap(ctx->base, ctx->layout.size);
	if (ctx->memfd >= 0)
		close(ctx->memfd);
	if (ctx->pool)
		munmap(ctx->pool, ctx->pool_size);
	if (ctx->pool_fd >= 0)
		close(ctx->pool_fd);
	if (ctx->ctl_fd >= 0)
		close(ctx->ctl_fd);
	for (int i = 0; i < 2; i++)
		if (ctx->wake_fd[i] >= 0)
			close(ctx->wake_fd[i]);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}
