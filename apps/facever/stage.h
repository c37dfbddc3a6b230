/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where the CPU servers compute a batch of requests: on the CPU thread
 * itself (stage_cpu.c: the CPU-only server P) or on the GPU (stage_cuda.cu:
 * the CPU-managed GPU server C, one copy in, one kernel with a block per
 * request, one copy out). One stage per server thread.
 */
#ifndef FV_STAGE_H
#define FV_STAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FV_STAGE_JOBS 64 /* requests one batch may hold */
#define FV_STAGE_BYTES (8u << 20) /* picture bytes one batch may hold */

struct fv_stage;

/* "cpu" or "cuda". */
const char *fv_stage_name(void);
/* A stage; NULL with a reason in err. */
struct fv_stage *fv_stage_open(char *err, size_t errlen);
/*
 * Room for the picture of job i (jobs are added in order from 0), or
 * NULL when the batch is full: run it first.
 */
uint8_t *fv_stage_picture(struct fv_stage *s, unsigned i, uint32_t w,
			  uint32_t h);
/* The stored features of jobs 0.. (FV_NFEAT floats each), to fill. */
float *fv_stage_stored(struct fv_stage *s);
/* The distances of jobs [0, n) into dist; 0 or -1. Empties the batch. */
int fv_stage_run(struct fv_stage *s, unsigned n, float *dist);

#ifdef __cplusplus
}
#endif

#endif
