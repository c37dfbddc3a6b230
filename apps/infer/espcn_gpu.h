/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ESPCN x3 (espcn.h) as the servers run it, written once: G's serving
 * blocks (infer-gserver; Gp beside the graph server) and C's batch
 * kernel without cuBLAS (stage_cuda.cu) both call espcn_batch_part(),
 * nvcc compiles it for the GPU, and the C compiler for the host backend
 * and C's host stage, where a block is one thread.
 *
 * A block computes a band of output rows at a time. The band's rows of
 * the first layer (two more each side, for the 3x3 layers after it) and
 * of the second (one more each side) live in a scratch of ESPCN_SCRATCH
 * floats, so that a block's memory does not grow with the picture: a
 * band is as many rows as the scratch holds (the whole picture up to 163
 * pixels wide; 7 rows at 1024, where recomputing the halo rows costs the
 * second layer 1.3x).
 *
 * Each value is summed in the order espcn_run_cpu() sums it (the bias,
 * then input channels, rows, columns, skipping the zero padding), so that
 * a C compiler that does not contract a * b + c into one rounding (x86-64
 * without -mfma, as built here) gives the reference's pixels bit for
 * bit. nvcc contracts them into FMAs and CUDA's tanhf is not glibc's:
 * there a value that sits at a half grey level may round the other way
 * (infer.h states the tolerance).
 */
#ifndef ESPCN_GPU_H
#define ESPCN_GPU_H

#include <math.h>
#include <stdint.h>

#include "espcn.h"
#include "gsock_port.h"

/* Floats of a block's scratch (4 MiB); a test may make it smaller. */
#ifndef ESPCN_SCRATCH
#define ESPCN_SCRATCH (1u << 20)
#endif
/* A band is at least one row: w x (96 + 320) floats at the widest w. */
#if ESPCN_SCRATCH < 416 * ESPCN_MAX_SIDE
#error "ESPCN_SCRATCH must hold a band of one row at ESPCN_MAX_SIDE: 416 x ESPCN_MAX_SIDE floats"
#endif
#define ESPCN_THREADS 256 /* threads a block the GPU code is written for */

/* One picture of a batch: its bytes, its output's, its first band. */
struct espcn_job {
	uint32_t in_at; /* the picture's offset in the batch's input */
	uint32_t out_at; /* its output's (3w x 3h bytes) in the batch's output */
	uint32_t first; /* its first band's number in the batch */
	uint16_t w, h;
};

/* Output rows a band of a picture w pixels wide (w <= ESPCN_MAX_SIDE). */
GSOCK_HD uint32_t espcn_band_rows(uint32_t w)
{
	/* w (96 rows + 320) floats: 64 (rows + 4) + 32 (rows + 2) a column */
	return (ESPCN_SCRATCH / w - 4 * ESPCN_C1 - 2 * ESPCN_C2) /
	       (ESPCN_C1 + ESPCN_C2);
}

GSOCK_HD uint32_t espcn_bands(uint32_t w, uint32_t h)
{
	return (h + espcn_band_rows(w) - 1) / espcn_band_rows(w);
}

/* Bands in a batch of n jobs: the parts espcn_batch_part() divides. */
GSOCK_HD uint32_t espcn_batch_bands(const struct espcn_job *jobs, uint32_t n)
{
	return n ? jobs[n - 1].first + espcn_bands(jobs[n - 1].w, jobs[n - 1].h) :
		   0;
}

/*
 * Add a w x h picture as job n of a batch whose input and output hold
 * *in_used and *out_used of in_cap and out_cap bytes (16-byte aligned
 * each): 0, or -1 when it does not fit.
 */
GSOCK_HD int espcn_job_add(struct espcn_job *jobs, uint32_t n, uint32_t w,
			   uint32_t h, uint64_t *in_used, uint64_t in_cap,
			   uint64_t *out_used, uint64_t out_cap)
{
	uint64_t px = (uint64_t)w * h;

	if (*in_used + px > in_cap || *out_used + px * 9 > out_cap)
		return -1;
	jobs[n].in_at = (uint32_t)*in_used;
	jobs[n].out_at = (uint32_t)*out_used;
	jobs[n].first = espcn_batch_bands(jobs, n);
	jobs[n].w = (uint16_t)w;
	jobs[n].h = (uint16_t)h;
	*in_used += (px + 15) & ~15ull;
	*out_used += (px * 9 + 15) & ~15ull;
	return 0;
}

/*
 * The block: rows [y0, y1) of a "same" k x k convolution into cout
 * planes at out (y1 - y0 rows each), from cin planes at in that hold the
 * input's rows [iy0, iy1) (all the picture's rows that those output rows
 * reach), or with pic, from the picture's bytes (one plane, all rows).
 */
