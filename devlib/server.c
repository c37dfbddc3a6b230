/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsrv_main(): the host side of a g-call server built on the server
 * layer (gsock_server.h). It parses the standard options and the
 * application's, registers with gsockd once per GPU, sizes the arena and
 * the blocks' memory, launches the kernel on every GPU on one port (GPU
 * 0 binds first, the others take the address it got, SO_REUSEPORT),
 * makes SIGINT and SIGTERM stop the kernels, and, when they have ended,
 * prints what the blocks counted and frees everything.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "gsock.h"
#include "gsock_server.h"

#define GSRV_MAX_GPUS 16

/*
 * One GPU's server: its context, its struct gsrv (the host's copy, and
 * the device's that the kernel gets), the thread that waits.
 */
struct gsrv_gpu {
	struct gsrv_app *app;
	struct gsock_ctx *ctx;
	struct gsrv *s; /* host memory; s->app is the host's copy too */
	struct gsrv *dev_s; /* device memory: what the kernel reads */
	void *dev_app; /* device memory: app_size bytes, from s->app */
	pthread_t thread;
	int device, status, started, listened;
	unsigned blocks, threads;
	const char *listen_at;
	/* CLOCK_MONOTONIC: when it listened, when its kernel was done */
	uint64_t listen_ns, end_ns;
};

static uint64_t gsrv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every context made: a signal stops them all (gsock_stop is signal-safe). */
static struct gsock_ctx *gsrv_ctx[GSRV_MAX_GPUS];
static int gsrv_nctx;

static void gsrv_on_signal(int sig)
{
	int n = __atomic_load_n(&gsrv_nctx, __ATOMIC_ACQUIRE);

	(void)sig;
	for (int i = 0; i < n; i++)
		gsock_stop(gsrv_ctx[i]);
}

static const char gsrv_std_usage[] =
	"  -l, --listen ADDR     HOST:PORT, [V6]:PORT, PORT or /unix/path (default %s)\n"
	"  -b, --blocks N        serving threadblocks (default %u)\n"
	"  -t, --threads N       threads per block (default %u; host backend: 1)\n"
	"  -m, --multiplex N     connections each block holds at once (default %u)\n"
	"  -B, --buffer BYTES    each block's buffer (default %u)\n"
	"  -r, --ring BYTES      socket ring size, a power of two (default %u)\n"
	"  -g, --gpus LIST       serve from each of these GPUs (CUDA ordinals, e.g. 0,1)\n"
	"                        on one port (SO_REUSEPORT)\n"
	"  -P, --reuseport       share the port with other programs (SO_REUSEPORT)\n"
	"  -I, --idle MS         close a connection nothing came from for MS (default %u;\n"
	"                        0: never)\n"
	"  -Q, --queue-wait MS   refuse clients that wait while no place is taken or\n"
	"                        freed for MS: every block holds its -m (default %u;\n"
	"                        0: they wait however long it takes)\n"
	"  -s, --control PATH    gsockd's control socket\n"
	"  -h, --help            this text\n";

static void gsrv_usage(const struct gsrv_app *app, FILE *f)
{
	fprintf(f, "usage: %s [options]\n", app->name);
	fprintf(f, gsrv_std_usage, app->listen, app->blocks, app->threads,
		app->per_block, app->bufsize,
		app->ring_size ? app->ring_size : 65536, app->idle_ms,
		app->queue_ms);
	if (app->usage)
		fputs(app->usage, f);
}

/* The device list "0,1,...": the count, or -1. */
static int gsrv_parse_gpus(const char *s, int *dev, int max)
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

/* A positive count from text, or 0 (said by the caller). */
static unsigned gsrv_count_arg(const char *arg)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 0);

	return *arg && !*end && v <= 1u << 30 ? (unsigned)v : 0;
}

