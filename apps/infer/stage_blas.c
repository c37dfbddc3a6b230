/* SPDX-License-Identifier: Apache-2.0 */
/*
 * P's model on OpenBLAS: each convolution is one GEMM, weights (cout x
 * cin k k, as the file lays them out) times im2col's columns (cin k k x
 * pixels), a band of rows at a time so that the columns stay within
 * INFER_COL_FLOATS. OpenBLAS sums in its own order: a pixel may come out
 * one grey level off the reference (infer.h's tolerance).
 */
#include <config.h>

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "espcn.h"
#include "stage.h"

#define INFER_COL_FLOATS (4u << 20) /* 16 MiB of im2col columns */

/* One "same" k x k convolution of cin planes at in into cout at out. */
static void conv_gemm(const float *in, uint32_t cin, float *out, uint32_t cout,
		      uint32_t w, uint32_t h, const float *wt,
		      const float *bias, int k, int act, float *col)
{
	uint32_t kk = cin * k * k, half = k / 2;
	uint32_t rows = INFER_COL_FLOATS / (kk * w);

	rows = rows ? rows : 1;
	for (uint32_t y0 = 0; y0 < h; y0 += rows) {
		uint32_t band = rows < h - y0 ? rows : h - y0, n = band * w;

		for (uint32_t r = 0; r < kk; r++) {
			uint32_t i = r / (k * k), ky = r / k % k, kx = r % k;

			for (uint32_t j = 0; j < n; j++) {
				long yy = (long)(y0 + j / w) + ky - half;
				long xx = (long)(j % w) + kx - half;

				col[(size_t)r * n + j] =
					yy < 0 || yy >= (long)h || xx < 0 || xx >= (long)w ?
						0.0f :
						in[((size_t)i * h + yy) * w + xx];
			}
		}
		for (uint32_t o = 0; o < cout; o++)
			for (uint32_t j = 0; j < n; j++)
				out[(size_t)o * h * w + (size_t)y0 * w + j] = bias[o];
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cout,
			    (int)n, (int)kk, 1.0f, wt, (int)kk, col, (int)n, 1.0f,
			    out + (size_t)y0 * w, (int)(h * w));
		for (uint32_t o = 0; act && o < cout; o++)
			for (uint32_t j = 0; j < n; j++) {
				float *v = &out[(size_t)o * h * w + (size_t)y0 * w + j];

				*v = tanhf(*v);
			}
	}
}

/* Room in ws for a picture of px pixels: 0, or -1 out of memory. */
static int blas_room(struct espcn_blas *ws, size_t px)
{
	float **plane[] = { &ws->x, &ws->a, &ws->b, &ws->c };
	const size_t per[] = { 1, ESPCN_C1, ESPCN_C2, ESPCN_C3 };

	if (!ws->col)
		ws->col = malloc(INFER_COL_FLOATS * sizeof(float));
	if (!ws->col)
		return -1;
	if (px <= ws->px)
		return 0;
	for (int i = 0; i < 4; i++) { /* free first: no old and new at once */
		free(*plane[i]);
		*plane[i] = malloc(px * per[i] * sizeof(float));
	}
	ws->px = ws->x && ws->a && ws->b && ws->c ? px : 0;
	return ws->px ? 0 : -1;
}

int espcn_run_blas(struct espcn_blas *ws, const float *p, const uint8_t *in,
		   uint32_t w, uint32_t h, uint8_t *out)
{
	size_t px = (size_t)w * h;

	if (blas_room(ws, px))
		return -1;
	for (size_t i = 0; i < px; i++)
		ws->x[i] = in[i] / 255.0f;
	conv_gemm(ws->x, 1, ws->a, ESPCN_C1, w, h, p + ESPCN_W1, p + ESPCN_B1, 5,
		  1, ws->col);
	conv_gemm(ws->a, ESPCN_C1, ws->b, ESPCN_C2, w, h, p + ESPCN_W2,
		  p + ESPCN_B2, 3, 1, ws->col);
	conv_gemm(ws->b, ESPCN_C2, ws->c, ESPCN_C3, w, h, p + ESPCN_W3,
		  p + ESPCN_B3, 3, 0, ws->col);
	espcn_shuffle(ws->c, w, h, out);
	return 0;
}
