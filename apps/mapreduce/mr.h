/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MapReduce held in GPU memory: what the workers (mr-worker, one per GPU),
 * the generator (mr-gen) and the CPU reference (mr-ref) agree on.
 *
 * Word count. A word is a maximal run of word bytes: ASCII letters and
 * digits and every byte >= 0x80 (so UTF-8 words stay whole); ASCII
 * letters count in lower case; a word longer than MR_WORD_MAX bytes
 * counts by its first MR_WORD_MAX. The input is split across the workers
 * at word boundaries (mr_split); a word belongs to the reducer
 * mr_part(hash) of its hash.
 *
 * k-means. Points are float32 vectors in a file: struct mr_points_hdr,
 * then n x dim floats. Every worker starts from the same centroids (the
 * file's first k points) and runs the same number of Lloyd iterations;
 * a point goes to the nearest centroid (squared distance summed with
 * fmaf in dimension order, ties to the lower index), and a centroid
 * becomes the mean of its points (sums in double), or stays where it
 * was when it has none.
 */
#ifndef MR_H
#define MR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "gsock_port.h"

#define MR_WORD_MAX 31
#define MR_MAX_PEERS 16 /* workers in one job */
#define MR_KM_MAX_K 64
#define MR_KM_MAX_DIM 32
/*
 * The most threads a block. The kernels keep within 128 registers a
 * thread, so that two blocks of 256 fit on a multiprocessor: 264 blocks
 * on an H100 or H200, bench/mapreduce's default (uncapped, the g-calls
 * inlined in them took up to 166, and only 132 blocks could run).
 */
#define MR_THREADS_MAX 512
#define MR_POINTS_MAGIC 0x5450524du /* "MRPT" */
#define MR_WIRE_MAGIC 0x4652534du /* "MSRF": a shuffle stream's header */

struct mr_points_hdr {
	uint32_t magic; /* MR_POINTS_MAGIC */
	uint32_t dim;
	uint64_t n;
};

/* A word and its count: a table entry's payload and a shuffle record. */
struct mr_word {
	uint32_t count;
	uint32_t len;
	uint32_t key[(MR_WORD_MAX + 1) / 4]; /* the bytes, zero-padded */
};

/* What starts every shuffle stream between two workers. */
struct mr_wire_hdr {
	uint32_t magic; /* MR_WIRE_MAGIC */
	uint32_t rank; /* the sender */
	uint64_t records; /* struct mr_word (word count) that follow */
};

GSOCK_HD int mr_is_word_byte(uint8_t c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	       (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/* FNV-1a over the word's (lower-cased, truncated) bytes. */
GSOCK_HD uint32_t mr_hash(const uint8_t *key, uint32_t len)
{
	uint32_t h = 2166136261u;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ key[i]) * 16777619u;
	return h;
}

/* The reducer of a word: mixed apart from the table index (hash's low bits). */
GSOCK_HD uint32_t mr_part(uint32_t hash, uint32_t workers)
{
	hash ^= hash >> 16;
	hash *= 0x85ebca6bu;
	hash ^= hash >> 13;
	return (hash >> 8) % workers;
}

/* The end of the word that starts at text[p] (a word byte). */
GSOCK_HD uint64_t mr_word_end(const uint8_t *text, uint64_t len, uint64_t p)
{
	while (p < len && mr_is_word_byte(text[p]))
		p++;
	return p;
}

/* A split boundary at or after pos: never inside a word. */
GSOCK_HD uint64_t mr_boundary(const uint8_t *text, uint64_t len, uint64_t pos)
{
	while (pos > 0 && pos < len && mr_is_word_byte(text[pos - 1]) &&
	       mr_is_word_byte(text[pos]))
		pos++;
	return pos;
}

/* Worker rank of workers: its bytes [*from, *to) of text. */
GSOCK_HD void mr_split(const uint8_t *text, uint64_t len, uint32_t rank,
		       uint32_t workers, uint64_t *from, uint64_t *to)
{
	*from = mr_boundary(text, len, len / workers * rank);
	*to = rank + 1 == workers ?
		      len :
		      mr_boundary(text, len, len / workers * (rank + 1));
}

/* The key of the word at text[0..) (n word bytes): its length. */
GSOCK_HD uint32_t mr_key(const uint8_t *text, uint64_t n,
			 uint8_t key[MR_WORD_MAX + 1])
{
	uint32_t len = n > MR_WORD_MAX ? MR_WORD_MAX : (uint32_t)n;

	for (uint32_t i = 0; i <= MR_WORD_MAX; i++) {
		uint8_t c = i < len ? text[i] : 0;

		key[i] = c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
	}
	return len;
}

/* Squared distance of point p to centroid c (dim floats each). */
GSOCK_HD float mr_dist2(const float *p, const float *c, uint32_t dim)
{
	float d = 0.f;

	for (uint32_t j = 0; j < dim; j++) {
		float t = p[j] - c[j];

		d = fmaf(t, t, d);
	}
	return d;
}

/* The centroid nearest point p: ties to the lower index. */
GSOCK_HD uint32_t mr_nearest(const float *p, const float *cent, uint32_t k,
			     uint32_t dim)
{
	uint32_t best = 0;
	float bd = mr_dist2(p, cent, dim);

	for (uint32_t c = 1; c < k; c++) {
		float d = mr_dist2(p, cent + (size_t)c * dim, dim);

		if (d < bd) {
			bd = d;
			best = c;
		}
	}
	return best;
}

/* New centroids from sums and counts; a centroid without points stays. */
GSOCK_HD void mr_centroids(float *cent, const double *sum,
			   const unsigned long long *count, uint32_t k,
			   uint32_t dim, unsigned from, unsigned step)
{
	for (uint32_t i = from; i < k * dim; i += step)
		if (count[i / dim])
			cent[i] = (float)(sum[i] / (double)count[i / dim]);
}

#endif /* MR_H */
