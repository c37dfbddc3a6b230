/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock's cuda backend: the arena and the direct pool registered as
 * mapped pinned memory so kernels reach them over PCIe, the device's own
 * state in device memory, the world word copied there on its own stream,
 * and kernels launched each on a stream of their own, all resident.
 */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "libgsock_int.h"

const char *gs_be_name(void)
{
	return "cuda";
}

int gs_be_open(int device, char *err, size_t len)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess) {
		gs_say(err, len, "cannot set up the GPU: %s",
		       cudaGetErrorString(e));
		return -1;
	}
	if (device < 0 || device >= count) {
		gs_say(err, len,
		       "there is no GPU %d: this host has %d (0 to %d)", device,
		       count, count - 1);
		return -1;
	}
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync |
				       cudaDeviceMapHost);
	if (e != cudaSuccess && e != cudaErrorSetOnActiveProcess) {
		gs_say(err, len, "cannot set up the GPU: %s",
		       cudaGetErrorString(e));
		return -1;
	}
	(void)cudaGetLastError();
	e = cudaFree(NULL); /* the context, now */
	if (e != cudaSuccess) {
		gs_say(err, len, "cannot set up the GPU: %s",
		       cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

int gs_be_map(struct gsock_ctx *ctx, char *err, size_t len)
{
	cudaStream_t world_stream;
	cudaError_t e;
	void *dev = NULL;

	e = cudaHostRegister(ctx->base, ctx->layout.size,
			     cudaHostRegisterMapped);
	if (e != cudaSuccess)
		goto err_cuda;
	e = cudaHostGetDevicePointer(&dev, ctx->base, 0);
	if (e != cudaSuccess)
		goto err_cuda;
	ctx->dev_base = dev;
	e = cudaStreamCreateWithFlags(&world_stream, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		goto err_cuda;
	ctx->be = world_stream;
	e = cudaMalloc((void **)&ctx->local, gs_local_size(ctx));
	if (e != cudaSuccess)
		goto err_cuda;
	e = cudaMemset(ctx->local, 0, gs_local_size(ctx));
	if (e != cudaSuccess)
		goto err_cuda;
	return 0;
err_cuda:
	gs_say(err, len, "cannot map the arena for the GPU: %s",
	       cudaGetErrorString(e));
	return -1;
}

void gs_be_map_pool(struct gsock_ctx *ctx)
{
	cudaError_t e = cudaHostRegister(ctx->pool, ctx->pool_size,
					 cudaHostRegisterMapped);
	void *dev = NULL;

	if (e == cudaSuccess)
		e = cudaHostGetDevicePointer(&dev, ctx->pool, 0);
	if (e != cudaSuccess) {
		fprintf(stderr,
			"libgsock: cannot map gsockd's direct pool (%llu MiB) for the GPU: %s; connections take the bridge (direct_conns in gsock.conf)\n",
			(unsigned long long)(ctx->pool_size >> 20),
			cudaGetErrorString(e));
		(void)cudaGetLastError();
		return;
	}
	ctx->dev_pool = dev;
}

void gs_be_label(int device, char *buf, size_t len)
{
	char pci[20] = "";

	if (cudaDeviceGetPCIBusId(pci, sizeof(pci), device) != cudaSuccess)
		pci[0] = 0;
	for (char *c = pci; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	snprintf(buf, len, "cuda:%d%s%s", device, *pci ? " " : "", pci);
}

void gs_be_use(const struct gsock_ctx *ctx)
{
	cudaSetDevice(ctx->device);
}

void gs_be_world_push(struct gsock_ctx *ctx)
{
	cudaStream_t s = ctx->be;

	cudaMemcpyAsync(&ctx->local->world, &ctx->world, sizeof(ctx->world),
			cudaMemcpyHostToDevice, s);
	cudaStreamSynchronize(s);
}

int gs_be_start(struct gs_launch *l, const void *kernel, struct gsock_dev dev,
		unsigned blocks, unsigned threads, void *arg)
{
	dim3 grid = { blocks, 1, 1 }, block = { threads, 1, 1 };
	void *args[] = { &dev, &arg };
	int per_sm = 0, sms = 0, device = 0;
	cudaStream_t stream;
	cudaError_t e;

	/*
	 * A g-call block waits on the network and on other blocks: one that
	 * is not resident never runs while the resident ones spin, and what
	 * it would serve waits for ever. Refuse what cannot all be resident
	 * (counting this kernel alone on an idle GPU).
	 */
	if (cudaGetDevice(&device) == cudaSuccess &&
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
				   device) == cudaSuccess &&
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(
		    &per_sm, kernel, (int)threads, 0) == cudaSuccess &&
	    (uint64_t)blocks > (uint64_t)per_sm * (unsigned)sms) {
		fprintf(stderr,
			"gsock: %u blocks of %u threads cannot all run at once: this kernel fits %d on each of the GPU's %d multiprocessors (%d in all), and g-call blocks must all be resident\n",
			blocks, threads, per_sm, sms, per_sm * sms);
		return -E2BIG;
	}
	e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		return -ENOMEM;
	e = cudaLaunchKernel(kernel, grid, block, args, 0, stream);
	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: kernel launch failed: %s\n",
			cudaGetErrorString(e));
		cudaStreamDestroy(stream);
		return -EINVAL;
	}
	l->be = stream;
	return 0;
}

bool gs_be_started_some(struct gs_launch *l)
{
	(void)l; /* a launch starts all its blocks or none; no stream is left */
	return false;
}

int gs_be_finish(struct gs_launch *l)
{
	cudaStream_t stream = l->be;
	cudaError_t e = cudaStreamSynchronize(stream);

	cudaStreamDestroy(stream);
	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: kernel failed: %s\n",
			cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}

void *gs_be_alloc(size_t size)
{
	void *p = NULL;

	/* portable: every GPU's kernels of this process reach it */
	if (cudaHostAlloc(&p, size,
			  cudaHostAllocMapped | cudaHostAllocPortable) !=
	    cudaSuccess)
		return NULL;
	memset(p, 0, size);
	return p;
}

void gs_be_free(void *p)
{
	if (p)
		cudaFreeHost(p);
}

void *gs_be_dev_alloc(size_t size)
{
	void *p = NULL;

	if (cudaMalloc(&p, size) != cudaSuccess)
		return NULL;
	/* synchronous: kernels run on a stream that does not wait for stream 0 */
	if (cudaMemset(p, 0, size) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

void gs_be_dev_free(void *p)
{
	if (p)
		cudaFree(p);
}

int gs_be_memcpy(void *dst, const void *src, size_t n)
{
	cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);

	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: cannot copy %zu bytes: %s\n", n,
			cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}

void gs_be_unmap(struct gsock_ctx *ctx)
{
	if (ctx->dev_pool)
		cudaHostUnregister(ctx->pool);
	if (ctx->dev_base)
		cudaHostUnregister(ctx->base);
	if (ctx->local)
		cudaFree(ctx->local);
	if (ctx->be)
		cudaStreamDestroy((cudaStream_t)ctx->be);
}
