/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Face verification: the wire protocol every variant speaks and the maths
 * every variant runs, written once. The feature code compiles under nvcc
 * (the g-call server G and the CPU-managed GPU server C run it in CUDA
 * blocks) and under the C compiler (the CPU-only server P and the host
 * backend run it as one thread), so that the variants differ in how they
 * serve, never in what they compute.
 *
 * Features: 8-neighbour local binary patterns, radius 1, mapped to the 58
 * uniform patterns plus one bin for the rest (59 bins), histogrammed over
 * a FV_GRID x FV_GRID grid of cells and normalised per cell; two feature
 * vectors are compared with the chi-square distance, and a distance at or
 * under the threshold is a match.
 *
 * Wire protocol (little-endian, one TCP connection, requests answered in
 * order, a client may send several before reading):
 *
 *   request   offset  size  field
 *             0       4     magic FV_REQ_MAGIC
 *             4       4     seq: echoed in the response
 *             8       4     id: the person the face claims to be
 *             12      2     w   image width  (FV_MIN_SIDE..FV_MAX_SIDE)
 *             14      2     h   image height (FV_MIN_SIDE..FV_MAX_SIDE)
 *             16      w*h   grey 8-bit pixels, row by row
 *
 *   response  0       4     magic FV_RESP_MAGIC
 *             4       4     seq of the request
 *             8       4     status: FV_MATCH, FV_NO_MATCH or FV_E_*
 *             12      4     distance (float), 0 unless matched or not
 *
 * A request with a wrong magic or a size out of range is answered with
 * FV_E_PROTO or FV_E_SIZE and the connection is closed (its bytes cannot
 * be trusted to frame the next request).
 *
 * Reference features live in memcached under "fv:<id>", FV_FEAT_BYTES of
 * floats, stored by facever-enrol.
 */
#ifndef FV_H
#define FV_H

#include <stdint.h>

#include "gsock_port.h"

#define FV_GRID 4 /* cells per side */
#define FV_BINS 59 /* 58 uniform patterns + the rest */
#define FV_NFEAT (FV_GRID * FV_GRID * FV_BINS) /* 944 */
#define FV_FEAT_BYTES (FV_NFEAT * 4)
#define FV_MIN_SIDE 16
#define FV_MAX_SIDE 512
#define FV_MAX_PIXELS (FV_MAX_SIDE * FV_MAX_SIDE)
#define FV_THRESHOLD 2.0f /* default: see t/facever-check for the spread */

#define FV_REQ_MAGIC 0x31515646u /* "FVQ1" */
#define FV_RESP_MAGIC 0x31525646u /* "FVR1" */

struct fv_req {
	uint32_t magic;
	uint32_t seq;
	uint32_t id;
	uint16_t w, h;
};

struct fv_resp {
	uint32_t magic;
	uint32_t seq;
	int32_t status;
	float distance;
};

enum fv_status {
	FV_NO_MATCH = 0, /* the face is not the person it claims to be */
	FV_MATCH = 1, /* the face is the person it claims to be */
	FV_E_UNKNOWN = -1, /* no reference features stored for the id */
	FV_E_SIZE = -2, /* w or h out of range; the connection closes */
	FV_E_STORE = -3, /* memcached unreachable or its reply unusable */
	FV_E_PROTO = -4, /* wrong magic; the connection closes */
};

/* The memcached key of a person's reference features; returns its length. */
GSOCK_HD uint32_t fv_key(char *out, uint32_t id)
{
	char digits[10];
	uint32_t n = 0, k = 0;

	out[k++] = 'f';
	out[k++] = 'v';
	out[k++] = ':';
	do {
		digits[n++] = (char)('0' + id % 10);
		id /= 10;
	} while (id);
	while (n)
		out[k++] = digits[--n];
	return k;
}

GSOCK_HD uint32_t fv_popc(uint32_t x)
{
#ifdef __CUDA_ARCH__
	return (uint32_t)__popc(x);
#else
	return (uint32_t)__builtin_popcount(x);
#endif
}

GSOCK_HD uint32_t fv_ctz(uint32_t x)
{
#ifdef __CUDA_ARCH__
	return (uint32_t)__ffs((int)x) - 1;
#else
	return (uint32_t)__builtin_ctz(x);
#endif
}

