/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gcall-probe MODE ADDR: runs one probe kernel (see probe.h) and prints
 * each result as "NAME VALUE", values as the g-call returned them
 * (negative errno). Exit status 69 if gsockd went away.
 * gcall-probe copy THREADS: the block copy probe, one block of THREADS.
 * gcall-probe lane THREADS: the direct path's lane probe, the same way.
 * gcall-probe send ADDR [BYTES]: listen at ADDR, serve one connection
 * BYTES (default 1000000) of a pattern that recv checks, then close.
 * gcall-probe relay ADDR: listen at ADDR and join the connections it
 * accepts in pairs (probe.h) until SIGINT or SIGTERM.
 * gcall-probe self ADDR: listen at ADDR, connect to it and talk to
 * itself, checking every byte.
 */
#include <config.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "app.h"
#include "gsock.h"
#include "probe.h"

static struct gsock_ctx *ctx;

static void stop(int sig)
{
	(void)sig;
	gsock_stop(ctx);
}

int main(int argc, char **argv)
{
	struct gsock_opts go = { .nslots = 1, .nsocks = 8 };
	struct probe_args *a;
	char err[512];
	unsigned threads = 128;
	size_t bufsize;
	int status = 0;

	if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[1], "send")) ||
	    (strcmp(argv[1], "recv") && strcmp(argv[1], "errors") &&
	     strcmp(argv[1], "copy") && strcmp(argv[1], "send") &&
	     strcmp(argv[1], "lane") &&
	     strcmp(argv[1], "relay") && strcmp(argv[1], "self"))) {
		fprintf(stderr,
			"usage: gcall-probe recv|errors|relay|self ADDR, gcall-probe send ADDR [BYTES], or gcall-probe copy|lane THREADS|max\n");
		return EX_USAGE;
	}
	if (!strcmp(argv[1], "relay"))
		go.nsocks = RELAY_CONNS + 1;
	ctx = gsock_init(&go, err, sizeof(err));
	if (!ctx) {
		fprintf(stderr, "gcall-probe: %s\n", err);
		return EX_UNAVAILABLE;
	}
	a = gsock_alloc(ctx, sizeof(*a));
	bufsize = !strcmp(argv[1], "relay") ? RELAY_MEM :
		  !strcmp(argv[1], "copy")  ? 2 * COPY_HALF :
					      4096;
	a->buf = gsock_dev_alloc(ctx, bufsize);
	a->mode = !strcmp(argv[1], "recv") ? PROBE_RECV :
		  !strcmp(argv[1], "copy") ? PROBE_COPY :
		  !strcmp(argv[1], "lane") ? PROBE_LANE :
		  !strcmp(argv[1], "send") ? PROBE_SEND :
		  !strcmp(argv[1], "relay") ? PROBE_RELAY :
		  !strcmp(argv[1], "self") ? PROBE_SELF :
					     PROBE_ERRORS;
	a->count = argc == 4 ? strtoull(argv[3], NULL, 10) : 1000000;
	if (a->mode == PROBE_COPY || a->mode == PROBE_LANE) {
		/* max: the largest block the probe's registers allow */
		threads = !strcmp(argv[2], "max") ?
				  (unsigned)gsock_max_threads(
					  ctx, (const void *)probe_kernel) :
				  (unsigned)strtoul(argv[2], NULL, 10);
		if (threads < 1 || threads > 1024) {
			fprintf(stderr,
				"gcall-probe: threads must be 1..1024 or max\n");
			status = EX_USAGE;
			goto out;
		}
	} else if (gsock_parse_addr(argv[2], &a->addr, &a->addrlen)) {
		fprintf(stderr, "gcall-probe: bad address %s\n", argv[2]);
		status = EX_USAGE;
		goto out;
	}
	if (a->mode == PROBE_RELAY) {
		signal(SIGINT, stop);
		signal(SIGTERM, stop);
	}
	printf("backend %s\n", gsock_backend());
	if (a->mode == PROBE_COPY || a->mode == PROBE_LANE)
		printf("threads %u\n", threads);
	fflush(stdout);
	if (gsock_launch(ctx, (const void *)probe_kernel, 1, threads, a)) {
		status = EX_SOFTWARE;
		goto out;
	}
	gsock_wait(ctx);
	for (uint32_t i = 0; i < a->n; i++)
		printf("%s %lld\n", a->name[i], (long long)a->value[i]);
	if (gsock_bridge_gone(ctx)) {
		fprintf(stderr, "gcall-probe: gsockd went away\n");
		status = EX_UNAVAILABLE;
	}
out:
	gsock_dev_free(ctx, a->buf);
	gsock_free(ctx, a);
	gsock_fini(ctx);
	return status;
}
