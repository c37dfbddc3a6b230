/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mm-gserver: the g-call matrix product server G, on the server layer
 * (gsock-server(3)), kernel and host program in one file (cc for the host
 * backend, nvcc -x cu for the GPU). Blocks form groups of --group-blocks:
 * a group's serving block receives A and B straight into the group's
 * device buffer, hands the product to the group, computes its share of
 * the tiles, waits for the others and sends C from device memory. No CPU
 * code is on this path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "gsock.h"
#include "gsock_server.cuh"
#include "mm.h"

struct mm_conf {
	uint32_t max_n; /* the largest side taken */
	long timeout_us; /* bound on each wait for a request's rest, a reply */
};

/* Block r of a group of k: its tiles of the product of side n at A. */
GSOCK_DEVICE void mm_share(float *A, uint32_t n, uint32_t r, uint32_t k)
{
	GS_SHARED float sa[MM_BK * MM_TILE], sb[MM_BK * MM_TILE];

	for (uint32_t t = r; t < mm_tiles(n); t += k)
		mm_tile(A, A + (size_t)n * n, A + 2 * (size_t)n * n, n, t, sa,
			sb);
}

/* A request header's body length (A and B), or why it is refused. */
GSOCK_DEVICE long mm_body_len(const void *hdr, void *ctx)
{
	const struct mm_hdr *h = (const struct mm_hdr *)hdr;
	uint32_t n = h->n_or_status;

	if (h->magic != MM_REQ_MAGIC)
		return -EPROTO;
	if (n == 0 || n > ((const struct mm_conf *)ctx)->max_n)
		return -EMSGSIZE;
	return 2 * (long)n * n * (long)sizeof(float);
}

/* The serving block: one request; a refused one is answered, then closes. */
GSOCK_DEVICE long mm_request(struct gsock_dev gs, struct gsrv *s, int fd,
			     struct mm_conf *m)
{
	struct mm_hdr *h = (struct mm_hdr *)gsrv_buf(gs, s);
	float *A = (float *)(h + 1);
	long r = gsrv_recv_msg(gs, fd, h, s->bufsize, sizeof(*h), mm_body_len,
			       m, MSG_DONTWAIT, m->timeout_us);
	int32_t status = r == -EPROTO	? MM_E_PROTO :
			 r == -EMSGSIZE ? MM_E_SIZE :
					  MM_OK;
	uint32_t n = h->n_or_status, seq = h->seq;

	if (r <= 0 && status == MM_OK)
		return r; /* nothing yet, the end, or an error */
	if (status == MM_OK) {
		gsrv_group_start(gs, s, n);
		mm_share(A, n, 0, s->group_blocks);
		r = gsrv_group_wait(gs, s);
		if (r < 0)
			return r;
	}
	gs_sync(); /* every thread read h */
	if (gs_tid() == 0)
		*h = (struct mm_hdr){ MM_RESP_MAGIC, seq, (uint32_t)status, n };
	gs_sync();
	r = gsrv_send_all(gs, fd, h, sizeof(*h), m->timeout_us);
	if (r > 0 && status == MM_OK)
		r = gsrv_send_all(gs, fd, A + 2 * (size_t)n * n,
				  (uint64_t)n * n * sizeof(float),
				  m->timeout_us);
	return status == MM_OK ? r : status == MM_E_PROTO ? -EPROTO : -EMSGSIZE;
}

GSOCK_KERNEL_FIT(mm_kernel, gs, arg, MM_THREADS, 2)
{
	struct gsrv *s = (struct gsrv *)arg;
	struct mm_conf *m = (struct mm_conf *)s->app;
	float *A = (float *)((struct mm_hdr *)gsrv_buf(gs, s) + 1);
	uint32_t seen = 0;
	long n;
	int fd;

	if (gsrv_rank(gs, s)) { /* a helping block of the group */
		while ((n = gsrv_group_next(gs, s, &seen)) > 0) {
			mm_share(A, (uint32_t)n, gsrv_rank(gs, s),
				 s->group_blocks);
			gsrv_group_done(gs, s);
		}
		return;
	}
	while ((fd = gsrv_next(gs, s)) >= 0)
		gsrv_done(gs, s, mm_request(gs, s, fd, m));
}

static struct mm_conf conf = { 1024, 5000000 };

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10);

	if (!*arg || *end || v <= 0 || (opt == 'N' && v > 8192) ||
	    (opt == 'k' && v > 1024)) {
		fprintf(stderr,
			"%s: -%c takes a number from 1 to %d, not '%s'\n",
			app->name, opt,
			opt == 'N' ? 8192 :
			opt == 'k' ? 1024 :
				     1 << 30,
			arg);
		return EX_USAGE;
	}
	if (opt == 'N')
		conf.max_n = (uint32_t)v;
	else if (opt == 'k')
		app->group_blocks = (unsigned)v;
	else /* -w */
		conf.timeout_us = v * 1000;
	return 0;
}

static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	(void)ctx;
	if (!strcmp(gsock_backend(), "cuda") && app->threads != MM_THREADS) {
		fprintf(stderr, "%s: the tile kernel runs %d threads a block\n",
			app->name, MM_THREADS);
		return EX_USAGE;
	}
	s->bufsize = sizeof(struct mm_hdr) + 3 * conf.max_n * conf.max_n * 4;
	*(struct mm_conf *)s->app = conf;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "group-blocks", required_argument, NULL, 'k' },
		{ "max-n", required_argument, NULL, 'N' },
		{ "timeout", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 }
	};
	struct gsrv_app app = { 0 };

	app.name = "mm-gserver";
	app.kernel = (const void *)mm_kernel;
	app.listen = "7200";
	app.blocks = 8;
	app.group_blocks = 16;
	app.threads = MM_THREADS;
	app.ring_size = 1 << 20;
	app.requests = "products";
	app.app_size = sizeof(conf);
	app.opts = "k:N:w:";
	app.longopts = opts;
	app.usage =
		"  -k, --group-blocks N  blocks that compute each product (default 16);\n"
		"                        blocks x group-blocks must fit on the GPU at once\n"
		"  -N, --max-n N         largest side taken (default 1024)\n"
		"  -w, --timeout MS      bound on a request's matrices (default 5000)\n";
	app.option = option;
	app.setup = setup;
	return gsrv_main(&app, argc, argv);
}
