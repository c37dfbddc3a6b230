/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ESPCN's weights files and its CPU reference (espcn.h says what both
 * are).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "espcn.h"

/* xorshift32: the same numbers on every machine. */
static uint32_t espcn_next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* n values uniform in +-bound. */
static void espcn_fill(float *p, size_t n, double bound, uint32_t *s)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(bound * (2.0 * espcn_next(s) / 4294967296.0 - 1));
}

void espcn_weights_make(float *p, uint32_t seed)
{
	uint32_t s = seed * 2654435761u + 1; /* never 0 */

	espcn_fill(p + ESPCN_W1, ESPCN_C1 * 25,
		   sqrt(6.0 / (25 + 25 * ESPCN_C1)), &s);
	espcn_fill(p + ESPCN_B1, ESPCN_C1, 0.01, &s);
	espcn_fill(p + ESPCN_W2, ESPCN_C2 * ESPCN_C1 * 9,
		   sqrt(6.0 / (9 * ESPCN_C1 + 9 * ESPCN_C2)), &s);
	espcn_fill(p + ESPCN_B2, ESPCN_C2, 0.01, &s);
	espcn_fill(p + ESPCN_W3, ESPCN_C3 * ESPCN_C2 * 9,
		   sqrt(6.0 / (9 * ESPCN_C2 + 9 * ESPCN_C3)), &s);
	espcn_fill(p + ESPCN_B3, ESPCN_C3, 0.01, &s);
}

static void espcn_put32(uint8_t *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t espcn_get32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

int espcn_weights_write(const char *path, const float *p, char *err,
			size_t errlen)
{
	uint8_t hdr[ESPCN_HDR_BYTES] = ESPCN_MAGIC, word[4];
	FILE *f = fopen(path, "wb");
	int bad;

	if (!f) {
		snprintf(err, errlen, "cannot write %s: %s", path,
			 strerror(errno));
		return -1;
	}
	espcn_put32(hdr + 8, ESPCN_R);
	espcn_put32(hdr + 12, ESPCN_C1);
	espcn_put32(hdr + 16, ESPCN_C2);
	espcn_put32(hdr + 20, ESPCN_NPARAMS);
	bad = fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr);
	for (size_t i = 0; i < ESPCN_NPARAMS && !bad; i++) {
		uint32_t v;

		memcpy(&v, &p[i], 4);
		espcn_put32(word, v);
		bad = fwrite(word, 1, 4, f) != 4;
	}
	if (fclose(f) || bad) {
		snprintf(err, errlen, "cannot write %s: %s", path,
			 strerror(errno));
		return -1;
	}
	return 0;
}

/* The parameters from a whole file's bytes; NULL with a sentence. */
static float *espcn_weights_parse(const uint8_t *b, size_t n, char *err,
				  size_t errlen)
{
	const size_t want = ESPCN_HDR_BYTES + 4 * (size_t)ESPCN_NPARAMS;
	float *p;

	if (n < ESPCN_HDR_BYTES || memcmp(b, ESPCN_MAGIC, 8)) {
		snprintf(err, errlen,
			 "not an ESPCN weights file (it does not start with \"%s\")",
			 ESPCN_MAGIC);
		return NULL;
	}
	if (espcn_get32(b + 8) != ESPCN_R || espcn_get32(b + 12) != ESPCN_C1 ||
	    espcn_get32(b + 16) != ESPCN_C2 ||
	    espcn_get32(b + 20) != ESPCN_NPARAMS) {
		snprintf(err, errlen,
			 "weights of another shape: scale %u, channels %u and %u, %u floats; this build runs scale %d, channels %d and %d, %d floats",
			 espcn_get32(b + 8), espcn_get32(b + 12),
			 espcn_get32(b + 16), espcn_get32(b + 20), ESPCN_R,
			 ESPCN_C1, ESPCN_C2, ESPCN_NPARAMS);
		return NULL;
	}
	if (n != want) {
		snprintf(err, errlen, "%s: %zu bytes where the header says %zu",
			 n < want ? "truncated" : "bytes after the weights", n,
			 want);
		return NULL;
	}
	p = malloc(4 * (size_t)ESPCN_NPARAMS);
	if (!p) {
		snprintf(err, errlen, "out of memory for the weights");
		return NULL;
	}
	for (size_t i = 0; i < ESPCN_NPARAMS; i++) {
		uint32_t v = espcn_get32(b + ESPCN_HDR_BYTES + 4 * i);

		memcpy(&p[i], &v, 4);
		if (!isfinite(p[i])) {
			snprintf(err, errlen,
				 "weight %zu is not a finite number", i);
			free(p);
			return NULL;
		}
	}
	return p;
}

