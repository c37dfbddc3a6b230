/* SPDX-License-Identifier: Apache-2.0 */
/*
 * facever-gserver: the g-call face verification server G, on the server
 * layer (gsock-server(3)), kernel and host program in one file (cc for
 * the host backend, nvcc -x cu for the GPU). A serving block takes a
 * request's header, asks memcached for the claimed person's reference
 * features through its pipe (pipe blocks batch many blocks' asks into
 * one write), receives the picture and computes its features while the
 * answer travels, compares, and replies. No CPU code is on this path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "fv.h"
#include "gsock.h"
#include "gsock_server.cuh"

#define FV_THREADS 256 /* at most, two blocks on a multiprocessor */

enum { FV_WAIT, FV_PIC, FV_COMPUTE, FV_ANSWER, FV_REPLY }; /* gsrv_step */

struct fv_conf {
	float threshold;
	long timeout_us; /* bound on a request's picture, its answer */
};

/* A serving block's buffer (gsrv_buf). */
struct fv_buf {
	struct fv_req req;
	struct fv_resp resp;
	float query[FV_NFEAT], stored[FV_NFEAT];
	uint8_t img[FV_MAX_PIXELS];
};

/* A request header is all gsrv_recv_msg takes: 0, or why it is refused. */
GSOCK_DEVICE long fv_check(const void *hdr, void *ctx)
{
	const struct fv_req *q = (const struct fv_req *)hdr;

	(void)ctx;
	if (q->magic != FV_REQ_MAGIC)
		return -EPROTO;
	return fv_side_ok(q->w) && fv_side_ok(q->h) ? 0 : -EMSGSIZE;
}

/* The verdict on the picture in b, whose features were asked for (r). */
GSOCK_DEVICE int32_t fv_verdict(struct gsock_dev gs, struct gsrv *s,
				struct fv_buf *b, struct fv_conf *c, long r,
				float *d)
{
	GS_SHARED uint32_t hist[FV_NFEAT], cellsum[FV_GRID * FV_GRID];
	GS_SHARED float scratch[FV_THREADS];

	fv_features(b->img, b->req.w, b->req.h, b->query, hist, cellsum);
	gsrv_step(gs, s, FV_COMPUTE);
	if (r == 0)
		r = gsrv_pipe_wait(gs, s, 3 * c->timeout_us);
	gsrv_step(gs, s, FV_ANSWER);
	if (r != FV_FEAT_BYTES)
		return r == -ENOENT ? FV_E_UNKNOWN : FV_E_STORE;
	*d = fv_chi2(b->query, b->stored, scratch);
	gsrv_count(gs, s, *d <= c->threshold);
	return *d <= c->threshold ? FV_MATCH : FV_NO_MATCH;
}

/* One request; a refused one is answered, then the connection closes. */
GSOCK_DEVICE long fv_request(struct gsock_dev gs, struct gsrv *s, int fd,
			     struct fv_conf *c)
{
	struct fv_buf *b = (struct fv_buf *)gsrv_buf(gs, s);
	long r = gsrv_recv_msg(gs, fd, &b->req, sizeof(b->req),
			       sizeof(b->req), fv_check, NULL, MSG_DONTWAIT,
			       c->timeout_us);
	int32_t status = r == -EPROTO ? FV_E_PROTO :
			 r == -EMSGSIZE ? FV_E_SIZE :
					  0;
	uint32_t n = (uint32_t)b->req.w * b->req.h;
	char key[16];
	float d = 0.0f;

