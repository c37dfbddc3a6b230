/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host-read: how fast one block reads host memory that a CPU program
 * wrote, the copy a GPU's grecv makes from a CPU sender's ring. No
 * library: one block copies CHUNK bytes at a time from a host ring (a
 * MAP_SHARED mapping registered with cudaHostRegister, as gsock's
 * segments are) into GPU memory, with THREADS threads and U 16-byte loads
 * in flight per thread, over 1 GiB; and one CPU thread's memcpy into the
 * same ring, the sender's side, in CHUNK steps.
 *
 *   nvcc -O2 -o host-read bench/probes/host-read.cu
 *   ./host-read [RING_KIB [CHUNK_KIB]]     (256 and 64 by default)
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ck.h"

template <int U>
__global__ void rd(uint4 *dst, const uint4 *ring, size_t ring_words,
		   size_t chunk_words, size_t total_words)
{
	unsigned nt = blockDim.x, tid = threadIdx.x;

	for (size_t done = 0; done < total_words; done += chunk_words) {
		const uint4 *s = ring + done % ring_words;
		uint4 *d = dst + done % ring_words;
		size_t k = tid;

		for (; k + (U - 1) * (size_t)nt < chunk_words;
		     k += U * (size_t)nt) {
			uint4 v[U];

			for (int j = 0; j < U; j++)
				v[j] = s[k + j * (size_t)nt];
			for (int j = 0; j < U; j++)
				d[k + j * (size_t)nt] = v[j];
		}
		for (; k < chunk_words; k += nt)
			d[k] = s[k];
		__syncthreads();
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

template <int U>
static void run(uint4 *dst, const uint4 *ring, size_t ring_b, size_t chunk_b,
		unsigned threads, unsigned blocks)
{
	size_t total = (size_t)1 << 30;
	cudaEvent_t a, b;
	float ms;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	rd<U><<<blocks, threads>>>(dst, ring, ring_b / 16, chunk_b / 16,
				   ring_b / 16);
	(void)cudaGetLastError(); /* the timed launch says it */
	CK(cudaEventRecord(a));
	rd<U><<<blocks, threads>>>(dst, ring, ring_b / 16, chunk_b / 16,
				   total / 16);
	if (cudaGetLastError() != cudaSuccess) { /* registers: too many threads */
		printf("gpu read: %u block(s) x %4u threads, %2d loads in flight: cannot launch\n",
		       blocks, threads, U);
		return;
	}
	CK(cudaEventRecord(b));
	CK(cudaEventSynchronize(b));
	CK(cudaEventElapsedTime(&ms, a, b));
	printf("gpu read: %u block(s) x %4u threads, %2d loads in flight: %6.2f GB/s%s\n",
	       blocks, threads, U, blocks * total / (ms * 1e-3) / 1e9,
	       blocks > 1 ? " (all blocks, the same bytes)" : "");
}

int main(int argc, char **argv)
{
	size_t ring_b = (argc > 1 ? strtoul(argv[1], 0, 0) : 256) << 10;
	size_t chunk_b = (argc > 2 ? strtoul(argv[2], 0, 0) : 64) << 10;
	size_t src_b = (size_t)4 << 20;
	uint8_t *ring, *src;
	uint4 *dst;
	double t0, t;
	size_t total = (size_t)1 << 30;

	ring = (uint8_t *)mmap(0, ring_b, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ring == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(ring, 1, ring_b);
	CK(cudaHostRegister(ring, ring_b, cudaHostRegisterMapped));
	CK(cudaMalloc(&dst, ring_b));
	src = (uint8_t *)malloc(src_b);
	memset(src, 2, src_b);
	printf("ring %zu KiB, chunk %zu KiB\n", ring_b >> 10, chunk_b >> 10);
	t0 = now();
	for (size_t done = 0; done < total; done += chunk_b)
		memcpy(ring + done % ring_b, src + done % src_b, chunk_b);
	t = now() - t0;
	printf("cpu memcpy into the ring: %.2f GB/s\n", total / t / 1e9);
	for (unsigned th = 256; th <= 1024; th *= 2) {
		run<4>(dst, (const uint4 *)ring, ring_b, chunk_b, th, 1);
		run<8>(dst, (const uint4 *)ring, ring_b, chunk_b, th, 1);
		run<16>(dst, (const uint4 *)ring, ring_b, chunk_b, th, 1);
	}
	run<4>(dst, (const uint4 *)ring, ring_b, chunk_b, 256, 4);
	run<8>(dst, (const uint4 *)ring, ring_b, chunk_b, 256, 4);
	return 0;
}