/* The standard long options followed by the application's. */
static struct option *gsrv_long_options(const struct gsrv_app *app)
{
	static const struct option std[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "multiplex", required_argument, NULL, 'm' },
		{ "buffer", required_argument, NULL, 'B' },
		{ "ring", required_argument, NULL, 'r' },
		{ "gpus", required_argument, NULL, 'g' },
		{ "reuseport", no_argument, NULL, 'P' },
		{ "idle", required_argument, NULL, 'I' },
		{ "queue-wait", required_argument, NULL, 'Q' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
	};
	size_t nstd = sizeof(std) / sizeof(std[0]), napp = 0;
	struct option *all;

	while (app->longopts && app->longopts[napp].name)
		napp++;
	all = calloc(nstd + napp + 1, sizeof(*all));
	if (!all)
		return NULL;
	memcpy(all, std, sizeof(std));
	if (napp)
		memcpy(all + nstd, app->longopts, napp * sizeof(*all));
	return all;
}

/*
 * The pipes' part of s (gsock_pipe.cuh): the backend's address, the
 * sizes. 0 or a <sysexits.h> status.
 */
static int gsrv_setup_pipes(struct gsrv_gpu *g, struct gsrv *s)
{
	const struct gsrv_app *app = g->app;
	uint64_t stride;

	s->blocks = g->blocks;
	s->pipes = app->pipes;
	if (!app->backend)
		return 0;
	if (gsock_parse_addr(app->backend, &s->backend, &s->backendlen)) {
		fprintf(stderr,
			"%s: cannot use backend address %s (HOST:PORT, [V6]:PORT, or an absolute unix path)\n",
			app->name, app->backend);
		return EX_USAGE;
	}
	if (s->pipes > g->blocks) {
		fprintf(stderr, "%s: %u pipes for %u serving blocks: at most one each\n",
			app->name, s->pipes, g->blocks);
		return EX_USAGE;
	}
	s->pipe_bufsize = app->pipe_bufsize ? app->pipe_bufsize : 256 << 10;
	s->pipe_quiet_ns = (app->pipe_timeout_ms ? app->pipe_timeout_ms :
						   2000) *
			   1000000ull;
	stride = (uint64_t)GSRV_PIPE_BATCH * GSRV_ASK_MAX + s->pipe_bufsize;
	s->pipe_stride = (uint32_t)((stride + 255) & ~255ull);
	return 0;
}

/*
 * Register one GPU's context, let the application set up, then make the
 * blocks' memory (layout in gsock_server.h). 0 or a <sysexits.h> status.
 */
