/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A face population that needs no download: each person is a texture of
 * a few oriented waves drawn from the person's number, each view of them
 * that texture shifted, lit differently and with noise, so that views of
 * one person stay close in LBP space and different people fall far apart
 * (t/facever-check measures both). Also PGM files, for real pictures,
 * and the CPU entry points of the shared maths.
 */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fv_cpu.h"

#define FV_WAVES 6

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A uniform number in [lo, hi) from the state *s, which it advances. */
static double draw(uint64_t *s, double lo, double hi)
{
	*s = mix(*s);
	return lo + (hi - lo) * (double)(*s >> 11) / 9007199254740992.0;
}

void fv_face(uint32_t seed, uint32_t person, uint32_t view, uint32_t w,
	     uint32_t h, uint8_t *img)
{
	uint64_t ps = mix(((uint64_t)seed << 32) | person), vs;
	double fx[FV_WAVES], fy[FV_WAVES], ph[FV_WAVES], amp[FV_WAVES];
	double cx[FV_WAVES], cy[FV_WAVES], r2[FV_WAVES];
	double dx = 0, dy = 0, gain = 1, offset = 0;

	for (int k = 0; k < FV_WAVES; k++) {
		double a = draw(&ps, 0, 2 * M_PI), f = draw(&ps, 2, 16);

		fx[k] = f * cos(a);
		fy[k] = f * sin(a);
		ph[k] = draw(&ps, 0, 2 * M_PI);
		amp[k] = draw(&ps, 20, 60);
		cx[k] = draw(&ps, 0, 1);
		cy[k] = draw(&ps, 0, 1);
		r2[k] = draw(&ps, 0.03, 0.12);
	}
	vs = mix(ps ^ mix(view + 1));
	if (view) {
		dx = floor(draw(&vs, -2, 3));
		dy = floor(draw(&vs, -2, 3));
		gain = draw(&vs, 0.85, 1.15);
		offset = draw(&vs, -15, 15);
	}
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t x = 0; x < w; x++) {
			double u = (x - dx) / w, v = (y - dy) / h, p = 128;

			for (int k = 0; k < FV_WAVES; k++)
				p += amp[k] *
				     exp(-((u - cx[k]) * (u - cx[k]) +
					   (v - cy[k]) * (v - cy[k])) /
					 r2[k]) *
				     sin(2 * M_PI * (fx[k] * u + fy[k] * v) +
					 ph[k]);
			p = p * gain + offset + draw(&vs, -3, 3);
			img[(size_t)y * w + x] = (uint8_t)(p < 0   ? 0 :
							   p > 255 ? 255 :
								     p);
		}
	}
}

void fv_features_cpu(const uint8_t *img, uint32_t w, uint32_t h, float *feats)
{
	uint32_t hist[FV_NFEAT], cellsum[FV_GRID * FV_GRID];

	fv_features(img, w, h, feats, hist, cellsum);
}

float fv_chi2_cpu(const float *a, const float *b)
{
	float scratch[1];

	return fv_chi2(a, b, scratch);
}
