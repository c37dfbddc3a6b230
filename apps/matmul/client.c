/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mm-client: the load generator of the matrix product, closed loop, one
 * thread per connection. Matrices hold small integers (-4..4), so every
 * product is exact in float32 whatever the order of the sums, and every
 * answer is checked exactly: in full for n <= 128, else with Freivalds'
 * test (C x = A (B x) for two random integer vectors x, in 64-bit
 * integers), which a wrong element fails with probability 1 - 1/81.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "mm.h"

#define VARIANTS 2 /* distinct (A, B) pairs each connection cycles through */
#define FULL_CHECK 128 /* sides up to this are checked element by element */

struct variant {
	float *ab; /* A then B */
	int64_t *x[2], *y[2]; /* Freivalds: y = A (B x) */
	float *ref; /* n <= FULL_CHECK: C itself */
};

static const char *server = "127.0.0.1:7200";
static uint32_t n = 256;
static double duration = 5;
static uint64_t per_conn; /* requests per connection, 0: for duration */
static struct variant var[VARIANTS];

struct conn_result {
	uint64_t sent, ok, wrong, errors;
	uint64_t *lat_us;
	size_t nlat, cap;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int64_t small(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (int64_t)((*s >> 33) % 9) - 4;
}

static void make_variant(struct variant *v, uint64_t seed)
{
	size_t n2 = (size_t)n * n;
	const float *A, *B;

	v->ab = malloc(2 * n2 * sizeof(float));
	for (size_t i = 0; i < 2 * n2; i++)
		v->ab[i] = (float)small(&seed);
	A = v->ab;
	B = v->ab + n2;
	if (n <= FULL_CHECK) {
		v->ref = calloc(n2, sizeof(float));
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t k = 0; k < n; k++)
				for (uint32_t j = 0; j < n; j++)
					v->ref[(size_t)i * n + j] +=
						A[(size_t)i * n + k] *
						B[(size_t)k * n + j];
		return;
	}
	for (int t = 0; t < 2; t++) {
		int64_t *bx = calloc(n, sizeof(int64_t));

		v->x[t] = malloc(n * sizeof(int64_t));
		v->y[t] = calloc(n, sizeof(int64_t));
		for (uint32_t j = 0; j < n; j++)
			v->x[t][j] = small(&seed);
		for (uint32_t k = 0; k < n; k++)
			for (uint32_t j = 0; j < n; j++)
				bx[k] += (int64_t)B[(size_t)k * n + j] *
					 v->x[t][j];
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t k = 0; k < n; k++)
				v->y[t][i] +=
					(int64_t)A[(size_t)i * n + k] * bx[k];
		free(bx);
	}
}

static int right(const struct variant *v, const float *C)
{
	if (v->ref)
		return !memcmp(v->ref, C, (size_t)n * n * sizeof(float));
	for (int t = 0; t < 2; t++)
		for (uint32_t i = 0; i < n; i++) {
			int64_t s = 0;

			for (uint32_t j = 0; j < n; j++)
				s += (int64_t)C[(size_t)i * n + j] * v->x[t][j];
			if (s != v->y[t][i])
				return 0;
		}
	return 1;
}

