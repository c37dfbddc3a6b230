/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA stage of the CPU-managed GPU server C, done the way a careful
 * engineer would: pinned host buffers, a stream per server thread, and per
 * batch one copy of all pictures, one of all stored features and of the
 * job table, one kernel with a block per request (the same fv.h maths as
 * G), one copy of the distances back.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "fv.h"
#include "stage.h"

struct fv_job {
	uint32_t at; /* the picture's offset in the batch */
	uint16_t w, h;
};

struct fv_stage {
	cudaStream_t stream;
	uint32_t used;
	struct fv_job *jobs, *djobs; /* pinned host, device */
	uint8_t *pictures, *dpictures;
	float *stored, *dstored;
	float *dist, *ddist;
};

__global__ void fv_batch_kernel(const struct fv_job *jobs,
				const uint8_t *pictures, const float *stored,
				float *dist)
{
	__shared__ uint32_t hist[FV_NFEAT], cellsum[FV_GRID * FV_GRID];
	__shared__ float query[FV_NFEAT], scratch[1024];
	struct fv_job j = jobs[blockIdx.x];
	float d;

	fv_features(pictures + j.at, j.w, j.h, query, hist, cellsum);
	d = fv_chi2(query, stored + (size_t)blockIdx.x * FV_NFEAT, scratch);
	if (threadIdx.x == 0)
		dist[blockIdx.x] = d;
}

extern "C" const char *fv_stage_name(void)
{
	return "cuda";
}

extern "C" struct fv_stage *fv_stage_open(char *err, size_t errlen)
{
	struct fv_stage *s = (struct fv_stage *)calloc(1, sizeof(*s));
	size_t jobs = sizeof(struct fv_job) * FV_STAGE_JOBS;
	size_t stored = sizeof(float) * FV_NFEAT * FV_STAGE_JOBS;
	size_t dist = sizeof(float) * FV_STAGE_JOBS;
	cudaError_t e = s ? cudaSuccess : cudaErrorMemoryAllocation;

	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s->stream,
					      cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->jobs, jobs, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->pictures, FV_STAGE_BYTES, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->stored, stored, 0);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&s->dist, dist, 0);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->djobs, jobs);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dpictures, FV_STAGE_BYTES);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->dstored, stored);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&s->ddist, dist);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
		return NULL; /* the process is about to exit */
	}
	return s;
}

extern "C" uint8_t *fv_stage_picture(struct fv_stage *s, unsigned i, uint32_t w,
				     uint32_t h)
{
	if (i == 0)
		s->used = 0;
	if (i >= FV_STAGE_JOBS || s->used + (size_t)w * h > FV_STAGE_BYTES)
		return NULL;
	s->jobs[i].at = s->used;
	s->jobs[i].w = (uint16_t)w;
	s->jobs[i].h = (uint16_t)h;
	s->used += (w * h + 15) & ~15u; /* each picture 16-byte aligned */
	return s->pictures + s->jobs[i].at;
}

extern "C" float *fv_stage_stored(struct fv_stage *s)
{
	return s->stored;
}

extern "C" int fv_stage_run(struct fv_stage *s, unsigned n, float *dist)
{
	cudaStream_t st = s->stream;

	if (!n)
		return 0;
	cudaMemcpyAsync(s->djobs, s->jobs, sizeof(struct fv_job) * n,
			cudaMemcpyHostToDevice, st);
	cudaMemcpyAsync(s->dpictures, s->pictures, s->used,
			cudaMemcpyHostToDevice, st);
	cudaMemcpyAsync(s->dstored, s->stored, sizeof(float) * FV_NFEAT * n,
			cudaMemcpyHostToDevice, st);
	fv_batch_kernel<<<n, 256, 0, st>>>(s->djobs, s->dpictures, s->dstored,
					   s->ddist);
	cudaMemcpyAsync(s->dist, s->ddist, sizeof(float) * n,
			cudaMemcpyDeviceToHost, st);
	if (cudaStreamSynchronize(st) != cudaSuccess)
		return -1;
	for (unsigned i = 0; i < n; i++)
		dist[i] = s->dist[i];
	return 0;
}
