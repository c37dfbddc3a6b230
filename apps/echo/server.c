/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-server: a GPU echo server. The host program only sets up:
 * it registers with gsockd, launches the server kernel, says where it
 * listens, and sleeps until a signal or gsockd's death ends the kernel.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "echo.h"
#include "gsock.h"

/* One GPU's server: its context, its kernel's arguments, its thread. */
struct gpu_server {
	struct gsock_ctx *ctx;
	struct echo_server_args *a;
	pthread_t thread;
	int device, status, started;
	unsigned blocks, threads;
	const char *listen_at;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsock-echo-server [options]\n"
		"  -l, --listen ADDR     HOST:PORT, [V6]:PORT, PORT or /unix/path (default 7000)\n"
		"  -b, --blocks N        threadblocks, one connection each at a time (default 16)\n"
		"  -t, --threads N       threads per block (default 256; host backend: 1)\n"
		"  -B, --buffer BYTES    receive buffer per block (default 65536)\n"
		"  -m, --multiplex N     each block holds N connections at once (gpoll)\n"
		"  -M, --mode MODE       echo (default); sink: read each connection to its end,\n"
		"                        check the stream pattern, answer the count and the\n"
		"                        wrong bytes; source: send the stream pattern until\n"
		"                        the peer goes (bench/loadgen -m up and -m down)\n"
		"  -r, --ring BYTES      socket ring size, a power of two (default 65536)\n"
		"  -g, --gpus LIST       serve from each of these GPUs (CUDA ordinals, e.g. 0,1),\n"
		"                        one context and kernel each, on one port (SO_REUSEPORT)\n"
		"  -s, --control PATH    gsockd's control socket\n");
}

/* The device list "0,1,...": the count, or -1. */
static int parse_gpus(const char *s, int *dev, int max)
{
	int n = 0;

	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v < 0 || v > 1023 || n == max ||
		    (*end && *end != ','))
			return -1;
		dev[n++] = (int)v;
		s = *end ? end + 1 : end;
	}
	return n ? n : -1;
}

/* Register with gsockd for one GPU and make its kernel's arguments. */
static int setup(struct gpu_server *g, struct gsock_opts go, unsigned bufsize,
		 unsigned per_block, enum echo_mode mode, int reuseport)
{
	struct echo_server_args *a;
	unsigned blocks = g->blocks;

	go.device = g->device;
	g->ctx = app_start("gsock-echo-server", &go, &g->threads);
	if (!g->ctx)
		return EX_UNAVAILABLE;
	a = g->a = gsock_alloc(g->ctx, sizeof(*a));
	if (!a || app_parse_addr(g->listen_at, &a->listen.addr,
				 &a->listen.addrlen)) {
		fprintf(stderr,
			"gsock-echo-server: cannot use listen address %s\n",
			g->listen_at);
		return EX_USAGE;
	}
	a->listen.reuseport = reuseport;
	a->mode = mode;
	a->bufsize = bufsize;
	a->stride = bufsize + (mode == ECHO_SOURCE ? STREAM_PERIOD : 0);
	a->bufs = gsock_dev_alloc(g->ctx, (size_t)blocks * a->stride);
	a->stats = gsock_alloc(g->ctx, blocks * sizeof(*a->stats));
	a->per_block = per_block;
	if (per_block)
		a->pfds = gsock_dev_alloc(g->ctx, (size_t)blocks *
							  (per_block + 1) *
							  sizeof(*a->pfds));
	if (!a->bufs || !a->stats || (per_block && !a->pfds)) {
		fprintf(stderr,
			"gsock-echo-server: out of memory for %u buffers\n",
			blocks);
		return EX_OSERR;
	}
	return 0;
}

static void *serve(void *p)
{
	struct gpu_server *g = p;
	struct echo_server_args *a = g->a;
	char detail[64];

	snprintf(detail, sizeof(detail), "GPU %d, %u connections per block%s",
		 g->device, a->per_block ? a->per_block : 1,
		 a->mode == ECHO_SINK	? ", sink" :
		 a->mode == ECHO_SOURCE ? ", source" :
					  "");
	g->status = app_run_server(g->ctx, "gsock-echo-server",
				   a->per_block ? (const void *)echo_mux_kernel :
						  (const void *)echo_server_kernel,
				   g->blocks, g->threads, a, &a->listen,
				   g->listen_at, detail);
	if (g->status < 0)
		g->status = EX_SOFTWARE;
	return NULL;
}

