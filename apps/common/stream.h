/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one-way stream test's wire rules, shared by bench/loadgen (-m up,
 * down, duplex), gsock-echo-server (-M sink, source: host and GPU code) and
 * cpu-echo-server / cgpu-echo-server (-M): the byte at every offset of a
 * stream, and the sink's 16-byte answer when the stream ends: how many
 * bytes came and how many were wrong, little-endian 64-bit each.
 */
#ifndef GSOCK_STREAM_H
#define GSOCK_STREAM_H

#include <stdint.h>

#ifdef __CUDACC__
#define STREAM_HD __host__ __device__ __forceinline__ static
#else
#define STREAM_HD static inline
#endif

/* stream_byte() repeats every STREAM_PERIOD bytes. */
#define STREAM_PERIOD 65536u
#define STREAM_ANSWER 16 /* bytes of the sink's answer */

STREAM_HD uint8_t stream_byte(uint64_t o)
{
	return (uint8_t)(o * 131 + (o >> 8) * 7 + 1);
}

STREAM_HD void stream_answer_put(uint8_t *a, uint64_t count, uint64_t wrong)
{
	for (int i = 0; i < 8; i++) {
		a[i] = (uint8_t)(count >> (8 * i));
		a[8 + i] = (uint8_t)(wrong >> (8 * i));
	}
}

STREAM_HD void stream_answer_get(const uint8_t *a, uint64_t *count,
				 uint64_t *wrong)
{
	*count = *wrong = 0;
	for (int i = 7; i >= 0; i--) {
		*count = *count << 8 | a[i];
		*wrong = *wrong << 8 | a[8 + i];
	}
}

#endif
