/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-calls' block copy engine (gsock_internal.cuh includes it): every
 * thread of a block copies, with the widest access both pointers allow
 * and several loads in flight, and the ring copy wraps at the ring's end.
 */
#ifndef GSOCK_COPY_CUH
#define GSOCK_COPY_CUH

#include <stddef.h>
#include <stdint.h>

#include "gsock_port.h"
#include "gsock_ring.h"

/*
 * Block-wide copy of n bytes with the widest access both pointers allow:
 * arena memory is reached over PCIe, where a 16-byte access costs about
 * what a byte costs.
 */
#ifdef __CUDACC__
/*
 * Four independent loads in flight per thread before their stores: over
 * PCIe a load waits about a microsecond, so one at a time caps a block's
 * copy at a few GB/s.
 */
#define GS_COPY_WORDS_FN(T)                                                    \
	GSOCK_DEVICE void gs_copy_words_##T(                                   \
		T *dst, const T *src, size_t words, unsigned tid, unsigned nt) \
	{                                                                      \
		size_t k = tid;                                                \
                                                                               \
		for (; k + 3 * (size_t)nt < words; k += 4 * (size_t)nt) {      \
			T a = src[k], b = src[k + nt], c = src[k + 2 * nt],    \
			  e = src[k + 3 * nt];                                 \
                                                                               \
			dst[k] = a;                                            \
			dst[k + nt] = b;                                       \
			dst[k + 2 * nt] = c;                                   \
			dst[k + 3 * nt] = e;                                   \
		}                                                              \
		for (; k < words; k += nt)                                     \
			dst[k] = src[k];                                       \
	}
GS_COPY_WORDS_FN(uint4)

