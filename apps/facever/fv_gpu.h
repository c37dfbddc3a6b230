/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-call face verification server G: what its host program and its
 * kernel share. Everything lives in gsock_alloc() memory (reached by
 * both) or device memory (the kernel's own buffers); each block writes
 * only its own entries.
 */
#ifndef FV_GPU_H
#define FV_GPU_H

#include "fv.h"
#include "gapp.cuh"

#define FV_MCBUF 128 /* bytes a block reads a memcached reply line into */
#define FV_IO_BYTES 256 /* per block: request header, response, memcached */
/* At most this many threads a block, two blocks on a multiprocessor. */
#define FV_THREADS 256
#define FV_PER_SM 2

struct fv_block_stats {
	uint64_t conns;
	uint64_t requests;
	uint64_t matches;
	uint64_t errors; /* requests answered with FV_E_* */
	int64_t last_error; /* the last error that ended a connection */
};

struct fv_server_args {
	struct app_listener listen;
	struct sockaddr_storage mc; /* memcached */
	uint32_t mclen;
	float threshold;
	int32_t timeout_ms; /* a request's body, a memcached reply */
	uint8_t *imgs; /* device memory: blocks * FV_MAX_PIXELS */
	float *feats; /* device memory: blocks * 2 * FV_NFEAT */
	uint8_t *io; /* device memory: blocks * FV_IO_BYTES */
	struct fv_block_stats *stats; /* one per block */
};

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL_FIT(fv_server_kernel, gs, arg, FV_THREADS, FV_PER_SM);
#ifdef __cplusplus
}
#endif

#endif
