/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Start-up of the example g-call programs: register with gsockd and make
 * SIGINT and SIGTERM end the kernels (gsock_stop is signal-safe).
 */
#include <config.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "app.h"
#include "gapp.cuh"
#include "gsock.h"

/* Every context app_start made: a signal stops them all. */
static struct gsock_ctx *app_ctx[APP_MAX_CONTEXTS];
static int app_nctx;

static void on_signal(int sig)
{
	int n = __atomic_load_n(&app_nctx, __ATOMIC_ACQUIRE);

	(void)sig;
	for (int i = 0; i < n; i++)
		gsock_stop(app_ctx[i]);
}

struct gsock_ctx *app_start(const char *prog, const struct gsock_opts *go,
			    unsigned *threads)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct gsock_ctx *ctx;
	char err[512];

	if (app_nctx == APP_MAX_CONTEXTS) {
		fprintf(stderr, "%s: at most %d GPU contexts\n", prog,
			APP_MAX_CONTEXTS);
		return NULL;
	}
	ctx = gsock_init(go, err, sizeof(err));
	if (!ctx) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return NULL;
	}
	app_ctx[app_nctx] = ctx;
	__atomic_store_n(&app_nctx, app_nctx + 1, __ATOMIC_RELEASE);
	if (!strcmp(gsock_backend(), "host"))
		*threads = 1; /* a block is one host thread */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	return ctx;
}

int app_wait_listening(struct gsock_ctx *ctx, struct app_listener *l)
{
	struct timespec ts = { 0, 1000000 };

	while (!__atomic_load_n(&l->ready, __ATOMIC_ACQUIRE) &&
	       !gsock_bridge_gone(ctx))
		nanosleep(&ts, NULL);
	return l->ready == 1 ? 0 : l->ready ? l->ready : -ECONNABORTED;
}

int app_run_server(struct gsock_ctx *ctx, const char *prog, const void *kernel,
		   unsigned blocks, unsigned threads, void *arg,
		   struct app_listener *l, const char *listen_at,
		   const char *detail)
{
	char where[160];
	int r, status = 0;

	r = gsock_launch(ctx, kernel, blocks, threads, arg);
	if (r) {
		fprintf(stderr, "%s: cannot launch %u blocks: %s\n", prog,
			blocks, strerror(-r));
		/* Blocks that did start (host backend, -EAGAIN) end here. */
		gsock_stop(ctx);
		gsock_wait(ctx);
		return -1;
	}
	r = app_wait_listening(ctx, l);
	if (r) {
		fprintf(stderr, "%s: cannot listen on %s: %s\n", prog,
			listen_at, strerror(-r));
		gsock_stop(ctx);
		status = EX_UNAVAILABLE;
	} else {
		gsock_format_addr(&l->bound, where, sizeof(where));
		printf("%s: listening on %s (%s backend, %u blocks x %u threads%s%s)\n",
		       prog, where, gsock_backend(), blocks, threads,
		       detail ? ", " : "", detail ? detail : "");
		fflush(stdout);
	}
	gsock_wait(ctx);
	if (gsock_bridge_gone(ctx)) {
		fprintf(stderr, "%s: gsockd went away; exiting\n", prog);
		status = EX_UNAVAILABLE;
	}
	return status;
}
