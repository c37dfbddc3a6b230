/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The face verification maths (apps/facever/fv.h) against a plain
 * reference written here from the definitions, and the generated
 * population against the threshold: every view of a person within it,
 * every other person beyond it. Prints TAP; with -v also the spread.
 */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../apps/common/app.h"
#include "../apps/facever/fv_cpu.h"
#include "tap.h"

/* Neighbours clockwise from the top left, as fv.h orders them. */
static const int nx[8] = { -1, 0, 1, 1, 1, 0, -1, -1 };
static const int ny[8] = { -1, -1, -1, 0, 1, 1, 1, 0 };

static int transitions(unsigned code)
{
	int t = 0;

	for (int i = 0; i < 8; i++)
		t += ((code >> i) & 1) != ((code >> ((i + 1) % 8)) & 1);
	return t;
}

/* Reference: per cell, a count for each of the 256 codes, then normalised. */
static void ref_features(const uint8_t *img, int w, int h, double *f)
{
	static double hist[FV_GRID * FV_GRID][256];
	double total[FV_GRID * FV_GRID] = { 0 };

	memset(hist, 0, sizeof(hist));
	for (int y = 1; y < h - 1; y++) {
		for (int x = 1; x < w - 1; x++) {
			unsigned code = 0;
			int cell =
				(y * FV_GRID / h) * FV_GRID + x * FV_GRID / w;

			for (int k = 0; k < 8; k++)
				if (img[(y + ny[k]) * w + x + nx[k]] >=
				    img[y * w + x])
					code |= 1u << k;
			hist[cell][code] += 1;
			total[cell] += 1;
		}
	}
	memset(f, 0, sizeof(double) * FV_NFEAT);
	for (int c = 0; c < FV_GRID * FV_GRID; c++)
		for (unsigned code = 0; code < 256; code++)
			f[c * FV_BINS + fv_bin(code)] +=
				hist[c][code] / total[c];
}

static double ref_chi2(const double *a, const double *b)
{
	double d = 0;

	for (int i = 0; i < FV_NFEAT; i++)
		if (a[i] + b[i] > 0)
			d += (a[i] - b[i]) * (a[i] - b[i]) / (a[i] + b[i]);
	return d;
}

int main(int argc, char **argv)
{
	int verbose = argc > 1 && !strcmp(argv[1], "-v");
	unsigned people = 40, views = 6, sizes[] = { 128, 256, 97 };
	int seen[FV_BINS] = { 0 }, bad = 0;
	static float fa[FV_NFEAT], fb[FV_NFEAT], enrolled[40][FV_NFEAT];
	static double ra[FV_NFEAT], rb[FV_NFEAT];
	uint8_t *img = malloc(FV_MAX_PIXELS), *img2 = malloc(FV_MAX_PIXELS);

	tap_plan(9);
	for (unsigned code = 0; code < 256; code++) {
		unsigned b = fv_bin(code);

		if (transitions(code) <= 2 ? b >= FV_BINS - 1 || seen[b]++ :
					     b != FV_BINS - 1)
			bad++;
	}
	ok(!bad,
	   "fv_bin: the 58 uniform patterns get bins of their own, the rest share bin 58");

	/* features and distances against the reference, three sizes */
	double worst_f = 0, worst_d = 0;

	for (unsigned s = 0; s < 3; s++) {
		unsigned w = sizes[s], h = s == 2 ? 131 : sizes[s];

		for (unsigned p = 0; p < 4; p++) {
			fv_face(7, p, 1, w, h, img);
			fv_face(7, p ? p - 1 : 9, 2, w, h, img2);
			fv_features_cpu(img, w, h, fa);
			fv_features_cpu(img2, w, h, fb);
			ref_features(img, (int)w, (int)h, ra);
			ref_features(img2, (int)w, (int)h, rb);
			for (int i = 0; i < FV_NFEAT; i++)
				worst_f = fmax(worst_f, fabs(fa[i] - ra[i]));
			worst_d = fmax(worst_d, fabs(fv_chi2_cpu(fa, fb) -
						     ref_chi2(ra, rb)) /
							ref_chi2(ra, rb));
		}
	}
	ok(worst_f < 1e-6,
	   "LBP histograms match the reference (largest difference %g)",
	   worst_f);
	ok(worst_d < 1e-4,
	   "chi-square distances match the reference (largest relative difference %g)",
	   worst_d);

	/* the population: genuine views within the threshold, impostors beyond */
	for (unsigned s = 0; s < 2; s++) {
		unsigned side = sizes[s];
		float gmax = 0, imin = 1e9, gsum = 0, isum = 0;
		unsigned ng = 0, ni = 0;

		for (unsigned p = 0; p < people; p++) {
			fv_face(1, p, 0, side, side, img);
			fv_features_cpu(img, side, side, enrolled[p]);
		}
		for (unsigned p = 0; p < people; p++) {
			for (unsigned v = 1; v <= views; v++) {
				fv_face(1, p, v, side, side, img);
				fv_features_cpu(img, side, side, fa);
				for (unsigned q = 0; q < people; q++) {
					float d = fv_chi2_cpu(fa, enrolled[q]);

					if (q == p) {
						gmax = fmaxf(gmax, d);
						gsum += d;
						ng++;
					} else {
						imin = fminf(imin, d);
						isum += d;
						ni++;
					}
				}
			}
		}
		if (verbose)
			printf("# %ux%u: genuine max %.3f mean %.3f; impostor min %.3f mean %.3f\n",
			       side, side, gmax, gsum / ng, imin, isum / ni);
		ok(gmax <= FV_THRESHOLD,
		   "%ux%u: every view of a person is within %.2f (largest %.3f)",
		   side, side, FV_THRESHOLD, gmax);
		ok(imin > FV_THRESHOLD,
		   "%ux%u: every other person is beyond %.2f (nearest %.3f)",
		   side, side, FV_THRESHOLD, imin);
	}

	/* PGM round trip */
	char path[] = "/tmp/facever-check-XXXXXX";
	int fd = mkstemp(path);
	uint32_t w = 0, h = 0;
	uint8_t *back = NULL;

	fv_face(3, 5, 1, 128, 96, img);
	if (fd >= 0 && app_pgm_write(path, img, 128, 96) == 0)
		back = app_pgm_read(path, &w, &h, FV_MIN_SIDE, FV_MAX_SIDE);
	ok(back && w == 128 && h == 96 && !memcmp(back, img, 128 * 96),
	   "a PGM file written and read back holds the same picture");
	free(back);
	if (fd >= 0) {
		FILE *f = fopen(path, "wb");

		fputs("P5\n8 8\n255\n", f); /* too small: refused */
		fclose(f);
		back = app_pgm_read(path, &w, &h, FV_MIN_SIDE, FV_MAX_SIDE);
		ok(!back, "a PGM file with a side under %d pixels is refused",
		   FV_MIN_SIDE);
		free(back);
		unlink(path);
	} else {
		ok(0, "a temporary file for the PGM checks");
	}
	free(img);
	free(img2);
	tap_exit();
}