	if (r <= 0 && !status)
		return r; /* nothing yet, the end, or an error */
	if (!status) {
		/* asked now, the answer travels while the picture comes in */
		long asked = gsrv_mc_get(gs, s, key, fv_key(key, b->req.id),
					 b->stored, FV_FEAT_BYTES);

		gsrv_step(gs, s, FV_WAIT);
		r = gsrv_recv_all(gs, fd, b->img, n, c->timeout_us);
		if (r != (long)n)
			return r < 0 ? r : -ECONNRESET;
		gsrv_step(gs, s, FV_PIC);
		status = fv_verdict(gs, s, b, c, asked, &d);
	}
	if (gs_tid() == 0)
		b->resp = (struct fv_resp){ FV_RESP_MAGIC, b->req.seq, status,
					    d };
	gs_sync();
	r = gsrv_send_all(gs, fd, &b->resp, sizeof(b->resp), c->timeout_us);
	gsrv_step(gs, s, FV_REPLY);
	return status == FV_E_PROTO ? -EPROTO :
	       status == FV_E_SIZE  ? -EMSGSIZE :
				      r;
}

GSOCK_KERNEL_FIT(fv_kernel, gs, arg, FV_THREADS, 2)
{
	struct gsrv *s = (struct gsrv *)arg;
	int fd;

	if (gsrv_pipe_block(gs, s)) {
		gsrv_mc_serve(gs, s);
		return;
	}
	while ((fd = gsrv_next(gs, s)) >= 0)
		gsrv_done(gs, s,
			  fv_request(gs, s, fd, (struct fv_conf *)s->app));
}

static struct fv_conf conf = { FV_THRESHOLD, 2000000 };

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (opt == 'M') {
		app->backend = arg;
		return 0;
	}
	if (!*arg || *end || !(v > 0) || (opt != 'T' && v != (long)v) ||
	    (opt == 'F' && v > 1024) || v > 86400000) {
		fprintf(stderr, "%s: -%c takes a positive %s, not '%s'\n",
			app->name, opt, opt == 'T' ? "number" : "whole number",
			arg);
		return EX_USAGE;
	}
	if (opt == 'F')
		app->pipes = (unsigned)v;
	else if (opt == 'T')
		conf.threshold = (float)v;
	else /* -w */
		app->pipe_timeout_ms = (unsigned)v;
	return 0;
}

static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	(void)ctx;
	if (app->threads > FV_THREADS || s->bufsize < sizeof(struct fv_buf)) {
		fprintf(stderr, "%s: at most %d threads, at least %zu bytes a block\n",
			app->name, FV_THREADS, sizeof(struct fv_buf));
		return EX_USAGE;
	}
	conf.timeout_us = app->pipe_timeout_ms * 1000L;
	*(struct fv_conf *)s->app = conf;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "memcached", required_argument, NULL, 'M' },
		{ "fetchers", required_argument, NULL, 'F' },
		{ "threshold", required_argument, NULL, 'T' },
		{ "timeout", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 }
	};
	static const char *const steps[] = { "header", "picture", "features",
					     "memcached", "reply", NULL };
	struct gsrv_app app = { 0 };

	app.name = "facever-gserver";
	app.kernel = (const void *)fv_kernel;
	app.listen = "7100";
	app.blocks = 64;
	app.threads = FV_THREADS;
	app.ring_size = 1 << 17;
	app.bufsize = sizeof(struct fv_buf);
	app.backend = "127.0.0.1:11211";
	app.pipe_timeout_ms = 2000;
	app.counted = "matches";
	app.steps = steps;
	app.app_size = sizeof(conf);
	app.opts = "M:F:T:w:";
	app.longopts = opts;
	app.usage =
		"  -M, --memcached ADDR  where the reference features are (default 127.0.0.1:11211)\n"
		"  -F, --fetchers N      pipe blocks that batch the memcached reads (default 8,\n"
		"                        or -b if fewer)\n"
		"  -T, --threshold D     largest chi-square distance of a match (default 2.00)\n"
		"  -w, --timeout MS      bound on a request's picture and a memcached reply\n"
		"                        (default 2000)\n";
	app.option = option;
	app.setup = setup;
	app.detail = "memcached through pipe blocks";
	return gsrv_main(&app, argc, argv);
}