static int gsrv_setup(struct gsrv_gpu *g, struct gsock_opts go)
{
	struct gsrv_app *app = g->app;
	struct gsrv *s;
	char err[512];
	uint64_t stride;
	int r, max;

	go.device = g->device;
	g->ctx = gsock_init(&go, err, sizeof(err));
	if (!g->ctx) {
		fprintf(stderr, "%s: %s\n", app->name, err);
		return EX_UNAVAILABLE;
	}
	gsrv_ctx[gsrv_nctx] = g->ctx;
	__atomic_store_n(&gsrv_nctx, gsrv_nctx + 1, __ATOMIC_RELEASE);
	if (!strcmp(gsock_backend(), "host"))
		g->threads = 1; /* a block is one host thread */
	max = app->kernel ? gsock_max_threads(g->ctx, app->kernel) : 0;
	if (max > 0 && g->threads > (unsigned)max) {
		fprintf(stderr,
			"%s: -t %u: on GPU %d its kernel runs at most %d threads a block (its registers allow no more); use -t %d or fewer\n",
			app->name, g->threads, g->device, max, max);
		return EX_USAGE;
	}
	s = g->s = calloc(1, sizeof(*s));
	if (!s)
		goto out_of_memory;
	s->pub = gsock_alloc(g->ctx, sizeof(*s->pub));
	g->dev_s = gsock_dev_alloc(g->ctx, sizeof(*s));
	if (!s->pub || !g->dev_s)
		goto out_of_memory;
	if (gsock_parse_addr(g->listen_at, &s->addr, &s->addrlen)) {
		fprintf(stderr,
			"%s: cannot use listen address %s (HOST:PORT, [V6]:PORT or PORT, a port from 0 to 65535, or an absolute unix path)\n",
			app->name, g->listen_at);
		return EX_USAGE;
	}
	s->per_block = app->per_block;
	s->group_blocks = app->group_blocks;
	s->idle_ns = app->idle_ms * 1000000ull;
	s->queue_ns = app->queue_ms * 1000000ull;
	s->bufsize = app->bufsize;
	s->conn_size = app->conn_size;
	if (app->app_size) {
		s->app = calloc(1, app->app_size);
		g->dev_app = gsock_dev_alloc(g->ctx, app->app_size);
		if (!s->app || !g->dev_app)
			goto out_of_memory;
	}
	r = gsrv_setup_pipes(g, s);
	if (!r && app->setup)
		r = app->setup(app, g->ctx, s);
	if (r)
		return r;
	/* 16-byte alignment for each part: the copy engine's words */
	s->conn_size = (s->conn_size + 15) & ~15u;
	s->pfd_off = (sizeof(struct gs_srv_blk) + 15) & ~15u;
	s->slot_off = s->pfd_off + ((8 * (s->per_block + 1) + 15) & ~15u);
	s->last_off = s->slot_off + ((4 * s->per_block + 15) & ~15u);
	s->wake_off = s->last_off + ((8 * s->per_block + 15) & ~15u);
	s->state_off = s->wake_off + ((8 * s->per_block + 15) & ~15u);
	/*
	 * The buffer on 256 bytes: with an odd per_block it sat 8 bytes off
	 * 16, and every copy from a ring into it took gs_copy's slower
	 * shifted path.
	 */
	s->buf_off = (s->state_off + s->per_block * s->conn_size + 255) & ~255u;
	stride = ((uint64_t)s->buf_off + s->bufsize + 255) & ~255ull;
	if (stride > UINT32_MAX) {
		fprintf(stderr, "%s: a block's memory would exceed 4 GiB\n",
			app->name);
		return EX_USAGE;
	}
	s->blk_stride = (uint32_t)stride;
	s->blk = gsock_dev_alloc(g->ctx, (size_t)g->blocks * stride);
	s->stats = gsock_dev_alloc(g->ctx, (g->blocks + s->pipes) *
						   sizeof(*s->stats));
	s->moves = gsock_dev_alloc(g->ctx, sizeof(*s->moves));
	s->held = gsock_dev_alloc(g->ctx,
				  (s->per_block + 1) * sizeof(*s->held));
	if (s->pipes) {
		s->asks = gsock_dev_alloc(g->ctx,
					  g->blocks * sizeof(*s->asks));
		s->pipe_mem = gsock_dev_alloc(g->ctx, (size_t)s->pipes *
							      s->pipe_stride);
		if (!s->asks || !s->pipe_mem)
			goto out_of_memory;
	}
	if (s->blk && s->stats && s->moves && s->held &&
	    (!app->app_size ||
	     !gsock_memcpy(g->ctx, g->dev_app, s->app, app->app_size)))
		return 0;
out_of_memory:
	fprintf(stderr, "%s: out of memory for %u blocks\n", app->name,
		g->blocks);
	return EX_OSERR;
}

/* "GPU N " on the cuda backend; "host:N " on the host one (it has no GPU). */
static const char *gpu_label(const struct gsrv_gpu *g, char *buf, size_t len)
{
	snprintf(buf, len, strcmp(gsock_backend(), "cuda") ? "host:%d " : "GPU %d ",
		 g->device);
	return buf;
}

/* Wait until block 0 listens (0) or failed (-errno); the kernel runs. */
static int gsrv_wait_listening(struct gsrv_gpu *g)
{
	struct timespec ts = { 0, 1000000 };

	struct gsrv_pub *pub = g->s->pub;

	while (!__atomic_load_n(&pub->ready, __ATOMIC_ACQUIRE) &&
	       !gsock_bridge_gone(g->ctx))
		nanosleep(&ts, NULL);
	return pub->ready == 1 ? 0 : pub->ready ? pub->ready : -ECONNABORTED;
}

