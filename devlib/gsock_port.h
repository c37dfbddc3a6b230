/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The only place that knows which device backend is compiled. Device code
 * uses these names for qualifiers, block geometry, barriers, fences,
 * ordered loads and stores of arena words, the clock and back-off.
 *
 *   backend  compiler  a block is            fences
 *   cuda     nvcc      a CUDA threadblock     __threadfence_system
 *   host     cc        one host thread        C11 atomics (seq_cst)
 */
#ifndef GSOCK_PORT_H
#define GSOCK_PORT_H

#include <stdint.h>

#ifdef __CUDACC__
#define GSOCK_BACKEND_NAME "cuda"
#define GSOCK_DEVICE __device__ __forceinline__ static
/* device code kept out of line: a large loop that only some calls run */
#define GSOCK_DEVICE_NOINLINE __device__ __noinline__ static
#define GS_UNROLL _Pragma("unroll") /* before a loop of constant count */
#define GSOCK_HD __host__ __device__ __forceinline__ static
#define GS_SHARED __shared__
#define GSOCK_KERNEL(name, gs, arg) \
	extern "C" __global__ void name(struct gsock_dev gs, void *arg)
/*
 * A kernel launched with up to `threads` threads a block that must fit
 * `per_sm` blocks on a multiprocessor (the compiler keeps its registers
 * within that): every block of a g-call kernel must be resident at once.
 */
#define GSOCK_KERNEL_FIT(name, gs, arg, threads, per_sm) \
	extern "C" __global__ void __launch_bounds__(threads, per_sm) \
		name(struct gsock_dev gs, void *arg)

GSOCK_DEVICE unsigned gs_tid(void)
{
	return threadIdx.x +
	       blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

GSOCK_DEVICE unsigned gs_bdim(void)
{
	return blockDim.x * blockDim.y * blockDim.z;
}

GSOCK_DEVICE unsigned gs_bid(void)
{
	return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

GSOCK_DEVICE void gs_sync(void)
{
	__syncthreads();
}

/* A barrier that also says whether any thread's v was non-zero. */
GSOCK_DEVICE int gs_sync_or(int v)
{
	return __syncthreads_or(v);
}

/*
 * Within the block's first warp, all 32 of its threads calling: thread
 * 0's v to each; whether any thread's v is non-zero. No block barrier.
 */
GSOCK_DEVICE long gs_warp_bcast(long v)
{
	return __shfl_sync(0xffffffffu, v, 0);
}

GSOCK_DEVICE int gs_warp_any(int v)
{
	return __any_sync(0xffffffffu, v);
}

GSOCK_DEVICE void gs_fence(void)
{
	__threadfence_system();
}

/*
 * Load an arena word with acquire semantics at system scope: later
 * accesses are ordered after it, and no full fence is paid for it.
 */
GSOCK_DEVICE uint64_t gs_ld64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.u64 %0, [%1];"
		     : "=l"(v)
		     : "l"(p)
		     : "memory");
	return v;
}

GSOCK_DEVICE uint32_t gs_ld32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.u32 %0, [%1];"
		     : "=r"(v)
		     : "l"(p)
		     : "memory");
	return v;
}

/*
 * Load a word that another agent moves, with no ordering: what a wait's
 * turn reads (gs_ld64_moved). An ld.acquire.sys also invalidates the
 * SM's L1 (CCTL.IVALL on sm_90), so every later load of the turn, the
 * socket's own state included, went to L2: with the waits on counters
 * in GPU memory peeking instead, the GPU echo's 64 B round trip between
 * two processes on one H100 fell from 7.0-7.7 to 6.3-6.5 us
 * (bench/results/20261127T0300Z-peeking-waits.md).
 */
GSOCK_DEVICE uint64_t gs_peek64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p));
	return v;
}

GSOCK_DEVICE uint32_t gs_peek32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
}

/*
 * Publish an arena word after every earlier write of the block (made
 * before a gs_sync) is visible to the host: a full system fence, then the
 * store.
 */
GSOCK_DEVICE void gs_st64(uint64_t *p, uint64_t v)
{
	__threadfence_system();
	*(volatile uint64_t *)p = v;
}

GSOCK_DEVICE void gs_st32(uint32_t *p, uint32_t v)
{
	__threadfence_system();
	*(volatile uint32_t *)p = v;
}

/* Store an arena word after this thread's earlier stores (release). */
GSOCK_DEVICE void gs_st_release64(uint64_t *p, uint64_t v)
{
	asm volatile("st.release.sys.u64 [%0], %1;"
		     :
		     : "l"(p), "l"(v)
		     : "memory");
}

/*
 * Store an arena word with no ordering but program order: for counters
 * that only tell the host what it may overwrite, written after the loads
 * they cover have returned their values.
 */
GSOCK_DEVICE void gs_st_plain64(uint64_t *p, uint64_t v)
{
	*(volatile uint64_t *)p = v;
}

