/* SPDX-License-Identifier: Apache-2.0 */
/*
 * infer-gserver: ESPCN x3 super-resolution over HTTP/1.1 (infer.h) from
 * the GPU, the inference server G, on the server layer (gsock-server(3));
 * kernel and host program in one file (cc for the host backend, nvcc -x
 * cu for the GPU). A serving block takes each request's head and body as
 * they come, without waiting (a slow client costs the block's other
 * connections nothing), parses the head on the device, runs the model
 * with its group (espcn_gpu.h: C's kernel without cuBLAS runs the same
 * code) and sends the picture. No CPU code is on this path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "espcn_gpu.h"
#include "ghttp.cuh"
#include "gsock.h"

/* The slowest a reader may take an answer (bytes a second): past it the block moves on. */
#define IG_SEND_RATE (1u << 20)

struct ig_conf {
	const float *weights; /* device memory */
	long timeout_us; /* bound on a request's arrival, an answer's send */
};

/* A connection's state (gsrv_state): its input, how far its request is. */
struct ig_conn {
	struct gsrv_lines lb;
	struct gsrv_http q; /* the head whose body is awaited */
	uint64_t since; /* when its request began to wait for bytes; 0 */
	uint32_t body; /* the head is in: the body is awaited */
	uint32_t w, h; /* X-Width, X-Height (0: a PGM) */
	uint8_t data[INFER_BODY_MAX];
};

/* A group's buffer (gsrv_buf), then each block's scratch. */
struct ig_buf {
	struct espcn_job job; /* the picture the group computes */
	const uint8_t *in; /* its pixels (the serving block's connection) */
	char head[INFER_ERROR_MAX];
	uint8_t out[INFER_REPLY_HEAD_MAX + 9 * ESPCN_MAX_SIDE * ESPCN_MAX_SIDE];
};

/* Block rank of the group: its bands of the group's picture. */
GSOCK_DEVICE void ig_part(struct ig_conf *c, struct gsrv *s, struct ig_buf *b,
			  unsigned rank)
{
	espcn_batch_part(c->weights, &b->job, 1, b->in,
			 b->out + INFER_REPLY_HEAD_MAX,
			 (float *)(b + 1) + (size_t)rank * ESPCN_SCRATCH, rank,
			 s->group_blocks);
}

/* Answer why the request is refused; -EPROTO closes the connection. */
GSOCK_DEVICE long ig_refuse(struct gsock_dev gs, struct gsrv *s, int fd,
			    struct ig_conf *c, int e)
{
	struct ig_buf *b = (struct ig_buf *)gsrv_buf(gs, s);
	long n = 0;

	gs_sync();
	if (gs_tid() == 0)
		n = infer_error(b->head, e);
	gsrv_send_rate(gs, fd, b->head, (uint64_t)gs_bcast(n), c->timeout_us,
		       IG_SEND_RATE);
	return -EPROTO;
}

/* The head of k's next request: 1 taken, or what ig_request returns. */
GSOCK_DEVICE long ig_head(struct gsock_dev gs, struct gsrv *s, int fd,
			  struct ig_conf *c, struct ig_conn *k)
{
	uint32_t at = 0;
	long e = 0, r = gsrv_recv_until(gs, fd, &k->lb, k->data, sizeof(k->data),
					"\r\n\r\n", 4, &at, MSG_DONTWAIT, 0);

	/* too long a head, or the start of one without its end yet */
	if (r == -EMSGSIZE || r > INFER_HEAD_MAX ||
	    (r == -EAGAIN && k->lb.have - k->lb.off > INFER_HEAD_MAX))
		return ig_refuse(gs, s, fd, c, INFER_E_HEAD_SIZE);
	if (r < 4 || !infer_is((const char *)k->data + at + r - 4, 4, "\r\n\r\n"))
		return r < 0 ? r : 0; /* ended, maybe mid-head: nothing to answer */
	if (gs_tid() == 0)
		e = ig_check((const char *)k->data + at, (uint32_t)r, &k->q,
			     &k->w, &k->h);
	if (gs_bcast(e))
		return ig_refuse(gs, s, fd, c, (int)e);
	if (k->q.expect_continue && k->q.minor >= 1) /* RFC 9110 10.1.1 */
		gsrv_send_rate(gs, fd, INFER_CONTINUE, sizeof(INFER_CONTINUE) - 1,
			       c->timeout_us, IG_SEND_RATE);
	gs_sync();
	if (gs_tid() == 0)
		k->body = 1;
	gs_sync();
	return 1;
}

/*
 * One request of connection k: 1 answered, -EAGAIN not all here yet, 0
 * or a negative errno to close it.
 */
GSOCK_DEVICE long ig_request(struct gsock_dev gs, struct gsrv *s, int fd,
			     struct ig_conf *c, struct ig_conn *k)
{
	struct ig_buf *b = (struct ig_buf *)gsrv_buf(gs, s);
	uint32_t at = 0, px = 0, w = 0, h = 0, hl = 0;
	long r = k->body ? 1 : ig_head(gs, s, fd, c, k), e;

