/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock: the host runtime of a GPU application. It creates the arena
 * (a memfd), makes it reachable from the device (mapped pinned memory on
 * cuda), hands it to gsockd over the control socket, watches that socket
 * so kernels learn at once when gsockd dies, and launches kernels with
 * their own command slots. Built twice: GSOCK_USE_CUDA for the cuda
 * backend, without it for the host backend (one thread per block).
 */
#include <config.h>

#include <ctype.h>
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

#ifdef GSOCK_USE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "gsock.cuh"
#include "gsock.h"
#include "ctl_peer.h"
#include "gsock_ctl.h"

#define DEFAULT_SLOTS 256
#define DEFAULT_SOCKS 128
#define DEFAULT_RING (64u << 10)
#define GS_CTL_WAIT_MS 10000 /* to connect, for the welcome, for the verdict */

/* One kernel launch still running. */
struct gs_launch {
	struct gs_launch *next;
#ifdef GSOCK_USE_CUDA
	cudaStream_t stream;
#else
	unsigned blocks;
	pthread_t *threads;
	struct gs_host_block *args;
#endif
};

/*
 * lock protects next_slot and launches. world is written by the watcher
 * thread only (gsock_stop() asks it through wake_fd, which is safe in a
 * signal handler) and copied by it to local->world on the device.
 */
struct gsock_ctx {
	int ctl_fd;
	int memfd;
	int wake_fd[2]; /* pipe: 's' stop the kernels, 'q' end the watcher */
	uint8_t *base; /* host view of the arena */
	uint8_t *dev_base; /* device view (equal on the host backend) */
	struct gs_arena_hdr *hdr;
	struct gs_layout layout;
	struct gs_local *local; /* device memory */
	struct gs_lsock *lsock; /* device memory, nsocks */
	/* the direct pool gsockd shares with its applications, or none */
	int pool_fd;
	uint8_t *pool; /* host view */
	uint8_t *dev_pool; /* device view; NULL: not reached, not used */
	uint64_t pool_size;
	uint32_t dsegs, dring_size;
	uint32_t world; /* GS_WORLD_*, the host's copy */
	pthread_t watcher;
	int watching;
	pthread_mutex_t lock;
	uint32_t next_slot;
	uint32_t poll_ns; /* gsock_opts.poll_ns or $GSOCK_POLL_NS */
	struct gs_launch *launches;
	int device; /* gsock_opts.device */
#ifdef GSOCK_USE_CUDA
	cudaStream_t
		world_stream; /* copies world to the device while kernels run */
#endif
};

#ifndef GSOCK_USE_CUDA
__thread unsigned gsock_host_block_id;

typedef void (*gs_host_kernel)(struct gsock_dev, void *);

/* What a host thread standing in for one block runs. */
struct gs_host_block {
	gs_host_kernel fn;
	struct gsock_dev dev;
	void *arg;
	unsigned id;
};

static void *gs_host_block_main(void *p)
{
	struct gs_host_block *b = p;

	gsock_host_block_id = b->id;
	b->fn(b->dev, b->arg);
	return NULL;
}
#endif

static void say(char *err, size_t len, const char *fmt, ...)
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
#ifdef GSOCK_USE_CUDA
	return "cuda";
#else
	return "host";
#endif
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
#ifdef GSOCK_USE_CUDA
	cudaMemcpyAsync(&ctx->local->world, &ctx->world, sizeof(ctx->world),
			cudaMemcpyHostToDevice, ctx->world_stream);
	cudaStreamSynchronize(ctx->world_stream);
#else
	__atomic_fetch_or(&ctx->local->world, bits, __ATOMIC_SEQ_CST);
#endif
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

#ifdef GSOCK_USE_CUDA
	cudaSetDevice(ctx->device);
