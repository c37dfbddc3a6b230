/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-server: a GPU echo server on the server layer
 * (gsock-server(3)), kernel and host program in one file: cc builds it
 * for the host backend, nvcc -x cu for the GPU. --mode sink and source
 * serve bench/loadgen's one-way streams (stream.h). With --group-blocks K
 * each connection's bytes are copied by a group of K blocks (the layer's
 * groups): the serving block calls gsend_group and grecv_group, the others
 * help in ggroup_help until it stops them (in sink mode they make the
 * group calls beside it and check their part of each chunk). --delay
 * holds each answer back, as a server that computes before it answers
 * would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "gsock.h"
#include "gsock_server.cuh"
#include "stream_check.cuh"

/* The server's own arguments (s->app). */
struct echo_app {
	uint32_t mode; /* enum echo_mode */
	uint32_t delay_us; /* -D: each echo's answer this late */
	struct ggroup_sync *sync; /* device memory: one per group, or NULL */
	unsigned long long *bad; /* sink, groups: each group's wrong bytes */
};

enum echo_mode {
	ECHO_ECHO, /* send back what arrives */
	ECHO_SINK, /* read to the end, check, answer count and wrong bytes */
	ECHO_SOURCE, /* send the stream pattern until the peer goes */
};

/*
 * Every rank of g, between group calls: rank 0 goes on only once every
 * rank has come here (its second post waits until each took the first).
 */
GSOCK_DEVICE long group_meet(struct gsock_dev gs, struct ggroup g)
{
	long r = ggroup_bcast(gs, g, 0);

	return r ? r : ggroup_bcast(gs, g, 0);
}

/*
 * -M sink: check a stream to its end, answer its count and wrong bytes.
 * Every rank of g calls, with rank 0's fd and the group's buf: each
 * checks its part of every chunk that grecv_group brings into buf, the
 * ranks meet before rank 0 takes the next one, and their counts add up
 * in gbad (this group's word, 0 between connections) before rank 0
 * answers.
 */
GSOCK_DEVICE long sink(struct gsock_dev gs, const struct gsrv *s, int fd,
		       uint8_t *buf, struct ggroup g, unsigned long long *gbad)
{
	uint64_t off = 0, bad = 0;
	long n, r = 0;

	while ((n = grecv_group(gs, fd, buf, s->bufsize, 0, g)) > 0) {
		bad += stream_wrong(buf, (uint64_t)n, off, g.rank, g.size);
		off += (uint64_t)n;
		gs_sync(); /* every thread is done with buf */
		if (g.size > 1 && (r = group_meet(gs, g)) != 0)
			return r; /* the application stops */
	}
	bad = gs_sum64(bad);
	if (g.size > 1) {
		if (gs_tid() == 0) {
			gs_fetch_add64(gbad, bad);
			gs_fence();
		}
		if ((r = group_meet(gs, g)) != 0)
			return r;
		if (gs_tid() == 0 && g.rank == 0) {
			bad = gs_ld64((const uint64_t *)gbad);
			gs_st64((uint64_t *)gbad, 0); /* before the next post */
		}
	}
	if (gs_tid() == 0 && g.rank == 0)
		stream_answer_put(buf, off, bad);
	gs_sync();
	if (n == 0)
		n = gsend_group(gs, fd, buf, STREAM_ANSWER, 0, g);
	if (g.rank == 0)
		gsrv_count(gs, s, off);
	return n < 0 ? n : 0; /* served to its end: close it */
}

/*
 * A helping rank of a sink's group: for each connection rank 0 names
 * (its fd + 1), check beside it in the group's buffer (gsrv_buf is the
 * group's, rank 0's too); 0 (ggroup_stop) or an error ends it.
 */
GSOCK_DEVICE void sink_help(struct gsock_dev gs, const struct gsrv *s,
			    struct ggroup g, unsigned long long *gbad)
{
	uint8_t *buf = (uint8_t *)gsrv_buf(gs, s);
	long fd1;

	while ((fd1 = ggroup_bcast(gs, g, 0)) > 0)
		sink(gs, s, (int)(fd1 - 1), buf, g, gbad);
}

/* -M source: the stream pattern, size bytes a call, until the peer goes. */
GSOCK_DEVICE long source(struct gsock_dev gs, const struct gsrv *s, int fd,
			 uint8_t *buf, struct ggroup g)
{
	uint32_t size = s->bufsize - STREAM_PERIOD;
	uint64_t off = 0;
	long n;

	for (uint64_t k = gs_tid(); k < s->bufsize; k += gs_bdim())
		buf[k] = stream_byte(k);
	gs_sync();
	while ((n = gsend_group(gs, fd, buf + off % STREAM_PERIOD, size, 0,
				g)) > 0)
		off += (uint64_t)n;
	gsrv_count(gs, s, off);
	return gsrv_fatal(n) ? n : 0; /* the peer's going ends it */
}

/*
 * -D: thread 0 waits ns, backing off as a g-call's wait does (a stop or
 * gsockd's end cuts it short: the next call says so), then the block
 * meets.
 */
GSOCK_DEVICE void think(struct gsock_dev gs, uint64_t ns)
{
	if (gs_tid() == 0) {
		uint64_t until = gs_now_ns() + ns;
		unsigned turn = 0;

		while (gs_now_ns() < until && !gs_wait_turn(gs, &turn))
			;
	}
	gs_sync();
}

/*
 * Blocks of at most 512 threads, so 128 registers a thread at most: two
 * blocks of 256 fit on a multiprocessor, and bench/run's servers of 256
 * blocks start on an H100 or H200. Uncapped the kernel took 142 (the
 * g-calls inlined in it) and one block fitted; capped it keeps 32 bytes
 * of stack a thread (sm_90, with the sink's group checks).
 */
