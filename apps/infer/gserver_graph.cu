/* SPDX-License-Identifier: Apache-2.0 */
/*
 * infer-gserver-graph: infer-gserver's protocol (infer.h) served by CUDA
 * graphs that launch each other from the device, on the server layer's
 * turns (gsock_turn.cuh): one graph launch a turn, and no CPU code
 * between a request and its answer.
 *
 *   node            does                                      blocks
 *   receive         igg_read: accept, read, check heads;      -b
 *                   a whole request's picture becomes a job
 *                   of the turn's batch (its pixels, and
 *                   IGG_GAP before them for its answer's head)
 *   im2col, SGEMM   the three convolutions of every picture   grid, cuBLAS
 *   (three times)   of the turn at once (espcn_cublas.cuh)
 *   shuffle         the outputs into their answers            grid
 *   send            igg_answer: each block answers its jobs   -b
 *                   (pictures, refusals); the layer launches
 *                   the next turn
 *
 * A batch size is pixels: one graph for each of -G sizes from 4 Ki to
 * ECB_PIXELS_MAX (a 1024x1024 picture), each a constant factor above the
 * one before (1.42 for 17), so that a turn computes at most that factor
 * more than it took. The model's ranges run side by side on
 * IGG_BRANCHES streams (ecb_model).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>

#include "espcn.h"
#include "espcn_cublas.cuh"
#include "espcn_gpu.h" /* ESPCN_THREADS */
#include "ghttp.cuh"
#include "gsock.h"
#include "gsock_turn.cuh"

#define IGG_GAP 32 /* plane pixels before a picture's: its answer's head */
#define IGG_SIZES_DEFAULT 17
#define IGG_STR_(x) #x
#define IGG_STR(x) IGG_STR_(x)
#ifndef IGG_BRANCHES
#define IGG_BRANCHES 4
#endif
typedef char igg_branches_fit[IGG_BRANCHES >= 1 && IGG_BRANCHES <= ECB_BRANCHES_MAX ? 1 : -1];
#define IGG_BLAS_WS (32u << 20) /* cuBLAS's workspace, a branch */

/* The application's part of struct gsrv (s->app); every pointer device memory. */
struct igg_conf {
	long timeout_us; /* bound on a request's arrival */
	struct ecb_batch m; /* the model's: job i's picture is m.pics[i] */
};

/* A connection's state (gsrv_state): its input, how far its request is. */
struct igg_conn {
	struct gsrv_turn_conn t; /* the layer's */
	struct gsrv_lines lb;
	struct gsrv_http q; /* the head whose body is awaited */
	uint64_t since; /* when its request began to wait for bytes; 0 */
	uint32_t body; /* the head is in: the body is awaited */
	uint32_t at, pw, ph; /* its picture: pixels at data + at */
	uint32_t w, h; /* X-Width, X-Height (0: a PGM) */
	uint8_t data[INFER_BODY_MAX];
};

/* ---- the receive node ---- */

/*
 * k's picture into the batch if this turn's graph holds it: its pixels
 * say whose they are and its answer's head is written (job note[0] the
 * head's length, note[1] keep-alive); else it waits (the layer's).
 */
GSOCK_DEVICE long igg_picture(struct gsock_dev gs, const struct gsrv_turn_arg *a,
			      struct igg_conn *k, int fd)
{
	struct igg_conf *c = (struct igg_conf *)a->s->app;
	long i = gsrv_turn_take(gs, a, fd, IGG_GAP + k->pw * k->ph);
	struct gsrv_job *j = &a->t->job[i < 0 ? 0 : i];

	if (i < 0) /* it waits for room (-1), or cannot fit (none here can) */
		return i == -1 ? -EAGAIN : i;
	if (gs_tid() == 0) {
		struct ecb_pic *p = &c->m.pics[i];
		char head[INFER_REPLY_HEAD_MAX];

		*p = (struct ecb_pic){ k->data + k->at, j->at + IGG_GAP, k->pw, k->ph };
		j->note[1] = k->q.keep_alive;
		j->note[0] = infer_reply_head(head, 200, 9ull * p->w * p->h,
					      j->note[1], 3 * p->w, 3 * p->h);
		memcpy(c->m.out + 9ull * p->at - j->note[0], head, j->note[0]);
	}
	for (uint32_t q = gs_tid(); q < j->units; q += gs_bdim())
		c->m.owner[j->at + q] = (uint32_t)i;
	gs_sync();
	return -EAGAIN;
}

/*
 * Connection fd, handed out: read what came of its next request; a
 * whole one becomes a job (its picture, or its refusal), bytes that
 * wait past -T a 408 (else a wake-up at -T). -EAGAIN keeps it, 0 or a
 * negative errno closes it (ended, maybe mid-request: nothing to answer).
 */