	if (r <= 0)
		return r;
	r = gsrv_recv_bytes(gs, fd, &k->lb, k->data, sizeof(k->data),
			    (uint32_t)k->q.content_length, &at, MSG_DONTWAIT, 0);
	if (r < 0 || (r == 0 && k->q.content_length))
		return r;
	e = infer_picture(k->data + at, (uint64_t)r, k->w, k->h, &w, &h, &px);
	if (e)
		return ig_refuse(gs, s, fd, c, (int)e);
	gs_sync();
	if (gs_tid() == 0) { /* the next request's time starts afresh */
		k->body = 0;
		k->since = 0;
		b->job = (struct espcn_job){ 0, 0, 0, (uint16_t)w, (uint16_t)h };
		b->in = k->data + at + px;
		hl = infer_reply_head(b->head, 200, 9ull * w * h, k->q.keep_alive,
				      3 * w, 3 * h);
		memcpy(b->out + INFER_REPLY_HEAD_MAX - hl, b->head, hl);
	}
	hl = (uint32_t)gs_bcast(hl);
	gsrv_group_start(gs, s, 1);
	ig_part(c, s, b, 0);
	r = gsrv_group_wait(gs, s);
	if (r < 0) {
		ig_refuse(gs, s, fd, c, INFER_E_UNAVAILABLE);
		return r;
	}
	r = gsrv_send_rate(gs, fd, b->out + INFER_REPLY_HEAD_MAX - hl,
			   hl + 9ull * w * h, c->timeout_us, IG_SEND_RATE);
	return r < 0 ? r : k->q.keep_alive ? 1 : 0;
}

/* Every request whose bytes are here; what becomes of the connection. */
GSOCK_DEVICE long ig_serve(struct gsock_dev gs, struct gsrv *s, int fd,
			   struct ig_conf *c)
{
	struct ig_conn *k = (struct ig_conn *)gsrv_state(gs, s);
	long r, served = 0;

	while ((r = ig_request(gs, s, fd, c, k)) > 0)
		served = 1;
	if (r != -EAGAIN)
		return r;
	if (gsrv_late(gs, s, &k->since, k->body || k->lb.have != k->lb.off,
		    c->timeout_us))
		return ig_refuse(gs, s, fd, c, INFER_E_TIMEOUT);
	return served ? 1 : -EAGAIN;
}

GSOCK_KERNEL_FIT(ig_kernel, gs, arg, ESPCN_THREADS, 2)
{
	struct gsrv *s = (struct gsrv *)arg;
	struct ig_conf *c = (struct ig_conf *)s->app;
	uint32_t seen = 0;
	int fd;

	if (gsrv_rank(gs, s)) { /* a helping block of the group */
		while (gsrv_group_next(gs, s, &seen) > 0) {
			ig_part(c, s, (struct ig_buf *)gsrv_buf(gs, s),
				gsrv_rank(gs, s));
			gsrv_group_done(gs, s);
		}
		return;
	}
	while ((fd = gsrv_next(gs, s)) >= 0)
		gsrv_done(gs, s, ig_serve(gs, s, fd, c));
}

static struct ig_conf conf = { NULL, INFER_TIMEOUT_MS * 1000L };
static const char *weights_path;

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10);

	if (opt == 'w') {
		weights_path = arg;
		return 0;
	}
	if (!*arg || *end || v <= 0 || v > (opt == 'k' ? 1024 : 86400000)) {
		fprintf(stderr, "%s: -%c takes a number from 1 to %d, not '%s'\n",
			app->name, opt, opt == 'k' ? 1024 : 86400000, arg);
		return EX_USAGE;
	}
	if (opt == 'k')
		app->group_blocks = (unsigned)v;
	else /* -T */
		conf.timeout_us = v * 1000;
	return 0;
}

/* The weights into device memory; the buffer for the group's scratch. */
static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	char err[300];
	int status;
	float *p = espcn_weights_open(weights_path, err, sizeof(err), &status);

	if (!p) {
		fprintf(stderr, "%s: %s\n", app->name, err);
		return status;
	}
	conf.weights = (const float *)gsock_dev_alloc(ctx, 4 * (size_t)ESPCN_NPARAMS);
	if (!conf.weights ||
	    gsock_memcpy(ctx, (void *)conf.weights, p, 4 * (size_t)ESPCN_NPARAMS)) {
		fprintf(stderr, "%s: out of device memory for the weights\n", app->name);
		free(p);
		return EX_OSERR;
	}
	free(p);
	s->bufsize = sizeof(struct ig_buf) + 4ull * ESPCN_SCRATCH * s->group_blocks;
	s->conn_size = sizeof(struct ig_conn);
	*(struct ig_conf *)s->app = conf;
	return 0;
}

static void teardown(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	(void)app;
	gsock_dev_free(ctx, (void *)((struct ig_conf *)s->app)->weights);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "weights", required_argument, NULL, 'w' },
		{ "group-blocks", required_argument, NULL, 'k' },
		{ "timeout", required_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 }
	};
	struct gsrv_app app = { 0 };

	app.name = "infer-gserver";
	app.kernel = (const void *)ig_kernel;
	app.listen = "7400";
	app.blocks = 32;
	app.per_block = 8;
	app.threads = ESPCN_THREADS;
	app.idle_ms = 60000;
	app.ring_size = 1 << 20;
	app.requests = "pictures";
	app.app_size = sizeof(conf);
	app.opts = "w:k:T:";
	app.longopts = opts;
	app.usage =
		"  -w, --weights FILE    the model's weights (infer-ref weights writes them)\n"
		"  -k, --group-blocks N  blocks that compute each picture (default 1)\n"
		"  -T, --timeout MS      bound on a request's arrival and on an answer's send\n"
		"                        (plus 1 s a MiB; default 5000)\n";
	app.option = option;
	app.setup = setup;
	app.teardown = teardown;
	app.detail = "ESPCN x3 over HTTP/1.1";
	return gsrv_main(&app, argc, argv);
}