GSOCK_DEVICE void espcn_conv_rows(const float *in, const uint8_t *pic,
				  uint32_t iy0, uint32_t iy1, uint32_t cin,
				  float *out, uint32_t cout, uint32_t w,
				  uint32_t y0, uint32_t y1, const float *wt,
				  const float *bias, int k, int act)
{
	uint32_t rows = y1 - y0, n = cout * rows * w, irows = iy1 - iy0;
	int half = k / 2;

	for (uint32_t e = gs_tid(); e < n; e += gs_bdim()) {
		uint32_t x = e % w, y = y0 + e / w % rows, o = e / w / rows;
		float v = bias[o];

		for (uint32_t i = 0; i < cin; i++)
			for (int ky = 0; ky < k; ky++) {
				long yy = (long)y + ky - half;

				if (yy < (long)iy0 || yy >= (long)iy1)
					continue;
				for (int kx = 0; kx < k; kx++) {
					long xx = (long)x + kx - half;
					size_t at = ((size_t)i * irows + (size_t)(yy - iy0)) * w;

					if (xx < 0 || xx >= (long)w)
						continue;
					v += wt[((o * cin + i) * k + ky) * k + kx] *
					     (pic ? pic[at + xx] / 255.0f :
						    in[at + xx]);
				}
			}
		out[((size_t)o * rows + (y - y0)) * w + x] = act ? tanhf(v) : v;
	}
	gs_sync();
}

/*
 * The block: output rows [3 y0, 3 y1) of the w x h picture pic into out
 * (the whole 3w x 3h output), with scratch (ESPCN_SCRATCH floats, this
 * block's own) and the parameters p (espcn.h's layout).
 */
GSOCK_DEVICE void espcn_band(const float *p, const uint8_t *pic, uint32_t w,
			     uint32_t h, uint32_t y0, uint32_t y1,
			     float *scratch, uint8_t *out)
{
	uint32_t a0 = y0 < 2 ? 0 : y0 - 2, a1 = y1 + 2 < h ? y1 + 2 : h;
	uint32_t b0 = y0 < 1 ? 0 : y0 - 1, b1 = y1 + 1 < h ? y1 + 1 : h;
	float *a = scratch, *b = scratch + (size_t)ESPCN_C1 * (a1 - a0) * w;
	float *c = scratch; /* the last layer's 9 planes: a is spent by then */
	uint32_t n = (y1 - y0) * w * ESPCN_C3;

	espcn_conv_rows(NULL, pic, 0, h, 1, a, ESPCN_C1, w, a0, a1,
			p + ESPCN_W1, p + ESPCN_B1, 5, 1);
	espcn_conv_rows(a, NULL, a0, a1, ESPCN_C1, b, ESPCN_C2, w, b0, b1,
			p + ESPCN_W2, p + ESPCN_B2, 3, 1);
	espcn_conv_rows(b, NULL, b0, b1, ESPCN_C2, c, ESPCN_C3, w, y0, y1,
			p + ESPCN_W3, p + ESPCN_B3, 3, 0);
	for (uint32_t e = gs_tid(); e < n; e += gs_bdim()) { /* pixel shuffle */
		uint32_t x = e / ESPCN_C3 % w, y = e / ESPCN_C3 / w;
		uint32_t ch = e % ESPCN_C3;
		float v = c[((size_t)ch * (y1 - y0) + y) * w + x] * 255.0f;
		size_t oy = (size_t)(y0 + y) * ESPCN_R + ch / ESPCN_R;

		v = v < 0 ? 0 : v > 255 ? 255 : v;
		out[oy * w * ESPCN_R + (size_t)x * ESPCN_R + ch % ESPCN_R] =
			(uint8_t)rintf(v);
	}
	gs_sync();
}

/*
 * The block: part `part` of `parts` of a batch of n jobs, one band every
 * parts bands (a CUDA grid divides a batch by block; a G group by
 * rank; one thread on the host does it all with part 0 of 1). in and out
 * are the batch's input and output; scratch is this block's own.
 */
GSOCK_DEVICE void espcn_batch_part(const float *p, const struct espcn_job *jobs,
				   uint32_t n, const uint8_t *in, uint8_t *out,
				   float *scratch, uint32_t part,
				   uint32_t parts)
{
	uint32_t total = espcn_batch_bands(jobs, n), j = 0;

	for (uint32_t u = part; u < total; u += parts) {
		const struct espcn_job *q;
		uint32_t rows, y0;

		while (j + 1 < n && jobs[j + 1].first <= u)
			j++;
		q = &jobs[j];
		rows = espcn_band_rows(q->w);
		y0 = (u - q->first) * rows;
		espcn_band(p, in + q->in_at, q->w, q->h, y0,
			   y0 + rows < q->h ? y0 + rows : q->h, scratch,
			   out + q->out_at);
	}
}

#endif
