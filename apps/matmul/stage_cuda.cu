/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA stage of the CPU-managed GPU server C: pinned host buffers and
 * a stream per connection; a product is one copy of A and B in, the same
 * tiled kernel as G with a block per output tile over the whole GPU, one
 * copy of C out.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "mm.h"
#include "stage.h"

struct mm_stage {
	cudaStream_t stream;
	float *in, *out; /* pinned host */
	float *din, *dout; /* device */
};

__global__ void mm_kernel(const float *A, const float *B, float *C, uint32_t n)
{
	__shared__ float sa[MM_BK * MM_TILE], sb[MM_BK * MM_TILE];

	mm_tile(A, B, C, n, blockIdx.x, sa, sb);
}

extern "C" const char *mm_stage_name(void)
{
	return "cuda";
}

extern "C" struct mm_stage *mm_stage_open(uint32_t max_n, char *err,
					  size_t errlen)
{
	struct mm_stage *s = (struct mm_stage *)calloc(1, sizeof(*s));
	size_t n2 = (size_t)max_n * max_n * sizeof(float);
	cudaError_t e = s ? cudaSuccess : cudaErrorMemoryAllocation;

	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s->stream,
					      cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->in, 2 * n2, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->out, n2, 0);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->din, 2 * n2);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dout, n2);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
		mm_stage_close(s);
		return NULL;
	}
	return s;
}

extern "C" void mm_stage_close(struct mm_stage *s)
{
	if (!s)
		return;
	if (s->in)
		cudaFreeHost(s->in);
	if (s->out)
		cudaFreeHost(s->out);
	if (s->din)
		cudaFree(s->din);
	if (s->dout)
		cudaFree(s->dout);
	if (s->stream)
		cudaStreamDestroy(s->stream);
	free(s);
}

extern "C" float *mm_stage_in(struct mm_stage *s)
{
	return s->in;
}

extern "C" float *mm_stage_out(struct mm_stage *s)
{
	return s->out;
}

extern "C" int mm_stage_run(struct mm_stage *s, uint32_t n)
{
	size_t n2 = (size_t)n * n * sizeof(float);

	cudaMemcpyAsync(s->din, s->in, 2 * n2, cudaMemcpyHostToDevice,
			s->stream);
	mm_kernel<<<mm_tiles(n), MM_THREADS, 0, s->stream>>>(
		s->din, s->din + (size_t)n * n, s->dout, n);
	cudaMemcpyAsync(s->out, s->dout, n2, cudaMemcpyDeviceToHost, s->stream);
	return cudaStreamSynchronize(s->stream) == cudaSuccess ? 0 : -1;
}