#define GS_COPY_WORDS(T)                                                  \
	do {                                                              \
		size_t lead = (sizeof(T) - (d & (sizeof(T) - 1))) &       \
			      (sizeof(T) - 1);                            \
		size_t words;                                             \
		if (lead > n)                                             \
			lead = n;                                         \
		words = (n - lead) / sizeof(T);                           \
		for (size_t k = tid; k < lead; k += nt)                   \
			((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];  \
		gs_copy_words_##T((T *)(d + lead), (const T *)(s + lead), \
				  words, tid, nt);                        \
		for (size_t k = lead + words * sizeof(T) + tid; k < n;    \
		     k += nt)                                             \
			((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];  \
	} while (0)

/* Bytes r..r+15 of the 32 bytes c then n (r in 0..15, the same for the whole copy). */
GSOCK_DEVICE uint4 gs_funnel16(uint4 c, uint4 n, unsigned r)
{
	unsigned b = (r & 3) * 8;
	uint32_t w0, w1, w2, w3, w4;

	switch (r >> 2) {
	case 0:
		w0 = c.x, w1 = c.y, w2 = c.z, w3 = c.w, w4 = n.x;
		break;
	case 1:
		w0 = c.y, w1 = c.z, w2 = c.w, w3 = n.x, w4 = n.y;
		break;
	case 2:
		w0 = c.z, w1 = c.w, w2 = n.x, w3 = n.y, w4 = n.z;
		break;
	default:
		w0 = c.w, w1 = n.x, w2 = n.y, w3 = n.z, w4 = n.w;
		break;
	}
	return make_uint4(__funnelshift_r(w0, w1, b),
			  __funnelshift_r(w1, w2, b),
			  __funnelshift_r(w2, w3, b),
			  __funnelshift_r(w3, w4, b));
}

GSOCK_DEVICE uint4 gs_shfl_down16(unsigned mask, uint4 v)
{
	return make_uint4(__shfl_down_sync(mask, v.x, 1),
			  __shfl_down_sync(mask, v.y, 1),
			  __shfl_down_sync(mask, v.z, 1),
			  __shfl_down_sync(mask, v.w, 1));
}

/*
 * words 16-byte stores to dst (aligned) of the bytes from src (r bytes
 * past a 16-byte boundary, r > 0): every thread loads aligned words of
 * the source, and takes the next one it needs from the lane above it
 * (the warp's last lane loads its own), so each source word crosses PCIe
 * about once, four per thread in flight. The last word loaded may hold
 * up to 15 bytes past the source's end: in the same aligned 16 bytes as
 * its last byte, so on the same page.
 */
GSOCK_DEVICE void gs_copy_shifted(uint4 *dst, const uint8_t *src, size_t words,
				  unsigned tid, unsigned nt)
{
	unsigned r = (unsigned)((uintptr_t)src & 15), lane = tid & 31;
	unsigned top = nt - (tid - lane) - 1 < 31 ? nt - (tid - lane) - 1 : 31;
	const uint4 *sw = (const uint4 *)(src - r);
	const uint4 zero = make_uint4(0, 0, 0, 0);

	/* Warp-uniform: k0 - lane is the same in every lane of a warp. */
	for (size_t k0 = tid; k0 - lane < words; k0 += 4 * (size_t)nt) {
		unsigned mask = __activemask();
		uint4 c[4], nx[4];

		for (int j = 0; j < 4; j++) {
			size_t k = k0 + j * (size_t)nt;

			c[j] = k <= words ? sw[k] : zero;
		}
		for (int j = 0; j < 4; j++) {
			size_t k = k0 + j * (size_t)nt;

			nx[j] = gs_shfl_down16(mask, c[j]);
			if (lane == top && k < words)
				nx[j] = sw[k + 1];
			if (k < words)
				dst[k] = gs_funnel16(c[j], nx[j], r);
		}
	}
}

GSOCK_DEVICE void gs_copy(void *dst, const void *src, size_t n)
{
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
	unsigned tid = gs_tid(), nt = gs_bdim();
	size_t lead, words;

	if (((d ^ s) & 15) == 0) {
		GS_COPY_WORDS(uint4);
		return;
	}
	/*
	 * Misaligned to each other (a ring position after an odd-sized
	 * message, say): still 16-byte accesses on both sides. Byte accesses
	 * over PCIe made a 1 MiB echo take 6 ms instead of under one.
	 */
	lead = (16 - (d & 15)) & 15;
	if (lead > n)
		lead = n;
	words = (n - lead) / 16;
	for (size_t k = tid; k < lead; k += nt)
		((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];
	if (words)
		gs_copy_shifted((uint4 *)(d + lead),
				(const uint8_t *)(s + lead), words, tid, nt);
	for (size_t k = lead + words * 16 + tid; k < n; k += nt)
		((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];
}

/*
 * A copy out of host memory (a ring from gsockd, a CPU sender or a
 * direct segment): eight loads in flight a thread, not four. A bare
 * CPU-to-GPU stream through a 256 KiB ring, one block of 256 threads
 * taking 64-256 KiB a copy (H200, bench/probes/up-stream.cu): 2 loads
 * 4.5 GB/s, 4 loads 7.2-8.4, 8 loads 9.8-12.4. Every round loads all its
 * words before it stores any, the last round too (a load past the end
 * reads the last word again and is not stored), so a copy that is not a
 * whole number of rounds keeps its loads in flight.
 *
 * Only for such copies, and out of line: with every copy at eight loads,
 * inlined, the echo server's kernel took 162-210 registers (135 at four)
 * and on one H200 under MPS the 64 B round trip to a preloaded CPU
 * client rose 0.3-0.5 us; out of line, one block's 4 MiB GPU-to-GPU
 * stream fell 4-6%. As it is (GSOCK_COPY_FAR below), that kernel
 * would take 142 (sm_90; 136 without it); it is held to 128 now
 * (apps/echo/server.c), as a kernel that must fit two blocks of 256 on
 * a multiprocessor should be (GSOCK_KERNEL_FIT). Only copies whose
 * ends align to each other take it (the misaligned ones, after an
 * odd-sized message, keep gs_copy_shifted's four loads), and only from
 * two words a thread (32 x threads bytes): below that a round is not
 * full, and the call is not worth it.
 */
#define GS_COPY_FAR_LOADS 8

GSOCK_DEVICE_NOINLINE void gs_copy_far_rounds(uint4 *dst, const uint4 *src,
					      size_t words, unsigned tid,
					      unsigned nt)
{
	for (size_t k = tid; k < words; k += GS_COPY_FAR_LOADS * (size_t)nt) {
		uint4 v[GS_COPY_FAR_LOADS];

		GS_UNROLL
		for (int j = 0; j < GS_COPY_FAR_LOADS; j++) {
			size_t w = k + j * (size_t)nt;

			v[j] = src[w < words ? w : words - 1];
		}
		GS_UNROLL
		for (int j = 0; j < GS_COPY_FAR_LOADS; j++)
			if (k + j * (size_t)nt < words)
				dst[k + j * (size_t)nt] = v[j];
	}
}

/* gs_copy from host memory: the rounds above where both ends align. */
GSOCK_DEVICE void gs_copy_far(void *dst, const void *src, size_t n)
{
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
	unsigned tid = gs_tid(), nt = gs_bdim();
	size_t lead, words;

	if (((d ^ s) & 15) || n < 32 * (size_t)nt) {
		gs_copy(dst, src, n);
		return;
	}
	lead = (16 - (d & 15)) & 15;
	words = (n - lead) / 16;
	for (size_t k = tid; k < lead; k += nt)
		((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];
	gs_copy_far_rounds((uint4 *)(d + lead), (const uint4 *)(s + lead),
			   words, tid, nt);
	for (size_t k = lead + words * 16 + tid; k < n; k += nt)
		((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];
}
#else
GSOCK_DEVICE void gs_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#define gs_copy_far gs_copy
#endif

/*
 * grecv takes gs_copy_far out of host memory unless built with
 * -DGSOCK_COPY_FAR=0 (gs_copy then, as before the far copy). It was off
 * for a while: face verification's G on two H200 died with "an illegal
 * instruction was encountered" in 7 of 22 rows with it on. The likeliest
 * cause is the server layer's barrier races (gsrv_done, gs_srv_wait_one),
 * not this copy: with them fixed, 36 rows of that shape, 12 with the far
 * copy, ran clean (bench/README.md); the fault was not made again on
 * purpose. t/block-copy.t tests it either way.
 */
#ifndef GSOCK_COPY_FAR
#define GSOCK_COPY_FAR 1
#endif

/*
 * Copy between a ring (at counter pos) and a flat buffer, block-wide;
 * far: the ring is in host memory (gs_copy_far), for a copy out of it.
 */
GSOCK_DEVICE void gs_ring_copy_at(uint32_t ring_size, uint8_t *ring,
				  uint64_t pos, uint8_t *buf, uint64_t n,
				  int to_ring, int far)
{
	uint64_t first;
	uint32_t off = gs_ring_split(pos, n, ring_size, &first);

	if (to_ring) {
		gs_copy(ring + off, buf, first);
		gs_copy(ring, buf + first, n - first);
	} else if (far && GSOCK_COPY_FAR) {
		gs_copy_far(buf, ring + off, first);
		gs_copy_far(buf + first, ring, n - first);
	} else {
		gs_copy(buf, ring + off, first);
		gs_copy(buf + first, ring, n - first);
	}
}

GSOCK_DEVICE void gs_ring_copy(uint32_t ring_size, uint8_t *ring, uint64_t pos,
			       uint8_t *buf, uint64_t n, int to_ring)
{
	gs_ring_copy_at(ring_size, ring, pos, buf, n, to_ring, 0);
}

#endif /* GSOCK_COPY_CUH */
