/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mr-gen: deterministic inputs for the MapReduce jobs. A text corpus of
 * Zipf-distributed words (with capitals, punctuation, line breaks, UTF-8
 * and over-long words, so the word rules are exercised), or points drawn
 * around random cluster centres.
 */
#include <config.h>

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "mr.h"

static uint64_t rng_state;

/* splitmix64 */
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rnd01(void)
{
	return (double)(rnd() >> 11) / 9007199254740992.0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mr-gen words [--bytes N] [--vocab V] [--zipf S] [--seed X] [-o FILE]\n"
		"       mr-gen points [--n N] [--dim D] [--clusters C] [--spread S] [--seed X] [-o FILE]\n"
		"  words:  about N bytes of text (default 16 MiB) over V words (50000), Zipf exponent S (1.0)\n"
		"  points: N points (1000000) of D dimensions (8, at most %d) around C centres (16),\n"
		"          standard deviation S (2.0); the format mr-worker --job kmeans reads\n",
		MR_KM_MAX_DIM);
}

/* Words that test the rules: UTF-8, over-long, mixed with digits. */
static const char *const specials[] = {
	"naïve",
	"Straße",
	"ABC123",
	"pneumonoultramicroscopicsilicovolcanoconiosis-and-then-some",
	"antidisestablishmentarianismantidisestablishmentarianism",
	"x",
};

static int gen_words(FILE *f, uint64_t bytes, uint32_t vocab, double s)
{
	double *cdf = malloc(vocab * sizeof(*cdf)), total = 0;
	char (*word)[24] = malloc((size_t)vocab * sizeof(*word));
	uint64_t written = 0, inline_words = 0;
	int capital = 1;

	if (!cdf || !word) {
		fprintf(stderr, "mr-gen: out of memory\n");
		return EX_OSERR;
	}
	for (uint32_t i = 0; i < vocab; i++) {
		unsigned len = 1 + (unsigned)(rnd() % 7), n = 0;

		while (n < len)
			word[i][n++] = (char)('a' + rnd() % 26);
		for (uint32_t v = i;; v /= 26) { /* distinct: the rank in base 26 */
			word[i][n++] = (char)('a' + v % 26);
			if (v < 26)
				break;
		}
		word[i][n] = 0;
		total += 1.0 / pow((double)(i + 1), s);
		cdf[i] = total;
	}
	while (written < bytes) {
		double u = rnd01() * total;
		uint32_t lo = 0, hi = vocab - 1;
		const char *w;
		char sep;
		int n;

		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		w = rnd() % 1000 == 0 ? specials[rnd() % 6] : word[lo];
		n = fprintf(f, "%c%s", capital ? (char)(w[0] >= 'a' && w[0] <= 'z' ? w[0] - 32 : w[0]) : w[0], w + 1);
		capital = 0;
		switch (rnd() % 16) {
		case 0:
			sep = '.';
			capital = 1;
			break;
		case 1:
			sep = ',';
			break;
		default:
			sep = ' ';
		}
		if (sep != ' ')
			n += fputc(sep, f) != EOF;
		n += fputc(++inline_words % 14 == 0 ? '\n' : ' ', f) != EOF;
		if (n <= 0) {
			perror("mr-gen");
			return EX_IOERR;
		}
		written += (uint64_t)n;
	}
	free(cdf);
	free(word);
	return 0;
}

static int gen_points(FILE *f, uint64_t n, uint32_t dim, uint32_t clusters,
		      double spread)
{
	struct mr_points_hdr h = { MR_POINTS_MAGIC, dim, n };
	float *centre = malloc((size_t)clusters * dim * sizeof(*centre));
	float p[MR_KM_MAX_DIM];

	if (!centre)
		return EX_OSERR;
	for (size_t i = 0; i < (size_t)clusters * dim; i++)
		centre[i] = (float)(rnd01() * 100.0 - 50.0);
	if (fwrite(&h, sizeof(h), 1, f) != 1)
		goto err;
	for (uint64_t i = 0; i < n; i++) {
		const float *c = centre + (rnd() % clusters) * dim;

		for (uint32_t d = 0; d < dim; d++) {
			double u1 = rnd01(), u2 = rnd01();
			double g = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) *
				   cos(2 * M_PI * u2);

			p[d] = c[d] + (float)(g * spread);
		}
		if (fwrite(p, sizeof(float), dim, f) != dim)
			goto err;
	}
	free(centre);
	return 0;
err:
	perror("mr-gen");
	free(centre);
	return EX_IOERR;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bytes", required_argument, NULL, 'B' },
		{ "vocab", required_argument, NULL, 'V' },
		{ "zipf", required_argument, NULL, 'z' },
		{ "n", required_argument, NULL, 'n' },
		{ "dim", required_argument, NULL, 'd' },
		{ "clusters", required_argument, NULL, 'c' },
		{ "spread", required_argument, NULL, 'S' },
		{ "seed", required_argument, NULL, 's' },
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t bytes = 16 << 20, n = 1000000, seed = 1;
	unsigned vocab = 50000, dim = 8, clusters = 16;
	double zipf = 1.0, spread = 2.0;
	const char *what, *out = NULL;
	FILE *f = stdout;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
		switch (opt) {
		case 'B': bytes = strtoull(optarg, NULL, 0); break;
		case 'V': vocab = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'z': zipf = atof(optarg); break;
		case 'n': n = strtoull(optarg, NULL, 0); break;
		case 'd': dim = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'c': clusters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'S': spread = atof(optarg); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'o': out = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return EX_USAGE;
	}
	what = argv[optind];
	if ((strcmp(what, "words") && strcmp(what, "points")) || !vocab ||
	    !dim || dim > MR_KM_MAX_DIM || !clusters || zipf < 0 ||
	    spread < 0) {
		usage(stderr);
		return EX_USAGE;
	}
	if (out && !(f = fopen(out, "w"))) {
		perror(out);
		return EX_CANTCREAT;
	}
	rng_state = seed;
	r = !strcmp(what, "words") ? gen_words(f, bytes, vocab, zipf) :
				     gen_points(f, n, dim, clusters, spread);
	if (fclose(f) && !r) {
		perror("mr-gen");
		r = EX_IOERR;
	}
	return r;
}