#endif
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
		if (pfd[0].revents) {
			ssize_t n = recv(ctx->ctl_fd, buf, sizeof(buf),
					 MSG_DONTWAIT);

			if (n == 0 ||
			    (n < 0 && errno != EAGAIN && errno != EINTR))
				break;
		}
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
		say(err, len, "control socket path %s is too long", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		say(err, len, "cannot create a control socket: %s",
		    strerror(errno));
		return -1;
	}
	if (gs_ctl_connect(fd, &sa, GS_CTL_WAIT_MS) < 0) {
		if (errno == ETIMEDOUT)
			say(err, len,
			    "cannot reach gsockd at %s: its listen queue stayed full for 10 s (gsockd stuck or stopped?)",
			    path);
		else
			say(err, len,
			    "cannot reach gsockd at %s: %s (is gsockd running? start it or set GSOCK_CONTROL)",
			    path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!gs_ctl_peer_ok(fd, path, why, sizeof(why))) {
		say(err, len, "refusing to hand the arena over: %s", why);
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
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	ssize_t n;

	if (!gs_ctl_wait(ctx->ctl_fd, GS_CTL_WAIT_MS)) {
		say(err, len,
		    "gsockd did not greet within 10 s (an older gsockd? this libgsock speaks protocol %u)",
		    GS_CTL_VERSION);
		return -1;
	}
	n = recvmsg(ctx->ctl_fd, &msg, MSG_CMSG_CLOEXEC);
	for (cm = CMSG_FIRSTHDR(&msg); n >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET &&
		    cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)) && ctx->pool_fd < 0)
			memcpy(&ctx->pool_fd, CMSG_DATA(cm), sizeof(int));
	if (n == (ssize_t)sizeof(m.r) && m.r.magic == GS_CTL_MAGIC &&
	    m.r.status) {
		m.r.msg[sizeof(m.r.msg) - 1] = 0;
		say(err, len, "gsockd refused the application: %s", m.r.msg);
		return -1;
	}
	if (n != (ssize_t)sizeof(m.w) || m.w.magic != GS_CTL_WELCOME_MAGIC) {
		say(err, len,
		    "gsockd sent no welcome (%zd bytes): closed, or not a gsockd of protocol %u",
		    n, GS_CTL_VERSION);
		return -1;
	}
	if (m.w.version != GS_CTL_VERSION) {
		say(err, len,
		    "gsockd speaks protocol %u, this libgsock %u: use the gsockd of the same release",
		    m.w.version, GS_CTL_VERSION);
		return -1;
	}
	*workers = m.w.workers;
	if (ctx->pool_fd >= 0 && m.w.dsegs &&
	    gs_pow2(m.w.dring_size) && m.w.dring_size >= GS_MIN_RING &&
	    m.w.dring_size <= GS_MAX_RING &&
	    m.w.pool_size == m.w.dsegs * GS_DSEG_STRIDE(m.w.dring_size)) {
		ctx->dsegs = m.w.dsegs;
		ctx->dring_size = m.w.dring_size;
		ctx->pool_size = m.w.pool_size;
	}
	return 0;
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
#ifdef GSOCK_USE_CUDA
	{
		cudaError_t e = cudaHostRegister(p, ctx->pool_size,
						 cudaHostRegisterMapped);
		void *dev = NULL;

		if (e == cudaSuccess)
			e = cudaHostGetDevicePointer(&dev, p, 0);
		if (e != cudaSuccess) {
			fprintf(stderr,
				"libgsock: cannot map gsockd's direct pool (%llu MiB) for the GPU: %s; connections take the bridge (direct_conns in gsock.conf)\n",
				(unsigned long long)(ctx->pool_size >> 20),
				cudaGetErrorString(e));
			(void)cudaGetLastError();
			return;
		}
		ctx->dev_pool = dev;
	}
#else
	ctx->dev_pool = ctx->pool;
#endif
}

/* Send the hello with the memfd; read gsockd's verdict. */
static int gs_register(struct gsock_ctx *ctx, char *err, size_t len)
{
	struct gs_ctl_hello hello = { GS_CTL_MAGIC, GS_CTL_VERSION,
				      ctx->layout.size, ctx->dev_pool != NULL,
				      0 };
	struct gs_ctl_reply reply;
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &hello, sizeof(hello) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	ssize_t n;

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &ctx->memfd, sizeof(int));
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
			say(err, len, "gsockd refused the arena: %s",
			    reply.msg);
		} else {
			say(err, len, "cannot send the arena to gsockd: %s",
			    strerror(e));
		}
		return -1;
	}
	if (!gs_ctl_wait(ctx->ctl_fd, GS_CTL_WAIT_MS)) {
		say(err, len,
		    "gsockd did not answer the arena within 10 s (stopped, or stuck?)");
		return -1;
	}
	n = recv(ctx->ctl_fd, &reply, sizeof(reply), MSG_DONTWAIT);
	if (n != (ssize_t)sizeof(reply) || reply.magic != GS_CTL_MAGIC) {
		say(err, len,
		    "gsockd closed the control socket without a reply");
		return -1;
	}
	if (reply.status) {
		reply.msg[sizeof(reply.msg) - 1] = 0;
		say(err, len, "gsockd refused the arena: %s", reply.msg);
		return -1;
	}
	return 0;
}

