/* SPDX-License-Identifier: Apache-2.0 */
/*
 * infer-gserver-graph: infer-gserver's protocol (infer.h) served by CUDA
 * graphs that launch each other from the device: one graph launch a
 * turn, and no CPU code between a request and its answer.
 *
 *   node            does                                      blocks
 *   receive         gsrv_next_by: accept, read, check heads;  -b
 *                   whole requests become the turn's jobs
 *   im2col, SGEMM   the three convolutions of every picture   grid, cuBLAS
 *   (three times)   of the turn at once
 *   shuffle         the outputs into their answers            grid
 *   send            each block answers its jobs (pictures,    -b
 *                   refusals), then one thread tail-launches
 *                   the next turn's graph
 *
 * A graph launched from the device may hold cuBLAS's kernels but no
 * conditional node (CUDA 13 refuses to instantiate one for device
 * launch), and a captured SGEMM keeps the sizes it was captured with.
 * So one graph is captured for each batch size of igg_caps (pixels of
 * all the turn's pictures, -G sizes); the receive node takes what its graph's size
 * holds, a picture that does not fit waits, and the send node launches
 * the graph whose size holds what came and what waits, with room kept
 * for the waiting pictures: new ones cannot take it, so a picture waits
 * one turn (more only when the waiting ones together pass the largest
 * graph).
 *
 * Every block's sends are part of the turn, which waits for the slowest:
 * so an answer (or a 100 Continue) gets IGG_SEND_US plus its bytes at
 * IGG_SEND_RATE to leave, not -T, and a reader that takes it slower is
 * closed as a slow reader (its error counted, -ETIMEDOUT). A slow or
 * dead reader costs every connection one turn of that much, at most,
 * instead of -T plus a second a MiB.
 *
 * The model is espcn_cublas.cuh's, which C's cuBLAS stage runs too.
 *
 * Between launches everything lives in device memory: the server
 * layer's blocks and connections (gsrv_next_by goes on where it
 * stopped), the jobs, the planes, the turn's counters. SIGINT and
 * SIGTERM (gsock_stop) make the receive node's gpoll return -ECANCELED:
 * that turn answers nothing and launches no other, and the host thread,
 * asleep in cudaStreamSynchronize, wakes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>

#include "espcn.h"
#include "espcn_cublas.cuh"
#include "espcn_gpu.h" /* ESPCN_THREADS */
#include "ghttp.cuh"
#include "gsock.h"

#define IGG_GAP 32 /* plane pixels before a picture's: its answer's head */
#define IGG_SLICE_NS 20000 /* an idle receive block looks at the others */
#define IGG_AGAIN (-1) /* a job's e: no room this turn, look again */
#define IGG_SIZES 32 /* graph sizes at most (-G) */
#ifndef IGG_SIZES_DEFAULT
#define IGG_SIZES_DEFAULT 17
#endif
#define IGG_SIZE_MIN (1u << 12)
#define IGG_STR_(x) #x
#define IGG_STR(x) IGG_STR_(x)
#define IGG_SEND_US 10000 /* an answer's time to leave, besides its bytes' */
#define IGG_SEND_RATE (64u << 20) /* the slowest reader kept, bytes a second */
/* The model's ranges run side by side in a turn (ecb_model): streams at capture. */
#ifndef IGG_BRANCHES
#define IGG_BRANCHES 4
#endif
#define IGG_BLAS_WS (32u << 20) /* cuBLAS's workspace, a branch */
/*
 * Batch sizes, pixels (-G of them): 4 Ki up to the largest, which holds a
 * 1024x1024 picture, each a constant factor above the one before (1.42
 * for 17): a turn of more than 4 Ki pixels computes at most that factor
 * more than it needs (what it took, and the room kept for the pictures
 * that wait).
 */
typedef char igg_sizes_fit[IGG_SIZES_DEFAULT >= 2 && IGG_SIZES_DEFAULT <= IGG_SIZES ? 1 : -1];
static uint32_t igg_caps[IGG_SIZES];
static int igg_nsizes = IGG_SIZES_DEFAULT;

/*
 * One of the turn's jobs: a picture to answer, a refusal, or IGG_AGAIN.
 * A picture job's picture is the model's of the same index (m.pics):
 * its bytes in its connection's buffer, plane pixels [at - IGG_GAP, at
 * + w h) its own, the gap its answer's head.
 */
struct igg_job {
	int32_t fd;
	int32_t e; /* INFER_OK, an infer_err, or IGG_AGAIN */
	uint32_t hl; /* its answer's head: hl bytes before its pixels */
	uint32_t keep; /* the connection stays open after the answer */
};