/* One GPU's life: launch, say where it listens, sleep until the end. */
static void *gsrv_serve(void *p)
{
	struct gsrv_gpu *g = p;
	const char *name = g->app->name, *detail = g->app->detail;
	struct gsrv dev = *g->s;
	char where[160];
	int r;

	if (g->dev_app)
		dev.app = g->dev_app;
	r = gsock_memcpy(g->ctx, g->dev_s, &dev, sizeof(dev));
	if (!r && g->app->launch) {
		g->status = g->app->launch(g->app, g->ctx, g->s, g->dev_s,
					   g->blocks, g->threads);
		if (g->status) {
			gsock_stop(g->ctx);
			return NULL;
		}
	} else if (!r) {
		r = gsock_launch(g->ctx, g->app->kernel,
				 g->blocks * g->s->group_blocks + g->s->pipes,
				 g->threads, g->dev_s);
	}
	if (r) {
		fprintf(stderr, "%s: cannot launch %u blocks: %s\n", name,
			g->blocks * g->s->group_blocks + g->s->pipes,
			strerror(-r));
		gsock_stop(g->ctx); /* host: blocks that did start end */
		gsock_wait(g->ctx);
		g->status = EX_SOFTWARE;
		return NULL;
	}
	r = gsrv_wait_listening(g);
	if (r) {
		fprintf(stderr, "%s: cannot listen on %s: %s\n", name,
			g->listen_at, strerror(-r));
		gsock_stop(g->ctx);
		g->status = EX_UNAVAILABLE;
	} else {
		char gpu[24] = ""; /* the host backend has none */

		if (!strcmp(gsock_backend(), "cuda"))
			snprintf(gpu, sizeof(gpu), ", GPU %d", g->device);
		g->listened = 1;
		g->listen_ns = gsrv_now_ns();
		gsock_format_addr(&g->s->pub->bound, where, sizeof(where));
		unsigned nb = g->blocks * g->s->group_blocks;

		printf("%s: listening on %s (%s backend, %u block%s x %u thread%s%s, %u connection%s per %s%s%s)\n",
		       name, where, gsock_backend(), nb, nb == 1 ? "" : "s",
		       g->threads, g->threads == 1 ? "" : "s", gpu,
		       g->s->per_block, g->s->per_block == 1 ? "" : "s",
		       g->s->group_blocks > 1 ? "group of blocks" : "block",
		       detail ? ", " : "", detail ? detail : "");
		fflush(stdout);
	}
	if (g->app->wait) {
		r = g->app->wait(g->app, g->ctx, g->s);
		if (r && !g->status)
			g->status = r;
	} else {
		gsock_wait(g->ctx);
	}
	g->end_ns = gsrv_now_ns();
	if (gsock_bridge_gone(g->ctx)) {
		fprintf(stderr, "%s: gsockd went away; exiting\n", name);
		g->status = EX_UNAVAILABLE;
	}
	return NULL;
}

