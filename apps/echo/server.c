/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-server: a GPU echo server. The host program only sets up:
 * it registers with gsockd, launches the server kernel, says where it
 * listens, and sleeps until a signal or gsockd's death ends the kernel.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
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

static struct gsock_ctx *ctx;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsock-echo-server [options]\n"
		"  -l, --listen ADDR     HOST:PORT, [V6]:PORT, PORT or /unix/path (default 7000)\n"
		"  -b, --blocks N        threadblocks, one connection each at a time (default 16)\n"
		"  -t, --threads N       threads per block (default 256; host backend: 1)\n"
		"  -B, --buffer BYTES    receive buffer per block (default 65536)\n"
		"  -m, --multiplex N     each block holds N connections at once (gpoll)\n"
		"  -r, --ring BYTES      socket ring size, a power of two (default 65536)\n"
		"  -s, --control PATH    gsockd's control socket\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "buffer", required_argument, NULL, 'B' },
		{ "multiplex", required_argument, NULL, 'm' },
		{ "ring", required_argument, NULL, 'r' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *listen_at = "7000";
	unsigned blocks = 16, threads = 256, bufsize = 65536, per_block = 0;
	struct gsock_opts go = { 0 };
	struct echo_server_args *a;
	uint64_t conns = 0, bytes = 0;
	char detail[64];
	int opt, status = 0;

	while ((opt = getopt_long(argc, argv, "l:b:t:B:m:r:s:h", opts, NULL)) !=
	       -1) {
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
	if (!blocks || !threads || threads > 1024 || !bufsize) {
		fprintf(stderr,
			"gsock-echo-server: blocks, threads (1..1024) and buffer must be positive\n");
		return EX_USAGE;
	}
	go.nslots = blocks;
	go.nsocks = blocks * (per_block ? per_block : 1) + 8;
	ctx = app_start("gsock-echo-server", &go, &threads);
	if (!ctx)
		return EX_UNAVAILABLE;
	a = gsock_alloc(ctx, sizeof(*a));
	if (!a ||
	    app_parse_addr(listen_at, &a->listen.addr, &a->listen.addrlen)) {
		fprintf(stderr,
			"gsock-echo-server: cannot use listen address %s\n",
			listen_at);
		status = EX_USAGE;
		goto out_fini;
	}
	a->bufsize = bufsize;
	a->bufs = gsock_dev_alloc(ctx, (size_t)blocks * bufsize);
	a->stats = gsock_alloc(ctx, blocks * sizeof(*a->stats));
	a->per_block = per_block;
	if (per_block)
		a->pfds =
			gsock_dev_alloc(ctx, (size_t)blocks * (per_block + 1) *
						     sizeof(*a->pfds));
	if (!a->bufs || !a->stats || (per_block && !a->pfds)) {
		fprintf(stderr,
			"gsock-echo-server: out of memory for %u buffers\n",
			blocks);
		status = EX_OSERR;
		goto out_fini;
	}
	snprintf(detail, sizeof(detail), "%u connections per block",
		 per_block ? per_block : 1);
	status = app_run_server(ctx, "gsock-echo-server",
				per_block ? (const void *)echo_mux_kernel :
					    (const void *)echo_server_kernel,
				blocks, threads, a, &a->listen, listen_at,
				detail);
	if (status < 0) {
		status = EX_SOFTWARE;
		goto out_fini;
	}
	for (unsigned b = 0; b < blocks; b++) {
		conns += a->stats[b].conns;
		bytes += a->stats[b].bytes;
		if (a->stats[b].last_error)
			fprintf(stderr,
				"gsock-echo-server: block %u: a connection ended with %s\n",
				b, strerror((int)-a->stats[b].last_error));
	}
	printf("gsock-echo-server: served %llu connections, %llu bytes\n",
	       (unsigned long long)conns, (unsigned long long)bytes);
out_fini:
	if (a) {
		gsock_dev_free(ctx, a->bufs);
		if (a->pfds)
			gsock_dev_free(ctx, a->pfds);
		gsock_free(ctx, a->stats);
	}
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