/*
 * Where the turns' time goes (gs_now_ns stamps, summed over the turns):
 * the receive node from its first block's start to the turn's first
 * job (the wait: the first turn's includes the wait for the first
 * client), then to its last block's end (the gathering), the model's
 * nodes to the send node's first block, block 0's sends,
 * and from there to the next turn's first receive block (the other
 * blocks' sends, the graph's end, the tail launch). The host prints the
 * means at the end. A turn whose stamps are out of order (a send block
 * that started only after block 0 summed the turn: more blocks than fit
 * at once) is left out of the sums.
 */
struct igg_clock {
	unsigned long long recv0, first, recv1, send0; /* this turn's stamps */
	unsigned long long send_end; /* last turn's block 0, after its sends */
	unsigned long long wait, gather, model, send, next; /* sums, ns */
	unsigned long long timed; /* turns summed */
	unsigned long long nexts; /* gaps summed in next */
	unsigned long long jobs, pixels, cap; /* sums: jobs, pixels taken, graph sizes */
};

/* What the turns share (device memory). */
struct igg_turn {
	uint32_t pixels; /* receive: plane pixels taken this turn */
	uint32_t reserved; /* send: plane pixels kept for last turn's waiters */
	uint32_t oldest; /* send: the turn the oldest waiting pictures began to wait */
	uint32_t reserved_old; /* send: plane pixels kept for those (<= reserved) */
	/* receive: the oldest waiting pictures' turn (high half) and pixels (low), or ~0 */
	unsigned long long oldest_next;
	uint32_t jobs; /* receive: jobs this turn, every block's */
	int32_t end; /* receive: the error that ends the server, or 0 */
	int32_t launch_err; /* send: the cudaGraphLaunch that failed (the host's) */
	uint32_t cap[IGG_SIZES]; /* igg_caps */
	uint32_t sizes; /* igg_nsizes */
	uint64_t turns; /* send: turns served */
	unsigned long long want; /* receive: plane pixels of the pictures that wait */
	cudaGraphExec_t exec[IGG_SIZES]; /* each size's graph */
	struct igg_clock clock; /* where the turns' time goes */
};

/* The application's part of struct gsrv (s->app); every pointer device memory. */
struct igg_conf {
	long timeout_us; /* bound on a request's arrival */
	struct igg_turn *turn;
	struct igg_job *jobs; /* per_block a block */
	uint32_t *njobs; /* a block's jobs this turn */
	struct ecb_batch m; /* the model's: a job's picture, turn->pixels */
};

/* The receive and send nodes' argument: the server, its graph's size. */
struct igg_arg {
	struct gsrv *s;
	uint32_t cap;
	uint32_t pad;
};

/* A connection's state (gsrv_state): its input, how far its request is. */
struct igg_conn {
	struct gsrv_lines lb;
	struct gsrv_http q; /* the head whose body is awaited */
	uint64_t since; /* when its request began to wait for bytes; 0 */
	uint32_t body; /* the head is in: the body is awaited */
	uint32_t job; /* a job of this turn: nothing more until it is sent */
	uint32_t pic; /* a picture waits for room: pixels at data + at */
	uint32_t wt; /* the turn its picture began to wait */
	uint32_t at, pw, ph;
	uint32_t w, h; /* X-Width, X-Height (0: a PGM) */
	uint8_t data[INFER_BODY_MAX];
};

/* ---- the receive node ---- */

/*
 * Send n bytes within the turn's budget (IGG_SEND_US, and n bytes at
 * IGG_SEND_RATE), so that a slow reader cannot hold up the turn of
 * every block: n or a negative errno (-ETIMEDOUT: a slow reader).
 */
GSOCK_DEVICE long igg_send_bytes(struct gsock_dev gs, int fd, const void *p,
				 uint64_t n)
{
	uint64_t by = (uint64_t)gs_bcast((long)gs_now_ns()) +
		      IGG_SEND_US * 1000ull +
		      n * (1000000000ull / IGG_SEND_RATE);

	return gsrv_send_by(gs, fd, p, n, IGG_SEND_US, by);
}

/* Thread 0: a job of this block for fd (the block's next); its index. */
GSOCK_DEVICE uint32_t igg_add_t0(struct gsock_dev gs, struct gsrv *s,
				 struct igg_conf *c, struct igg_conn *k, int fd,
				 int e)
{
	uint32_t b = gs_bid(), i = b * s->per_block + c->njobs[b]++;

	c->jobs[i] = (struct igg_job){ 0 };
	c->jobs[i].fd = fd;
	c->jobs[i].e = e;
	k->job = 1;
	if (!atomicAdd(&c->turn->jobs, 1u))
		c->turn->clock.first = gs_now_ns();
	return i;
}

