/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock's host backend: the device is this process, so the arena and
 * the direct pool are reached where they are mapped, device memory is
 * the heap, and a kernel's blocks are host threads of one thread each
 * (gs_bid() reads the thread's gsock_host_block_id).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libgsock_int.h"

__thread unsigned gsock_host_block_id;

typedef void (*gs_host_kernel)(struct gsock_dev, void *);

/* What a host thread standing in for one block runs. */
struct gs_host_block {
	gs_host_kernel fn;
	struct gsock_dev dev;
	void *arg;
	unsigned id;
};

/* A launch: its blocks' threads. */
struct gs_host_launch {
	unsigned blocks; /* started */
	pthread_t *threads;
	struct gs_host_block *args;
};

static void *gs_host_block_main(void *p)
{
	struct gs_host_block *b = p;

	gsock_host_block_id = b->id;
	b->fn(b->dev, b->arg);
	return NULL;
}

const char *gs_be_name(void)
{
	return "host";
}

int gs_be_open(int device, char *err, size_t len)
{
	if (device < 0) {
		gs_say(err, len, "device %d: a device is 0 or more", device);
		return -1;
	}
	return 0;
}

int gs_be_map(struct gsock_ctx *ctx, char *err, size_t len)
{
	ctx->dev_base = ctx->base;
	ctx->local = calloc(1, gs_local_size(ctx));
	if (!ctx->local) {
		gs_say(err, len, "out of memory");
		return -1;
	}
	return 0;
}

void gs_be_map_pool(struct gsock_ctx *ctx)
{
	ctx->dev_pool = ctx->pool;
}

/* A receive pool is a memfd: what the cuda backend's device memory is here. */
int gs_be_rx_make(struct gsock_ctx *ctx, uint64_t size, char *why, size_t len)
{
	int fd = memfd_create("gsock-rx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p = MAP_FAILED;

	/* sealed: a peer that maps it can rely on its size */
	if (fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(why, len, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	ctx->rx_dev = p;
	ctx->rx_size = size;
	ctx->rx_fd = fd;
	return 0;
}

void gs_be_rx_free(struct gsock_ctx *ctx)
{
	if (ctx->rx_dev)
		munmap(ctx->rx_dev, ctx->rx_size);
}

void *gs_be_peer_map(struct gsock_ctx *ctx, int fd, uint64_t size, void **be,
		     char *why, size_t len)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	void *p;

	(void)ctx;
	*be = NULL;
	/* a pool shorter than said, or that may shrink, would fault */
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < size || seals < 0 ||
	    !(seals & F_SEAL_SHRINK)) {
		snprintf(why, len,
			 "its descriptor holds fewer than %llu bytes, or is not sealed against shrinking",
			 (unsigned long long)size);
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(why, len, "%s", strerror(errno));
		return NULL;
	}
	return p;
}

void gs_be_peer_unmap(void *view, uint64_t size, void *be)
{
	(void)be;
	munmap(view, size);
}

void gs_be_label(int device, char *buf, size_t len)
{
	snprintf(buf, len, "host:%d", device);
}

void gs_be_use(const struct gsock_ctx *ctx)
{
	(void)ctx;
}

int gs_be_max_threads(const void *kernel)
{
	(void)kernel;
	return 1024; /* a block is one thread, whatever it is given */
}

void gs_be_world_push(struct gsock_ctx *ctx)
{
	__atomic_fetch_or(&ctx->local->world,
			  __atomic_load_n(&ctx->world, __ATOMIC_SEQ_CST),
			  __ATOMIC_SEQ_CST);
}

static void gs_host_launch_free(struct gs_host_launch *h)
{
	if (h) {
		free(h->threads);
		free(h->args);
		free(h);
	}
}

int gs_be_start(struct gs_launch *l, const void *kernel, struct gsock_dev dev,
		unsigned blocks, unsigned threads, void *arg)
{
	struct gs_host_launch *h = calloc(1, sizeof(*h));
	pthread_attr_t attr;
	unsigned i;
	int r = 0;

	(void)threads; /* the host backend runs blocks of one thread */
	l->be = h;
	if (h) {
		h->threads = calloc(blocks, sizeof(*h->threads));
		h->args = calloc(blocks, sizeof(*h->args));
	}
	if (!h || !h->threads || !h->args) {
		gs_host_launch_free(h);
		l->be = NULL;
		return -ENOMEM;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (i = 0; i < blocks; i++) {
		h->args[i] = (struct gs_host_block){ (gs_host_kernel)kernel,
						     dev, arg, i };
		r = -pthread_create(&h->threads[i], &attr, gs_host_block_main,
				    &h->args[i]);
		if (r)
			break;
	}
	pthread_attr_destroy(&attr);
	h->blocks = i;
	if (r)
		fprintf(stderr,
			"gsock: block %u of %u could not start: %s; the %u started run until gsock_stop()\n",
			i, blocks, strerror(-r), i);
	return r ? -EAGAIN : 0;
}

int gs_be_start_on(void *stream, const void *kernel, struct gsock_dev dev,
		   unsigned blocks, unsigned threads, void *arg)
{
	(void)stream, (void)kernel, (void)dev, (void)blocks, (void)threads,
		(void)arg;
	return -ENOTSUP; /* no streams, no graphs: blocks are threads */
}

/*
 * After gs_be_start failed: whether blocks run that gs_be_finish must
 * wait for (threads that started before one could not); else let go of
 * the rest.
 */
bool gs_be_started_some(struct gs_launch *l)
{
	struct gs_host_launch *h = l->be;

	if (h && h->blocks)
		return true;
	gs_host_launch_free(h);
	l->be = NULL;
	return false;
}

int gs_be_finish(struct gs_launch *l)
{
	struct gs_host_launch *h = l->be;

	for (unsigned i = 0; h && i < h->blocks; i++)
		pthread_join(h->threads[i], NULL);
	gs_host_launch_free(h);
	return 0;
}

void *gs_be_alloc(size_t size)
{
	return calloc(1, size);
}

void gs_be_free(void *p)
{
	free(p);
}

void *gs_be_dev_alloc(size_t size)
{
	return calloc(1, size);
}

void gs_be_dev_free(void *p)
{
	free(p);
}

int gs_be_memcpy(void *dst, const void *src, size_t n)
{
	memmove(dst, src, n);
	return 0;
}

void gs_be_unmap(struct gsock_ctx *ctx)
{
	free(ctx->local);
}
