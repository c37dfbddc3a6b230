/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-client: a GPU echo client for any echo server. Each block
 * (or group of --group blocks sharing the copying with gsend_group and
 * grecv_group) connects, sends --size bytes --iters times, checks every
 * echoed byte, and times each round trip on the device clock. With
 * --mode up or down it streams one way instead, to a server's sink or
 * from its source (stream.h), and reports the streams' GB/s. Exit
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
#include "stream.h"

static struct gsock_ctx *ctx;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsock-echo-client [options] ADDR\n"
		"  ADDR                  HOST:PORT, [V6]:PORT or /unix/path\n"
		"  -m, --mode MODE       echo (default): round trips; up: a one-way stream\n"
		"                        of iters x size bytes to a sink (gsock-echo-server\n"
		"                        -M sink), which answers its count and wrong bytes;\n"
		"                        down: iters x size bytes from a source (-M source),\n"
		"                        every byte checked on the GPU\n"
		"  -n, --size BYTES      bytes per round trip or stream call (default 64)\n"
		"  -i, --iters N         round trips (stream calls) per block (default 1000)\n"
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

/* How each connection ended: complaints on stderr; how many failed. */
static int connection_errors(const struct echo_client_args *a,
			     unsigned conns)
{
	unsigned group = a->group;
	int failed = 0;

	/* A group's blocks all return rank 0's result: one line for it. */
	for (unsigned b = 0; b < conns; b++) {
		const struct echo_client_result *res = &a->result[b * group];
		uint64_t wrong = 0;
		int64_t e = res->error;

		for (unsigned k = 1; k < group && !e; k++)
			e = a->result[b * group + k].error;
		for (unsigned k = 0; k < group; k++)
			wrong += a->result[b * group + k].wrong;
		if (!e && wrong) /* -m down: the blocks' counts */
			e = ECHO_MISMATCH;
		if (e == ECHO_MISMATCH && a->mode == ECHO_ROUND_TRIPS)
			fprintf(stderr,
				"gsock-echo-client: connection %u: echoed data differs at byte %llu\n",
				b, (unsigned long long)res->mismatch_at);
		else if (e == ECHO_MISMATCH)
			fprintf(stderr,
				"gsock-echo-client: connection %u: %llu wrong bytes in the stream\n",
				b, (unsigned long long)wrong);
		else if (e == ECHO_SHORT)
			fprintf(stderr,
				"gsock-echo-client: connection %u: the stream ended after %llu bytes of %llu\n",
				b, (unsigned long long)res->mismatch_at,
				(unsigned long long)a->iters * a->size);
		else if (e == -EPROTO && a->mode == ECHO_UP)
			fprintf(stderr,
				"gsock-echo-client: connection %u: the sink counted %llu bytes of %llu sent\n",
				b, (unsigned long long)res->mismatch_at,
				(unsigned long long)a->iters * a->size);
		else if (e)
			fprintf(stderr,
				"gsock-echo-client: connection %u: %s\n", b,
				strerror((int)-e));
		failed += e != 0;
	}
	if (failed)
		printf("gsock-echo-client: FAILED: %d of %u connections (%s backend)\n",
		       failed, conns, gsock_backend());
	return failed;
}

static int report_round_trips(const struct echo_client_args *a,
			      unsigned conns)
{
	size_t nrtt = (size_t)conns * a->iters;

	if (connection_errors(a, conns))
		return 1;
	qsort(a->rtt_ns, nrtt, sizeof(uint64_t), cmp_u64);
	printf("gsock-echo-client: ok: %u blocks x %u round trips of %u B, bytes intact (%s backend); rtt us p50 %.1f p99 %.1f max %.1f\n",
	       conns, a->iters, a->size, gsock_backend(),
	       pct_us(a->rtt_ns, nrtt, 0.5), pct_us(a->rtt_ns, nrtt, 0.99),
	       pct_us(a->rtt_ns, nrtt, 1.0));
	if (a->group > 1)
		printf("gsock-echo-client: groups of %u blocks a connection: %llu chunks shared\n",
		       a->group, (unsigned long long)shared_chunks(a, conns));
	return 0;
}