/* Start every GPU's server (GPU 0 first), then wait for them all. */
static int gsrv_run(struct gsrv_gpu *g, int ngpus)
{
	int status = 0, broke = 0;

	for (int i = 0; i < ngpus && !broke; i++) {
		if (i > 0) {
			if (gsrv_wait_listening(&g[0])) {
				broke = 1;
				break;
			}
			g[i].s->addr = g[0].s->pub->bound;
			g[i].s->addrlen = g[0].s->pub->boundlen;
		}
		if (pthread_create(&g[i].thread, NULL, gsrv_serve, &g[i])) {
			fprintf(stderr, "%s: cannot start a thread\n",
				g[i].app->name);
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
	return broke && !status ? EX_UNAVAILABLE : status;
}

/* What the pipes counted (gsock_pipe.cuh), in all. */
static void gsrv_report_pipes(const struct gsrv_gpu *g, int ngpus)
{
	struct gsrv_stats all = { 0 };
	double t = 0;

	for (int i = 0; i < ngpus; i++) {
		for (unsigned p = 0; g[i].listened && p < g[i].s->pipes; p++) {
			struct gsrv_stats st;

			if (gsock_memcpy(g[i].ctx, &st,
					 &g[i].s->stats[g[i].blocks + p],
					 sizeof(st)))
				return; /* said on stderr */
			all.conns += st.conns;
			all.requests += st.requests;
			all.errors += st.errors;
			all.batches += st.batches;
			for (int k = GSRV_PIPE_ASK; k <= GSRV_PIPE_IDLE; k++) {
				all.step_ns[k] += st.step_ns[k];
				t += (double)st.step_ns[k];
			}
		}
	}
	if (!g[0].listened || !g[0].s->pipes)
		return;
	printf("%s: the pipes to %s answered %llu asks (%llu errors) in %llu writes (%.1f a write) on %llu connections\n",
	       g[0].app->name, g[0].app->backend,
	       (unsigned long long)all.requests,
	       (unsigned long long)all.errors,
	       (unsigned long long)all.batches,
	       all.batches ? (double)all.requests / (double)all.batches : 0.0,
	       (unsigned long long)all.conns);
	if (t > 0)
		printf("%s: the pipes' time: %.0f%% writing, %.0f%% receiving, %.0f%% handing out, %.0f%% idle\n",
		       g[0].app->name, 100 * all.step_ns[GSRV_PIPE_ASK] / t,
		       100 * all.step_ns[GSRV_PIPE_RECV] / t,
		       100 * all.step_ns[GSRV_PIPE_HAND] / t,
		       100 * all.step_ns[GSRV_PIPE_IDLE] / t);
}

/* Where a request's time went, by the steps the application named. */
static void gsrv_report_steps(const struct gsrv_app *app,
			      const struct gsrv_stats *all)
{
	if (!app->steps || !app->steps[0] || !all->requests)
		return;
	printf("%s: a request's steps, us:", app->name);
	for (int k = 0; k < GSRV_STEPS && app->steps[k]; k++)
		printf("%s %.1f %s", k ? "," : "",
		       (double)all->step_ns[k] / 1e3 / (double)all->requests,
		       app->steps[k]);
	printf("\n");
}

/*
 * How much of the time they listened the serving blocks held a request
 * (gsrv_next to gsrv_done): near all, and they bound the server; far
 * from it, and the bound is outside them (clients, the network, gsockd).
 */
static void gsrv_report_busy(const struct gsrv_gpu *g, const char *label,
			     uint64_t busy_ns, uint64_t requests)
{
	double span = (double)(g->end_ns - g->listen_ns) * g->blocks;

	if (!g->app->steps || !requests || !g->listen_ns ||
	    g->end_ns <= g->listen_ns)
		return;
	printf("%s: %sthe serving blocks held a request %.0f%% of the time they listened (%u blocks, %.1f us a request)\n",
	       g->app->name, label, 100.0 * (double)busy_ns / span, g->blocks,
	       (double)busy_ns / 1e3 / (double)requests);
}

/*
 * How the connections spread over the blocks: how many blocks held at
 * most 0, 1, ... connections at once (the counts that are not 0).
 */
static void gsrv_report_most(const struct gsrv_gpu *g, const char *label,
			     const uint64_t *most)
{
	printf("%s: %sblocks by the most connections each held at once:",
	       g->app->name, label);
	for (uint32_t k = 0, first = 1; k <= g->s->per_block; k++)
		if (most[k]) {
			printf("%s %u: %llu", first ? "" : ",", k,
			       (unsigned long long)most[k]);
			first = 0;
		}
	printf("\n");
}

/* What the blocks counted: per GPU where several served, then in all. */
static void gsrv_report(const struct gsrv_gpu *g, int ngpus)
{
	struct gsrv_stats all = { 0 };
	char label[24];

	for (int i = 0; i < ngpus; i++) {
		uint64_t conns = 0, busy = 0, requests = 0, *most;
		unsigned read = 0;

		if (!g[i].listened)
			continue;
		most = calloc(g[i].s->per_block + 1, sizeof(*most));
		for (unsigned b = 0; b < g[i].blocks; b++) {
			struct gsrv_stats one, *st = &one;

			if (gsock_memcpy(g[i].ctx, st, &g[i].s->stats[b],
					 sizeof(one)))
				break; /* said on stderr */

			read++;
			if (most)
				most[st->most <= g[i].s->per_block ?
					     st->most :
					     g[i].s->per_block]++;
			conns += st->conns;
			busy += st->busy_ns;
			requests += st->requests;
			for (int k = 0; k < GSRV_STEPS; k++)
				all.step_ns[k] += st->step_ns[k];
			all.requests += st->requests;
			all.bytes += st->bytes;
			all.errors += st->errors;
			all.refused += st->refused;
			if (st->last_error)
				fprintf(stderr,
					"%s: %sblock %u: a connection ended with %s\n",
					g[i].app->name, gpu_label(&g[i], label,
								  sizeof(label)),
					b, strerror((int)-st->last_error));
		}
		if (ngpus > 1)
			printf("%s: %sserved %llu connections\n",
			       g[i].app->name,
			       gpu_label(&g[i], label, sizeof(label)),
			       (unsigned long long)conns);
		if (ngpus > 1)
			gpu_label(&g[i], label, sizeof(label));
		gsrv_report_busy(&g[i], ngpus > 1 ? label : "", busy, requests);
		/* every block read, and one held some */
		if (most && read == g[i].blocks && most[0] < read)
			gsrv_report_most(&g[i], ngpus > 1 ? label : "", most);
		free(most);
		all.conns += conns;
	}
	if (g[0].listened)
		gsrv_report_steps(g[0].app, &all);
	if (g[0].listened)
		printf("%s: served %llu %s on %llu connections, %llu %s, %llu errors\n",
		       g[0].app->name, (unsigned long long)all.requests,
		       g[0].app->requests, (unsigned long long)all.conns,
		       (unsigned long long)all.bytes, g[0].app->counted,
		       (unsigned long long)all.errors);
	if (all.refused)
		fprintf(stderr,
			"%s: refused %llu clients: no place was taken or freed for %u ms while they waited (%u blocks x %u connections%s, all held); more -b or -m, -I to close idle clients, or -Q 0 to let them wait\n",
			g[0].app->name, (unsigned long long)all.refused,
			g[0].app->queue_ms, g[0].blocks, g[0].s->per_block,
			ngpus > 1 ? " a GPU" : "");
	gsrv_report_pipes(g, ngpus);
}

static void gsrv_teardown(struct gsrv_gpu *g)
{
	if (g->s) {
		if (g->app->teardown)
			g->app->teardown(g->app, g->ctx, g->s);
		if (g->app->app_size) /* not the application's to free */
			free(g->s->app);
		gsock_dev_free(g->ctx, g->dev_app);
		gsock_dev_free(g->ctx, g->dev_s);
		gsock_dev_free(g->ctx, g->s->blk);
		gsock_dev_free(g->ctx, g->s->stats);
		gsock_dev_free(g->ctx, g->s->moves);
		gsock_dev_free(g->ctx, g->s->held);
		gsock_dev_free(g->ctx, g->s->asks);
		gsock_dev_free(g->ctx, g->s->pipe_mem);
		gsock_free(g->ctx, g->s->pub);
		free(g->s);
	}
	gsock_fini(g->ctx);
}

/* One standard option into app's fields: 0, or a <sysexits.h> status. */
static int gsrv_std_option(struct gsrv_app *app, int opt, const char *arg,
			   struct gsock_opts *go, int *dev, int *ngpus,
			   int *reuseport)
{
	unsigned *count = opt == 'b' ? &app->blocks :
			  opt == 't' ? &app->threads :
			  opt == 'm' ? &app->per_block :
			  opt == 'B' ? &app->bufsize :
				       NULL;

	if (count) {
		*count = gsrv_count_arg(arg);
		if (*count && (opt != 't' || *count <= 1024))
			return 0;
		fprintf(stderr, "%s: -%c takes a positive number%s, not '%s'\n",
			app->name, opt, opt == 't' ? " up to 1024" : "", arg);
		return EX_USAGE;
	}
	switch (opt) {
	case 'l':
		app->listen = arg;
		return 0;
	case 'r':
		go->ring_size = gsrv_count_arg(arg);
		return 0;
	case 's':
		go->control = arg;
		return 0;
	case 'P':
		*reuseport = 1;
		return 0;
	case 'I':
	case 'Q': {
		char *end;
		unsigned long v = strtoul(arg, &end, 10);

		if (*arg && !*end && v <= 86400000) {
			*(opt == 'I' ? &app->idle_ms : &app->queue_ms) =
				(unsigned)v;
			return 0;
		}
		fprintf(stderr, "%s: -%c takes milliseconds (0: never), not '%s'\n",
			app->name, opt, arg);
		return EX_USAGE;
	}
	case 'g':
		*ngpus = gsrv_parse_gpus(arg, dev, GSRV_MAX_GPUS);
		if (*ngpus > 0)
			return 0;
		fprintf(stderr,
			"%s: --gpus takes 1 to %d GPU numbers, e.g. 0,1; not '%s'\n",
			app->name, GSRV_MAX_GPUS, arg);
		return EX_USAGE;
	}
	if (app->option && opt != '?')
		return app->option(app, opt, arg);
	gsrv_usage(app, stderr);
	return EX_USAGE;
}

int gsrv_main(struct gsrv_app *app, int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = gsrv_on_signal };
	struct gsock_opts go = { .ring_size = app->ring_size };
	struct gsrv_gpu g[GSRV_MAX_GPUS];
	int dev[GSRV_MAX_GPUS] = { 0 }, ngpus = 1, opt, status = 0;
	int reuseport = 0;
	struct option *longopts = gsrv_long_options(app);
	char shortopts[128];

	app->listen = app->listen ? app->listen : "7000";
	app->blocks = app->blocks ? app->blocks : 16;
	app->threads = app->threads ? app->threads : 256;
	app->per_block = app->per_block ? app->per_block : 1;
	app->bufsize = app->bufsize ? app->bufsize : 65536;
	app->group_blocks = app->group_blocks ? app->group_blocks : 1;
	app->queue_ms = app->queue_ms ? app->queue_ms : GSRV_QUEUE_MS;
	app->requests = app->requests ? app->requests : "requests";
	app->counted = app->counted ? app->counted : "bytes";
	snprintf(shortopts, sizeof(shortopts), "l:b:t:m:B:r:g:PI:Q:s:h%s",
		 app->opts ? app->opts : "");
	if (!longopts) {
		fprintf(stderr, "%s: out of memory\n", app->name);
		return EX_OSERR;
	}
	while (!status && (opt = getopt_long(argc, argv, shortopts, longopts,
					     NULL)) != -1) {
		if (opt == 'h') {
			gsrv_usage(app, stdout);
			free(longopts);
			return 0;
		}
		status = gsrv_std_option(app, opt, optarg, &go, dev, &ngpus,
					 &reuseport);
	}
	free(longopts);
	if (!status && optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", app->name,
			argv[optind]);
		status = EX_USAGE;
	}
	if (status)
		return status;
	if (!app->backend)
		app->pipes = 0;
	else if (!app->pipes)
		app->pipes = app->blocks < 8 ? app->blocks : 8;
	/* a pipe holds one backend connection, and one closed one */
	go.nslots = app->blocks * app->group_blocks + app->pipes;
	go.nsocks = gsrv_nsocks(app->blocks, app->per_block) + 2 * app->pipes;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	memset(g, 0, sizeof(g));
	for (int i = 0; i < ngpus && !status; i++) {
		g[i] = (struct gsrv_gpu){ .app = app,
					  .device = dev[i],
					  .blocks = app->blocks,
					  .threads = app->threads,
					  .listen_at = app->listen };
		status = gsrv_setup(&g[i], go);
		if (g[i].s)
			g[i].s->reuseport = ngpus > 1 || reuseport;
	}
	if (!status) {
		status = gsrv_run(g, ngpus);
		gsrv_report(g, ngpus);
	}
	for (int i = ngpus; i-- > 0;)
		if (g[i].ctx)
			gsrv_teardown(&g[i]);
	return status;
}
