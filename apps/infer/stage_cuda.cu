/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA stage of the CPU-managed GPU server C where cuBLAS is not
 * found (stage_cublas.cu, G's cuBLAS path, where it is), done the way a
 * careful engineer would: pinned host buffers, a stream per server
 * thread, and per batch one copy of the job table and all pictures, one
 * launch of espcn_gpu.h's batch (the code infer-gserver's blocks run)
 * over a grid of blocks that each take every gridDim-th band, one copy
 * of all outputs back.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "espcn_gpu.h"
#include "stage.h"

#define STAGE_BLOCKS 64 /* a grid's blocks, each with its own scratch */

struct infer_stage {
	cudaStream_t stream;
	uint64_t in_used, out_used;
	struct espcn_job *jobs, *djobs; /* pinned host, device */
	uint8_t *in, *din, *out, *dout;
	float *dp, *dscratch;
};

__global__ void __launch_bounds__(ESPCN_THREADS)
	espcn_batch_kernel(const float *p, const struct espcn_job *jobs,
			   uint32_t n, const uint8_t *in, uint8_t *out,
			   float *scratch)
{
	espcn_batch_part(p, jobs, n, in, out,
			 scratch + (size_t)blockIdx.x * ESPCN_SCRATCH,
			 blockIdx.x, gridDim.x);
}

extern "C" const char *infer_stage_name(void)
{
	return "cuda";
}

extern "C" struct infer_stage *infer_stage_open(const float *p, char *err,
						size_t errlen)
{
	struct infer_stage *s = (struct infer_stage *)calloc(1, sizeof(*s));
	size_t jobs = sizeof(struct espcn_job) * INFER_STAGE_JOBS;
	size_t out = 9ull * INFER_STAGE_PIXELS, np = 4ull * ESPCN_NPARAMS;
	cudaError_t e = s ? cudaSuccess : cudaErrorMemoryAllocation;

	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->jobs, jobs, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->in, INFER_STAGE_PIXELS, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->out, out, 0);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->djobs, jobs);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->din, INFER_STAGE_PIXELS);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dout, out);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dp, np);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dscratch,
			       4ull * ESPCN_SCRATCH * STAGE_BLOCKS);
	if (e == cudaSuccess)
		e = cudaMemcpy(s->dp, p, np, cudaMemcpyHostToDevice);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
		return NULL; /* the process is about to exit */
	}
	return s;
}

extern "C" uint8_t *infer_stage_add(struct infer_stage *s, unsigned i,
				    uint32_t w, uint32_t h)
{
	if (i == 0)
		s->in_used = s->out_used = 0;
	if (i >= INFER_STAGE_JOBS ||
	    espcn_job_add(s->jobs, i, w, h, &s->in_used, INFER_STAGE_PIXELS,
			  &s->out_used, 9ull * INFER_STAGE_PIXELS))
		return NULL;
	return s->in + s->jobs[i].in_at;
}

/*
 * Every copy and the launch checked: a batch that failed is never
 * answered with the last batch's pixels. After a failure, one that the
 * device still reports once the error is cleared is sticky (an illegal
 * address, a launch failure: the context is lost), and -2 stops the
 * server rather than answer 503 for ever.
 */
extern "C" int infer_stage_run(struct infer_stage *s, unsigned n, char *err,
			       size_t errlen)
{
	cudaStream_t st = s->stream;
	uint32_t bands = espcn_batch_bands(s->jobs, n);
	cudaError_t e;

	if (!n)
		return 0;
	e = cudaMemcpyAsync(s->djobs, s->jobs, sizeof(struct espcn_job) * n,
			    cudaMemcpyHostToDevice, st);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(s->din, s->in, s->in_used,
				    cudaMemcpyHostToDevice, st);
	if (e == cudaSuccess) {
		espcn_batch_kernel<<<bands < STAGE_BLOCKS ? bands : STAGE_BLOCKS,
				     ESPCN_THREADS, 0, st>>>(s->dp, s->djobs, n,
							     s->din, s->dout,
							     s->dscratch);
		e = cudaGetLastError();
	}
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(s->out, s->dout, s->out_used,
				    cudaMemcpyDeviceToHost, st);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(st);
	if (e == cudaSuccess)
		return 0;
	snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
	cudaGetLastError(); /* clear what can be cleared */
	return cudaDeviceSynchronize() == cudaSuccess ? -1 : -2;
}

extern "C" const uint8_t *infer_stage_out(struct infer_stage *s, unsigned i)
{
	return s->out + s->jobs[i].out_at;
}
