/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock's insides, shared by its parts: libgsock.c (the control
 * client, the arena, the watcher thread, the public API) and the one
 * backend a library is built with, backend_cuda.c or backend_host.c,
 * which make the arena reachable from the device, launch kernels and
 * hold device memory. Not installed.
 */
#ifndef LIBGSOCK_INT_H
#define LIBGSOCK_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gsock.cuh"
#include "gsock_ctl.h"
#include "gsock.h"

/* One kernel launch still running: the backend's handle (a stream, threads). */
struct gs_launch {
	struct gs_launch *next;
	void *be;
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
	/*
	 * The receive pool (gsock_ctl.h): this arena's direct rings in its
	 * device memory, and the pools of the other applications, mapped by
	 * the watcher thread as gsockd names them. peers holds their device
	 * views (host memory the device reads, gs_be_alloc), GS_MAX_PEERS.
	 */
	bool rx_wanted; /* the welcome asked for a receive pool */
	int rx_fd; /* its descriptor until the hello carries it, else -1 */
	uint8_t *rx_dev; /* device view; NULL: none */
	uint64_t rx_size;
	uint64_t *peers; /* NULL when there is no receive pool */
	void *peer_be[GS_MAX_PEERS]; /* the backend's mapping of each */
	uint64_t peer_size[GS_MAX_PEERS];
	uint32_t peer_gen[GS_MAX_PEERS]; /* the use of each index mapped */
	uint32_t world; /* GS_WORLD_*, the host's copy */
	pthread_t watcher;
	int watching;
	pthread_mutex_t lock;
	uint32_t next_slot;
	uint32_t poll_ns; /* gsock_opts.poll_ns or $GSOCK_POLL_NS */
	uint32_t lane; /* $GSOCK_DIRECT_LANE: direct connections use lanes */
	struct gs_launch *launches;
	int device; /* gsock_opts.device */
	void *be; /* the backend's: cuda, the stream that copies world */
};

/* Write a sentence into err (len bytes), for gsock_init's caller. */
void gs_say(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Bytes of device-memory state: gs_local, then one gs_lsock per socket. */
size_t gs_local_size(const struct gsock_ctx *ctx);

/* ---- what a backend provides ---- */

/* "cuda" or "host". */
const char *gs_be_name(void);
/*
 * Make the device's context before gsockd is asked for anything (it can
 * take seconds, and gsockd gives a connection hello_timeout_ms to hand
 * over its arena). 0, or -1 with err written.
 */
int gs_be_open(int device, char *err, size_t len);
/* Map the arena for the device (ctx->dev_base), make ctx->local. */
int gs_be_map(struct gsock_ctx *ctx, char *err, size_t len);
/* Make the mapped direct pool (ctx->pool) reachable: ctx->dev_pool. */
void gs_be_map_pool(struct gsock_ctx *ctx);
/*
 * Make a receive pool of at least size bytes in device memory, exported
 * as a descriptor: ctx->rx_dev, rx_size, rx_fd. 0, or -1 with why.
 */
int gs_be_rx_make(struct gsock_ctx *ctx, uint64_t size, char *why, size_t len);
void gs_be_rx_free(struct gsock_ctx *ctx);
/*
 * Map another arena's receive pool (its descriptor, size bytes) for
 * ctx's device: its device view, *be what unmapping needs; or NULL with
 * why. Watcher thread only.
 */
void *gs_be_peer_map(struct gsock_ctx *ctx, int fd, uint64_t size, void **be,
		     char *why, size_t len);
void gs_be_peer_unmap(void *view, uint64_t size, void *be);
/* What gsock-stat shows for the device: backend, ordinal, PCI address. */
void gs_be_label(int device, char *buf, size_t len);
/* Make ctx's device current for this thread (device calls follow). */
void gs_be_use(const struct gsock_ctx *ctx);
/* The most threads a block of kernel can have on the current device. */
int gs_be_max_threads(const void *kernel);
/* Copy ctx->world to the device's world word. Watcher thread only. */
void gs_be_world_push(struct gsock_ctx *ctx);
/*
 * Start blocks x threads of kernel: 0, or a negative errno (-E2BIG: not
 * all resident; -EAGAIN: some blocks started, see gs_be_started_some).
 */
int gs_be_start(struct gs_launch *l, const void *kernel, struct gsock_dev dev,
		unsigned blocks, unsigned threads, void *arg);
/*
 * Launch blocks x threads of kernel on the caller's stream (cuda: a
 * cudaStream_t, capturing or not): 0 or a negative errno (-ENOTSUP on
 * the host backend).
 */
int gs_be_start_on(void *stream, const void *kernel, struct gsock_dev dev,
		   unsigned blocks, unsigned threads, void *arg);
/* After gs_be_start failed: whether blocks run that gs_be_finish must end. */
bool gs_be_started_some(struct gs_launch *l);
/* Wait for l's blocks; 0 or -EIO (said on stderr). */
int gs_be_finish(struct gs_launch *l);
void *gs_be_alloc(size_t size);
void gs_be_free(void *p);
void *gs_be_dev_alloc(size_t size);
void gs_be_dev_free(void *p);
int gs_be_memcpy(void *dst, const void *src, size_t n);
/* Undo gs_be_map and gs_be_map_pool (what of them was done). */
void gs_be_unmap(struct gsock_ctx *ctx);

#endif
