/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgsock's cuda backend: the arena and the direct pool registered as
 * mapped pinned memory so kernels reach them over PCIe, the device's own
 * state in device memory, the world word copied there on its own stream,
 * and kernels launched each on a stream of their own, all resident.
 * A receive pool is device memory made with the driver's virtual memory
 * calls, so it can be exported as a descriptor that another process
 * maps for its own GPU (over NVLink or PCIe peer access); the physical
 * memory lives until every process that mapped it lets go, so a sender
 * whose receiver died writes into memory that still exists. The driver
 * calls are looked up through the runtime: no link against libcuda.
 */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <unistd.h>

#include <cuda.h>
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

/* The driver's virtual memory calls, looked up once. */
static struct {
	CUresult (*gran)(size_t *, const CUmemAllocationProp *,
			 CUmemAllocationGranularity_flags);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
			   const CUmemAllocationProp *, unsigned long long);
	CUresult (*export_fd)(void *, CUmemGenericAllocationHandle,
			      CUmemAllocationHandleType, unsigned long long);
	CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *,
			      CUmemAllocationHandleType);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
			    unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t,
			CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *,
			   size_t);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*release)(CUmemGenericAllocationHandle);
	int looked; /* 1 found, -1 not */
} vmm;

static bool vmm_ok(void)
{
	static const char *const names[] = {
		"cuMemGetAllocationGranularity", "cuMemCreate",
		"cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
		"cuMemAddressReserve", "cuMemMap", "cuMemSetAccess",
		"cuMemUnmap", "cuMemAddressFree", "cuMemRelease",
	};
	void **fn = (void **)&vmm;

	if (__atomic_load_n(&vmm.looked, __ATOMIC_ACQUIRE))
		return vmm.looked > 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		enum cudaDriverEntryPointQueryResult q;

		if (cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000,
						     cudaEnableDefault,
						     &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess || !fn[i]) {
			__atomic_store_n(&vmm.looked, -1, __ATOMIC_RELEASE);
			return false;
		}
	}
	__atomic_store_n(&vmm.looked, 1, __ATOMIC_RELEASE);
	return true;
}

static void vmm_say(char *why, size_t len, const char *call, CUresult r)
{
	snprintf(why, len, "%s failed (CUresult %d)", call, (int)r);
}

/*
 * Reserve size bytes of address space, map h there and let device reach
 * it: the address, or 0 with why.
 */
static CUdeviceptr vmm_map(CUmemGenericAllocationHandle h, size_t size,
			   int device, char *why, size_t len)
{
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
					      .id = device },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr p = 0;
	CUresult r = vmm.reserve(&p, size, 0, 0, 0);

	if (r != CUDA_SUCCESS) {
		vmm_say(why, len, "cuMemAddressReserve", r);
		return 0;
	}
	r = vmm.map(p, size, 0, h, 0);
	if (r != CUDA_SUCCESS) {
		vmm_say(why, len, "cuMemMap", r);
		vmm.addr_free(p, size);
		return 0;
	}
	r = vmm.access(p, size, &acc, 1);
	if (r != CUDA_SUCCESS) {
		vmm_say(why, len,
			"cuMemSetAccess (no peer access between the GPUs?)", r);
		vmm.unmap(p, size);
		vmm.addr_free(p, size);
		return 0;
	}
	return p;
}

int gs_be_rx_make(struct gsock_ctx *ctx, uint64_t size, char *why, size_t len)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
			      .id = ctx->device },
	};
	CUmemGenericAllocationHandle h;
	CUdeviceptr p;
	size_t gran = 0;
	int fd = -1;
	CUresult r;

	if (!vmm_ok()) {
		snprintf(why, len,
			 "the driver lacks the virtual memory calls (cuMemCreate)");
		return -1;
	}
	r = vmm.gran(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS || !gran) {
		vmm_say(why, len, "cuMemGetAllocationGranularity", r);
		return -1;
	}
	size = (size + gran - 1) / gran * gran;
	r = vmm.create(&h, size, &prop, 0);
	if (r != CUDA_SUCCESS) {
		vmm_say(why, len, "cuMemCreate", r);
		return -1;
	}
	r = vmm.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r != CUDA_SUCCESS) {
		vmm_say(why, len, "cuMemExportToShareableHandle", r);
		vmm.release(h);
		return -1;
	}
	p = vmm_map(h, size, ctx->device, why, len);
	vmm.release(h); /* the mapping and the descriptor hold it */
	/* zeroed: the counter copies (gsock_arena.h, gs_dctr) start unused */
	if (p && (cudaMemsetAsync((void *)(uintptr_t)p, 0, size,
				  (cudaStream_t)ctx->be) != cudaSuccess ||
		  cudaStreamSynchronize((cudaStream_t)ctx->be) != cudaSuccess)) {
		snprintf(why, len, "cannot zero it");
		gs_be_peer_unmap((void *)(uintptr_t)p, size, NULL);
		p = 0;
	}
	if (!p) {
		close(fd);
		return -1;
	}
	ctx->rx_dev = (uint8_t *)(uintptr_t)p;
	ctx->rx_size = size;
	ctx->rx_fd = fd;
	return 0;
}

