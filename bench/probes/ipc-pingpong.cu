/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc-pingpong: the floor of a direct connection's 64 B round trip
 * between two processes, with no library: each process's one warp polls
 * a lane of 32 8-byte units (4 bytes and a 4-byte sequence tag each, as
 * gsock's lanes) in its own GPU memory, and writes its answer into the
 * other's through CUDA IPC. Two processes on one GPU need MPS to run at
 * once; on two GPUs the writes cross NVLink or PCIe.
 *
 *   nvcc -O2 -o ipc-pingpong bench/probes/ipc-pingpong.cu -lcuda
 *   ./ipc-pingpong server DIR [GPU [vmm|pub|vmm,pub]] & ./ipc-pingpong client DIR ...
 *
 * DIR is where the two leave their IPC handles for each other. With vmm,
 * each lane lies in memory made as gsock makes a receive pool
 * (cuMemCreate, exported as a POSIX descriptor, which the other process
 * takes with pidfd_getfd and maps with cuMemMap) instead of cudaMalloc's
 * with a CUDA IPC handle. With pub (vmm,pub too), each side's put is
 * followed by what gsend's publish does: a system fence, then a store to
 * host memory. The client
 * prints the round trip's p10, p50 and p99 (the GPU's global timer), over
 * ITERS (20000) round trips after 2000 left out, its waits' turns (polls
 * of the lane that found nothing), and where waits took several, a
 * turn's length (round trip time over turns: an upper bound).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define UNITS 32
#define ITERS 20000
#define SKIP 2000

__device__ uint64_t now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__device__ uint64_t peek(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p));
	return v;
}

__device__ void put(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.u64 [%0], %1;" : : "l"(p), "l"(v));
}

/* wait until every unit of rx carries tag seq; returns the turns */
__device__ uint32_t take(const uint64_t *rx, uint32_t seq)
{
	uint32_t turns = 0;

	while (!__all_sync(0xffffffffu,
			   (uint32_t)(peek(rx + threadIdx.x) >> 32) == seq))
		turns++;
	return turns;
}

/*
 * After each put, with pub: what a gsend does after its copy, a store to
 * host memory behind a system fence (a publish of the tail).
 */
__device__ void publish(uint64_t *pub, uint32_t i)
{
	if (pub && threadIdx.x == 0) {
		__threadfence_system();
		*(volatile uint64_t *)pub = i;
	}
	__syncwarp();
}

__global__ void run(uint64_t *rx, uint64_t *tx, int client, uint64_t *rtt,
		    uint32_t *turns, uint64_t *pub)
{
	for (uint32_t i = 1; i <= ITERS + SKIP; i++) {
		uint64_t t0 = now_ns();

		if (client) {
			put(tx + threadIdx.x, (uint64_t)i << 32 | threadIdx.x);
			publish(pub, i);
		}
		uint32_t n = take(rx, i);
		if (!client) {
			put(tx + threadIdx.x, (uint64_t)i << 32 | threadIdx.x);
			publish(pub, i);
		}
		if (client && threadIdx.x == 0 && i > SKIP) {
			rtt[i - SKIP - 1] = now_ns() - t0;
			turns[i - SKIP - 1] = n;
		}
	}
}

static void die(const char *what, cudaError_t e)
{
	fprintf(stderr, "ipc-pingpong: %s: %s\n", what, cudaGetErrorString(e));
	exit(1);
}

#define VMM_SIZE (2u << 20)

static void cu_die(const char *what, CUresult r)
{
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "ipc-pingpong: %s: CUresult %d\n", what, (int)r);
		exit(1);
	}
}

/* h mapped for gpu's reads and writes */
static uint64_t *vmm_map(CUmemGenericAllocationHandle h, int gpu)
{
	CUmemAccessDesc acc = {};
	CUdeviceptr p;

	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = gpu;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cu_die("cuMemAddressReserve", cuMemAddressReserve(&p, VMM_SIZE, 0, 0, 0));
	cu_die("cuMemMap", cuMemMap(p, VMM_SIZE, 0, h, 0));
	cu_die("cuMemSetAccess", cuMemSetAccess(p, VMM_SIZE, &acc, 1));
	return (uint64_t *)(uintptr_t)p;
}

/* gsock's receive pool's way: device memory, a POSIX descriptor for it */
static uint64_t *vmm_make(int gpu, int *fd)
{
	CUmemAllocationProp prop = {};
	CUmemGenericAllocationHandle h;

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = gpu;
	cu_die("cuMemCreate", cuMemCreate(&h, VMM_SIZE, &prop, 0));
	cu_die("cuMemExportToShareableHandle",
	       cuMemExportToShareableHandle(fd, h,
					    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					    0));
	return vmm_map(h, gpu);
}

