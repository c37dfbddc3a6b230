/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA stage: pinned host buffers, device buffers, a stream per
 * server thread; each run is copy in, kernel, copy out, synchronize.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "stage.h"

struct stage {
	cudaStream_t stream;
	uint8_t *in, *out; /* pinned host */
	uint8_t *din, *dout; /* device */
};

/* The "work": every thread copies 16-byte words, then the tail bytes. */
__global__ void echo_work(const uint8_t *in, uint8_t *out, size_t n)
{
	size_t words = n / 16,
	       i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t k = i; k < words; k += stride)
		((uint4 *)out)[k] = ((const uint4 *)in)[k];
	for (size_t k = words * 16 + i; k < n; k += stride)
		out[k] = in[k];
}

extern "C" const char *stage_name(void)
{
	return "cuda";
}

extern "C" struct stage *stage_open(size_t cap, char *err, size_t errlen)
{
	struct stage *s = (struct stage *)calloc(1, sizeof(*s));
	cudaError_t e = s ? cudaSuccess : cudaErrorMemoryAllocation;

	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s->stream,
					      cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->in, cap, cudaHostAllocDefault);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->out, cap, cudaHostAllocDefault);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->din, cap);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dout, cap);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
		return NULL; /* the process is about to exit */
	}
	return s;
}

extern "C" uint8_t *stage_in(struct stage *s)
{
	return s->in;
}

extern "C" uint8_t *stage_out(struct stage *s)
{
	return s->out;
}

extern "C" int stage_run(struct stage *s, size_t n)
{
	unsigned blocks = (unsigned)((n / 16 + 255) / 256);

	if (blocks < 1)
		blocks = 1;
	if (blocks > 1024)
		blocks = 1024;
	cudaMemcpyAsync(s->din, s->in, n, cudaMemcpyHostToDevice, s->stream);
	echo_work<<<blocks, 256, 0, s->stream>>>(s->din, s->dout, n);
	cudaMemcpyAsync(s->out, s->dout, n, cudaMemcpyDeviceToHost, s->stream);
	return cudaStreamSynchronize(s->stream) == cudaSuccess ? 0 : -1;
}