/* Bytes of device-memory state: gs_local, then one gs_lsock per socket. */
static size_t gs_local_size(const struct gsock_ctx *ctx)
{
	return sizeof(struct gs_local) +
	       ctx->hdr->nsocks * sizeof(struct gs_lsock);
}

/*
 * Make the device's context before gsockd is asked for anything: it can
 * take seconds, and gsockd gives a connection hello_timeout_ms to hand
 * over its arena.
 */
static int gs_device_open(int device, char *err, size_t len)
{
#ifdef GSOCK_USE_CUDA
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess) {
		say(err, len, "cannot set up the GPU: %s",
		    cudaGetErrorString(e));
		return -1;
	}
	if (device < 0 || device >= count) {
		say(err, len, "there is no GPU %d: this host has %d (0 to %d)",
		    device, count, count - 1);
		return -1;
	}
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync |
				       cudaDeviceMapHost);
	if (e != cudaSuccess && e != cudaErrorSetOnActiveProcess) {
		say(err, len, "cannot set up the GPU: %s",
		    cudaGetErrorString(e));
		return -1;
	}
	(void)cudaGetLastError();
	e = cudaFree(NULL); /* the context, now */
	if (e != cudaSuccess) {
		say(err, len, "cannot set up the GPU: %s",
		    cudaGetErrorString(e));
		return -1;
	}
#else
	if (device < 0) {
		say(err, len, "device %d: a device is 0 or more", device);
		return -1;
	}
#endif
	return 0;
}

/* Map the arena into the device's address space; make the local state. */
static int gs_device_map(struct gsock_ctx *ctx, char *err, size_t len)
{
#ifdef GSOCK_USE_CUDA
	cudaError_t e;
	void *dev = NULL;

	e = cudaHostRegister(ctx->base, ctx->layout.size,
			     cudaHostRegisterMapped);
	if (e != cudaSuccess)
		goto err_cuda;
	e = cudaHostGetDevicePointer(&dev, ctx->base, 0);
	if (e != cudaSuccess)
		goto err_cuda;
	ctx->dev_base = dev;
	e = cudaStreamCreateWithFlags(&ctx->world_stream,
				      cudaStreamNonBlocking);
	if (e != cudaSuccess)
		goto err_cuda;
	e = cudaMalloc((void **)&ctx->local, gs_local_size(ctx));
	if (e != cudaSuccess)
		goto err_cuda;
	e = cudaMemset(ctx->local, 0, gs_local_size(ctx));
	if (e != cudaSuccess)
		goto err_cuda;
	return 0;
err_cuda:
	say(err, len, "cannot map the arena for the GPU: %s",
	    cudaGetErrorString(e));
	return -1;
#else
	ctx->dev_base = ctx->base;
	ctx->local = calloc(1, gs_local_size(ctx));
	if (!ctx->local) {
		say(err, len, "out of memory");
		return -1;
	}
	return 0;
#endif
}