/* the other process's descriptor fd, taken from it and mapped */
static uint64_t *vmm_take(int pid, int fd, int gpu)
{
	CUmemGenericAllocationHandle h;
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int mine = pfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);

	if (mine < 0) {
		perror("ipc-pingpong: pidfd_getfd");
		exit(1);
	}
	cu_die("cuMemImportFromShareableHandle",
	       cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)mine,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	return vmm_map(h, gpu);
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct {
		cudaIpcMemHandle_t ipc;
		int pid, fd;
	} mine, theirs;
	uint64_t *rx, *tx, *rtt, *h;
	uint32_t *turns, *ht;
	char path[512], tmp[520];
	int client, gpu, vmm, pubs;
	uint64_t *pub = NULL;
	cudaError_t e;
	FILE *f;

	if (argc < 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: ipc-pingpong server|client DIR [GPU [vmm|pub|vmm,pub]]\n");
		return 64;
	}
	client = !strcmp(argv[1], "client");
	gpu = argc > 3 ? atoi(argv[3]) : 0;
	vmm = argc > 4 && strstr(argv[4], "vmm");
	pubs = argc > 4 && strstr(argv[4], "pub");
	memset(&mine, 0, sizeof(mine));
	mine.pid = (int)getpid();
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY); /* for the other's pidfd_getfd */
	if ((e = cudaSetDevice(gpu)) || (e = cudaFree(0)))
		die("setup", e);
	if (vmm)
		rx = vmm_make(gpu, &mine.fd);
	else if ((e = cudaMalloc(&rx, 4096)) ||
		 (e = cudaIpcGetMemHandle(&mine.ipc, rx)))
		die("setup", e);
	if ((e = cudaMemset(rx, 0, 4096)) || (e = cudaDeviceSynchronize()))
		die("setup", e);
	snprintf(path, sizeof(path), "%s/%s.handle", argv[2], argv[1]);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f || fwrite(&mine, sizeof(mine), 1, f) != 1 || fclose(f) ||
	    rename(tmp, path)) {
		perror(path);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/%s.handle", argv[2],
		 client ? "server" : "client");
	for (int k = 0; !(f = fopen(path, "rb")); k++) {
		if (k > 3000) {
			fprintf(stderr, "ipc-pingpong: no %s\n", path);
			return 1;
		}
		usleep(10000);
	}
	if (fread(&theirs, sizeof(theirs), 1, f) != 1) {
		fprintf(stderr, "ipc-pingpong: short %s\n", path);
		return 1;
	}
	fclose(f);
	if (vmm)
		tx = vmm_take(theirs.pid, theirs.fd, gpu);
	else if ((e = cudaIpcOpenMemHandle((void **)&tx, theirs.ipc,
					   cudaIpcMemLazyEnablePeerAccess)))
		die("open", e);
	if ((e = cudaMalloc(&rtt, ITERS * sizeof(*rtt))) ||
	    (e = cudaMalloc(&turns, ITERS * sizeof(*turns))))
		die("open", e);
	if (pubs && ((e = cudaHostAlloc((void **)&pub, 4096, cudaHostAllocMapped)) ||
		     (e = cudaHostGetDevicePointer((void **)&pub, pub, 0))))
		die("host memory", e);
	run<<<1, UNITS>>>(rx, tx, client, rtt, turns, pubs ? pub : NULL);
	if ((e = cudaDeviceSynchronize()))
		die("run", e);
	if (client) {
		h = (uint64_t *)malloc(ITERS * sizeof(*h));
		ht = (uint32_t *)malloc(ITERS * sizeof(*ht));
		cudaMemcpy(h, rtt, ITERS * sizeof(*h), cudaMemcpyDeviceToHost);
		cudaMemcpy(ht, turns, ITERS * sizeof(*ht), cudaMemcpyDeviceToHost);
		uint64_t sum_t = 0, sum_n = 0;

		for (int i = 0; i < ITERS; i++) {
			sum_t += h[i];
			sum_n += ht[i];
		}
		qsort(h, ITERS, sizeof(*h), cmp);
		printf("ipc-pingpong gpu %d%s%s: 64 B lane round trip p10 %.2f p50 %.2f p99 %.2f us; %.1f turns a wait",
		       gpu, vmm ? " vmm" : "", pubs ? " pub" : "",
		       h[ITERS / 10] / 1e3, h[ITERS / 2] / 1e3,
		       h[ITERS * 99 / 100] / 1e3, (double)sum_n / ITERS);
		/* a turn's length, where waits took several */
		if (sum_n >= ITERS)
			printf(", %.0f ns a turn", (double)sum_t / (double)sum_n);
		printf("\n");
	}
	return 0;
}