/* A job that is no picture (a refusal, IGG_AGAIN); -EAGAIN keeps fd. */
GSOCK_DEVICE long igg_job(struct gsock_dev gs, struct gsrv *s,
			  struct igg_conf *c, int fd, int e)
{
	gs_sync();
	if (gs_tid() == 0)
		igg_add_t0(gs, s, c, (struct igg_conn *)gsrv_state(gs, s), fd, e);
	gs_sync();
	return -EAGAIN;
}

/*
 * Thread 0: a picture of `need` pixels that began to wait in turn wt
 * waits on; turn->oldest_next keeps the oldest such turn and the pixels
 * of the pictures that began to wait in it.
 */
GSOCK_DEVICE void igg_oldest_t0(struct igg_turn *t, uint32_t wt, uint32_t need)
{
	unsigned long long cur = *(volatile unsigned long long *)&t->oldest_next;
	unsigned long long v, old;

	for (;;) {
		uint32_t cwt = (uint32_t)(cur >> 32);

		if (cur == ~0ull || (int32_t)(wt - cwt) < 0)
			v = (unsigned long long)wt << 32 | need;
		else if (wt == cwt) /* the pixels saturate: many blocks, large pictures */
			v = (uint32_t)cur > ~0u - need ? cur | 0xffffffffull : cur + need;
		else
			return;
		old = atomicCAS(&t->oldest_next, cur, v);
		if (old == cur)
			return;
		cur = old;
	}
}

/*
 * k's picture into the planes if this graph's size still holds it: a job
 * whose plane pixels say whose they are and whose answer's head is
 * written; else a job IGG_AGAIN, and the next turn's graph holds it.
 * Room goes by age: a new picture leaves turn->reserved free for all the
 * ones that waited (waited), and one that waited leaves
 * turn->reserved_old free for the ones that have waited longest, so
 * that no picture loses turn after turn to others that the blocks
 * happen to look at first.
 */
GSOCK_DEVICE long igg_picture(struct gsock_dev gs, struct gsrv *s,
			      struct igg_conf *c, struct igg_conn *k, int fd,
			      uint32_t cap, int waited)
{
	struct igg_turn *t = c->turn;
	uint32_t need = IGG_GAP + k->pw * k->ph, kept = t->reserved;
	long off = -1, i = 0;

	if (waited && k->wt != t->oldest)
		kept = t->reserved_old;
	if (!waited || k->wt != t->oldest)
		cap = kept < cap ? cap - kept : 0;
	gs_sync();
	if (gs_tid() == 0) {
		uint32_t cur = *(volatile uint32_t *)&c->turn->pixels, old;

		while (cur + need <= cap &&
		       (old = atomicCAS(&c->turn->pixels, cur, cur + need)) != cur)
			cur = old;
		if (cur + need > cap) {
			if (!waited)
				k->wt = (uint32_t)t->turns;
			atomicAdd(&c->turn->want, (unsigned long long)need);
			igg_oldest_t0(t, k->wt, need);
			igg_add_t0(gs, s, c, k, fd, IGG_AGAIN);
		} else {
			struct igg_job *j;
			struct ecb_pic *p;
			char head[INFER_REPLY_HEAD_MAX];

			off = cur;
			i = igg_add_t0(gs, s, c, k, fd, INFER_OK);
			j = &c->jobs[i];
			p = &c->m.pics[i];
			p->in = k->data + k->at;
			p->at = cur + IGG_GAP;
			p->w = k->pw;
			p->h = k->ph;
			j->keep = k->q.keep_alive;
			j->hl = infer_reply_head(head, 200, 9ull * p->w * p->h,
						 j->keep, 3 * p->w, 3 * p->h);
			memcpy(c->m.out + 9ull * p->at - j->hl, head, j->hl);
			k->pic = 0;
		}
	}
	off = gs_bcast(off);
	i = gs_bcast(i);
	for (uint32_t p = gs_tid(); off >= 0 && p < need; p += gs_bdim())
		c->m.owner[off + p] = (uint32_t)i;
	gs_sync();
	return -EAGAIN;
}

/* Bytes of a request wait: 408 past -T, else a wake-up at -T. */
GSOCK_DEVICE long igg_wait(struct gsock_dev gs, struct gsrv *s,
			   struct igg_conf *c, struct igg_conn *k, int fd)
{
	gs_sync();
	if (ig_late(gs, s, &k->since, k->body || k->lb.have != k->lb.off,
		    c->timeout_us))
		return igg_job(gs, s, c, fd, INFER_E_TIMEOUT);
	return -EAGAIN;
}

