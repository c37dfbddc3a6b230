/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mm-gserver: the g-call matrix product server G. The host program only
 * sets up: it registers with gsockd, launches groups x group-blocks
 * blocks, says where it listens, and sleeps until a signal or gsockd's
 * death ends the kernel; then it prints what the groups served.
 */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "app.h"
#include "gsock.h"
#include "mm_gpu.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mm-gserver [options]\n"
		"  -l, --listen ADDR        HOST:PORT, [V6]:PORT, PORT or /unix/path (default 7200)\n"
		"  -g, --groups N           connections served at once (default 8)\n"
		"  -k, --group-blocks N     blocks that compute each product (default 16);\n"
		"                           groups x group-blocks must fit on the GPU at once\n"
		"  -N, --max-n N            largest side taken (default 1024)\n"
		"  -P, --reuseport          share the port with other servers (SO_REUSEPORT)\n"
		"  -w, --timeout MS         bound on a request's matrices (default 5000)\n"
		"  -r, --ring BYTES         socket ring size, a power of two (default 1048576)\n"
		"  -s, --control PATH       gsockd's control socket\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "groups", required_argument, NULL, 'g' },
		{ "group-blocks", required_argument, NULL, 'k' },
		{ "max-n", required_argument, NULL, 'N' },
		{ "reuseport", no_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "ring", required_argument, NULL, 'r' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *listen_at = "7200";
	unsigned groups = 8, k = 16, max_n = 1024, threads = MM_THREADS;
	struct gsock_opts go = { .ring_size = 1 << 20 };
	struct mm_server_args *a = NULL;
	struct gsock_ctx *ctx;
	uint64_t conns = 0, products = 0;
	int opt, status = 0, reuseport = 0, timeout_ms = 5000;
	char detail[64];

	while ((opt = getopt_long(argc, argv, "l:g:k:N:Pw:r:s:h", opts,
				  NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_at = optarg;
			break;
		case 'g':
			groups = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'k':
			k = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'N':
			max_n = (unsigned)strtoul(optarg, NULL, 0);
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
	if (!groups || !k || !max_n || max_n > 8192 || timeout_ms <= 0) {
		fprintf(stderr,
			"mm-gserver: groups, group-blocks and timeout must be positive, max-n 1..8192\n");
		return EX_USAGE;
	}
	go.nslots = groups * k;
	go.nsocks = groups + 8;
	ctx = app_start("mm-gserver", &go, &threads);
	if (!ctx)
		return EX_UNAVAILABLE;
	a = gsock_alloc(ctx, sizeof(*a));
	if (!a ||
	    gsock_parse_addr(listen_at, &a->listen.addr, &a->listen.addrlen)) {
		fprintf(stderr, "mm-gserver: cannot use listen address %s\n",
			listen_at);
		status = EX_USAGE;
		goto out_fini;
	}
	a->listen.reuseport = reuseport;
	a->group_blocks = k;
	a->max_n = max_n;
	a->timeout_ms = timeout_ms;
	a->bufs = gsock_dev_alloc(ctx, (size_t)groups * 3 * max_n * max_n *
					       sizeof(float));
	a->io = gsock_dev_alloc(ctx, (size_t)groups * 64);
	a->groups = gsock_dev_alloc(ctx, groups * sizeof(struct mm_group));
	a->stats = gsock_alloc(ctx, groups * sizeof(*a->stats));
	if (!a->bufs || !a->io || !a->groups || !a->stats) {
		fprintf(stderr,
			"mm-gserver: out of memory for %u groups of %ux%u matrices\n",
			groups, max_n, max_n);
		status = EX_OSERR;
		goto out_fini;
	}
	snprintf(detail, sizeof(detail), "%u groups of %u, n up to %u", groups,
		 k, max_n);
	status = app_run_server(ctx, "mm-gserver",
				(const void *)mm_server_kernel, groups * k,
				threads, a, &a->listen, listen_at, detail);
	if (status < 0) {
		status = EX_SOFTWARE;
		goto out_fini;
	}
	for (unsigned g = 0; g < groups; g++) {
		conns += a->stats[g].conns;
		products += a->stats[g].products;
	}
	printf("mm-gserver: served %llu products on %llu connections\n",
	       (unsigned long long)products, (unsigned long long)conns);
out_fini:
	if (a) {
		gsock_dev_free(ctx, a->bufs);
		gsock_dev_free(ctx, a->io);
		gsock_dev_free(ctx, a->groups);
		gsock_free(ctx, a->stats);
	}
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
