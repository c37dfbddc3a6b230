/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-call face verification server G: what its host program and its
 * kernel share. Everything lives in gsock_alloc() memory (reached by
 * both) or device memory (the kernel's own buffers); each block writes
 * only its own entries, but for a server block's struct fv_ask, where
 * its fetcher writes what the block waits for (kernels.cu).
 */
#ifndef FV_GPU_H
#define FV_GPU_H

#include "fv.h"
#include "gapp.cuh"

#define FV_MCBUF 128 /* longest memcached reply line read */
#define FV_IO_BYTES 64 /* per block: request header, response */
#define FV_FETCHERS 8 /* fetcher blocks by default */
#define FV_BATCH 64 /* keys a fetcher asks memcached for in one write */
#define FV_FIFO 256 /* keys a fetcher has in flight at most */
#define FV_FETCH_TEXT (FV_FIFO * 32) /* "mg fv:<id> v" lines of those */
/* a fetcher's buffer: a write's text, then replies not yet handed out */
#define FV_FETCH_BUF (FV_FETCH_TEXT + FV_BATCH * (FV_FEAT_BYTES + 64))
/* At most this many threads a block, two blocks on a multiprocessor. */
#define FV_THREADS 256
#define FV_PER_SM 2

/* A server block's request, step by step (ns_step). */
enum {
	FV_WAIT, /* for its header (the client's turn) */
	FV_PIC, /* receiving its picture */
	FV_COMPUTE, /* its features and the distance */
	FV_ANSWER, /* waiting for the fetcher's answer after that */
	FV_REPLY, /* sending the reply */
	FV_STEPS
};

/*
 * What a block did, for the report at the end (gsock_alloc memory, so
 * the block only stores it: a read-modify-write there is a PCIe read).
 * A fetcher counts batches in conns and keys in requests; fetchers and
 * server blocks say where their time went in their ns_ fields.
 */
struct fv_block_stats {
	uint64_t conns;
	uint64_t requests;
	uint64_t matches;
	uint64_t errors; /* requests answered with FV_E_* */
	int64_t last_error; /* the last error that ended a connection */
	uint64_t ns_ask; /* fetcher: taking requests, writing them (gsend) */
	uint64_t ns_recv; /* fetcher: grecv, with or without bytes */
	uint64_t ns_parse; /* fetcher: handing replies out */
	uint64_t ns_idle; /* fetcher: nothing to do */
	uint64_t ns_step[FV_STEPS]; /* server block: a request's steps (above) */
};

/*
 * A server block's request for reference features, to its fetcher (device
 * memory). The block writes id, then seq; the fetcher takes it (taken =
 * seq), writes the features into the block's buffer and status, then done
 * = seq.
 */
struct fv_ask {
	uint64_t seq; /* block: the number of its latest request */
	uint64_t taken; /* fetcher: the latest it has taken */
	uint64_t done; /* fetcher: the latest it has answered */
	uint32_t id; /* block: whose features */
	int32_t status; /* fetcher: 0, FV_E_UNKNOWN or FV_E_STORE */
};

struct fv_server_args {
	struct app_listener listen;
	struct sockaddr_storage mc; /* memcached */
	uint32_t mclen;
	float threshold;
	int32_t timeout_ms; /* a request's body, a memcached reply */
	uint32_t blocks; /* server blocks; fetchers follow them */
	uint32_t fetchers;
	uint8_t *imgs; /* device memory: blocks * FV_MAX_PIXELS */
	float *feats; /* device memory: blocks * 2 * FV_NFEAT (query, stored) */
	uint8_t *io; /* device memory: blocks * FV_IO_BYTES */
	struct fv_ask *asks; /* device memory: one per server block */
	uint8_t *fetch_buf; /* device memory: fetchers * FV_FETCH_BUF */
	struct fv_block_stats *stats; /* one per block, fetchers too */
};

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL_FIT(fv_server_kernel, gs, arg, FV_THREADS, FV_PER_SM);
#ifdef __cplusplus
}
#endif

#endif
