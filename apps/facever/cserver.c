/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU servers of face verification, one loop for both: built with
 * stage_cpu.c it is facever-pserver, the CPU-only server P; with
 * stage_cuda.cu it is facever-cserver, the CPU-managed GPU server C.
 *
 * Each thread has its own SO_REUSEPORT listener, epoll set (the CPU
 * servers' loop, apps/common/cpu_loop.c), memcached connection and
 * stage. A wake-up's complete requests form one batch:
 * their reference features come from memcached in one pipelined round,
 * the stage computes all their distances at once, and the answers go out
 * in request order. A client may leave up to CONN_OUT / 16 answers
 * unread; past that it is cut off.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sysexits.h>

#include "cpu_loop.h"
#include "fv_cpu.h"
#include "stage.h"

#define CONN_OUT 4096 /* answer bytes a connection may have unsent */

struct conn {
	struct cl_conn cl;
	size_t in_len, in_cap;
	uint8_t *in;
};

struct job {
	struct conn *c;
	uint32_t seq, id;
};

struct worker {
	struct cl_worker cl;
	struct fv_stage *st;
	struct mc mc;
	unsigned njobs;
	struct job jobs[FV_STAGE_JOBS];
	uint32_t ids[FV_STAGE_JOBS];
	int32_t status[FV_STAGE_JOBS];
	float dist[FV_STAGE_JOBS];
	uint64_t requests, matches, errors;
};

static const char *prog;
static const char *listen_at = "7100", *mc_at = "127.0.0.1:11211";
static float threshold = FV_THRESHOLD;

static void conn_answer(struct conn *c, uint32_t seq, int32_t status,
			float distance)
{
	struct fv_resp r = { FV_RESP_MAGIC, seq, status, distance };

	cl_put(&c->cl, &r, sizeof(r)); /* past CONN_OUT, c is cut off */
}

/* Fetch, compute and answer the batch; the connections stay alive. */
static void run_batch(struct cl_worker *cw)
{
	struct worker *wk = (struct worker *)cw;
	unsigned n = wk->njobs;

	if (!n)
		return;
	for (unsigned i = 0; i < n; i++)
		wk->ids[i] = wk->jobs[i].id;
	mc_get_feats(&wk->mc, wk->ids, n, fv_stage_stored(wk->st), wk->status);
	if (fv_stage_run(wk->st, n, wk->dist) < 0)
		for (unsigned i = 0; i < n; i++)
			wk->status[i] = FV_E_STORE;
	for (unsigned i = 0; i < n; i++) {
		int32_t s = wk->status[i];
		float d = s == 0 ? wk->dist[i] : 0.0f;

		if (s == 0)
			s = d <= threshold ? FV_MATCH : FV_NO_MATCH;
		wk->requests++;
		wk->matches += s == FV_MATCH;
		wk->errors += s < 0;
		wk->jobs[i].c->cl.pending--;
		conn_answer(wk->jobs[i].c, wk->jobs[i].seq, s, d);
	}
	for (unsigned i = 0; i < n; i++)
		if (wk->jobs[i].c->cl.out_len || wk->jobs[i].c->cl.closing)
			cl_flush(&wk->jobs[i].c->cl);
	wk->njobs = 0;
}

/* Add c's complete requests to the batch (running it when it fills). */
static void conn_take(struct worker *wk, struct conn *c)
{
	size_t pos = 0;

	while (!c->cl.closing && c->in_len - pos >= sizeof(struct fv_req)) {
		struct fv_req q;
		size_t need;
		uint8_t *pic;

		memcpy(&q, c->in + pos, sizeof(q));
		if (q.magic != FV_REQ_MAGIC || !fv_side_ok(q.w) ||
		    !fv_side_ok(q.h)) {
			if (c->cl.pending) { /* its earlier requests answer first */
				run_batch(&wk->cl);
				if (c->cl.dead)
					return;
			}
			conn_answer(c, q.seq,
				    q.magic != FV_REQ_MAGIC ? FV_E_PROTO :
							      FV_E_SIZE,
				    0.0f);
			c->cl.closing = 1;
			break;
		}
		need = sizeof(q) + (size_t)q.w * q.h;
		if (c->in_len - pos < need)
			break;
		pic = fv_stage_picture(wk->st, wk->njobs, q.w, q.h);
		if (!pic) {
			run_batch(&wk->cl);
			if (c->cl.dead)
				return;
			pic = fv_stage_picture(wk->st, 0, q.w, q.h);
		}
		memcpy(pic, c->in + pos + sizeof(q), (size_t)q.w * q.h);
		wk->jobs[wk->njobs++] = (struct job){ c, q.seq, q.id };
		c->cl.pending++;
		pos += need;
	}
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
}

/* Read what c has; its requests join the batch. */
static void conn_read(struct cl_conn *cc)
{
	struct worker *wk = (struct worker *)cc->wk;
	struct conn *c = (struct conn *)cc;

	for (;;) {
		ssize_t n;

		if (c->in_len == c->in_cap) {
			size_t cap = c->in_cap * 2;
			uint8_t *in;

			if (cap > 2 * (sizeof(struct fv_req) + FV_MAX_PIXELS)) {
				conn_take(wk, c);
				if (c->in_len == c->in_cap)
					break; /* the batch must drain first */
				continue;
			}
			in = realloc(c->in, cap);
			if (!in) {
				cl_kill(cc);
				return;
			}
			c->in = in;
			c->in_cap = cap;
		}
		n = recv(cc->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			conn_take(wk, c); /* what came before the end */
			cc->closing = 1;
			break;
		}
		c->in_len += (size_t)n;
	}
	if (!cc->closing)
		conn_take(wk, c);
	if (cc->closing && !cc->dead && !cc->pending)
		cl_flush(cc); /* else the batch's answers flush it */
}

static int conn_accepted(struct cl_conn *cc)
{
	struct conn *c = (struct conn *)cc;

	c->in = malloc(c->in_cap = 65536);
	return c->in ? 0 : -1;
}

static void conn_freed(struct cl_conn *cc)
{
	free(((struct conn *)cc)->in);
}

static const struct cl_ops ops = {
	.conn_size = sizeof(struct conn),
	.out_max = CONN_OUT,
	.accepted = conn_accepted,
	.read = conn_read,
	.wakeup = run_batch,
	.freed = conn_freed,
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [options]\n"
		"  -l, --listen ADDR      HOST:PORT, [V6]:PORT or PORT (default 7100); the port is\n"
		"                         always shared (SO_REUSEPORT), also with a facever-gserver -P\n"
		"  -M, --memcached ADDR   where the reference features are (default 127.0.0.1:11211)\n"
		"  -t, --threads N        server threads (default 1)\n"
		"  -T, --threshold D      largest chi-square distance of a match (default %.2f)\n",
		prog, FV_THRESHOLD);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "memcached", required_argument, NULL, 'M' },
		{ "threads", required_argument, NULL, 't' },
		{ "threshold", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int threads = 1, opt, r;
	struct worker *wk;
	uint64_t reqs = 0, conns = 0, matches = 0, errors = 0;
	char err[256];

	prog = strcmp(fv_stage_name(), "cpu") ? "facever-cserver" :
						"facever-pserver";
	while ((opt = getopt_long(argc, argv, "l:M:t:T:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_at = optarg;
			break;
		case 'M':
			mc_at = optarg;
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 'T':
			threshold = strtof(optarg, NULL);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (threads < 1 || threads > 1024 || !(threshold > 0)) {
		fprintf(stderr,
			"%s: threads (1..1024) and threshold must be positive\n",
			prog);
		return EX_USAGE;
	}
	wk = calloc((size_t)threads, sizeof(*wk));
	if (!wk)
		return EX_OSERR;
	for (int i = 0; i < threads; i++) {
		r = cl_listen(&wk[i].cl, &ops, prog, listen_at);
		if (r)
			return r;
		wk[i].st = fv_stage_open(err, sizeof(err));
		if (!wk[i].st) {
			fprintf(stderr, "%s: %s\n", prog, err);
			return EX_UNAVAILABLE;
		}
		mc_init(&wk[i].mc, mc_at);
	}
	printf("%s: listening on %s (%d threads, %s stage, memcached %s)\n",
	       prog, listen_at, threads, fv_stage_name(), mc_at);
	fflush(stdout);
	cl_serve(&wk[0].cl, sizeof(*wk), (unsigned)threads);
	for (int i = 0; i < threads; i++) {
		reqs += wk[i].requests;
		conns += wk[i].cl.conns_seen;
		matches += wk[i].matches;
		errors += wk[i].errors;
	}
	printf("%s: served %llu requests on %llu connections (%llu matches, %llu errors)\n",
	       prog, (unsigned long long)reqs, (unsigned long long)conns,
	       (unsigned long long)matches, (unsigned long long)errors);
	return 0;
}
