/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-client: a GPU echo client for any echo server. Each block
 * connects, sends --size bytes --iters times, checks every echoed byte,
 * and times each round trip on the device clock. Exit status 0 only if
 * every block got every byte back intact.
 */
#include <config.h>

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "app.h"
#include "echo.h"
#include "gsock.h"

static struct gsock_ctx *ctx;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsock-echo-client [options] ADDR\n"
		"  ADDR                  HOST:PORT, [V6]:PORT or /unix/path\n"
		"  -n, --size BYTES      bytes per round trip (default 64)\n"
		"  -i, --iters N         round trips per block (default 1000)\n"
		"  -b, --blocks N        blocks, one connection each (default 1)\n"
		"  -t, --threads N       threads per block (default 256; host backend: 1)\n"
		"  -S, --seed N          pattern seed (default: time)\n"
		"  -d, --gpu N           the GPU to run on (CUDA ordinal, default 0)\n"
		"  -s, --control PATH    gsockd's control socket\n");
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

static double pct_us(const uint64_t *sorted, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);

	return sorted[i] / 1000.0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 'n' },
		{ "iters", required_argument, NULL, 'i' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "seed", required_argument, NULL, 'S' },
		{ "gpu", required_argument, NULL, 'd' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	unsigned blocks = 1, threads = 256, size = 64, iters = 1000;
	unsigned seed = (unsigned)time(NULL);
	struct gsock_opts go = { 0 };
	struct echo_client_args *a;
	size_t nrtt;
	int opt, r, status = 0, failed = 0;

	while ((opt = getopt_long(argc, argv, "n:i:b:t:S:d:s:h", opts, NULL)) !=
	       -1) {
		switch (opt) {
		case 'n':
			size = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'i':
			iters = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			blocks = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 't':
			threads = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'S':
			seed = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'd':
			go.device = atoi(optarg);
			break;
		case 's':
			go.control = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind != argc - 1 || !size || !iters || !blocks || !threads ||
	    threads > 1024) {
		usage(stderr);
		return EX_USAGE;
	}
	go.nslots = blocks;
	go.nsocks = blocks + 4;
	ctx = app_start("gsock-echo-client", &go, &threads);
	if (!ctx)
		return EX_UNAVAILABLE;
	nrtt = (size_t)blocks * iters;
	a = gsock_alloc(ctx, sizeof(*a));
	if (!a || gsock_parse_addr(argv[optind], &a->addr, &a->addrlen)) {
		fprintf(stderr, "gsock-echo-client: cannot use address %s\n",
			argv[optind]);
		status = EX_USAGE;
		goto out_fini;
	}
	a->size = size;
	a->iters = iters;
	a->seed = seed;
	a->sbuf = gsock_dev_alloc(ctx, (size_t)blocks * size);
	a->rbuf = gsock_dev_alloc(ctx, (size_t)blocks * size);
	a->rtt_ns = gsock_alloc(ctx, nrtt * sizeof(uint64_t));
	a->result = gsock_alloc(ctx, blocks * sizeof(*a->result));
	if (!a->sbuf || !a->rbuf || !a->rtt_ns || !a->result) {
		fprintf(stderr, "gsock-echo-client: out of memory\n");
		status = EX_OSERR;
		goto out_free;
	}
	r = gsock_launch(ctx, (const void *)echo_client_kernel, blocks, threads,
			 a);
	if (r) {
		fprintf(stderr, "gsock-echo-client: cannot launch: %d\n", r);
		status = EX_SOFTWARE;
		goto out_free;
	}
	gsock_wait(ctx);
	for (unsigned b = 0; b < blocks; b++) {
		int64_t e = a->result[b].error;

		if (e == ECHO_MISMATCH)
			fprintf(stderr,
				"gsock-echo-client: block %u: echoed data differs at byte %llu\n",
				b,
				(unsigned long long)a->result[b].mismatch_at);
		else if (e)
			fprintf(stderr, "gsock-echo-client: block %u: %s\n", b,
				strerror((int)-e));
		failed += e != 0;
	}
	if (failed) {
		printf("gsock-echo-client: FAILED: %d of %u blocks (%s backend)\n",
		       failed, blocks, gsock_backend());
		status = 1;
	} else {
		qsort(a->rtt_ns, nrtt, sizeof(uint64_t), cmp_u64);
		printf("gsock-echo-client: ok: %u blocks x %u round trips of %u B, bytes intact (%s backend); rtt us p50 %.1f p99 %.1f max %.1f\n",
		       blocks, iters, size, gsock_backend(),
		       pct_us(a->rtt_ns, nrtt, 0.5),
		       pct_us(a->rtt_ns, nrtt, 0.99),
		       pct_us(a->rtt_ns, nrtt, 1.0));
	}
out_free:
	gsock_dev_free(ctx, a->sbuf);
	gsock_dev_free(ctx, a->rbuf);
	gsock_free(ctx, a->rtt_ns);
	gsock_free(ctx, a->result);
out_fini:
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
