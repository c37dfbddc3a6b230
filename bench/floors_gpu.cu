/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU floors: what no GPU network stack can beat on this machine.
 * A one-thread kernel and a CPU thread bounce a counter through mapped
 * pinned memory (the path every g-call's signal takes), and cudaMemcpy
 * moves 256 MiB between pinned host memory and the device.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "floors.h"

#define TRIPS 20000

__global__ void ping(volatile uint32_t *to_cpu, volatile uint32_t *to_gpu)
{
	for (uint32_t i = 1; i <= TRIPS; i++) {
		*to_cpu = i;
		__threadfence_system();
		while (*to_gpu != i)
			;
	}
}

struct pong {
	volatile uint32_t *to_cpu, *to_gpu;
};

static void *pong_run(void *arg)
{
	struct pong *p = (struct pong *)arg;

	for (uint32_t i = 1; i <= TRIPS; i++) {
		while (*p->to_cpu != i)
			;
		*p->to_gpu = i;
	}
	return NULL;
}

static double secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double copy_gbs(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
	double t;

	cudaMemcpy(dst, src, n, k); /* warm */
	t = secs();
	for (int i = 0; i < 5; i++)
		cudaMemcpy(dst, src, n, k);
	return 5.0 * (double)n / (secs() - t) / 1e9;
}

extern "C" int floors_gpu(double *mapped_rtt_us, double *h2d_gbs,
			  double *d2h_gbs, const char **why)
{
	const size_t n = 256u << 20;
	uint32_t *flags, *dflags;
	void *host, *dev;
	struct pong p;
	pthread_t t;
	double t0;
	int count = 0;

	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		*why = "no CUDA device";
		return -1;
	}
	if (cudaHostAlloc((void **)&flags, 2 * sizeof(uint32_t),
			  cudaHostAllocMapped) != cudaSuccess ||
	    cudaHostGetDevicePointer((void **)&dflags, flags, 0) !=
		    cudaSuccess ||
	    cudaHostAlloc(&host, n, cudaHostAllocDefault) != cudaSuccess ||
	    cudaMalloc(&dev, n) != cudaSuccess) {
		*why = "CUDA allocation failed";
		return -1;
	}
	flags[0] = flags[1] = 0;
	p.to_cpu = flags;
	p.to_gpu = flags + 1;
	ping<<<1, 1>>>(dflags,
		       dflags + 1); /* warm-up launch, then the real one */
	pthread_create(&t, NULL, pong_run, &p);
	pthread_join(t, NULL);
	cudaDeviceSynchronize();
	flags[0] = flags[1] = 0;
	t0 = secs();
	ping<<<1, 1>>>(dflags, dflags + 1);
	pthread_create(&t, NULL, pong_run, &p);
	pthread_join(t, NULL);
	cudaDeviceSynchronize();
	*mapped_rtt_us = (secs() - t0) * 1e6 / TRIPS;
	*h2d_gbs = copy_gbs(dev, host, n, cudaMemcpyHostToDevice);
	*d2h_gbs = copy_gbs(host, dev, n, cudaMemcpyDeviceToHost);
	cudaFree(dev);
	cudaFreeHost(host);
	cudaFreeHost(flags);
	return 0;
}

extern "C" int floors_peer(double *peer_gbs, const char **why)
{
	const size_t n = 256u << 20;
	void *a = NULL, *b = NULL;
	int count = 0, can = 0;
	double t;

	if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
		*why = "fewer than two GPUs";
		return -1;
	}
	cudaDeviceCanAccessPeer(&can, 1, 0);
	cudaSetDevice(0);
	if (can)
		cudaDeviceEnablePeerAccess(1, 0);
	if (cudaMalloc(&a, n) != cudaSuccess) {
		*why = "CUDA allocation failed";
		return -1;
	}
	cudaSetDevice(1);
	if (can)
		cudaDeviceEnablePeerAccess(0, 0);
	if (cudaMalloc(&b, n) != cudaSuccess) {
		*why = "CUDA allocation failed";
		return -1;
	}
	cudaMemcpyPeer(b, 1, a, 0, n); /* warm */
	cudaDeviceSynchronize();
	t = secs();
	for (int i = 0; i < 5; i++)
		cudaMemcpyPeer(b, 1, a, 0, n);
	cudaDeviceSynchronize();
	*peer_gbs = 5.0 * (double)n / (secs() - t) / 1e9;
	cudaFree(b);
	cudaSetDevice(0);
	cudaFree(a);
	return 0;
}