static void *run(void *arg)
{
	struct conn_result *r = arg;
	size_t n2 = (size_t)n * n;
	float *C = malloc(n2 * sizeof(float));
	uint64_t end = now_ns() + (uint64_t)(duration * 1e9);
	int fd = app_connect(server);

	if (fd < 0) {
		r->errors++;
		return NULL;
	}
	for (uint32_t seq = 1;; seq++) {
		const struct variant *v = &var[seq % VARIANTS];
		struct mm_hdr h = { MM_REQ_MAGIC, seq, n, 0 };
		uint64_t t0 = now_ns();

		if (per_conn ? r->sent >= per_conn : t0 >= end)
			break;
		r->sent++;
		if (app_io_all(fd, &h, sizeof(h), 1) ||
		    app_io_all(fd, v->ab, 2 * n2 * sizeof(float), 1) ||
		    app_io_all(fd, &h, sizeof(h), 0) ||
		    h.magic != MM_RESP_MAGIC || h.seq != seq ||
		    h.n_or_status != MM_OK || h.n != n ||
		    app_io_all(fd, C, n2 * sizeof(float), 0)) {
			r->errors++;
			break;
		}
		if (r->nlat == r->cap) {
			r->cap = r->cap ? 2 * r->cap : 1024;
			r->lat_us =
				realloc(r->lat_us, r->cap * sizeof(uint64_t));
		}
		r->lat_us[r->nlat++] = (now_ns() - t0) / 1000;
		if (right(v, C))
			r->ok++;
		else
			r->wrong++;
	}
	close(fd);
	free(C);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "conns", required_argument, NULL, 'c' },
		{ "side", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'd' },
		{ "requests", required_argument, NULL, 'k' },
		{ "seed", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	unsigned conns = 4, seed = 1;
	struct conn_result *res, all = { 0 };
	pthread_t *tid;
	uint64_t *lat, t0, t1;
	size_t nlat = 0;
	double secs;
	int opt;

	while ((opt = getopt_long(argc, argv, "s:c:n:d:k:e:h", opts, NULL)) !=
	       -1) {
		switch (opt) {
		case 's':
			server = optarg;
			break;
		case 'c':
			conns = (unsigned)atoi(optarg);
			break;
		case 'n':
			n = (uint32_t)atoi(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		case 'k':
			per_conn = strtoull(optarg, NULL, 0);
			break;
		case 'e':
			seed = (unsigned)atoi(optarg);
			break;
		default:
			fprintf(opt == 'h' ? stdout : stderr,
				"usage: mm-client [-s ADDR] [-c CONNS] [-n SIDE] [-d SECONDS | -k REQUESTS-PER-CONN] [-e SEED]\n");
			return opt == 'h' ? 0 : EX_USAGE;
		}
	}
	if (!conns || !n || n > 8192) {
		fprintf(stderr,
			"mm-client: conns must be positive and the side 1..8192\n");
		return EX_USAGE;
	}
	for (int v = 0; v < VARIANTS; v++)
		make_variant(&var[v], (uint64_t)seed * 1000 + (uint64_t)v);
	res = calloc(conns, sizeof(*res));
	tid = calloc(conns, sizeof(*tid));
	t0 = now_ns();
	for (unsigned i = 0; i < conns; i++)
		pthread_create(&tid[i], NULL, run, &res[i]);
	for (unsigned i = 0; i < conns; i++) {
		pthread_join(tid[i], NULL);
		all.sent += res[i].sent;
		all.ok += res[i].ok;
		all.wrong += res[i].wrong;
		all.errors += res[i].errors;
		nlat += res[i].nlat;
	}
	t1 = now_ns();
	secs = (t1 - t0) / 1e9;
	lat = malloc((nlat + 1) * sizeof(*lat));
	nlat = 0;
	for (unsigned i = 0; i < conns; i++) {
		memcpy(lat + nlat, res[i].lat_us, res[i].nlat * sizeof(*lat));
		nlat += res[i].nlat;
	}
	qsort(lat, nlat, sizeof(*lat), cmp_u64);
	printf("mm-client: n=%u requests=%llu ok=%llu wrong=%llu errors=%llu seconds=%.2f rps=%.1f gflops=%.1f p50_us=%llu p99_us=%llu\n",
	       n, (unsigned long long)all.sent, (unsigned long long)all.ok,
	       (unsigned long long)all.wrong, (unsigned long long)all.errors,
	       secs, nlat / secs, nlat * 2.0 * n * n * n / secs / 1e9,
	       (unsigned long long)(nlat ? lat[(nlat - 1) / 2] : 0),
	       (unsigned long long)(nlat ? lat[(size_t)((nlat - 1) * 0.99)] :
					   0));
	return all.wrong || all.errors ? 1 : 0;
}
