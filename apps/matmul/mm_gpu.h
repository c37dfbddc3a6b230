/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-call matrix product server G: what its host program and kernel
 * share. The blocks form groups of group_blocks; a group serves one
 * connection at a time. Its first block (the leader) accepts, receives A
 * and B straight into the group's device buffers and answers; all blocks
 * of the group compute the product's tiles between.
 */
#ifndef MM_GPU_H
#define MM_GPU_H

#include "gapp.cuh"
#include "mm.h"

/* How a leader hands a product to its group; device memory. */
struct mm_group {
	uint32_t gen; /* bumped by the leader: a product to compute, or stop */
	uint32_t n; /* its side */
	uint32_t stop; /* the leader is done: the group ends */
	uint32_t pad;
	unsigned long long done; /* blocks other than the leader done with gen */
};

struct mm_group_stats {
	uint64_t conns;
	uint64_t products;
	int64_t last_error; /* the last error that ended a connection */
};

struct mm_server_args {
	struct app_listener listen;
	uint32_t group_blocks;
	uint32_t max_n;
	int32_t timeout_ms; /* the rest of a request after its header */
	float *bufs; /* device memory: groups * 3 * max_n^2 */
	uint8_t *io; /* device memory: groups * 64 */
	struct mm_group *groups; /* device memory: one per group */
	struct mm_group_stats *stats; /* one per group */
};

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL_FIT(mm_server_kernel, gs, arg, MM_THREADS, 2);
#ifdef __cplusplus
}
#endif

#endif