/*
 * Connection fd, handed out: read what came of its next request; a
 * whole one becomes a job (its picture, or its refusal). -EAGAIN keeps
 * it, 0 or a negative errno closes it (ended, maybe mid-request:
 * nothing to answer).
 */
GSOCK_DEVICE long igg_read(struct gsock_dev gs, struct gsrv *s,
			   struct igg_conf *c, int fd, uint32_t cap)
{
	struct igg_conn *k = (struct igg_conn *)gsrv_state(gs, s);
	uint32_t at = 0, w = 0, h = 0, px = 0;
	long r, e = 0;

	if (k->job) /* answered by this turn's send node; its bytes wait */
		return -EAGAIN;
	if (k->pic) /* it waited for room */
		return igg_picture(gs, s, c, k, fd, cap, 1);
	if (!k->body) {
		r = gsrv_recv_until(gs, fd, &k->lb, k->data, sizeof(k->data),
				    "\r\n\r\n", 4, &at, MSG_DONTWAIT, 0);
		if (r == -EMSGSIZE || r > INFER_HEAD_MAX ||
		    (r == -EAGAIN && k->lb.have - k->lb.off > INFER_HEAD_MAX))
			return igg_job(gs, s, c, fd, INFER_E_HEAD_SIZE);
		if (r == -EAGAIN)
			return igg_wait(gs, s, c, k, fd);
		if (r < 4 || !infer_is((const char *)k->data + at + r - 4, 4, "\r\n\r\n"))
			return r < 0 ? r : 0;
		if (gs_tid() == 0)
			e = ig_check((const char *)k->data + at, (uint32_t)r,
				     &k->q, &k->w, &k->h);
		if (gs_bcast(e))
			return igg_job(gs, s, c, fd, (int)e);
		if (k->q.expect_continue && k->q.minor >= 1) { /* RFC 9110 10.1.1 */
			r = igg_send_bytes(gs, fd, INFER_CONTINUE,
					   sizeof(INFER_CONTINUE) - 1);
			if (r < 0)
				return r;
		}
		gs_sync();
		if (gs_tid() == 0)
			k->body = 1;
		gs_sync();
	}
	r = gsrv_recv_bytes(gs, fd, &k->lb, k->data, sizeof(k->data),
			    (uint32_t)k->q.content_length, &at, MSG_DONTWAIT, 0);
	if (r == -EAGAIN)
		return igg_wait(gs, s, c, k, fd);
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
		k->pic = !e;
	}
	if (gs_bcast(e))
		return igg_job(gs, s, c, fd, (int)e);
	return igg_picture(gs, s, c, k, fd, cap, 0);
}

/* Whether the turn has a job, or has ended: a block that waits stops. */
GSOCK_DEVICE int igg_turn_over(struct igg_conf *c)
{
	long v = 0;

	if (gs_tid() == 0)
		v = *(volatile uint32_t *)&c->turn->jobs ||
		    *(volatile int32_t *)&c->turn->end;
	return (int)gs_bcast(v);
}

/*
 * The receive node: each block serves its connections until the turn
 * has a job (any block's), then returns; an idle block waits in slices
 * of IGG_SLICE_NS so that it sees another block's job. gsock_stop ends
 * every block's gpoll at once (-ECANCELED): the turn's end.
 */
GSOCK_KERNEL_FIT(igg_recv, gs, arg, ESPCN_THREADS, 1)
{
	struct igg_arg *a = (struct igg_arg *)arg;
	struct gsrv *s = a->s;
	struct igg_conf *c = (struct igg_conf *)s->app;
	struct igg_clock *k = &c->turn->clock;
	uint64_t by = (uint64_t)gs_bcast((long)gs_now_ns()) + IGG_SLICE_NS;

	if (gs_tid() == 0) {
		atomicMin(&k->recv0, (unsigned long long)(by - IGG_SLICE_NS));
		if (gs_bid() == 0 && k->send_end) {
			k->next += by - IGG_SLICE_NS - k->send_end;
			k->nexts++;
			k->send_end = 0;
		}
	}
	for (;;) {
		int fd = gsrv_next_by(gs, s, by);

		if (fd >= 0) {
			gsrv_done(gs, s, igg_read(gs, s, c, fd, a->cap));
			if (igg_turn_over(c))
				by = 1; /* what is ready, then return */
			continue;
		}
		if (fd != -EAGAIN) {
			if (gs_tid() == 0)
				atomicCAS((unsigned *)&c->turn->end, 0u, (unsigned)fd);
			break;
		}
		if (igg_turn_over(c))
			break;
		by = (uint64_t)gs_bcast((long)gs_now_ns()) + IGG_SLICE_NS;
	}
	if (gs_tid() == 0)
		atomicMax(&k->recv1, (unsigned long long)gs_now_ns());
}