/* Load a device-memory word that the host runtime may change. */
GSOCK_DEVICE uint32_t gs_ld_local32(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

/*
 * A lane unit (gsock_arena.h): one 8-byte load or store, whole, with no
 * ordering, so a thread's loads of several units travel side by side.
 */
GSOCK_DEVICE uint64_t gs_ld_unit(const uint64_t *p)
{
	return gs_peek64(p); /* the same load: no ordering, whole */
}

GSOCK_DEVICE void gs_st_unit(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.u64 [%0], %1;" : : "l"(p), "l"(v));
}

GSOCK_DEVICE uint64_t gs_fetch_add64(unsigned long long *p, uint64_t v)
{
	return atomicAdd(p, (unsigned long long)v);
}

/* Device-memory atomics for applications' own tables (device scope). */
GSOCK_DEVICE uint32_t gs_fetch_add32(uint32_t *p, uint32_t v)
{
	return atomicAdd((unsigned *)p, v);
}

/* Compare and swap: the old value (the swap happened if it equals old). */
GSOCK_DEVICE uint32_t gs_cas32(uint32_t *p, uint32_t old, uint32_t v)
{
	return atomicCAS((unsigned *)p, old, v);
}

GSOCK_DEVICE void gs_add_f64(double *p, double v)
{
	atomicAdd(p, v);
}

/* Order this thread's device-memory writes before its later ones (GPU scope). */
GSOCK_DEVICE void gs_fence_dev(void)
{
	__threadfence();
}

/*
 * Publish a device-memory word that another block of this GPU waits on,
 * after every earlier write of this block (made before a gs_sync): GPU
 * scope, so no wait for this block's PCIe writes as gs_st64's system
 * fence does.
 */
GSOCK_DEVICE void gs_st_dev64(uint64_t *p, uint64_t v)
{
	__threadfence();
	*(volatile uint64_t *)p = v;
}

GSOCK_DEVICE uint64_t gs_now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Sleep about ns nanoseconds (the hardware caps one sleep at 1 ms). */
GSOCK_DEVICE void gs_pause(uint32_t ns)
{
	__nanosleep(ns);
}

/* Back off in a wait loop: iteration i of the wait. */
GSOCK_DEVICE void gs_relax(unsigned i)
{
	/*
	 * Each poll is already a PCIe read (~1 us); sleep only when idle
	 * long, and then long enough that hundreds of idle blocks do not
	 * fill the bus with reads (they slow every other read on it).
	 */
	if (i > 256)
		__nanosleep(i > 4096 ? 8000 : i > 1024 ? 1000 : 200);
}

#else /* host backend */

#include <sched.h>
#include <time.h>

#define GSOCK_BACKEND_NAME "host"
#define GSOCK_DEVICE static inline
#define GS_UNROLL
#define GSOCK_HD static inline
#define GS_SHARED
/*
 * A block is one thread here, so its shared memory is that thread's own:
 * kernels written with CUDA's qualifiers compile unchanged.
 */
#ifndef __shared__
#define __shared__
#endif
#ifndef __device__
#define __device__
#endif
#define GSOCK_KERNEL(name, gs, arg) void name(struct gsock_dev gs, void *arg)
#define GSOCK_KERNEL_FIT(name, gs, arg, threads, per_sm) \
	GSOCK_KERNEL(name, gs, arg)

/* Set by libgsock for each host thread that runs a block. */
extern __thread unsigned gsock_host_block_id;

GSOCK_DEVICE unsigned gs_tid(void)
{
	return 0;
}

GSOCK_DEVICE unsigned gs_bdim(void)
{
	return 1;
}

GSOCK_DEVICE unsigned gs_bid(void)
{
	return gsock_host_block_id;
}

GSOCK_DEVICE void gs_sync(void)
{
}

GSOCK_DEVICE int gs_sync_or(int v)
{
	return v != 0;
}

/* A block's first "warp" is its one thread. */
GSOCK_DEVICE long gs_warp_bcast(long v)
{
	return v;
}

GSOCK_DEVICE int gs_warp_any(int v)
{
	return v != 0;
}

GSOCK_DEVICE void gs_fence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

GSOCK_DEVICE uint64_t gs_ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

GSOCK_DEVICE uint32_t gs_ld32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

GSOCK_DEVICE uint64_t gs_peek64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

GSOCK_DEVICE uint32_t gs_peek32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

GSOCK_DEVICE void gs_st64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

GSOCK_DEVICE void gs_st32(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

GSOCK_DEVICE void gs_st_release64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

GSOCK_DEVICE void gs_st_plain64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

GSOCK_DEVICE uint32_t gs_ld_local32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

GSOCK_DEVICE uint64_t gs_ld_unit(const uint64_t *p)
{
	return gs_peek64(p);
}

GSOCK_DEVICE void gs_st_unit(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

GSOCK_DEVICE uint64_t gs_fetch_add64(unsigned long long *p, uint64_t v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

GSOCK_DEVICE uint32_t gs_fetch_add32(uint32_t *p, uint32_t v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

GSOCK_DEVICE uint32_t gs_cas32(uint32_t *p, uint32_t old, uint32_t v)
{
	__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	return old;
}

GSOCK_DEVICE void gs_add_f64(double *p, double v)
{
	double cur, next;

	__atomic_load(p, &cur, __ATOMIC_RELAXED);
	do
		next = cur + v;
	while (!__atomic_compare_exchange(p, &cur, &next, 1, __ATOMIC_SEQ_CST,
					  __ATOMIC_RELAXED));
}

GSOCK_DEVICE void gs_fence_dev(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

GSOCK_DEVICE void gs_st_dev64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

GSOCK_DEVICE uint64_t gs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Host threads stand in for blocks, often more of them than cores: spin
 * briefly, then yield, then sleep, so that waiting blocks leave the CPU to
 * the bridge and to the blocks that have work.
 */
/* The host backend's waits yield already (gs_relax): no extra pause. */
GSOCK_DEVICE void gs_pause(uint32_t ns)
{
	(void)ns;
}

GSOCK_DEVICE void gs_relax(unsigned i)
{
	struct timespec ts = { 0, 20000 };

	if (i < 64)
		return;
	if (i < 256) {
		sched_yield();
		return;
	}
	/* idle for seconds (16384 turns): 1 ms, about 0.1% of a core */
	if (i > 4096)
		ts.tv_nsec = i > 16384 ? 1000000 : 200000;
	nanosleep(&ts, 0);
}

#endif /* __CUDACC__ */

#endif /* GSOCK_PORT_H */
