/* SPDX-License-Identifier: Apache-2.0 */
/*
 * facever-gserver: the g-call face verification server G. The host
 * program only sets up: it registers with gsockd, launches the server
 * kernel, says where it listens, and sleeps until a signal or gsockd's
 * death ends the kernel; then it prints what the blocks served.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "app.h"
#include "fv_gpu.h"
#include "gsock.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: facever-gserver [options]\n"
		"  -l, --listen ADDR      HOST:PORT, [V6]:PORT, PORT or /unix/path (default 7100)\n"
		"  -M, --memcached ADDR   where the reference features are (default 127.0.0.1:11211)\n"
		"  -b, --blocks N         threadblocks, one connection each at a time (default 64)\n"
		"  -F, --fetchers N       blocks that fetch from memcached for them, in batches (default 8, or -b if fewer)\n"
		"  -t, --threads N        threads per block, at most 256 (default 256; host backend: 1)\n"
		"  -T, --threshold D      largest chi-square distance of a match (default %.2f)\n"
		"  -P, --reuseport        share the port with other servers (SO_REUSEPORT)\n"
		"  -w, --timeout MS       bound on a request's body and a memcached reply (default 2000)\n"
		"  -r, --ring BYTES       socket ring size, a power of two (default 131072)\n"
		"  -s, --control PATH     gsockd's control socket\n",
		FV_THRESHOLD);
}

static void report(struct fv_server_args *a)
{
	uint64_t conns = 0, reqs = 0, matches = 0, errors = 0, batches = 0,
		 keys = 0;
	double ask = 0, rx = 0, parse = 0, idle = 0, all,
	       steps[FV_STEPS] = { 0 };

	for (unsigned f = 0; f < a->fetchers; f++) {
		const struct fv_block_stats *st = &a->stats[a->blocks + f];

		batches += st->conns;
		keys += st->requests;
		ask += (double)st->ns_ask;
		rx += (double)st->ns_recv;
		parse += (double)st->ns_parse;
		idle += (double)st->ns_idle;
	}
	for (unsigned b = 0; b < a->blocks; b++) {
		const struct fv_block_stats *st = &a->stats[b];

		conns += st->conns;
		reqs += st->requests;
		matches += st->matches;
		errors += st->errors;
		for (unsigned i = 0; i < FV_STEPS; i++)
			steps[i] += (double)st->ns_step[i];
	}
	printf("facever-gserver: served %llu requests on %llu connections (%llu matches, %llu errors)\n",
	       (unsigned long long)reqs, (unsigned long long)conns,
	       (unsigned long long)matches, (unsigned long long)errors);
	printf("facever-gserver: memcached asked for %llu keys in %llu batches (%.1f a batch)\n",
	       (unsigned long long)keys, (unsigned long long)batches,
	       batches ? (double)keys / (double)batches : 0.0);
	all = ask + rx + parse + idle;
	if (all > 0 && keys)
		printf("facever-gserver: the fetchers' time: %.0f%% asking, %.0f%% receiving, %.0f%% handing out, %.0f%% idle; %.2f us busy a key\n",
		       100 * ask / all, 100 * rx / all, 100 * parse / all,
		       100 * idle / all,
		       (ask + rx + parse) / 1e3 / (double)keys);
	if (reqs)
		printf("facever-gserver: a server block's request, us: %.1f waiting for the client, %.1f receiving the picture, %.1f computing, %.1f waiting for the fetcher, %.1f replying\n",
		       steps[FV_WAIT] / 1e3 / (double)reqs,
		       steps[FV_PIC] / 1e3 / (double)reqs,
		       steps[FV_COMPUTE] / 1e3 / (double)reqs,
		       steps[FV_ANSWER] / 1e3 / (double)reqs,
		       steps[FV_REPLY] / 1e3 / (double)reqs);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "memcached", required_argument, NULL, 'M' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "fetchers", required_argument, NULL, 'F' },
		{ "threads", required_argument, NULL, 't' },
		{ "threshold", required_argument, NULL, 'T' },
		{ "reuseport", no_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "ring", required_argument, NULL, 'r' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *listen_at = "7100", *mc_at = "127.0.0.1:11211";
	unsigned blocks = 64, threads = 256, fetchers = 0; /* 0: automatic */
	struct gsock_opts go = { .ring_size = 131072 };
	struct fv_server_args *a = NULL;
	struct gsock_ctx *ctx;
	float threshold = FV_THRESHOLD;
	int opt, status = 0, reuseport = 0, timeout_ms = 2000;
	char detail[300];

	while ((opt = getopt_long(argc, argv, "l:M:b:F:t:T:Pw:r:s:h", opts,
				  NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_at = optarg;
			break;
		case 'M':
			mc_at = optarg;
			break;
		case 'b':
			blocks = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'F':
			fetchers = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 't':
			threads = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'T':
			threshold = strtof(optarg, NULL);
			break;
		case 'P':
			reuseport = 1;
			break;
		case 'w':
			timeout_ms = atoi(optarg);
			break;
		case 'r':
			go.ring_size = (uint32_t)strtoul(optarg, NULL, 0);
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
	if (!fetchers)
		fetchers = blocks < FV_FETCHERS ? blocks : FV_FETCHERS;
	if (!blocks || !threads || threads > FV_THREADS || timeout_ms <= 0 ||
	    !(threshold > 0) || !fetchers || fetchers > blocks) {
		fprintf(stderr,
			"facever-gserver: blocks, threads (1..%d), fetchers (1..blocks), timeout and threshold must be positive\n",
			FV_THREADS);
		return EX_USAGE;
	}
	go.nslots = blocks + fetchers;
	/* a client per block, memcached per fetcher */
	go.nsocks = blocks + fetchers + 8;
	ctx = app_start("facever-gserver", &go, &threads);
	if (!ctx)
		return EX_UNAVAILABLE;
	a = gsock_alloc(ctx, sizeof(*a));
	if (!a ||
	    gsock_parse_addr(listen_at, &a->listen.addr, &a->listen.addrlen)) {
		fprintf(stderr,
			"facever-gserver: cannot use listen address %s\n",
			listen_at);
		status = EX_USAGE;
		goto out_fini;
	}
	if (gsock_parse_addr(mc_at, &a->mc, &a->mclen)) {
		fprintf(stderr,
			"facever-gserver: cannot use memcached address %s\n",
			mc_at);
		status = EX_USAGE;
		goto out_fini;
	}
	a->listen.reuseport = reuseport;
	a->threshold = threshold;
	a->timeout_ms = timeout_ms;
	a->blocks = blocks;
	a->fetchers = fetchers;
	a->imgs = gsock_dev_alloc(ctx, (size_t)blocks * FV_MAX_PIXELS);
	a->feats = gsock_dev_alloc(ctx, (size_t)blocks * 2 * FV_FEAT_BYTES);
	a->io = gsock_dev_alloc(ctx, (size_t)blocks * FV_IO_BYTES);
	a->asks = gsock_dev_alloc(ctx, (size_t)blocks * sizeof(*a->asks));
	a->fetch_buf = gsock_dev_alloc(ctx, (size_t)fetchers * FV_FETCH_BUF);
	a->stats = gsock_alloc(ctx, (blocks + fetchers) * sizeof(*a->stats));
	if (!a->imgs || !a->feats || !a->io || !a->asks || !a->fetch_buf ||
	    !a->stats) {
		fprintf(stderr,
			"facever-gserver: out of memory for %u blocks' buffers\n",
			blocks);
		status = EX_OSERR;
		goto out_fini;
	}
	snprintf(detail, sizeof(detail), "memcached %s through %u fetcher blocks",
		 mc_at, fetchers);
	status = app_run_server(ctx, "facever-gserver",
				(const void *)fv_server_kernel,
				blocks + fetchers, threads,
				a, &a->listen, listen_at, detail);
	if (status < 0) {
		status = EX_SOFTWARE;
		goto out_fini;
	}
	report(a);
out_fini:
	if (a) {
		gsock_dev_free(ctx, a->imgs);
		gsock_dev_free(ctx, a->feats);
		gsock_dev_free(ctx, a->io);
		gsock_dev_free(ctx, a->asks);
		gsock_dev_free(ctx, a->fetch_buf);
		gsock_free(ctx, a->stats);
	}
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