/* ---- the send node ---- */

/* Job i, its connection taken again: what gsrv_done is to make of it. */
GSOCK_DEVICE long igg_answer(struct gsock_dev gs, struct gsrv *s,
			     struct igg_conf *c, uint32_t i)
{
	const struct igg_job *j = &c->jobs[i];
	const struct ecb_pic *p = &c->m.pics[i];
	struct igg_conn *k = (struct igg_conn *)gsrv_state(gs, s);
	char *text = (char *)gsrv_buf(gs, s);
	long r = 0;

	gs_sync();
	if (gs_tid() == 0)
		k->job = 0;
	gs_sync();
	if (j->e == IGG_AGAIN) { /* no room last turn: at once in the next */
		gsrv_wake_at(gs, s, (uint64_t)gs_bcast((long)gs_now_ns()));
		return -EAGAIN;
	}
	if (j->e) { /* refused: why, and a close */
		if (gs_tid() == 0)
			r = infer_error(text, j->e);
		igg_send_bytes(gs, j->fd, text, (uint64_t)gs_bcast(r));
		return -EPROTO;
	}
	r = igg_send_bytes(gs, j->fd, c->m.out + 9ull * p->at - j->hl,
			   j->hl + 9ull * p->w * p->h);
	if (r < 0 || !j->keep)
		return r < 0 ? r : 0;
	if (k->lb.have > k->lb.off) /* pipelined bytes wait: the next turn */
		gsrv_wake_at(gs, s, (uint64_t)gs_bcast((long)gs_now_ns()));
	return 1;
}

/*
 * Thread 0 of the send node: the next turn, in the graph of its size:
 * room for as much as came this turn and for every picture that waits
 * (up to the largest graph), that room kept for the waiting ones.
 */
__device__ static void igg_next_t0(struct igg_turn *t, uint32_t cap)
{
	unsigned long long need = t->pixels + t->want;
	uint32_t k = 0, top = t->cap[t->sizes - 1];
	struct igg_clock *c = &t->clock;
	uint64_t now = gs_now_ns();
	cudaError_t e;

	/* a stamp out of order (none can be, but for a block late to start) is not summed */
	if (c->recv0 <= c->first && c->first <= c->recv1 &&
	    c->recv1 <= c->send0 && c->send0 <= now) {
		c->wait += c->first - c->recv0;
		c->gather += c->recv1 - c->first;
		c->model += c->send0 - c->recv1;
		c->send += now - c->send0;
		c->timed++;
		c->jobs += t->jobs;
		c->pixels += t->pixels;
		c->cap += cap;
	}
	c->recv0 = c->send0 = ~0ull;
	c->recv1 = c->first = 0;
	c->send_end = now;

	while (k + 1 < t->sizes && t->cap[k] < need)
		k++;
	t->reserved = t->want < top ? (uint32_t)t->want : top;
	if (t->oldest_next != ~0ull) {
		t->oldest = (uint32_t)(t->oldest_next >> 32);
		t->reserved_old = (uint32_t)t->oldest_next < top ?
					  (uint32_t)t->oldest_next : top;
	} else {
		t->reserved_old = 0;
	}
	t->oldest_next = ~0ull;
	t->pixels = t->jobs = 0;
	t->want = 0;
	t->turns++;
	if (t->end)
		return;
	/* a failed launch ends the server: no turn follows, the host reports it */
	e = cudaGraphLaunch(t->exec[k], cudaStreamGraphTailLaunch);
	if (e != cudaSuccess)
		t->launch_err = (int32_t)e;
}

/*
 * The send node: each block answers its jobs of the turn on their
 * connections (gsrv_take, gsrv_done); once the server ends it answers
 * nothing and closes them. Block 0 launches the next turn, which starts
 * when this graph is done.
 */
