/* SPDX-License-Identifier: Apache-2.0 */
/*
 * infer-ref: ESPCN's weights and its CPU reference from the command line.
 *
 *   infer-ref weights [-s SEED] -o FILE      write deterministic weights
 *   infer-ref run -w FILE -i IN.pgm -o OUT.pgm   upscale a picture x3
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "app.h"
#include "espcn.h"

static int usage(FILE *f)
{
	fprintf(f,
		"usage: infer-ref weights [-s SEED] -o FILE\n"
		"       infer-ref run -w WEIGHTS -i IN.pgm -o OUT.pgm\n"
		"  weights: write ESPCN x3 weights made from SEED (default 1)\n"
		"  run: upscale a grey PGM of %d to %d pixels a side 3 times\n",
		ESPCN_MIN_SIDE, ESPCN_MAX_SIDE);
	return f == stdout ? 0 : EX_USAGE;
}

int main(int argc, char **argv)
{
	const char *out = NULL, *weights = NULL, *input = NULL;
	unsigned long seed = 1;
	char err[256], *end;
	uint32_t w, h;
	uint8_t *img, *big;
	float *p;
	int opt;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
		return usage(argc < 2 ? stderr : stdout);
	optind = 2;
	while ((opt = getopt(argc, argv, "s:o:w:i:")) != -1) {
		switch (opt) {
		case 's':
			seed = strtoul(optarg, &end, 0);
			if (!*optarg || *end || seed > UINT32_MAX) {
				fprintf(stderr, "infer-ref: -s takes a number up to %u, not '%s'\n",
					UINT32_MAX, optarg);
				return EX_USAGE;
			}
			break;
		case 'o':
			out = optarg;
			break;
		case 'w':
			weights = optarg;
			break;
		case 'i':
			input = optarg;
			break;
		default:
			return usage(stderr);
		}
	}
	if (!out || optind < argc)
		return usage(stderr);
	if (!strcmp(argv[1], "weights")) {
		p = malloc(4 * (size_t)ESPCN_NPARAMS);
		if (!p)
			return EX_OSERR;
		espcn_weights_make(p, (uint32_t)seed);
		if (espcn_weights_write(out, p, err, sizeof(err))) {
			fprintf(stderr, "infer-ref: %s\n", err);
			return EX_CANTCREAT;
		}
		return 0;
	}
	if (strcmp(argv[1], "run") || !weights || !input)
		return usage(stderr);
	p = espcn_weights_load(weights, err, sizeof(err));
	if (!p) {
		fprintf(stderr, "infer-ref: %s: %s\n", weights, err);
		return EX_DATAERR;
	}
	img = app_pgm_read(input, &w, &h, ESPCN_MIN_SIDE, ESPCN_MAX_SIDE);
	if (!img) {
		fprintf(stderr,
			"infer-ref: cannot read %s: %s (a binary PGM of %d to %d pixels a side)\n",
			input, strerror(errno), ESPCN_MIN_SIDE, ESPCN_MAX_SIDE);
		return EX_DATAERR;
	}
	big = malloc((size_t)w * h * ESPCN_R * ESPCN_R);
	if (!big || espcn_run_cpu(p, img, w, h, big)) {
		fprintf(stderr, "infer-ref: out of memory for a %ux%u picture\n",
			w, h);
		return EX_OSERR;
	}
	if (app_pgm_write(out, big, w * ESPCN_R, h * ESPCN_R)) {
		fprintf(stderr, "infer-ref: cannot write %s: %s\n", out,
			strerror(errno));
		return EX_CANTCREAT;
	}
	return 0;
}
