/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence-cost: what a publishing thread pays for its fence, by what it
 * stored before. One block of THREADS threads; each round every thread
 * stores 8 bytes (into GPU memory, or into mapped host memory, or
 * nothing), the block syncs, and thread 0 fences and stores a flag; the
 * round's time is thread 0's, on the GPU's global timer.
 *
 *   nvcc -O2 -o fence-cost bench/probes/fence-cost.cu
 *   ./fence-cost [THREADS]
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 20000

enum { F_NONE, F_GPU, F_ACQREL_SYS, F_SC_SYS };
static const char *fname[] = { "none", "fence.acq_rel.gpu", "fence.acq_rel.sys",
			       "fence.sc.sys" };

__device__ static uint64_t now(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void run(uint64_t *data, uint64_t *flag, int fence, int store,
		    uint64_t *out)
{
	uint64_t t0 = 0;

	for (int r = 0; r < ROUNDS + 100; r++) {
		if (r == 100 && threadIdx.x == 0)
			t0 = now();
		if (store)
			((volatile uint64_t *)data)[threadIdx.x] = r;
		__syncthreads();
		if (threadIdx.x == 0) {
			switch (fence) {
			case F_GPU:
				asm volatile("fence.acq_rel.gpu;" ::: "memory");
				break;
			case F_ACQREL_SYS:
				asm volatile("fence.acq_rel.sys;" ::: "memory");
				break;
			case F_SC_SYS:
				asm volatile("fence.sc.sys;" ::: "memory");
				break;
			}
			*(volatile uint64_t *)flag = r;
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*out = now() - t0;
}

int main(int argc, char **argv)
{
	unsigned threads = argc > 1 ? (unsigned)atoi(argv[1]) : 256;
	uint64_t *hdata, *hflag, *ddata, *dflag, *out, *dh, *df;

	cudaHostAlloc((void **)&hdata, 8192, cudaHostAllocMapped);
	cudaHostAlloc((void **)&hflag, 64, cudaHostAllocMapped);
	cudaHostGetDevicePointer((void **)&dh, hdata, 0);
	cudaHostGetDevicePointer((void **)&df, hflag, 0);
	cudaMalloc((void **)&ddata, 8192);
	cudaMalloc((void **)&dflag, 64);
	cudaHostAlloc((void **)&out, 64, cudaHostAllocMapped);
	printf("fence-cost: %u threads, ns a round (sync, stores, fence, flag, sync)\n",
	       threads);
	printf("  %-18s %12s %12s %12s %12s\n", "fence", "no stores",
	       "gpu data", "host data", "host flag");
	for (int f = F_NONE; f <= F_SC_SYS; f++) {
		double ns[4];

		for (int k = 0; k < 4; k++) {
			uint64_t *d = k == 2 ? dh : ddata;
			uint64_t *fl = k == 3 ? df : dflag;

			run<<<1, threads>>>(d, fl, f, k != 0 && k != 3 ? 1 : k == 3,
					     out);
			if (cudaDeviceSynchronize() != cudaSuccess) {
				fprintf(stderr, "fence-cost: kernel failed\n");
				return 1;
			}
			ns[k] = (double)*out / ROUNDS;
		}
		printf("  %-18s %12.0f %12.0f %12.0f %12.0f\n", fname[f], ns[0],
		       ns[1], ns[2], ns[3]);
	}
	return 0;
}