GSOCK_DEVICE long igg_read(struct gsock_dev gs, const struct gsrv_turn_arg *a,
			   int fd)
{
	struct igg_conf *c = (struct igg_conf *)a->s->app;
	struct igg_conn *k = (struct igg_conn *)gsrv_state(gs, a->s);
	uint32_t at = 0, w = 0, h = 0, px = 0;
	long r, e = 0;

	if (k->t.wait) /* it waited for room */
		return igg_picture(gs, a, k, fd);
	if (!k->body) {
		r = gsrv_recv_until(gs, fd, &k->lb, k->data, sizeof(k->data),
				    "\r\n\r\n", 4, &at, MSG_DONTWAIT, 0);
		if (r == -EMSGSIZE || r > INFER_HEAD_MAX ||
		    (r == -EAGAIN && k->lb.have - k->lb.off > INFER_HEAD_MAX))
			return gsrv_turn_refuse(gs, a, fd, INFER_E_HEAD_SIZE);
		if (r == -EAGAIN)
			goto wait;
		if (r < 4 || !infer_is((const char *)k->data + at + r - 4, 4, "\r\n\r\n"))
			return r < 0 ? r : 0;
		if (gs_tid() == 0)
			e = ig_check((const char *)k->data + at, (uint32_t)r,
				     &k->q, &k->w, &k->h);
		if (gs_bcast(e))
			return gsrv_turn_refuse(gs, a, fd, (int)e);
		if (k->q.expect_continue && k->q.minor >= 1 && /* RFC 9110 10.1.1 */
		    (r = gsrv_turn_send_bytes(gs, fd, INFER_CONTINUE,
					      sizeof(INFER_CONTINUE) - 1)) < 0)
			return r;
		gs_sync();
		if (gs_tid() == 0)
			k->body = 1;
		gs_sync();
	}
	r = gsrv_recv_bytes(gs, fd, &k->lb, k->data, sizeof(k->data),
			    (uint32_t)k->q.content_length, &at, MSG_DONTWAIT, 0);
	if (r == -EAGAIN)
		goto wait;
	if (r < 0 || (r == 0 && k->q.content_length))
		return r;
	gs_sync();
	if (gs_tid() == 0) { /* the next request's time starts afresh */
		e = infer_picture(k->data + at, (uint64_t)r, k->w, k->h, &w, &h, &px);
		k->body = 0;
		k->since = 0;
		k->at = at + px;
		k->pw = w;
		k->ph = h;
	}
	if (gs_bcast(e))
		return gsrv_turn_refuse(gs, a, fd, (int)e);
	return igg_picture(gs, a, k, fd);
wait:
	gs_sync();
	if (gsrv_late(gs, a->s, &k->since, k->body || k->lb.have != k->lb.off,
		      c->timeout_us))
		return gsrv_turn_refuse(gs, a, fd, INFER_E_TIMEOUT);
	return -EAGAIN;
}

GSOCK_KERNEL_FIT(igg_recv, gs, arg, ESPCN_THREADS, 1)
{
	gsrv_turn_receive(gs, arg, igg_read);
}

/* ---- the send node ---- */

/* Job i, its connection taken again: its answer; what gsrv_done is to make of it. */
GSOCK_DEVICE long igg_answer(struct gsock_dev gs, const struct gsrv_turn_arg *a,
			     uint32_t i)
{
	struct igg_conf *c = (struct igg_conf *)a->s->app;
	const struct gsrv_job *j = &a->t->job[i];
	const struct ecb_pic *p = &c->m.pics[i];
	struct igg_conn *k = (struct igg_conn *)gsrv_state(gs, a->s);
	char *text = (char *)gsrv_buf(gs, a->s);
	long r = 0;

	if (j->e) { /* refused: why, and a close */
		if (gs_tid() == 0)
			r = infer_error(text, j->e);
		gsrv_turn_send_bytes(gs, j->fd, text, (uint64_t)gs_bcast(r));
		return -EPROTO;
	}
	r = gsrv_turn_send_bytes(gs, j->fd, c->m.out + 9ull * p->at - j->note[0],
				 j->note[0] + 9ull * p->w * p->h);
	if (r < 0 || !j->note[1])
		return r < 0 ? r : 0;
	if (k->lb.have > k->lb.off) /* pipelined bytes wait: the next turn */
		gsrv_wake_at(gs, a->s, (uint64_t)gs_bcast((long)gs_now_ns()));
	return 1;
}

GSOCK_KERNEL_FIT(igg_send, gs, arg, ESPCN_THREADS, 1)
{
	gsrv_turn_send(gs, arg, igg_answer);
}

/* ---- the host program ---- */

static struct igg_conf conf = { INFER_TIMEOUT_MS * 1000L }; /* the host's copy */
static struct ecb_branches br;
static void *model, *blas_ws; /* device memory: the weights and planes, cuBLAS's */
static const char *weights_path;

/* The layer's hooks: cuBLAS's choices outside the capture, the model in it. */
static int igg_prepare(void *data, uint32_t cap)
{
	(void)data;
	return ecb_warm(&br, &conf.m, cap) ? -1 : 0;
}