GSOCK_KERNEL_FIT(igg_send, gs, arg, ESPCN_THREADS, 1)
{
	struct igg_arg *a = (struct igg_arg *)arg;
	struct gsrv *s = a->s;
	struct igg_conf *c = (struct igg_conf *)s->app;
	uint32_t b = gs_bid(), n = c->njobs[b];
	/* one value for the whole block: its threads meet at barriers below */
	int end = (int)gs_bcast(
		gs_tid() == 0 ? *(volatile int32_t *)&c->turn->end : 0);

	if (gs_tid() == 0)
		atomicMin(&c->turn->clock.send0, (unsigned long long)gs_now_ns());

	for (uint32_t i = b * s->per_block; i < b * s->per_block + n && !end; i++)
		if (!gsrv_take(gs, s, c->jobs[i].fd))
			gsrv_done(gs, s, igg_answer(gs, s, c, i));
	/*
	 * The last turn: a receive block that stopped at its -EAGAIN (it saw
	 * a job, or another block's end) never reached gsrv_next_by's end,
	 * so its connections are closed here; again is harmless.
	 */
	if (end)
		gsrv_finish(gs, s);
	gs_sync();
	if (gs_tid() == 0)
		c->njobs[b] = 0;
	if (b == 0 && gs_tid() == 0)
		igg_next_t0(c->turn, a->cap);
}

/* ---- the host program ---- */

/* What the host keeps while the graphs run. */
struct igg_host {
	cudaStream_t st[IGG_BRANCHES]; /* st[0] launches, waits, captures */
	cublasHandle_t blas[IGG_BRANCHES]; /* blas[k] on st[k] */
	cudaEvent_t ev[3 * IGG_BRANCHES]; /* the capture's forks and joins */
	void *blas_ws; /* cuBLAS's workspaces: none may be allocated in a capture */
	struct igg_arg *args; /* device memory, one a size */
	void *model; /* the weights and the planes: host.conf.m's */
	cudaGraphExec_t exec[IGG_SIZES];
	struct igg_conf conf; /* the host's copy */
};

static struct igg_host host;
static long timeout_us = INFER_TIMEOUT_MS * 1000L;
static const char *weights_path;

/*
 * Capture the turn of size k: the receive node, the model on its cap
 * pixels (ecb_model), the send node; instantiate it for device launch.
 */
static int igg_capture(struct gsock_ctx *ctx, unsigned blocks,
		       unsigned threads, int k)
{
	const struct ecb_batch *m = &host.conf.m;
	cudaStream_t st = host.st[0];
	cudaGraph_t g = NULL;
	cudaError_t e;
	int r;

	/* cuBLAS picks and loads its kernels outside the capture */
	for (int b = 0; b < IGG_BRANCHES; b++) {
		uint32_t lo, hi;

		ecb_part(igg_caps[k], IGG_BRANCHES, b, &lo, &hi);
		for (int l = 0; l < 3 && hi > lo; l++)
			ecb_sgemm(host.blas[b], m, lo, hi, l);
	}
	e = cudaDeviceSynchronize();
	if (e == cudaSuccess)
		e = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
	if (e != cudaSuccess)
		goto out_cuda;
	r = gsock_launch_stream(ctx, st, 0, (const void *)igg_recv, blocks,
				threads, &host.args[k]);
	if (!r)
		r = ecb_model(host.blas, host.st, host.ev, IGG_BRANCHES, m,
			      igg_caps[k]);
	if (!r)
		r = gsock_launch_stream(ctx, st, 0, (const void *)igg_send,
					blocks, threads, &host.args[k]);
	e = cudaStreamEndCapture(st, &g);
	if (r || e != cudaSuccess) {
		fprintf(stderr, "infer-gserver-graph: cannot capture the turn of %u pixels: %s\n",
			igg_caps[k], r ? strerror(-r) : cudaGetErrorString(e));
		cudaGraphDestroy(g);
		return -1;
	}
	e = cudaGraphInstantiateWithFlags(&host.exec[k], g,
					  cudaGraphInstantiateFlagDeviceLaunch);
	if (e != cudaSuccess) /* nothing for igg_release to destroy */
		host.exec[k] = NULL;
	cudaGraphDestroy(g);
	if (e == cudaSuccess)
		e = cudaGraphUpload(host.exec[k], st);
	if (e == cudaSuccess)
		return 0;
out_cuda:
	fprintf(stderr, "infer-gserver-graph: cannot make the turn of %u pixels a graph launched from the device: %s\n",
		igg_caps[k], cudaGetErrorString(e));
	return -1;
}

/* The graphs, cuBLAS's handles, the streams, the events (teardown frees the memory). */
static void igg_release(void)
{
	for (int k = 0; k < IGG_SIZES; k++)
		if (host.exec[k])
			cudaGraphExecDestroy(host.exec[k]);
	for (int b = 0; b < IGG_BRANCHES; b++) {
		if (host.blas[b])
			cublasDestroy(host.blas[b]);
		if (host.st[b])
			cudaStreamDestroy(host.st[b]);
	}
	for (int i = 0; i < 3 * IGG_BRANCHES; i++)
		if (host.ev[i])
			cudaEventDestroy(host.ev[i]);
	memset(host.exec, 0, sizeof(host.exec));
	memset(host.blas, 0, sizeof(host.blas));
	memset(host.st, 0, sizeof(host.st));
	memset(host.ev, 0, sizeof(host.ev));
}

