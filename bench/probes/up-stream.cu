/* SPDX-License-Identifier: Apache-2.0 */
/*
 * up-stream: the floor of one CPU-to-GPU stream through a ring in host
 * memory, with no library. A CPU thread copies 1 MiB sends into the
 * ring (streaming stores, as the preload does, or memcpy), STEP bytes at
 * a time, publishing its tail after each step; one GPU block waits for
 * the tail, copies what is there (at most CHUNK bytes) into GPU memory
 * with U 16-byte loads in flight per thread, and publishes its head after
 * each copy. 4 GiB in all; prints GB/s and the GPU's mean bytes a copy.
 *
 *   nvcc -O2 -o up-stream bench/probes/up-stream.cu -lpthread
 *   ./up-stream RING_KIB STEP_KIB CHUNK_KIB THREADS U nt|memcpy
 */
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ck.h"

struct ctl {
	volatile uint64_t tail; /* CPU's */
	char pad[120];
	volatile uint64_t head; /* GPU's */
	char pad2[120];
	uint64_t copies;
};

template <int U>
__global__ void sink(struct ctl *c, const uint4 *ring, uint4 *dst,
		     uint64_t ring_b, uint64_t chunk_b, uint64_t total)
{
	__shared__ uint64_t tail_s;
	unsigned nt = blockDim.x, tid = threadIdx.x;
	uint64_t head = 0, copies = 0;

	while (head < total) {
		if (tid == 0) {
			uint64_t t;

			do
				asm volatile("ld.acquire.sys.u64 %0, [%1];"
					     : "=l"(t)
					     : "l"(&c->tail)
					     : "memory");
			while (t == head);
			tail_s = t;
		}
		__syncthreads();
		uint64_t n = tail_s - head;

		if (n > chunk_b)
			n = chunk_b;
		/* ring_b and steps are multiples of 16 KiB: no wrap inside a word */
		for (uint64_t off = 0; off < n;) {
			uint64_t at = (head + off) % ring_b;
			uint64_t run = ring_b - at < n - off ? ring_b - at : n - off;
			const uint4 *s = ring + at / 16;
			uint4 *d = dst + at / 16;
			uint64_t w = run / 16, k = tid;

			for (; k + (U - 1) * (uint64_t)nt < w; k += U * (uint64_t)nt) {
				uint4 v[U];

#pragma unroll
				for (int j = 0; j < U; j++)
					v[j] = s[k + j * (uint64_t)nt];
#pragma unroll
				for (int j = 0; j < U; j++)
					d[k + j * (uint64_t)nt] = v[j];
			}
			for (; k < w; k += nt)
				d[k] = s[k];
			off += run;
		}
		__syncthreads();
		head += n;
		copies++;
		if (tid == 0)
			asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(&c->head),
				     "l"(head)
				     : "memory");
	}
	if (tid == 0)
		c->copies = copies;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The preload's ring_write (preload/direct.c), which this stands for. */
static void nt_copy(uint8_t *r, const uint8_t *b, size_t k)
{
	for (; k >= 64; k -= 64, r += 64, b += 64) {
		__m128i x0 = _mm_loadu_si128((const __m128i *)b);
		__m128i x1 = _mm_loadu_si128((const __m128i *)(b + 16));
		__m128i x2 = _mm_loadu_si128((const __m128i *)(b + 32));
		__m128i x3 = _mm_loadu_si128((const __m128i *)(b + 48));

		_mm_stream_si128((__m128i *)r, x0);
		_mm_stream_si128((__m128i *)(r + 16), x1);
		_mm_stream_si128((__m128i *)(r + 32), x2);
		_mm_stream_si128((__m128i *)(r + 48), x3);
	}
	_mm_sfence();
}

int main(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: up-stream RING_KIB STEP_KIB CHUNK_KIB THREADS U nt|memcpy\n");
		return 64;
	}
	uint64_t ring_b = strtoull(argv[1], 0, 0) << 10;
	uint64_t step_b = strtoull(argv[2], 0, 0) << 10;
	uint64_t chunk_b = strtoull(argv[3], 0, 0) << 10;
	unsigned threads = atoi(argv[4]);
	int u = atoi(argv[5]), nt = !strcmp(argv[6], "nt");
	uint64_t total = (uint64_t)4 << 30, send = 1 << 20;
	struct ctl *c;
	uint8_t *ring, *src;
	uint4 *dst;
	double t0, t;

	ring = (uint8_t *)mmap(0, ring_b + 4096, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	memset(ring, 0, ring_b + 4096);
	CK(cudaHostRegister(ring, ring_b + 4096, cudaHostRegisterMapped));
	c = (struct ctl *)(ring + ring_b);
	CK(cudaMalloc(&dst, ring_b));
	src = (uint8_t *)aligned_alloc(4096, send);
	memset(src, 3, send);
	if (u == 4)
		sink<4><<<1, threads>>>(c, (const uint4 *)ring, dst, ring_b,
					chunk_b, total);
	else if (u == 8)
		sink<8><<<1, threads>>>(c, (const uint4 *)ring, dst, ring_b,
					chunk_b, total);
	else
		sink<2><<<1, threads>>>(c, (const uint4 *)ring, dst, ring_b,
					chunk_b, total);
	CK(cudaGetLastError());
	t0 = now();
	for (uint64_t tail = 0; tail < total;) {
		uint64_t off = tail % send, n = step_b;

		if (n > send - off)
			n = send - off;
		while (tail + n - __atomic_load_n(&c->head, __ATOMIC_ACQUIRE) >
		       ring_b)
			_mm_pause();
		if (nt)
			nt_copy(ring + tail % ring_b, src + off, n);
		else
			memcpy(ring + tail % ring_b, src + off, n);
		tail += n;
		__atomic_store_n(&c->tail, tail, __ATOMIC_RELEASE);
	}
	CK(cudaDeviceSynchronize());
	t = now() - t0;
	printf("ring %4llu KiB step %4llu KiB chunk %4llu KiB, %4u threads x %d loads, %-6s: %6.2f GB/s, %7.1f KiB a copy\n",
	       (unsigned long long)(ring_b >> 10), (unsigned long long)(step_b >> 10),
	       (unsigned long long)(chunk_b >> 10), threads, u, argv[6],
	       total / t / 1e9, total / 1024.0 / c->copies);
	return 0;
}
