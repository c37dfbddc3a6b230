/* SPDX-License-Identifier: Apache-2.0 */
/*
 * facever-enrol: stores reference features in memcached, for the
 * generated population (view 0 of each person) or for one PGM picture.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "app.h"
#include "fv_cpu.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: facever-enrol [-M ADDR] [-p PEOPLE] [-S SIDE] [-e SEED]\n"
		"       facever-enrol [-M ADDR] --id N --image FILE.pgm\n"
		"  -M, --memcached ADDR  (default 127.0.0.1:11211)\n"
		"  -p, --people N        persons 0..N-1 of the population (default 100)\n"
		"  -S, --side PIXELS     picture side (default 128)\n"
		"  -e, --seed N          population seed (default 1)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "memcached", required_argument, NULL, 'M' },
		{ "people", required_argument, NULL, 'p' },
		{ "side", required_argument, NULL, 'S' },
		{ "seed", required_argument, NULL, 'e' },
		{ "id", required_argument, NULL, 'I' },
		{ "image", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *mc_at = "127.0.0.1:11211", *image = NULL;
	unsigned people = 100, side = 128, seed = 1;
	long id = -1;
	static float feats[FV_NFEAT];
	static struct mc mc;
	uint8_t *img;
	uint32_t w, h;
	char err[256];
	int opt;

	while ((opt = getopt_long(argc, argv, "M:p:S:e:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'M':
			mc_at = optarg;
			break;
		case 'p':
			people = (unsigned)atoi(optarg);
			break;
		case 'S':
			side = (unsigned)atoi(optarg);
			break;
		case 'e':
			seed = (unsigned)atoi(optarg);
			break;
		case 'I':
			id = atol(optarg);
			break;
		case 'F':
			image = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	mc_init(&mc, mc_at);
	if (image || id >= 0) {
		if (!image || id < 0) {
			fprintf(stderr,
				"facever-enrol: one picture needs both --id and --image\n");
			return EX_USAGE;
		}
		img = app_pgm_read(image, &w, &h, FV_MIN_SIDE,
				   FV_MAX_SIDE);
		if (!img) {
			fprintf(stderr,
				"facever-enrol: cannot read %s: %s (a binary PGM of %d to %d pixels a side)\n",
				image, strerror(errno), FV_MIN_SIDE,
				FV_MAX_SIDE);
			return EX_NOINPUT;
		}
		fv_features_cpu(img, w, h, feats);
		if (mc_set(&mc, (uint32_t)id, feats, FV_FEAT_BYTES, err,
			   sizeof(err))) {
			fprintf(stderr, "facever-enrol: %s\n", err);
			return EX_UNAVAILABLE;
		}
		printf("facever-enrol: enrolled id %ld from %s\n", id, image);
		return 0;
	}
	if (!people || !fv_side_ok(side)) {
		fprintf(stderr,
			"facever-enrol: people must be positive and the side %d..%d\n",
			FV_MIN_SIDE, FV_MAX_SIDE);
		return EX_USAGE;
	}
	img = malloc((size_t)side * side);
	if (!img)
		return EX_OSERR;
	for (unsigned p = 0; p < people; p++) {
		fv_face(seed, p, 0, side, side, img);
		fv_features_cpu(img, side, side, feats);
		if (mc_set(&mc, p, feats, FV_FEAT_BYTES, err, sizeof(err))) {
			fprintf(stderr, "facever-enrol: %s\n", err);
			return EX_UNAVAILABLE;
		}
	}
	printf("facever-enrol: enrolled %u people (%ux%u, seed %u) in %s\n",
	       people, side, side, seed, mc_at);
	return 0;
}
