/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock: the host side of a GPU application. It registers an arena
 * with gsockd, makes it reachable from the device, launches kernels that
 * use g-calls, and tells those kernels when gsockd dies or the
 * application stops. Plain C; the same API on both device backends.
 */
#ifndef GSOCK_H
#define GSOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gsock_ctx;

/* Geometry and where gsockd is; zero fields take the defaults. */
struct gsock_opts {
	const char *
		control; /* control socket; default $GSOCK_CONTROL, then per-user */
	uint32_t nslots; /* blocks that may run g-calls at once (256) */
	uint32_t nsocks; /* sockets open at once (128) */
	uint32_t ring_size; /* bytes per rx and per tx ring, power of two (64 KiB) */
	/*
	 * cuda: a block that has waited a few turns sleeps this long between
	 * its reads of host memory (0: $GSOCK_POLL_NS, else none). Fewer
	 * reads cross PCIe from many waiting blocks, for at most this much
	 * more latency. The host backend's waits already yield.
	 */
	uint32_t poll_ns;
	/*
	 * cuda: the GPU (CUDA ordinal, 0 the first) whose context holds this
	 * application's arena mapping, kernels and memory; one process may
	 * open one context per GPU. host: a label gsock-stat shows.
	 */
	int32_t device;
};

/* The backend this library was built for: "cuda" or "host". */
const char *gsock_backend(void);

/*
 * Connect to gsockd and register a new arena. On failure returns NULL and
 * writes a sentence saying why into err.
 */
struct gsock_ctx *gsock_init(const struct gsock_opts *opts, char *err,
			     size_t errlen);

/*
 * Launch kernel (declared with GSOCK_KERNEL) on blocks x threads, passing
 * arg (memory from gsock_alloc, or any device pointer). Returns 0 or a
 * negative errno; -ENOSPC when the blocks launched since the last
 * gsock_wait() would exceed nslots;
 * -E2BIG (cuda) when the blocks cannot all be resident on the GPU at once,
 * or a block of threads cannot run at all (gsock_max_threads; the
 * sentence on stderr says how many fit); -EAGAIN (host) when only
 * some blocks could be started: those run on, and gsock_stop() then
 * gsock_wait() ends them.
 */
int gsock_launch(struct gsock_ctx *ctx, const void *kernel, unsigned blocks,
		 unsigned threads, void *arg);

/*
 * cuda: launch kernel on blocks x threads on stream (a cudaStream_t of
 * the context's GPU, which may be capturing a CUDA graph), its blocks on
 * command slots [slot, slot + blocks). For kernels the application
 * launches and waits for itself: the nodes of a graph that launches
 * itself again, say, which may share slots because they never run at
 * once. Kernels that do run at once, gsock_launch's too (they take slots
 * from 0 up), need slots of their own. 0 or a negative errno: -ENOSPC
 * past nslots, -E2BIG as gsock_launch's, -ENOTSUP on the host backend.
 */
int gsock_launch_stream(struct gsock_ctx *ctx, void *stream, unsigned slot,
			const void *kernel, unsigned blocks, unsigned threads,
			void *arg);

/* Wait for every launched kernel to end; the host thread sleeps. */
int gsock_wait(struct gsock_ctx *ctx);

/* Make every g-call of this application return -ECANCELED (signal-safe). */
void gsock_stop(struct gsock_ctx *ctx);

/* Whether gsockd is gone (its control socket closed). */
int gsock_bridge_gone(struct gsock_ctx *ctx);

/* Zeroed memory both the host and the kernels reach (mapped pinned on cuda). */
void *gsock_alloc(struct gsock_ctx *ctx, size_t size);
void gsock_free(struct gsock_ctx *ctx, void *p);

/* Zeroed memory for kernels' own buffers: device memory on cuda, heap on host. */
void *gsock_dev_alloc(struct gsock_ctx *ctx, size_t size);
void gsock_dev_free(struct gsock_ctx *ctx, void *p);

/*
 * Copy n bytes between any two of: host memory, gsock_alloc memory and
 * gsock_dev_alloc memory (cudaMemcpy with the direction inferred; memcpy
 * on host). Returns 0 or -EIO (said on stderr).
 */
int gsock_memcpy(struct gsock_ctx *ctx, void *dst, const void *src, size_t n);

/* The context's device: its ordinal (gsock_opts.device). */
int gsock_device(const struct gsock_ctx *ctx);

/*
 * The most threads a block of kernel can have on the context's device
 * (cuda: what its registers and shared memory allow, cudaFuncGetAttributes'
 * maxThreadsPerBlock; host: 1024, a block running one thread whatever it
 * is given), or a negative errno. A program checks its -t against it
 * before launching: gsock_launch refuses more (-E2BIG).
 */
int gsock_max_threads(struct gsock_ctx *ctx, const void *kernel);

/* Unregister and release everything; kernels must have ended. */
void gsock_fini(struct gsock_ctx *ctx);

struct sockaddr_storage;
/*
 * Fill ss and *len from address text: "HOST:PORT", "[V6]:PORT", "PORT"
 * (any IPv4 address) or "/unix/path" (getaddrinfo resolves HOST).
 * Returns 0, or -1 when the text is no address.
 */
int gsock_parse_addr(const char *spec, struct sockaddr_storage *ss,
		     uint32_t *len);
/* Write ss as text, the way gsock_parse_addr reads it. */
void gsock_format_addr(const struct sockaddr_storage *ss, char *buf,
		       size_t len);

#ifdef __cplusplus
}
#endif

#endif /* GSOCK_H */