void gs_be_rx_free(struct gsock_ctx *ctx)
{
	if (ctx->rx_dev)
		gs_be_peer_unmap(ctx->rx_dev, ctx->rx_size, NULL);
}

void *gs_be_peer_map(struct gsock_ctx *ctx, int fd, uint64_t size, void **be,
		     char *why, size_t len)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr p;
	CUresult r;

	*be = NULL;
	if (!vmm_ok()) {
		snprintf(why, len,
			 "the driver lacks the virtual memory calls (cuMemImportFromShareableHandle)");
		return NULL;
	}
	r = vmm.import_fd(&h, (void *)(uintptr_t)fd,
			  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS) {
		vmm_say(why, len, "cuMemImportFromShareableHandle", r);
		return NULL;
	}
	p = vmm_map(h, size, ctx->device, why, len);
	vmm.release(h);
	return p ? (void *)(uintptr_t)p : NULL;
}

void gs_be_peer_unmap(void *view, uint64_t size, void *be)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)view;

	(void)be;
	if (!vmm_ok())
		return;
	vmm.unmap(p, size);
	vmm.addr_free(p, size);
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

int gs_be_max_threads(const void *kernel)
{
	struct cudaFuncAttributes fa;

	if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
		return -EINVAL;
	return fa.maxThreadsPerBlock;
}

void gs_be_world_push(struct gsock_ctx *ctx)
{
	cudaStream_t s = ctx->be;

	cudaMemcpyAsync(&ctx->local->world, &ctx->world, sizeof(ctx->world),
			cudaMemcpyHostToDevice, s);
	cudaStreamSynchronize(s);
}

/*
 * Launch blocks x threads of kernel on stream, every block resident: 0,
 * -E2BIG (said on stderr) or -EINVAL (the launch failed, said too).
 */
static int gs_be_launch(cudaStream_t stream, const void *kernel,
			struct gsock_dev dev, unsigned blocks,
			unsigned threads, void *arg)
{
	dim3 grid = { blocks, 1, 1 }, block = { threads, 1, 1 };
	void *args[] = { &dev, &arg };
	int per_sm = 0, sms = 0, device = 0;
	struct cudaFuncAttributes fa;
	cudaError_t e;

	/*
	 * A block larger than the kernel's registers allow cannot run at
	 * all: say so, not that 0 blocks fit (the occupancy check below).
	 */
	if (cudaFuncGetAttributes(&fa, kernel) == cudaSuccess &&
	    threads > (unsigned)fa.maxThreadsPerBlock) {
		fprintf(stderr,
			"gsock: blocks of %u threads cannot run this kernel: it uses %d registers a thread, which allows %d threads a block at most\n",
			threads, fa.numRegs, fa.maxThreadsPerBlock);
		return -E2BIG;
	}
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
	e = cudaLaunchKernel(kernel, grid, block, args, 0, stream);
	if (e != cudaSuccess) {
		fprintf(stderr, "gsock: kernel launch failed: %s\n",
			cudaGetErrorString(e));
		return -EINVAL;
	}
	return 0;
}

int gs_be_start(struct gs_launch *l, const void *kernel, struct gsock_dev dev,
		unsigned blocks, unsigned threads, void *arg)
{
	cudaStream_t stream;
	int r;

	if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
	    cudaSuccess)
		return -ENOMEM;
	r = gs_be_launch(stream, kernel, dev, blocks, threads, arg);
	if (r) {
		cudaStreamDestroy(stream);
		return r;
	}
	l->be = stream;
	return 0;
}

int gs_be_start_on(void *stream, const void *kernel, struct gsock_dev dev,
		   unsigned blocks, unsigned threads, void *arg)
{
	return gs_be_launch((cudaStream_t)stream, kernel, dev, blocks,
			    threads, arg);
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