static void teardown(struct gpu_server *g)
{
	struct echo_server_args *a = g->a;

	if (a) {
		gsock_dev_free(g->ctx, a->bufs);
		if (a->pfds)
			gsock_dev_free(g->ctx, a->pfds);
		gsock_free(g->ctx, a->stats);
	}
	gsock_free(g->ctx, a);
	gsock_fini(g->ctx);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "buffer", required_argument, NULL, 'B' },
		{ "multiplex", required_argument, NULL, 'm' },
		{ "mode", required_argument, NULL, 'M' },
		{ "ring", required_argument, NULL, 'r' },
		{ "gpus", required_argument, NULL, 'g' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *listen_at = "7000";
	unsigned blocks = 16, threads = 256, bufsize = 65536, per_block = 0;
	enum echo_mode mode = ECHO_ECHO;
	struct gsock_opts go = { 0 };
	struct gpu_server g[APP_MAX_CONTEXTS];
	int dev[APP_MAX_CONTEXTS] = { 0 }, ngpus = 1;
	uint64_t conns = 0, bytes = 0;
	int opt, status = 0, broke = 0;

	while ((opt = getopt_long(argc, argv, "l:b:t:B:m:M:r:g:s:h", opts,
				  NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_at = optarg;
			break;
		case 'b':
			blocks = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 't':
			threads = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'B':
			bufsize = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'm':
			per_block = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'M':
			if (!strcmp(optarg, "sink"))
				mode = ECHO_SINK;
			else if (!strcmp(optarg, "source"))
				mode = ECHO_SOURCE;
			else if (strcmp(optarg, "echo")) {
				fprintf(stderr,
					"gsock-echo-server: --mode is echo, sink or source, not '%s'\n",
					optarg);
				return EX_USAGE;
			}
			break;
		case 'r':
			go.ring_size = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'g':
			ngpus = parse_gpus(optarg, dev, APP_MAX_CONTEXTS);
			if (ngpus < 0) {
				fprintf(stderr,
					"gsock-echo-server: --gpus takes 1 to %d GPU numbers, e.g. 0,1; not '%s'\n",
					APP_MAX_CONTEXTS, optarg);
				return EX_USAGE;
			}
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
	if (!blocks || !threads || threads > 1024 || !bufsize) {
		fprintf(stderr,
			"gsock-echo-server: blocks, threads (1..1024) and buffer must be positive\n");
		return EX_USAGE;
	}
	if (mode != ECHO_ECHO && per_block) {
		fprintf(stderr,
			"gsock-echo-server: --mode sink and source serve one connection per block: leave out --multiplex\n");
		return EX_USAGE;
	}
	if (bufsize > UINT32_MAX - STREAM_PERIOD) {
		fprintf(stderr, "gsock-echo-server: buffer too large\n");
		return EX_USAGE;
	}
	go.nslots = blocks;
	go.nsocks = blocks * (per_block ? per_block : 1) + 8;
	memset(g, 0, sizeof(g));
	for (int i = 0; i < ngpus; i++) {
		g[i] = (struct gpu_server){ .device = dev[i],
					    .blocks = blocks,
					    .threads = threads,
					    .listen_at = listen_at };
		status = setup(&g[i], go, bufsize, per_block, mode, ngpus > 1);
		if (status)
			goto out;
	}
	/*
	 * GPU 0 binds first; the others take the address it got (a port of
	 * 0 becomes one port for all).
	 */
	for (int i = 0; i < ngpus && !broke; i++) {
		if (i > 0) {
			if (app_wait_listening(g[0].ctx, &g[0].a->listen)) {
				broke = 1;
				break;
			}
			g[i].a->listen.addr = g[0].a->listen.bound;
			g[i].a->listen.addrlen = g[0].a->listen.boundlen;
		}
		if (pthread_create(&g[i].thread, NULL, serve, &g[i])) {
			fprintf(stderr,
				"gsock-echo-server: cannot start a thread\n");
			status = EX_OSERR;
			broke = 1;
			break;
		}
		g[i].started = 1;
	}
	for (int i = 0; i < ngpus; i++) {
		if (!g[i].started)
			continue;
		if (broke) /* not every GPU serves: end the ones that do */
			gsock_stop(g[i].ctx);
		pthread_join(g[i].thread, NULL);
		if (g[i].status && !status)
			status = g[i].status;
	}
	if (broke && !status)
		status = EX_UNAVAILABLE;
	for (int i = 0; i < ngpus; i++) {
		uint64_t c = 0;

		if (!g[i].started)
			continue;
		for (unsigned b = 0; b < blocks; b++) {
			c += g[i].a->stats[b].conns;
			bytes += g[i].a->stats[b].bytes;
			if (g[i].a->stats[b].last_error)
				fprintf(stderr,
					"gsock-echo-server: GPU %d block %u: a connection ended with %s\n",
					g[i].device, b,
					strerror((int)-g[i].a->stats[b]
							 .last_error));
		}
		if (ngpus > 1)
			printf("gsock-echo-server: GPU %d served %llu connections\n",
			       g[i].device, (unsigned long long)c);
		conns += c;
	}
	if (g[0].started)
		printf("gsock-echo-server: served %llu connections, %llu bytes\n",
		       (unsigned long long)conns, (unsigned long long)bytes);
out:
	for (int i = ngpus; i-- > 0;)
		if (g[i].ctx)
			teardown(&g[i]);
	return status;
}
