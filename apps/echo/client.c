/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-client: a GPU echo client for any echo server. Each block
 * (or group of --group blocks sharing the copying with gsend_group and
 * grecv_group) connects, sends --size bytes --iters times, checks every
 * echoed byte, and times each round trip on the device clock. Exit
 * status 0 only if every connection got every byte back intact.
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
		"  -b, --blocks N        connections, a block or a group each (default 1)\n"
		"  -k, --group K         blocks per connection, sharing its copying (default 1)\n"
		"  -t, --threads N       threads per block (default 256; host backend: 1)\n"
		"  -r, --ring BYTES      bytes per socket ring through gsockd (a power of two)\n"
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

/* Chunks the groups' rank 0 shared with the others (gsock_group.cuh). */
static uint64_t shared_chunks(const struct echo_client_args *a,
			      unsigned conns)
{
	struct ggroup_sync y;
	uint64_t sum = 0;

	for (unsigned c = 0; c < conns; c++)
		if (!gsock_memcpy(ctx, &y, &a->sync[c], sizeof(y)))
			sum += y.shared;
	return sum;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 'n' },
		{ "iters", required_argument, NULL, 'i' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "group", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 't' },
		{ "ring", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 'S' },
		{ "gpu", required_argument, NULL, 'd' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	unsigned blocks = 1, threads = 256, size = 64, iters = 1000, group = 1;
	unsigned seed = (unsigned)time(NULL);
	struct gsock_opts go = { 0 };
	struct echo_client_args *a;
	size_t nrtt;
	int opt, r, status = 0, failed = 0;

	while ((opt = getopt_long(argc, argv, "n:i:b:k:t:r:S:d:s:h", opts, NULL)) !=
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
		case 'k':
			group = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 't':
			threads = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'r':
			go.ring_size = (uint32_t)strtoul(optarg, NULL, 0);
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
	    threads > 1024 || !group || group > GGROUP_MAX ||
	    blocks > 65536) {
		usage(stderr);
		return EX_USAGE;
	}
	go.nslots = blocks * group;
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
	r = gsock_max_threads(ctx, (const void *)echo_client_kernel);
	if (r > 0 && threads > (unsigned)r) {
		fprintf(stderr,
			"gsock-echo-client: -t %u: on GPU %d its kernel runs at most %d threads a block (its registers allow no more); use -t %d or fewer\n",
			threads, gsock_device(ctx), r, r);
		status = EX_USAGE;
		goto out_fini;
	}
	a->size = size;
	a->iters = iters;
	a->seed = seed;
	a->group = group;
	if (group > 1) /* zeroed, as struct ggroup_sync must start */
		a->sync = gsock_dev_alloc(ctx, blocks * sizeof(*a->sync));
	a->sbuf = gsock_dev_alloc(ctx, (size_t)blocks * size);
	a->rbuf = gsock_dev_alloc(ctx, (size_t)blocks * size);
	a->rtt_ns = gsock_alloc(ctx, nrtt * sizeof(uint64_t));
	a->result = gsock_alloc(ctx, blocks * group * sizeof(*a->result));
	if (!a->sbuf || !a->rbuf || !a->rtt_ns || !a->result ||
	    (group > 1 && !a->sync)) {
		fprintf(stderr, "gsock-echo-client: out of memory\n");
		status = EX_OSERR;
		goto out_free;
	}
	r = gsock_launch(ctx, (const void *)echo_client_kernel, blocks * group,
			 threads, a);
	if (r) {
		fprintf(stderr, "gsock-echo-client: cannot launch %u blocks of %u threads: %s\n",
			blocks * group, threads, strerror(-r));
		status = EX_SOFTWARE;
		goto out_free;
	}
	gsock_wait(ctx);
	/* A group's blocks all return rank 0's result: one line for it. */
	for (unsigned b = 0; b < blocks; b++) {
		const struct echo_client_result *res = &a->result[b * group];
		int64_t e = res->error;

		for (unsigned k = 1; k < group && !e; k++)
			e = a->result[b * group + k].error;
		if (e == ECHO_MISMATCH)
			fprintf(stderr,
				"gsock-echo-client: connection %u: echoed data differs at byte %llu\n",
				b, (unsigned long long)res->mismatch_at);
		else if (e)
			fprintf(stderr,
				"gsock-echo-client: connection %u: %s\n", b,
				strerror((int)-e));
		failed += e != 0;
	}
	if (failed) {
		printf("gsock-echo-client: FAILED: %d of %u connections (%s backend)\n",
		       failed, blocks, gsock_backend());
		status = 1;
	} else {
		qsort(a->rtt_ns, nrtt, sizeof(uint64_t), cmp_u64);
		printf("gsock-echo-client: ok: %u blocks x %u round trips of %u B, bytes intact (%s backend); rtt us p50 %.1f p99 %.1f max %.1f\n",
		       blocks, iters, size, gsock_backend(),
		       pct_us(a->rtt_ns, nrtt, 0.5),
		       pct_us(a->rtt_ns, nrtt, 0.99),
		       pct_us(a->rtt_ns, nrtt, 1.0));
		if (group > 1)
			printf("gsock-echo-client: groups of %u blocks a connection: %llu chunks shared\n",
			       group, (unsigned long long)shared_chunks(a, blocks));
	}
out_free:
	gsock_dev_free(ctx, a->sbuf);
	gsock_dev_free(ctx, a->rbuf);
	gsock_free(ctx, a->rtt_ns);
	gsock_free(ctx, a->result);
	if (a->sync)
		gsock_dev_free(ctx, a->sync);
out_fini:
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
