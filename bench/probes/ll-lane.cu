/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll-lane: what a 64 B round trip costs with bytes that carry their own
 * validity (NCCL's LL: 8-byte units of 4 data bytes and a 4-byte flag,
 * each one 8-byte store) against today's direct-path protocol (the bytes,
 * a fence, then a tail counter that the reader polls before it reads the
 * bytes), and against a mirror of the two (today's protocol, the tail
 * still the truth for every other reader, plus an LL copy that the
 * receiver takes instead), with no library around any, side by side in
 * one run.
 *
 *   gpu-gpu  two one-warp blocks of one kernel ping-pong
 *   cpu-gpu  a CPU thread ping-pongs with a one-warp block
 * each with the two lanes in mapped host memory (where a CPU peer's and a
 * one-GPU MPS pair's rings are) and, for gpu-gpu, in device memory.
 * Prints p50 and p99 of the round trip (GPU global timer for gpu-gpu,
 * CLOCK_MONOTONIC for cpu-gpu).
 *
 *   nvcc -O2 -o ll-lane bench/probes/ll-lane.cu && ./ll-lane [ITERS]
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MSG 64
#define UNITS (MSG / 4) /* LL units of one message */
#define MAXIT 200000

enum { P_RING, P_LL, P_MIRROR };
static const char *pname[] = { "ring (bytes, fence, tail)", "LL (flag in every unit)",
			       "mirror (ring, tail + LL copy)" };

/*
 * One direction's lane: the ring protocol uses tail and data; LL uses
 * unit (a slot per message, reused each time: the flag is the sequence
 * number, so a unit of the last message never reads as the next's).
 */
struct lane {
	volatile uint64_t tail;
	uint64_t pad[15];
	volatile uint32_t data[UNITS];
	uint64_t pad2[8];
	volatile uint64_t unit[UNITS];
};

__device__ static uint64_t now(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* One warp sends message seq (its bytes are seq-derived) into l. */
__device__ static void dsend(struct lane *l, int proto, uint32_t seq)
{
	int i = threadIdx.x;

	if (proto != P_RING && i < UNITS)
		l->unit[i] = (uint64_t)seq << 32 | (seq * 131u + i);
	if (proto == P_LL)
		return;
	if (i < UNITS)
		l->data[i] = seq * 131u + i;
	__syncwarp();
	if (i == 0) {
		__threadfence_system();
		l->tail = seq;
	}
}

/* One warp waits for message seq in l and checks it; 1 if it is right. */
__device__ static int drecv(struct lane *l, int proto, uint32_t seq)
{
	int i = threadIdx.x, good = 1;

	if (proto != P_RING) { /* the mirror's reader takes the LL copy */
		if (i < UNITS) {
			uint64_t u;

			while ((uint32_t)((u = l->unit[i]) >> 32) != seq)
				;
			good = (uint32_t)u == seq * 131u + i;
		}
	} else {
		if (i == 0)
			while ((uint32_t)l->tail != seq)
				;
		__syncwarp();
		__threadfence_system();
		if (i < UNITS)
			good = l->data[i] == seq * 131u + i;
	}
	return __all_sync(0xffffffffu, good);
}

/* gpu-gpu: block 0 pings, block 1 pongs; block 0 stamps each round trip. */
__global__ void gpu_pair(struct lane *ab, struct lane *ba, int proto, int iters,
			 uint64_t *rtt, int *bad)
{
	for (int k = 1; k <= iters; k++) {
		if (blockIdx.x == 0) {
			uint64_t t0 = now();

			dsend(ab, proto, k);
			if (!drecv(ba, proto, k) && threadIdx.x == 0)
				atomicAdd(bad, 1);
			if (threadIdx.x == 0)
				rtt[k - 1] = now() - t0;
		} else {
			if (!drecv(ab, proto, k) && threadIdx.x == 0)
				atomicAdd(bad, 1);
			dsend(ba, proto, k);
		}
	}
}

/* cpu-gpu: the block pongs what the CPU pings. */
__global__ void gpu_pong(struct lane *ab, struct lane *ba, int proto, int iters, int *bad)
{
	for (int k = 1; k <= iters; k++) {
		if (!drecv(ab, proto, k) && threadIdx.x == 0)
			atomicAdd(bad, 1);
		dsend(ba, proto, k);
	}
}

static void hsend(struct lane *l, int proto, uint32_t seq)
{
	if (proto != P_RING)
		for (int i = 0; i < UNITS; i++)
			__atomic_store_n((uint64_t *)&l->unit[i],
					 (uint64_t)seq << 32 | (seq * 131u + i), __ATOMIC_RELAXED);
	if (proto == P_LL)
		return;
	for (int i = 0; i < UNITS; i++)
		l->data[i] = seq * 131u + i;
	__atomic_store_n((uint64_t *)&l->tail, seq, __ATOMIC_RELEASE);
}

static int hrecv(struct lane *l, int proto, uint32_t seq)
{
	int good = 1;

	if (proto != P_RING) {
		for (int i = 0; i < UNITS; i++) {
			uint64_t u;

			while ((uint32_t)((u = __atomic_load_n((uint64_t *)&l->unit[i],
								__ATOMIC_ACQUIRE)) >> 32) != seq)
				;
			good &= (uint32_t)u == seq * 131u + i;
		}
		return good;
	}
	while ((uint32_t)__atomic_load_n((uint64_t *)&l->tail, __ATOMIC_ACQUIRE) != seq)
		;
	for (int i = 0; i < UNITS; i++)
		good &= l->data[i] == seq * 131u + i;
	return good;
}

static int cmp64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, int proto, uint64_t *ns, int n, int bad)
{
	int skip = n / 10; /* the first tenth warms up */

	qsort(ns + skip, n - skip, sizeof(*ns), cmp64);
	n -= skip;
	ns += skip;
	printf("%-22s %-26s p50 %6.2f us  p99 %6.2f us%s\n", what, pname[proto],
	       ns[n / 2] / 1000.0, ns[n * 99 / 100] / 1000.0, bad ? "  WRONG BYTES" : "");
}

#define CK(x)                                                                  \
	do {                                                                   \
		cudaError_t e_ = (x);                                          \
		if (e_ != cudaSuccess) {                                       \
			fprintf(stderr, "ll-lane: %s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1);                                               \
		}                                                              \
	} while (0)

static uint64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20000;
	struct lane *h, *hd, *d;
	uint64_t *rtt_d, *rtt = (uint64_t *)malloc(MAXIT * sizeof(uint64_t));
	int *bad_d, bad;

	if (iters < 100 || iters > MAXIT) {
		fprintf(stderr, "ll-lane: ITERS 100..%d\n", MAXIT);
		return 64;
	}
	CK(cudaHostAlloc((void **)&h, 2 * sizeof(*h), cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
	CK(cudaMalloc((void **)&d, 2 * sizeof(*d)));
	CK(cudaMalloc((void **)&rtt_d, MAXIT * sizeof(uint64_t)));
	CK(cudaMalloc((void **)&bad_d, sizeof(int)));
	for (int round = 0; round < 2; round++) /* the two protocols alternate */
		for (int proto = P_RING; proto <= P_MIRROR; proto++) {
			for (int mem = 0; mem < 2; mem++) {
				struct lane *l = mem ? d : hd;

				if (mem)
					CK(cudaMemset(d, 0, 2 * sizeof(*d)));
				else
					memset(h, 0, 2 * sizeof(*h));
				CK(cudaMemset(bad_d, 0, sizeof(int)));
				gpu_pair<<<2, 32>>>(l, l + 1, proto, iters, rtt_d, bad_d);
				CK(cudaDeviceSynchronize());
				CK(cudaMemcpy(rtt, rtt_d, iters * sizeof(uint64_t),
					      cudaMemcpyDeviceToHost));
				CK(cudaMemcpy(&bad, bad_d, sizeof(int), cudaMemcpyDeviceToHost));
				report(mem ? "gpu-gpu, device mem" : "gpu-gpu, host mem", proto,
				       rtt, iters, bad);
			}
			memset(h, 0, 2 * sizeof(*h));
			CK(cudaMemset(bad_d, 0, sizeof(int)));
			gpu_pong<<<1, 32>>>(hd, hd + 1, proto, iters, bad_d);
			CK(cudaGetLastError()); /* else the pings below wait for ever */
			bad = 0;
			for (int k = 1; k <= iters; k++) {
				uint64_t t0 = mono_ns();

				hsend(h, proto, k);
				bad |= !hrecv(h + 1, proto, k);
				rtt[k - 1] = mono_ns() - t0;
			}
			CK(cudaDeviceSynchronize());
			int gbad;

			CK(cudaMemcpy(&gbad, bad_d, sizeof(int), cudaMemcpyDeviceToHost));
			report("cpu-gpu, host mem", proto, rtt, iters, bad | gbad);
		}
	return 0;
}