/*
 * The bin of an 8-bit pattern: 0 all dark, 1 all bright, 2 + 8 (k - 1) + r
 * for a run of k (1..7) bright neighbours that starts at neighbour r, 58
 * for patterns with more than two transitions around the circle.
 */
GSOCK_HD uint32_t fv_bin(uint32_t code)
{
	uint32_t rot = ((code << 1) | (code >> 7)) & 0xffu;
	uint32_t turns = fv_popc(code ^ rot);

	if (turns == 0)
		return code ? 1 : 0;
	if (turns > 2)
		return FV_BINS - 1;
	return 2 + 8 * (fv_popc(code) - 1) + fv_ctz(code & ~rot & 0xffu);
}

/* The pattern at (x, y), an interior pixel; neighbours go round clockwise. */
GSOCK_HD uint32_t fv_code(const uint8_t *img, uint32_t w, uint32_t x,
			  uint32_t y)
{
	const uint8_t *p = img + (uint64_t)y * w + x;
	uint8_t c = p[0];

	return (uint32_t)(p[-(int64_t)w - 1] >= c) |
	       (uint32_t)(p[-(int64_t)w] >= c) << 1 |
	       (uint32_t)(p[-(int64_t)w + 1] >= c) << 2 |
	       (uint32_t)(p[1] >= c) << 3 | (uint32_t)(p[w + 1] >= c) << 4 |
	       (uint32_t)(p[w] >= c) << 5 | (uint32_t)(p[w - 1] >= c) << 6 |
	       (uint32_t)(p[-1] >= c) << 7;
}

GSOCK_DEVICE void fv_count(uint32_t *cell)
{
#ifdef __CUDA_ARCH__
	atomicAdd(cell, 1u);
#else
	++*cell;
#endif
}

/*
 * Block-cooperative (every thread of a block, or one CPU thread): the
 * feature vector of img into feats. hist (FV_NFEAT words) and cellsum
 * (FV_GRID * FV_GRID words) are scratch the block shares.
 */
GSOCK_DEVICE void fv_features(const uint8_t *img, uint32_t w, uint32_t h,
			      float *feats, uint32_t *hist, uint32_t *cellsum)
{
	uint32_t tid = gs_tid(), n = gs_bdim();
	uint32_t iw = w - 2, pixels = (w - 2) * (h - 2);

	for (uint32_t i = tid; i < FV_NFEAT; i += n)
		hist[i] = 0;
	gs_sync();
	for (uint32_t p = tid; p < pixels; p += n) {
		uint32_t x = 1 + p % iw, y = 1 + p / iw;
		uint32_t cell = (y * FV_GRID / h) * FV_GRID + x * FV_GRID / w;

		fv_count(&hist[cell * FV_BINS + fv_bin(fv_code(img, w, x, y))]);
	}
	gs_sync();
	for (uint32_t c = tid; c < FV_GRID * FV_GRID; c += n) {
		uint32_t s = 0;

		for (uint32_t b = 0; b < FV_BINS; b++)
			s += hist[c * FV_BINS + b];
		cellsum[c] = s ? s : 1;
	}
	gs_sync();
	for (uint32_t i = tid; i < FV_NFEAT; i += n)
		feats[i] = (float)hist[i] / (float)cellsum[i / FV_BINS];
	gs_sync();
}

/*
 * Block-cooperative: the chi-square distance of a and b. scratch holds
 * one float per thread; thread 0 adds the parts in order, so that the
 * result depends only on the block size.
 */
GSOCK_DEVICE float fv_chi2(const float *a, const float *b, float *scratch)
{
	uint32_t tid = gs_tid(), n = gs_bdim();
	float part = 0.0f, sum = 0.0f;

	for (uint32_t i = tid; i < FV_NFEAT; i += n) {
		float s = a[i] + b[i], d = a[i] - b[i];

		if (s > 0.0f)
			part += d * d / s;
	}
	scratch[tid] = part;
	gs_sync();
	if (tid == 0) {
		for (uint32_t t = 0; t < n; t++)
			sum += scratch[t];
		scratch[0] = sum;
	}
	gs_sync();
	sum = scratch[0];
	gs_sync();
	return sum;
}

GSOCK_HD int fv_side_ok(uint32_t side)
{
	return side >= FV_MIN_SIDE && side <= FV_MAX_SIDE;
}

#endif /* FV_H */