/*
 * One-way streams: every connection's bytes over the time from the first
 * connection's start to the last one's end (device clock), and the
 * slowest and fastest connection alone.
 */
static int report_streams(const struct echo_client_args *a, unsigned conns)
{
	double bytes = (double)a->iters * a->size, lo = 0, hi = 0;
	uint64_t t0 = UINT64_MAX, t1 = 0;

	if (connection_errors(a, conns))
		return 1;
	for (unsigned c = 0; c < conns; c++) {
		uint64_t s = a->span_ns[2 * c], e = a->span_ns[2 * c + 1];
		double gbs = bytes / (double)(e > s ? e - s : 1);

		t0 = s < t0 ? s : t0;
		t1 = e > t1 ? e : t1;
		lo = !c || gbs < lo ? gbs : lo;
		hi = gbs > hi ? gbs : hi;
	}
	printf("gsock-echo-client: ok: %s: %u connections x %llu B, every byte checked (%s backend); GB/s %.2f (a connection %.2f to %.2f)\n",
	       a->mode == ECHO_UP ? "up" : "down", conns,
	       (unsigned long long)a->iters * a->size, gsock_backend(),
	       bytes * conns / (double)(t1 > t0 ? t1 - t0 : 1), lo, hi);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
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
	unsigned seed = (unsigned)time(NULL), mode = ECHO_ROUND_TRIPS;
	struct gsock_opts go = { 0 };
	struct echo_client_args *a;
	size_t nrtt;
	int opt, r, status = 0, failed = 0;

	while ((opt = getopt_long(argc, argv, "m:n:i:b:k:t:r:S:d:s:h", opts, NULL)) !=
	       -1) {
		switch (opt) {
		case 'm':
			if (!strcmp(optarg, "echo"))
				mode = ECHO_ROUND_TRIPS;
			else if (!strcmp(optarg, "up"))
				mode = ECHO_UP;
			else if (!strcmp(optarg, "down"))
				mode = ECHO_DOWN;
			else {
				fprintf(stderr,
					"gsock-echo-client: --mode is echo, up or down, not '%s'\n",
					optarg);
				return EX_USAGE;
			}
			break;
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
	a->mode = mode;
	a->size = size;
	a->iters = iters;
	/* a stream sends from any offset of its pattern, period included */
	a->stride = size + (mode == ECHO_ROUND_TRIPS ? 0 : STREAM_PERIOD);
	a->seed = seed;
	a->group = group;
	if (group > 1) /* zeroed, as struct ggroup_sync must start */
		a->sync = gsock_dev_alloc(ctx, blocks * sizeof(*a->sync));
	a->sbuf = gsock_dev_alloc(ctx, (size_t)blocks * a->stride);
	a->rbuf = gsock_dev_alloc(ctx, (size_t)blocks * a->stride);
	a->rtt_ns = gsock_alloc(ctx, nrtt * sizeof(uint64_t));
	a->span_ns = gsock_alloc(ctx, 2 * (size_t)blocks * sizeof(uint64_t));
	a->result = gsock_alloc(ctx, blocks * group * sizeof(*a->result));
	if (!a->sbuf || !a->rbuf || !a->rtt_ns || !a->span_ns || !a->result ||
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
	failed = mode == ECHO_ROUND_TRIPS ? report_round_trips(a, blocks) :
					    report_streams(a, blocks);
	status = failed ? 1 : 0;
out_free:
	gsock_dev_free(ctx, a->sbuf);
	gsock_dev_free(ctx, a->rbuf);
	gsock_free(ctx, a->rtt_ns);
	gsock_free(ctx, a->span_ns);
	gsock_free(ctx, a->result);
	if (a->sync)
		gsock_dev_free(ctx, a->sync);
out_fini:
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