/* What gsock-stat shows for the device: backend, ordinal, PCI address. */
static void gs_device_label(int device, char *buf, size_t len)
{
#ifdef GSOCK_USE_CUDA
	char pci[20] = "";

	if (cudaDeviceGetPCIBusId(pci, sizeof(pci), device) != cudaSuccess)
		pci[0] = 0;
	for (char *c = pci; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	snprintf(buf, len, "cuda:%d%s%s", device, *pci ? " " : "", pci);
#else
	snprintf(buf, len, "host:%d", device);
#endif
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
		say(err, len,
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
		say(err, len, "cannot create a %llu-byte arena: %s",
		    (unsigned long long)ctx->layout.size, strerror(errno));
		return -1;
	}
	ctx->base = mmap(NULL, ctx->layout.size, PROT_READ | PROT_WRITE,
			 MAP_SHARED, ctx->memfd, 0);
	if (ctx->base == MAP_FAILED) {
		ctx->base = NULL;
		say(err, len, "cannot map the arena: %s", strerror(errno));
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
	gs_device_label(ctx->device, h->device, sizeof(h->device));
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

struct gsock_ctx *gsock_init(const struct gsock_opts *opts, char *err,
			     size_t errlen)
{
	struct gsock_opts none = { 0 };
	struct gsock_ctx *ctx = calloc(1, sizeof(*ctx));
	uint32_t workers = 1;

	if (!ctx) {
		say(err, errlen, "out of memory");
		return NULL;
	}
	ctx->memfd = ctx->ctl_fd = ctx->pool_fd = -1;
	ctx->wake_fd[0] = ctx->wake_fd[1] = -1;
	pthread_mutex_init(&ctx->lock, NULL);
	if (pipe2(ctx->wake_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
		say(err, errlen, "cannot create a pipe: %s", strerror(errno));
		goto err_free;
	}
	ctx->device = opts ? opts->device : 0;
	if (gs_device_open(ctx->device, err, errlen))
		goto err_free;
	ctx->ctl_fd = gs_connect_control(opts ? opts : &none, err, errlen);
	if (ctx->ctl_fd < 0)
		goto err_free;
	if (gs_welcome(ctx, &workers, err, errlen) ||
	    gs_arena_create(ctx, opts ? opts : &none, workers, err, errlen) ||
	    gs_device_map(ctx, err, errlen))
		goto err_free;
	gs_pool_map(ctx);
	if (gs_register(ctx, err, errlen))
		goto err_free;
	if (pthread_create(&ctx->watcher, NULL, gs_watch, ctx)) {
		say(err, errlen, "cannot start the watcher thread");
		goto err_free;
	}
	ctx->watching = 1;
	ctx->poll_ns = opts && opts->poll_ns ? opts->poll_ns : env_poll_ns();
	return ctx;
err_free:
	gsock_fini(ctx);
	return NULL;
}

/* Make ctx's GPU current for this host thread (cuda calls follow). */
static void gs_use_device(const struct gsock_ctx *ctx)
{
#ifdef GSOCK_USE_CUDA
	cudaSetDevice(ctx->device);
#else
	(void)ctx;
#endif
}

int gsock_device(const struct gsock_ctx *ctx)
{
	return ctx->device;
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
	return d;
}

#ifdef GSOCK_USE_CUDA
static int gs_start(struct gs_launch *l, const void *kernel,
		    struct gsock_dev dev, unsigned blocks, unsigned threads,
		    void *arg)
{
	dim3 grid = { blocks, 1, 1 }, block = { threads, 1, 1 };
	void *args[] = { &dev, &arg };
	int per_sm = 0, sms = 0, device = 0;
	cudaError_t e;

	/*
	 * A g-call block waits on the network and on other blocks: one that
	 * is not resident never runs while the resident ones spin, and what
	 * it would serve waits for ever. Refuse what cannot all be resident
	 * (counting this kernel alone on an idle GPU).
	 */
	if (cudaGetDevice(&device) == cudaSuccess &&
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
				   device) == cudaSuccess &&
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(
		    &per_sm, kernel, (int)threads, 0) == cudaSuccess &&
	    (uint64_t)blocks > (uint64_t)per_sm * (unsigned)sms) {
		fprintf(stderr,
			"gsock: %u blocks of %u threads cannot all run at once: this kernel fits %d on each of the GPU's %d multiprocessors (%d in all), and g-call blocks must all be resident\n",
			blocks, threads, per_sm, sms, per_sm * sms);
		return -E2BIG;
	}
	e = cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		return -ENOMEM;
	e = cudaLaunchKernel(kernel, grid, block, args, 0, l->stream);
	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: kernel launch failed: %s\n",
			cudaGetErrorString(e));
		cudaStreamDestroy(l->stream);
		return -EINVAL;
	}
	return 0;
}

/* After gs_start failed: whether blocks run that gs_finish must wait for. */
static bool gs_started_some(struct gs_launch *l)
{
	(void)l; /* a launch starts all its blocks or none; no stream is left */
	return false;
}

static int gs_finish(struct gs_launch *l)
{
	cudaError_t e = cudaStreamSynchronize(l->stream);

	cudaStreamDestroy(l->stream);
	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: kernel failed: %s\n",
			cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}
#else
static int gs_start(struct gs_launch *l, const void *kernel,
		    struct gsock_dev dev, unsigned blocks, unsigned threads,
		    void *arg)
{
	pthread_attr_t attr;
	unsigned i;
	int r = 0;

	(void)threads; /* the host backend runs blocks of one thread */
	l->threads = calloc(blocks, sizeof(*l->threads));
	l->args = calloc(blocks, sizeof(*l->args));
	if (!l->threads || !l->args)
		return -ENOMEM;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (i = 0; i < blocks; i++) {
		l->args[i] = (struct gs_host_block){ (gs_host_kernel)kernel,
						     dev, arg, i };
		r = -pthread_create(&l->threads[i], &attr, gs_host_block_main,
				    &l->args[i]);
		if (r)
			break;
	}
	pthread_attr_destroy(&attr);
	l->blocks = i;
	if (r)
		fprintf(stderr,
			"gsock: block %u of %u could not start: %s; the %u started run until gsock_stop()\n",
			i, blocks, strerror(-r), i);
	return r ? -EAGAIN : 0;
}

/*
 * After gs_start failed: whether blocks run that gs_finish must wait for
 * (threads that started before one could not); else let go of the rest.
 */
static bool gs_started_some(struct gs_launch *l)
{
	if (l->blocks)
		return true;
	free(l->threads);
	free(l->args);
	return false;
}

static int gs_finish(struct gs_launch *l)
{
	for (unsigned i = 0; i < l->blocks; i++)
		pthread_join(l->threads[i], NULL);
	free(l->threads);
	free(l->args);
	return 0;
}
#endif

int gsock_launch(struct gsock_ctx *ctx, const void *kernel, unsigned blocks,
		 unsigned threads, void *arg)
{
	struct gs_launch *l;
	int r = -ENOSPC;

	if (!blocks || !threads)
		return -EINVAL;
	gs_use_device(ctx);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->lock);
	if ((uint64_t)ctx->next_slot + blocks > ctx->hdr->nslots)
		goto out_unlock;
	r = gs_start(l, kernel, gs_dev_view(ctx, ctx->next_slot), blocks,
		     threads, arg);
	/*
	 * Blocks that started before the launch failed run on: they stay a
	 * launch, with their slots, for gsock_stop() and gsock_wait() to
	 * end (waiting for them here could wait for ever).
	 */
	if (r && !gs_started_some(l))
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

int gsock_wait(struct gsock_ctx *ctx)
{
	struct gs_launch *l, *next;
	int r = 0;

	gs_use_device(ctx);
	pthread_mutex_lock(&ctx->lock);
	l = ctx->launches;
	ctx->launches = NULL;
	pthread_mutex_unlock(&ctx->lock);
	for (; l; l = next) {
		next = l->next;
		r = gs_finish(l) ?: r;
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
	gs_use_device(ctx);
#ifdef GSOCK_USE_CUDA
	void *p = NULL;

	/* portable: every GPU's kernels of this process reach it */
	if (cudaHostAlloc(&p, size,
			  cudaHostAllocMapped | cudaHostAllocPortable) !=
	    cudaSuccess)
		return NULL;
	memset(p, 0, size);
	return p;
#else
	return calloc(1, size);
#endif
}

void gsock_free(struct gsock_ctx *ctx, void *p)
{
	gs_use_device(ctx);
#ifdef GSOCK_USE_CUDA
	if (p)
		cudaFreeHost(p);
#else
	free(p);
#endif
}

void *gsock_dev_alloc(struct gsock_ctx *ctx, size_t size)
{
	gs_use_device(ctx);
#ifdef GSOCK_USE_CUDA
	void *p = NULL;

	if (cudaMalloc(&p, size) != cudaSuccess)
		return NULL;
	/* synchronous: kernels run on a stream that does not wait for stream 0 */
	if (cudaMemset(p, 0, size) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		cudaFree(p);
		return NULL;
	}
	return p;
#else
	return calloc(1, size);
#endif
}

void gsock_dev_free(struct gsock_ctx *ctx, void *p)
{
	gs_use_device(ctx);
#ifdef GSOCK_USE_CUDA
	if (p)
		cudaFree(p);
#else
	free(p);
#endif
}

int gsock_memcpy(struct gsock_ctx *ctx, void *dst, const void *src, size_t n)
{
	gs_use_device(ctx);
#ifdef GSOCK_USE_CUDA
	cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);

	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: cannot copy %zu bytes: %s\n", n,
			cudaGetErrorString(e));
		return -EIO;
	}
#else
	memmove(dst, src, n);
#endif
	return 0;
}

void gsock_fini(struct gsock_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->dev_base) /* not when the device itself was refused */
		gs_use_device(ctx);
	if (ctx->watching) {
		if (write(ctx->wake_fd[1], "q", 1) < 0)
			shutdown(ctx->ctl_fd, SHUT_RDWR);
		pthread_join(ctx->watcher, NULL);
	}
#ifdef GSOCK_USE_CUDA
	if (ctx->dev_pool)
		cudaHostUnregister(ctx->pool);
	if (ctx->dev_base)
		cudaHostUnregister(ctx->base);
	if (ctx->local)
		cudaFree(ctx->local);
	if (ctx->world_stream)
		cudaStreamDestroy(ctx->world_stream);
#else
	free(ctx->local);
#endif
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
