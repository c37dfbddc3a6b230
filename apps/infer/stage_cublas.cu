/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA stage of the CPU-managed GPU server C where cuBLAS is found:
 * the graph server G's model (espcn_cublas.cuh: im2col kernels, cuBLAS
 * SGEMMs, the pixel shuffle), so that G and C compute with the same
 * kernels and calls and a comparison of the two is one of serving.
 * Pinned host buffers, a stream and a cuBLAS handle per server thread,
 * and per batch one copy of the pictures' table and one of their bytes,
 * the model's launches, one copy of all answers back. A batch's pictures
 * lie one after another in the plane, no gap between them, up to
 * ECB_PIXELS_MAX pixels: the most G's largest graph holds.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "espcn_cublas.cuh"
#include "stage.h"

struct infer_stage {
	cudaStream_t stream;
	cublasHandle_t blas; /* on stream */
	uint32_t pixels; /* the batch's plane pixels so far */
	struct ecb_pic *pics; /* pinned host; the device's are m.pics */
	uint8_t *in, *din; /* pinned host, device: a plane pixel's byte */
	uint8_t *out; /* pinned host: the answers, 9 bytes a plane pixel */
	void *model; /* device memory: m's buffers */
	void *ws; /* cuBLAS's workspace, made here, not at the first SGEMM */
	struct ecb_batch m;
};

/* The largest picture fits a batch alone (cserver.c relies on it). */
static_assert((uint64_t)ESPCN_MAX_SIDE * ESPCN_MAX_SIDE <= ECB_PIXELS_MAX,
	      "a largest picture must fit a batch");

#define STAGE_BLAS_WS (32u << 20)

/* Each plane pixel's picture: what G's receive node writes as pictures come. */
__global__ static void __launch_bounds__(256) stage_owners(struct ecb_batch b,
							   uint32_t n)
{
	for (uint32_t i = blockIdx.x; i < n; i += gridDim.x) {
		const struct ecb_pic *p = &b.pics[i];

		for (uint32_t q = threadIdx.x; q < p->w * p->h; q += blockDim.x)
			b.owner[p->at + q] = i;
	}
}

extern "C" const char *infer_stage_name(void)
{
	return "cublas";
}

extern "C" struct infer_stage *infer_stage_open(const float *p, char *err,
						size_t errlen)
{
	struct infer_stage *s = (struct infer_stage *)calloc(1, sizeof(*s));
	size_t pics = sizeof(struct ecb_pic) * INFER_STAGE_JOBS;
	cudaError_t e = s ? cudaSuccess : cudaErrorMemoryAllocation;

	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->pics, pics, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->in, ECB_PIXELS_MAX, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->out, 9ull * ECB_PIXELS_MAX, 0);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->din, ECB_PIXELS_MAX);
	if (e == cudaSuccess)
		e = cudaMalloc(&s->ws, STAGE_BLAS_WS);
	if (e == cudaSuccess)
		e = cudaMalloc(&s->model, ecb_size(ECB_PIXELS_MAX, INFER_STAGE_JOBS));
	if (e == cudaSuccess) {
		ecb_carve(&s->m, s->model, ECB_PIXELS_MAX, INFER_STAGE_JOBS);
		e = cudaMemcpy((void *)s->m.weights, p, 4ull * ESPCN_NPARAMS,
			       cudaMemcpyHostToDevice);
	}
	if (e != cudaSuccess) {
		snprintf(err, errlen, "CUDA: %s (each server thread's stage takes %zu MiB of device memory)",
			 cudaGetErrorString(e),
			 (ecb_size(ECB_PIXELS_MAX, INFER_STAGE_JOBS) +
			  STAGE_BLAS_WS) >> 20);
		return NULL; /* the process is about to exit */
	}
	if (cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(s->blas, s->stream) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetWorkspace(s->blas, s->ws, STAGE_BLAS_WS) !=
		    CUBLAS_STATUS_SUCCESS) {
		snprintf(err, errlen, "cuBLAS: cannot create a handle on the stage's stream");
		return NULL;
	}
	return s;
}

extern "C" uint8_t *infer_stage_add(struct infer_stage *s, unsigned i,
				    uint32_t w, uint32_t h)
{
	if (i == 0)
		s->pixels = 0;
	if (i >= INFER_STAGE_JOBS || (uint64_t)w * h > ECB_PIXELS_MAX - s->pixels)
		return NULL;
	s->pics[i] = (struct ecb_pic){ s->din + s->pixels, s->pixels, w, h, 0 };
	s->pixels += w * h;
	return s->in + s->pics[i].at;
}

/*
 * Every copy, launch and SGEMM checked: a batch that failed is never
 * answered with the last batch's pixels. After a failure, one that the
 * device still reports once the error is cleared is sticky (an illegal
 * address, a launch failure: the context is lost), and -2 stops the
 * server rather than answer 503 for ever.
 */
extern "C" int infer_stage_run(struct infer_stage *s, unsigned n, char *err,
			       size_t errlen)
{
	cudaStream_t st = s->stream;
	cudaError_t e;
	int r = 0;

	if (!n)
		return 0;
	s->m.n = s->pixels;
	e = cudaMemcpyAsync(s->m.pics, s->pics, sizeof(*s->pics) * n,
			    cudaMemcpyHostToDevice, st);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(s->din, s->in, s->pixels,
				    cudaMemcpyHostToDevice, st);
	if (e == cudaSuccess) {
		stage_owners<<<n, 256, 0, st>>>(s->m, n);
		r = ecb_model(&s->blas, &st, NULL, 1, &s->m, s->pixels);
		e = cudaGetLastError();
	}
	if (e == cudaSuccess && !r)
		e = cudaMemcpyAsync(s->out, s->m.out, 9ull * s->pixels,
				    cudaMemcpyDeviceToHost, st);
	if (e == cudaSuccess && !r)
		e = cudaStreamSynchronize(st);
	if (e == cudaSuccess && !r)
		return 0;
	if (e == cudaSuccess)
		snprintf(err, errlen, "cuBLAS: an SGEMM of %u pixels failed", s->pixels);
	else
		snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
	cudaGetLastError(); /* clear what can be cleared */
	return cudaDeviceSynchronize() == cudaSuccess ? -1 : -2;
}

extern "C" const uint8_t *infer_stage_out(struct infer_stage *s, unsigned i)
{
	return s->out + 9ull * s->pics[i].at;
}
