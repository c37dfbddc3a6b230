/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Binary PGM (P5) pictures for the example programs that take real
 * pictures: face verification's enrolment and client, the super-resolution
 * server's tools.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "app.h"

/* The next number of a PGM header, skipping blanks and # comments. */
static long pgm_number(FILE *f)
{
	int c;
	long v = 0;

	for (;;) {
		c = getc(f);
		if (c == '#')
			while (c != '\n' && c != EOF)
				c = getc(f);
		else if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
			break;
	}
	if (c < '0' || c > '9')
		return -1;
	while (c >= '0' && c <= '9' && v < 100000) {
		v = v * 10 + (c - '0');
		c = getc(f);
	}
	return v; /* the one blank after maxval is consumed here */
}

uint8_t *app_pgm_read(const char *path, uint32_t *w, uint32_t *h,
		      uint32_t min_side, uint32_t max_side)
{
	FILE *f = fopen(path, "rb");
	uint8_t *img = NULL;
	long pw, ph, maxval;

	if (!f)
		return NULL;
	if (getc(f) != 'P' || getc(f) != '5')
		goto out_bad;
	pw = pgm_number(f);
	ph = pgm_number(f);
	maxval = pgm_number(f);
	if (pw < (long)min_side || pw > (long)max_side ||
	    ph < (long)min_side || ph > (long)max_side || maxval < 1 ||
	    maxval > 255)
		goto out_bad;
	img = malloc((size_t)pw * ph);
	if (!img)
		goto out_close;
	if (fread(img, 1, (size_t)pw * ph, f) != (size_t)pw * ph) {
		free(img);
		img = NULL;
		goto out_bad;
	}
	*w = (uint32_t)pw;
	*h = (uint32_t)ph;
	goto out_close;
out_bad:
	errno = EINVAL;
out_close:
	fclose(f);
	return img;
}

int app_pgm_write(const char *path, const uint8_t *img, uint32_t w, uint32_t h)
{
	FILE *f = fopen(path, "wb");
	int r;

	if (!f)
		return -1;
	fprintf(f, "P5\n%u %u\n255\n", w, h);
	r = fwrite(img, 1, (size_t)w * h, f) == (size_t)w * h ? 0 : -1;
	return fclose(f) || r ? -1 : 0;
}