float *espcn_weights_load(const char *path, char *err, size_t errlen)
{
	const size_t cap = ESPCN_HDR_BYTES + 4 * (size_t)ESPCN_NPARAMS + 1;
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	float *p = NULL;
	size_t n;

	if (!f) {
		snprintf(err, errlen, "cannot read %s: %s", path,
			 strerror(errno));
		return NULL;
	}
	b = malloc(cap);
	if (b) {
		n = fread(b, 1, cap, f); /* one byte more: what comes after */
		p = espcn_weights_parse(b, n, err, errlen);
		free(b);
	} else {
		snprintf(err, errlen, "out of memory for the weights");
	}
	fclose(f);
	return p;
}

float *espcn_weights_open(const char *path, char *err, size_t errlen,
			  int *status)
{
	char why[256];
	float *p = path ? espcn_weights_load(path, why, sizeof(why)) : NULL;

	if (!p) {
		if (path)
			snprintf(err, errlen, "%s: %s", path, why);
		else
			snprintf(err, errlen, "-w WEIGHTS is required (infer-ref weights writes one)");
		*status = path ? EX_DATAERR : EX_USAGE;
	}
	return p;
}

/*
 * One "same" convolution with a k x k kernel: cin planes of w x h at in
 * to cout planes at out, tanh'd where asked.
 */
static void espcn_conv(const float *in, uint32_t cin, float *out,
		       uint32_t cout, uint32_t w, uint32_t h, const float *wt,
		       const float *bias, int k, int act)
{
	int half = k / 2;

	for (uint32_t o = 0; o < cout; o++)
		for (uint32_t y = 0; y < h; y++)
			for (uint32_t x = 0; x < w; x++) {
				float v = bias[o];

				for (uint32_t i = 0; i < cin; i++)
					for (int ky = 0; ky < k; ky++) {
						long yy = (long)y + ky - half;

						if (yy < 0 || yy >= (long)h)
							continue;
						for (int kx = 0; kx < k; kx++) {
							long xx = (long)x + kx -
								  half;

							if (xx < 0 || xx >= (long)w)
								continue;
							v += wt[((o * cin + i) * k +
								 ky) * k +
								kx] *
							     in[((size_t)i * h +
								 yy) * w +
								xx];
						}
					}
				out[((size_t)o * h + y) * w + x] =
					act ? tanhf(v) : v;
			}
}

void espcn_shuffle(const float *c, uint32_t w, uint32_t h, uint8_t *out)
{
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			for (uint32_t ch = 0; ch < ESPCN_C3; ch++) {
				float v = c[((size_t)ch * h + y) * w + x] * 255.0f;
				size_t oy = (size_t)y * ESPCN_R + ch / ESPCN_R;
				size_t ox = (size_t)x * ESPCN_R + ch % ESPCN_R;

				v = v < 0 ? 0 : v > 255 ? 255 : v;
				out[oy * w * ESPCN_R + ox] = (uint8_t)lrintf(v);
			}
}

int espcn_run_cpu(const float *p, const uint8_t *in, uint32_t w, uint32_t h,
		  uint8_t *out)
{
	size_t px = (size_t)w * h;
	float *x = malloc(px * sizeof(float));
	float *a = malloc(px * ESPCN_C1 * sizeof(float));
	float *b = malloc(px * ESPCN_C2 * sizeof(float));
	float *c = malloc(px * ESPCN_C3 * sizeof(float));
	int r = -1;

	if (x && a && b && c) {
		for (size_t i = 0; i < px; i++)
			x[i] = in[i] / 255.0f;
		espcn_conv(x, 1, a, ESPCN_C1, w, h, p + ESPCN_W1, p + ESPCN_B1,
			   5, 1);
		espcn_conv(a, ESPCN_C1, b, ESPCN_C2, w, h, p + ESPCN_W2,
			   p + ESPCN_B2, 3, 1);
		espcn_conv(b, ESPCN_C2, c, ESPCN_C3, w, h, p + ESPCN_W3,
			   p + ESPCN_B3, 3, 0);
		espcn_shuffle(c, w, h, out);
		r = 0;
	}
	free(x);
	free(a);
	free(b);
	free(c);
	return r;
}