/* The streams, cuBLAS handles and events of the model's branches: 0 or -1. */
static int igg_branches(void)
{
	char *ws = (char *)host.blas_ws;

	for (int b = 0; b < IGG_BRANCHES; b++)
		if (cudaStreamCreateWithFlags(&host.st[b], cudaStreamNonBlocking) ||
		    cublasCreate(&host.blas[b]) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetStream(host.blas[b], host.st[b]) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetWorkspace(host.blas[b], ws + (size_t)b * IGG_BLAS_WS,
				       IGG_BLAS_WS) != CUBLAS_STATUS_SUCCESS)
			return -1;
	for (int i = 0; i < 3 * IGG_BRANCHES; i++)
		if (cudaEventCreateWithFlags(&host.ev[i], cudaEventDisableTiming))
			return -1;
	return 0;
}

/*
 * Capture every size's graph, tell the device of them, launch the
 * smallest. On an error what was made is released here: gsrv_main
 * calls no wait hook after a launch hook's error.
 */
static int igg_launch(struct gsrv_app *app, struct gsock_ctx *ctx,
		      struct gsrv *s, struct gsrv *dev_s, unsigned blocks,
		      unsigned threads)
{
	struct igg_arg args[IGG_SIZES] = {}; /* the sizes past -G too: nothing unset copied */
	struct cudaFuncAttributes fa;
	cudaError_t e;
	int status = 0;

	(void)app, (void)s;
	host.args = (struct igg_arg *)gsock_dev_alloc(ctx, sizeof(args));
	host.blas_ws = gsock_dev_alloc(ctx, (size_t)IGG_BLAS_WS * IGG_BRANCHES);
	if (!host.args || !host.blas_ws || igg_branches()) {
		fprintf(stderr, "infer-gserver-graph: cannot set up cuBLAS and its streams\n");
		status = EX_OSERR;
		goto out_release;
	}
	for (int k = 0; k < igg_nsizes; k++)
		args[k] = (struct igg_arg){ dev_s, igg_caps[k], 0 };
	if (gsock_memcpy(ctx, host.args, args, sizeof(args))) {
		status = EX_OSERR;
		goto out_release;
	}
	/* every kernel loaded before the captures (lazy loading) */
	cudaFuncGetAttributes(&fa, (const void *)igg_recv);
	cudaFuncGetAttributes(&fa, (const void *)igg_send);
	ecb_load();
	for (int k = 0; k < igg_nsizes && !status; k++)
		if (igg_capture(ctx, blocks, threads, k))
			status = EX_SOFTWARE;
	if (!status &&
	    gsock_memcpy(ctx, host.conf.turn->exec, host.exec, sizeof(host.exec)))
		status = EX_OSERR;
	if (status)
		goto out_release;
	/*
	 * gsock_memcpy copies on stream 0 (cudaMemcpy, which may return
	 * before a pageable copy lands), which host.st[0] does not wait
	 * for: every copy (weights, turn, args, execs) done before the launch.
	 */
	e = cudaDeviceSynchronize();
	if (e == cudaSuccess)
		e = cudaGraphLaunch(host.exec[0], host.st[0]);
	if (e != cudaSuccess) {
		fprintf(stderr, "infer-gserver-graph: cannot launch the first turn: %s\n",
			cudaGetErrorString(e));
		status = EX_SOFTWARE;
		goto out_release;
	}
	return 0;
out_release:
	igg_release();
	return status;
}

/* The turns' means (struct igg_clock), one line. */
static void igg_print_clock(const struct igg_clock *k)
{
	double n = k->timed ? (double)k->timed : 1;

	if (!k->timed)
		return;
	printf("infer-gserver-graph: a turn's mean: %.1f jobs, %.0f of %.0f pixels; receive: wait %.1f us, gather %.1f us; model %.1f us, block 0's sends %.1f us, to the next receive %.1f us\n",
	       k->jobs / n, k->pixels / n, k->cap / n, k->wait / n / 1e3,
	       k->gather / n / 1e3,
	       k->model / n / 1e3, k->send / n / 1e3,
	       k->nexts ? k->next / (double)k->nexts / 1e3 : 0.0);
}

