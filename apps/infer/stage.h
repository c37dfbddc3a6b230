/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where the CPU servers run a batch of pictures through the model: on
 * the GPU (the CPU-managed GPU server C: one copy in, the model's
 * launches, one copy out; stage_cublas.cu runs the graph server G's
 * im2col and cuBLAS path, espcn_cublas.cuh, where cuBLAS is found, else
 * stage_cuda.cu launches espcn_gpu.h's batch) or on the server thread
 * (stage_cpu.c: C's stand-in on the host backend runs espcn_gpu.h there;
 * the CPU-only server P runs im2col and OpenBLAS's GEMM, stage_blas.c, or
 * without OpenBLAS the plain reference). One stage per server thread.
 */
#ifndef INFER_STAGE_H
#define INFER_STAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INFER_STAGE_JOBS 64 /* pictures a batch may hold */
#define INFER_STAGE_PIXELS (4u << 20) /* input pixels (outputs 9x) */

struct infer_stage;

/* "cublas", "cuda", "host", "openblas" or "cpu": the listening line's. */
const char *infer_stage_name(void);
/* A stage running the parameters p (copied); NULL with a reason in err. */
struct infer_stage *infer_stage_open(const float *p, char *err, size_t errlen);
/*
 * Room for the w x h picture of job i (jobs are added in order from 0),
 * or NULL when the batch is full: run it first.
 */
uint8_t *infer_stage_add(struct infer_stage *s, unsigned i, uint32_t w,
			 uint32_t h);
/*
 * Upscale jobs [0, n): 0; -1 this batch failed (its requests get 503);
 * -2 the stage is broken for good (a sticky CUDA error: every later call
 * would fail too), err says why and the server must stop.
 */
int infer_stage_run(struct infer_stage *s, unsigned n, char *err,
		    size_t errlen);
/* Job i's output (3w x 3h), valid until the next batch's first add. */
const uint8_t *infer_stage_out(struct infer_stage *s, unsigned i);

/*
 * P's buffers (zeroed at first): the planes of the largest picture so
 * far and the im2col columns, kept from picture to picture, so that a
 * 1024x1024 request does not cost 440 MB of malloc and page faults each.
 */
struct espcn_blas {
	float *x, *a, *b, *c, *col;
	size_t px; /* pixels x, a, b and c have room for */
};

/* P's model: im2col and OpenBLAS (stage_blas.c); 0, or -1 out of memory. */
int espcn_run_blas(struct espcn_blas *ws, const float *p, const uint8_t *in,
		   uint32_t w, uint32_t h, uint8_t *out);

#ifdef __cplusplus
}
#endif

#endif
