/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mr-ref: the MapReduce jobs on one CPU core, by the rules of mr.h, for
 * the tests to compare against: the word counts sorted as mr-worker
 * writes them, or the k-means centroids.
 */
#include <config.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "mr.h"

struct entry {
	uint32_t used, hash;
	struct mr_word w;
};

static int cmp_words(const void *a, const void *b)
{
	const struct mr_word *x = a, *y = b;

	return strcmp((const char *)x->key, (const char *)y->key);
}

static int wordcount(const uint8_t *t, uint64_t len)
{
	size_t cap = 1 << 16, n = 0, m = 0;
	struct entry *tab = calloc(cap, sizeof(*tab));
	struct mr_word *w;

	for (uint64_t p = 0; tab && p < len;) {
		union {
			uint8_t b[MR_WORD_MAX + 1];
			struct mr_word w;
		} k;
		uint64_t q;
		uint32_t h, klen;
		size_t i;

		if (!mr_is_word_byte(t[p])) {
			p++;
			continue;
		}
		q = mr_word_end(t, len, p);
		klen = mr_key(t + p, q - p, k.b);
		h = mr_hash(k.b, klen);
		p = q;
		for (i = h & (cap - 1); tab[i].used; i = (i + 1) & (cap - 1))
			if (tab[i].hash == h && tab[i].w.len == klen &&
			    !memcmp(tab[i].w.key, k.b, sizeof(k.b)))
				break;
		if (tab[i].used) {
			tab[i].w.count++;
			continue;
		}
		tab[i].used = 1;
		tab[i].hash = h;
		tab[i].w.len = klen;
		tab[i].w.count = 1;
		memcpy(tab[i].w.key, k.b, sizeof(k.b));
		if (++n * 2 > cap) { /* grow: rehash into twice the slots */
			struct entry *old = tab;

			tab = calloc(cap * 2, sizeof(*tab));
			for (size_t o = 0; tab && o < cap; o++) {
				if (!old[o].used)
					continue;
				for (i = old[o].hash & (cap * 2 - 1);
				     tab[i].used; i = (i + 1) & (cap * 2 - 1))
					;
				tab[i] = old[o];
			}
			free(old);
			cap *= 2;
		}
	}
	w = tab ? malloc((n + 1) * sizeof(*w)) : NULL;
	if (!w) {
		fprintf(stderr, "mr-ref: out of memory\n");
		return EX_OSERR;
	}
	for (size_t i = 0; i < cap; i++)
		if (tab[i].used)
			w[m++] = tab[i].w;
	qsort(w, m, sizeof(*w), cmp_words);
	for (size_t i = 0; i < m; i++)
		printf("%.*s\t%u\n", (int)w[i].len, (const char *)w[i].key,
		       w[i].count);
	free(w);
	free(tab);
	return 0;
}

static int kmeans(const uint8_t *file, uint64_t size, uint32_t k,
		  uint32_t iters)
{
	struct mr_points_hdr h;
	const float *pts;
	float *cent;
	double *sum;
	unsigned long long *cnt;

	if (size < sizeof(h))
		goto bad;
	memcpy(&h, file, sizeof(h));
	if (h.magic != MR_POINTS_MAGIC || !h.dim || h.dim > MR_KM_MAX_DIM ||
	    !k || k > MR_KM_MAX_K || h.n < k ||
	    (size - sizeof(h)) / 4 / h.dim < h.n)
		goto bad;
	pts = (const float *)(file + sizeof(h));
	cent = malloc((size_t)k * h.dim * sizeof(*cent));
	sum = malloc((size_t)k * h.dim * sizeof(*sum));
	cnt = malloc(k * sizeof(*cnt));
	if (!cent || !sum || !cnt)
		return EX_OSERR;
	memcpy(cent, pts, (size_t)k * h.dim * sizeof(*cent));
	for (uint32_t it = 0; it < iters; it++) {
		memset(sum, 0, (size_t)k * h.dim * sizeof(*sum));
		memset(cnt, 0, k * sizeof(*cnt));
		for (uint64_t i = 0; i < h.n; i++) {
			const float *p = pts + i * h.dim;
			uint32_t c = mr_nearest(p, cent, k, h.dim);

			for (uint32_t d = 0; d < h.dim; d++)
				sum[c * h.dim + d] += p[d];
			cnt[c]++;
		}
		mr_centroids(cent, sum, cnt, k, h.dim, 0, 1);
	}
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t d = 0; d < h.dim; d++)
			printf("%.9g%c", cent[i * h.dim + d],
			       d + 1 == h.dim ? '\n' : ' ');
	free(cent);
	free(sum);
	free(cnt);
	return 0;
bad:
	fprintf(stderr,
		"mr-ref: not a points file of 1..%d dimensions with at least k = %u points\n",
		MR_KM_MAX_DIM, k);
	return EX_DATAERR;
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	struct stat st;
	const uint8_t *map = NULL;
	int fd, r;

	if (argc < 3 || (strcmp(argv[1], "wordcount") ? argc != 5 || strcmp(argv[1], "kmeans") : argc != 3)) {
		fprintf(stderr,
			"usage: mr-ref wordcount FILE\n"
			"       mr-ref kmeans FILE K ITERS\n");
		return EX_USAGE;
	}
	fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		perror(argv[2]);
		return EX_NOINPUT;
	}
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			perror(argv[2]);
			return EX_IOERR;
		}
	}
	close(fd);
	clock_gettime(CLOCK_MONOTONIC, &a);
	if (!strcmp(argv[1], "wordcount"))
		r = wordcount(map, (uint64_t)st.st_size);
	else
		r = kmeans(map, (uint64_t)st.st_size,
			   (uint32_t)strtoul(argv[3], NULL, 0),
			   (uint32_t)strtoul(argv[4], NULL, 0));
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (fflush(stdout)) {
		perror("mr-ref");
		return EX_IOERR;
	}
	if (!r)
		fprintf(stderr, "mr-ref: %s %.4f s on one core\n", argv[1],
			(double)(b.tv_sec - a.tv_sec) +
				(b.tv_nsec - a.tv_nsec) / 1e9);
	return r;
}