GSOCK_KERNEL_FIT(echo_kernel, gs, arg, 512, 1)
{
	struct gsrv *s = (struct gsrv *)arg;
	uint8_t *buf = (uint8_t *)gsrv_buf(gs, s);
	struct echo_app *e = (struct echo_app *)s->app;
	struct ggroup g = { gsrv_rank(gs, s), s->group_blocks,
			    e->sync ? &e->sync[gs_bid() / s->group_blocks] :
				      0 };
	int fd, wait = s->per_block == 1 ? 0 : MSG_DONTWAIT;
	long n;
	unsigned long long *gbad =
		e->bad ? &e->bad[gs_bid() / s->group_blocks] : 0;

	if (g.rank) { /* a helping block: copies for the serving one */
		if (e->mode == ECHO_SINK)
			sink_help(gs, s, g, gbad);
		else
			ggroup_help(gs, g);
		return;
	}
	while ((fd = gsrv_next(gs, s)) >= 0) {
		if (e->mode == ECHO_SINK) {
			/* the helpers' sink_help: fd + 1, or an errno */
			n = g.size > 1 ? ggroup_bcast(gs, g, fd + 1) : 0;
			if (n >= 0)
				n = sink(gs, s, fd, buf, g, gbad);
		} else if (e->mode == ECHO_SOURCE)
			n = source(gs, s, fd, buf, g);
		else /* one connection a block: serve it to its end here */
			do {
				n = grecv_group(gs, fd, buf, s->bufsize, wait,
						g);
				if (n > 0 && e->delay_us)
					think(gs, e->delay_us * 1000ull);
				if (n > 0)
					n = gsend_group(gs, fd, buf, (size_t)n,
							0, g);
				if (n > 0)
					gsrv_count(gs, s, (uint64_t)n);
			} while (n > 0 && !wait);
		gsrv_done(gs, s, n);
	}
	ggroup_stop(gs, g); /* the helpers' ggroup_help (sink_help) returns */
}

static const char *const modes[] = { "echo", "sink", "source" };
static uint32_t mode_opt = ECHO_ECHO, delay_opt;

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	if (opt == 'k') {
		char *end;
		unsigned long v = strtoul(arg, &end, 0);

		if (*end || !v || v > GGROUP_MAX) {
			fprintf(stderr,
				"%s: --group-blocks is 1 to %d blocks a connection, not '%s'\n",
				app->name, GGROUP_MAX, arg);
			return EX_USAGE;
		}
		app->group_blocks = (unsigned)v;
		return 0;
	}
	if (opt == 'D') {
		char *end;
		unsigned long v = strtoul(arg, &end, 10);

		if (*arg < '0' || *arg > '9' || *end || v > 10000000) {
			fprintf(stderr,
				"%s: --delay is 0 to 10000000 microseconds, not '%s'\n",
				app->name, arg);
			return EX_USAGE;
		}
		delay_opt = (uint32_t)v;
		return 0;
	}
	for (mode_opt = 0; mode_opt < 3; mode_opt++)
		if (!strcmp(arg, modes[mode_opt])) {
			app->detail = mode_opt ? modes[mode_opt] : NULL;
			return 0;
		}
	fprintf(stderr, "%s: --mode is echo, sink or source, not '%s'\n",
		app->name, arg);
	return EX_USAGE;
}

static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	struct echo_app *e = (struct echo_app *)s->app;

	if (mode_opt != ECHO_ECHO && s->per_block > 1) {
		fprintf(stderr,
			"%s: --mode sink and source serve one connection per block: leave out --multiplex\n",
			app->name);
		return EX_USAGE;
	}
	if (mode_opt == ECHO_SOURCE)
		s->bufsize += STREAM_PERIOD; /* the pattern from any offset */
	if (delay_opt && mode_opt != ECHO_ECHO) {
		fprintf(stderr, "%s: --delay holds back echoes: --mode echo only\n",
			app->name);
		return EX_USAGE;
	}
	e->mode = mode_opt;
	e->delay_us = delay_opt;
	if (s->group_blocks > 1) { /* zeroed, as struct ggroup_sync must start */
		e->sync = (struct ggroup_sync *)gsock_dev_alloc(
			ctx, (size_t)s->blocks * sizeof(*e->sync));
		if (mode_opt == ECHO_SINK)
			e->bad = (unsigned long long *)gsock_dev_alloc(
				ctx, (size_t)s->blocks * sizeof(*e->bad));
		if (!e->sync || (mode_opt == ECHO_SINK && !e->bad)) {
			fprintf(stderr, "%s: out of memory\n", app->name);
			return EX_OSERR;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'M' },
		{ "group-blocks", required_argument, NULL, 'k' },
		{ "delay", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 }
	};
	struct gsrv_app app = { 0 };

	app.name = "gsock-echo-server";
	app.kernel = (const void *)echo_kernel;
	app.opts = "M:k:D:";
	app.longopts = opts;
	app.usage =
		"  -M, --mode MODE       echo (default); sink: read each connection to its end,\n"
		"                        check the stream pattern, answer the count and the\n"
		"                        wrong bytes; source: send the stream pattern until\n"
		"                        the peer goes (bench/loadgen -m up and -m down)\n"
		"  -k, --group-blocks K  blocks that copy each connection's bytes together\n"
		"                        (default 1; -b counts groups then)\n"
		"  -D, --delay US        answer each echo US microseconds after its bytes\n"
		"                        came (a server that computes first; default 0)\n";
	app.option = option;
	app.setup = setup;
	app.app_size = sizeof(struct echo_app);
	return gsrv_main(&app, argc, argv);
}
