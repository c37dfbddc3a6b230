/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where the CPU servers multiply: with OpenBLAS on the CPU (stage_blas.c:
 * the CPU-only server P) or on the GPU (stage_cuda.cu: the CPU-managed
 * GPU server C: copy in, the same tiled kernel as G over the whole GPU,
 * copy out). One stage per connection.
 */
#ifndef MM_STAGE_H
#define MM_STAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mm_stage;

/* "openblas" or "cuda". */
const char *mm_stage_name(void);
/* A stage for sides up to max_n; NULL with a reason in err. */
struct mm_stage *mm_stage_open(uint32_t max_n, char *err, size_t errlen);
void mm_stage_close(struct mm_stage *s);
/* Where the request's A and B go (2 n^2 floats), and where C comes out. */
float *mm_stage_in(struct mm_stage *s);
float *mm_stage_out(struct mm_stage *s);
/* C = A B for side n; 0 or -1. */
int mm_stage_run(struct mm_stage *s, uint32_t n);

#ifdef __cplusplus
}
#endif

#endif