/* Sleep until the last turn ends (a stop, gsockd's end, a failure). */
static int igg_wait_end(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	struct igg_turn t;
	cudaError_t e = cudaStreamSynchronize(host.st[0]);
	int status = 0;

	(void)app, (void)s;
	if (e != cudaSuccess) {
		fprintf(stderr, "infer-gserver-graph: a turn failed: %s\n",
			cudaGetErrorString(e));
		status = EX_SOFTWARE;
	} else if (!gsock_memcpy(ctx, &t, host.conf.turn, sizeof(t))) {
		if (t.launch_err) {
			fprintf(stderr, "infer-gserver-graph: the device could not launch the next turn: %s\n",
				cudaGetErrorString((cudaError_t)t.launch_err));
			status = EX_SOFTWARE;
		}
		printf("infer-gserver-graph: %llu turns\n", (unsigned long long)t.turns);
		igg_print_clock(&t.clock);
	}
	igg_release();
	return status;
}

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10);

	if (opt == 'w') {
		weights_path = arg;
		return 0;
	}
	if (opt == 'G') {
		if (!*arg || *end || v < 2 || v > IGG_SIZES) {
			fprintf(stderr, "%s: -G takes a number of graph sizes from 2 to %d, not '%s'\n",
				app->name, IGG_SIZES, arg);
			return EX_USAGE;
		}
		igg_nsizes = (int)v;
		return 0;
	}
	if (!*arg || *end || v <= 0 || v > 86400000) {
		fprintf(stderr, "%s: -T takes milliseconds from 1 to 86400000, not '%s'\n",
			app->name, arg);
		return EX_USAGE;
	}
	timeout_us = v * 1000;
	return 0;
}

/* The weights, the jobs, the planes and the columns, in device memory. */
static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	struct igg_conf *c = &host.conf;
	uint32_t cap = ECB_PIXELS_MAX, jobs = s->blocks * s->per_block;
	struct igg_turn t = { 0 };
	int status;
	float *p;

	if (c->turn) { /* the host's state is one GPU's */
		fprintf(stderr, "%s: serves from one GPU (-g takes one)\n", app->name);
		return EX_USAGE;
	}
	p = ig_weights(app->name, weights_path, &status);
	if (!p)
		return status;
	c->timeout_us = timeout_us;
	c->turn = (struct igg_turn *)gsock_dev_alloc(ctx, sizeof(*c->turn));
	c->jobs = (struct igg_job *)gsock_dev_alloc(ctx, sizeof(*c->jobs) * jobs);
	c->njobs = (uint32_t *)gsock_dev_alloc(ctx, 4 * s->blocks);
	host.model = gsock_dev_alloc(ctx, ecb_size(cap, jobs));
	for (int k = 0; k < igg_nsizes; k++) /* 4 Ki, ..., ECB_PIXELS_MAX */
		igg_caps[k] = k == igg_nsizes - 1 ? ECB_PIXELS_MAX :
			(uint32_t)(IGG_SIZE_MIN * pow((double)ECB_PIXELS_MAX / IGG_SIZE_MIN,
						      (double)k / (igg_nsizes - 1)));
	memcpy(t.cap, igg_caps, sizeof(t.cap));
	t.sizes = (uint32_t)igg_nsizes;
	t.clock.recv0 = t.clock.send0 = ~0ull;
	t.oldest_next = ~0ull;
	if (host.model && c->turn) {
		ecb_carve(&c->m, host.model, cap, jobs);
		c->m.pixels = &c->turn->pixels;
	}
	if (!c->turn || !c->jobs || !c->njobs || !host.model ||
	    gsock_memcpy(ctx, (void *)c->m.weights, p, 4 * (size_t)ESPCN_NPARAMS) ||
	    gsock_memcpy(ctx, c->turn, &t, sizeof(t))) {
		fprintf(stderr, "%s: out of device memory for the model (%zu MiB)\n",
			app->name, ecb_size(cap, jobs) >> 20);
		free(p);
		return EX_OSERR;
	}
	free(p);
	s->bufsize = INFER_ERROR_MAX;
	s->conn_size = sizeof(struct igg_conn);
	*(struct igg_conf *)s->app = *c;
	return 0;
}

static void teardown(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	struct igg_conf *c = &host.conf;
	void *mem[] = { c->turn, c->jobs, c->njobs, host.model, host.args,
			host.blas_ws };

	(void)app, (void)s;
	for (size_t i = 0; i < sizeof(mem) / sizeof(mem[0]); i++)
		gsock_dev_free(ctx, mem[i]);
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
	app.launch = igg_launch;
	app.wait = igg_wait_end;
	app.detail = "ESPCN x3 over HTTP/1.1, a self-launching CUDA graph";
	return gsrv_main(&app, argc, argv);
}
