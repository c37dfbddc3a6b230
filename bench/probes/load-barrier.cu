/* SPDX-License-Identifier: Apache-2.0 */
/*
 * load-barrier: does a block barrier wait for one thread's outstanding
 * load of mapped host memory? Thread 0 of a 256-thread block loads a word
 * of host memory (four kinds of load, and none), then every thread stores
 * to shared memory, meets at a barrier, loads shared memory and meets at
 * a second barrier; thread 0 uses the word only after that. Prints the
 * mean ns from the load to after the first barrier, and to after the
 * second, three rounds. On an H100: 15-20 ns for ld.relaxed.sys,
 * ld.volatile and ld.global.cv (the barriers do not wait), 1,145-1,283 ns
 * for ld.acquire.sys (they do). Why gsend's publishing thread reads a
 * CPU reader's want word with a relaxed load, and is a thread that
 * issues no other global load before it needs the word.
 *
 *   nvcc -O2 -arch=sm_90 -o load-barrier bench/probes/load-barrier.cu && ./load-barrier
 */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

__device__ __forceinline__ uint64_t now(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

template <int K> __device__ __forceinline__ uint32_t ld(const uint32_t *p)
{
	uint32_t v = 0;

	if (K == 0)
		asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p));
	if (K == 1)
		asm volatile("ld.acquire.sys.u32 %0, [%1];"
			     : "=r"(v)
			     : "l"(p)
			     : "memory");
	if (K == 2)
		asm volatile("ld.global.cv.u32 %0, [%1];" : "=r"(v) : "l"(p));
	if (K == 3)
		asm volatile("ld.volatile.global.u32 %0, [%1];"
			     : "=r"(v)
			     : "l"(p));
	return v;
}

template <int K>
__global__ void probe(const uint32_t *h, uint64_t *out, uint32_t *sink,
		      int iters)
{
	__shared__ uint32_t sh[256];
	uint64_t first = 0, second = 0;
	uint32_t acc = 0;

	for (int i = 0; i < iters; i++) {
		uint32_t v = 0;
		uint64_t t0 = now(), t1, t2;

		if (threadIdx.x == 0)
			v = ld<K>(h);
		sh[threadIdx.x] = threadIdx.x;
		__syncthreads();
		t1 = now();
		acc += sh[(threadIdx.x + 1) & 255];
		__syncthreads();
		t2 = now();
		if (threadIdx.x == 0)
			acc += v;
		first += t1 - t0;
		second += t2 - t0;
	}
	if (threadIdx.x == 0) {
		out[0] = first / iters;
		out[1] = second / iters;
	}
	sink[threadIdx.x] = acc;
}

int main(void)
{
	static const char *name[] = { "ld.relaxed.sys", "ld.acquire.sys",
				      "ld.global.cv", "ld.volatile", "none" };
	uint32_t *h, *hd, *sink;
	uint64_t *out, r[2];

	if (cudaHostAlloc(&h, 4096, cudaHostAllocMapped) != cudaSuccess ||
	    cudaHostGetDevicePointer(&hd, h, 0) != cudaSuccess ||
	    cudaMalloc(&out, 16) != cudaSuccess ||
	    cudaMalloc(&sink, 1024) != cudaSuccess) {
		fprintf(stderr, "load-barrier: no GPU memory\n");
		return 1;
	}
	*h = 1;
	for (int round = 0; round < 3; round++)
		for (int k = 0; k < 5; k++) {
			switch (k) {
			case 0: probe<0><<<1, 256>>>(hd, out, sink, 20000); break;
			case 1: probe<1><<<1, 256>>>(hd, out, sink, 20000); break;
			case 2: probe<2><<<1, 256>>>(hd, out, sink, 20000); break;
			case 3: probe<3><<<1, 256>>>(hd, out, sink, 20000); break;
			default: probe<4><<<1, 256>>>(hd, out, sink, 20000); break;
			}
			if (cudaMemcpy(r, out, 16, cudaMemcpyDeviceToHost) !=
			    cudaSuccess) {
				fprintf(stderr, "load-barrier: the probe failed\n");
				return 1;
			}
			printf("%-16s load to after the first barrier %5lu ns, to after the second %5lu ns\n",
			       name[k], (unsigned long)r[0], (unsigned long)r[1]);
		}
	return 0;
}