static int igg_capture(void *data, cudaStream_t st, uint32_t cap)
{
	(void)data, (void)st; /* br.st[0] is st, the layer's stream */
	return ecb_model(br.h, br.st, br.ev, br.n, &conf.m, cap);
}

static struct gsrv_turn_host turns = {
	.receive = (const void *)igg_recv, .send = (const void *)igg_send,
	.sizes = IGG_SIZES_DEFAULT, .cap_min = 1u << 12, .cap_max = ECB_PIXELS_MAX,
	.units = "pixels", .prepare = igg_prepare, .capture = igg_capture
};

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10), lo = opt == 'G' ? 2 : 1,
	     hi = opt == 'G' ? GSRV_TURN_SIZES : 86400000;

	if (opt == 'w') {
		weights_path = arg;
		return 0;
	}
	if (!*arg || *end || v < lo || v > hi) {
		fprintf(stderr, "%s: -%c takes %s from %ld to %ld, not '%s'\n", app->name, opt,
			opt == 'G' ? "a number of graph sizes" : "milliseconds", lo, hi, arg);
		return EX_USAGE;
	}
	if (opt == 'G')
		turns.sizes = (unsigned)v;
	else /* -T, milliseconds */
		conf.timeout_us = v * 1000;
	return 0;
}

/* The turns, the weights, the planes, cuBLAS's branches. */
static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	uint32_t jobs = s->blocks * s->per_block;
	int status = gsrv_turn_setup(&turns, app->name, ctx, s);
	char err[300];
	float *p;

	if (status)
		return status;
	p = espcn_weights_open(weights_path, err, sizeof(err), &status);
	if (!p) {
		fprintf(stderr, "%s: %s\n", app->name, err);
		return status;
	}
	model = gsock_dev_alloc(ctx, ecb_size(ECB_PIXELS_MAX, jobs));
	blas_ws = gsock_dev_alloc(ctx, (size_t)IGG_BLAS_WS * IGG_BRANCHES);
	if (model) {
		ecb_carve(&conf.m, model, ECB_PIXELS_MAX, jobs);
		conf.m.pixels = turns.units_p;
	}
	status = !model || !blas_ws ||
		 gsock_memcpy(ctx, (void *)conf.m.weights, p, 4 * (size_t)ESPCN_NPARAMS);
	free(p);
	if (status) {
		fprintf(stderr, "%s: out of device memory for the model (%zu MiB)\n",
			app->name, ecb_size(ECB_PIXELS_MAX, jobs) >> 20);
		return EX_OSERR;
	}
	if (ecb_branches_open(&br, IGG_BRANCHES, turns.st, blas_ws, IGG_BLAS_WS)) {
		fprintf(stderr, "%s: cannot set up cuBLAS and its streams\n", app->name);
		return EX_OSERR;
	}
	s->bufsize = INFER_ERROR_MAX;
	s->conn_size = sizeof(struct igg_conn);
	*(struct igg_conf *)s->app = conf;
	return 0;
}

/* The GPU whose setup made them: cuBLAS's branches before the layer's stream. */
static void teardown(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	(void)app, (void)s;
	if (ctx != turns.ctx)
		return;
	ecb_branches_close(&br);
	gsrv_turn_teardown(&turns, ctx);
	gsock_dev_free(ctx, model);
	gsock_dev_free(ctx, blas_ws);
	model = blas_ws = NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "weights", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "graphs", required_argument, NULL, 'G' },
		{ NULL, 0, NULL, 0 }
	};
	struct gsrv_app app = { 0 };

	app.name = "infer-gserver-graph";
	app.listen = "7400";
	app.blocks = 4;
	app.per_block = 16;
	app.threads = ESPCN_THREADS;
	app.idle_ms = 60000;
	app.ring_size = 1 << 20;
	app.requests = "pictures";
	app.app_size = sizeof(struct igg_conf);
	app.opts = "w:T:G:";
	app.longopts = opts;
	app.usage =
		"  -w, --weights FILE    the model's weights (infer-ref weights writes them)\n"
		"  -T, --timeout MS      bound on a request's arrival (default 5000); an\n"
		"                        answer has 10 ms plus about 15 ms a MiB to leave,\n"
		"                        then its reader is closed as too slow\n"
		"  -G, --graphs N        graph sizes, 4 Ki to 1 Mi + 64 Ki pixels (default "
		IGG_STR(IGG_SIZES_DEFAULT) "):\n"
		"                        a turn runs the smallest that holds its pictures\n";
	app.option = option;
	app.setup = setup;
	app.teardown = teardown;
	app.launch = gsrv_turn_launch;
	app.wait = gsrv_turn_wait;
	app.data = &turns;
	app.detail = "ESPCN x3 over HTTP/1.1, a self-launching CUDA graph";
	return gsrv_main(&app, argc, argv);
}
