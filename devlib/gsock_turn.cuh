/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server layer's turns (CUDA only): a g-call server whose request
 * path is CUDA graphs that launch each other from the device, so that
 * library kernels (cuBLAS, a framework's) serve requests with no CPU
 * code between a request and its answer. A turn is one graph:
 *
 *   node        does                                           blocks
 *   receive     gsrv_turn_receive: the serving blocks read     the server's
 *               their connections (gsrv_next_by); whole
 *               requests become the turn's jobs, each with
 *               its units (pixels, rows, tokens) in the batch
 *   compute     what the application captured for a batch of   its own
 *               cap units (gsrv_turn_host.capture)
 *   send        gsrv_turn_send: each block answers its jobs;   the server's
 *               one thread launches the next turn
 *               (cudaStreamGraphTailLaunch)
 *
 * A graph launched from the device holds no conditional node and a
 * captured library call keeps the sizes it was captured with, so one
 * graph is captured for each batch size (gsrv_turn_host.cap_min to
 * cap_max, sizes of them a constant factor apart). The send node launches
 * the smallest that holds what came and what waits: a job that did not
 * fit waits, and room is kept for the jobs that wait, the oldest first,
 * so that none loses turn after turn to jobs the blocks happen to see
 * first.
 *
 * Every block's sends are part of the turn, which waits for the slowest:
 * gsrv_turn_send_bytes bounds a send by GSRV_TURN_SEND_US plus its bytes
 * at GSRV_TURN_SEND_RATE, and a reader slower than that is closed
 * (-ETIMEDOUT), so that a slow or dead reader costs the other
 * connections one turn of that much at most.
 *
 * Between launches everything lives in device memory: the server
 * layer's blocks and connections (gsrv_next_by goes on where it
 * stopped), the jobs, the turn's counters. gsock_stop (SIGINT, SIGTERM)
 * makes the receive node's gpoll return -ECANCELED: that turn answers
 * nothing and launches no other, and the host thread, asleep in
 * cudaStreamSynchronize, wakes. gsock-server(3) documents the whole.
 */
#ifndef GSOCK_TURN_CUH
#define GSOCK_TURN_CUH

#ifndef __CUDACC__
#error "gsock_turn.cuh is CUDA graphs: compile it with nvcc (-rdc, cudadevrt)"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "gsock.h"
#include "gsock_server.cuh"

#define GSRV_TURN_SIZES 32 /* graph sizes at most */
#define GSRV_JOB_AGAIN (-1) /* a job's e: no room this turn, looked at again */
#define GSRV_TURN_SLICE_NS 20000 /* an idle receive block looks at the others */
#define GSRV_TURN_SEND_US 10000 /* an answer's time to leave, besides its bytes' */
#define GSRV_TURN_SEND_RATE (64u << 20) /* the slowest reader kept, bytes a second */

/*
 * One of the turn's jobs (device memory): a request to answer from the
 * batch (e 0: units [at, at + units) of it are its own), a refusal (e:
 * the application's code, > 0), or GSRV_JOB_AGAIN (it waits for room).
 */
struct gsrv_job {
	int32_t fd;
	int32_t e;
	uint32_t at, units;
	uint32_t note[2]; /* the application's */
};

/*
 * Where the turns' time goes (gs_now_ns stamps, summed over the turns):
 * the receive node from its first block's start to the turn's first job
 * (the wait; the first turn's includes the wait for the first client),
 * then to its last block's end (the gathering), the compute to the send
 * node's first block, block 0's sends, and from there to the next
 * turn's first receive block (the other blocks' sends, the graph's end,
 * the tail launch). A turn whose stamps are out of order (a send block
 * that started only after block 0 summed the turn: more blocks than fit
 * at once) is left out of the sums.
 */
struct gsrv_turn_clock {
	unsigned long long recv0, first, recv1, send0; /* this turn's stamps */
	unsigned long long send_end; /* last turn's block 0, after its sends */
	unsigned long long wait, gather, compute, send, next; /* sums, ns */
	unsigned long long timed; /* turns summed */
	unsigned long long nexts; /* gaps summed in next */
	unsigned long long jobs, units, cap; /* sums: jobs, units taken, graph sizes */
};

/* What the turns share (device memory). */
struct gsrv_turns {
	uint32_t units; /* receive: batch units taken this turn */
	uint32_t reserved; /* send: units kept for last turn's waiters */
	uint32_t oldest; /* send: the turn the oldest waiters began to wait */
	uint32_t reserved_old; /* send: units kept for those (<= reserved) */
	/* receive: the oldest waiters' turn (high half) and units (low), or ~0 */
	unsigned long long oldest_next;
	uint32_t jobs; /* receive: jobs this turn, every block's */
	int32_t end; /* receive: the error that ends the server, or 0 */
	int32_t launch_err; /* send: the cudaGraphLaunch that failed */
	uint32_t sizes; /* graphs */
	uint32_t cap[GSRV_TURN_SIZES]; /* each graph's batch, units */
	uint64_t turns; /* send: turns served */
	unsigned long long want; /* receive: units of the jobs that wait */
	cudaGraphExec_t exec[GSRV_TURN_SIZES];
	struct gsrv_job *job; /* per_block a block: block b's from b per_block */
	uint32_t *njobs; /* a block's jobs this turn */
	struct gsrv_turn_clock clock;
};

/*
 * The first bytes of each connection's state (gsrv_state): the
 * application's struct for conn_size begins with one.
 */
struct gsrv_turn_conn {
	uint32_t job; /* a job of this turn: nothing more until it is sent */
	uint32_t wait; /* units of a job that waits for room (0: none) */
	uint32_t wt; /* the turn it began to wait */
	uint32_t pad;
};

/* The receive and send nodes' argument (device memory): one a size. */
struct gsrv_turn_arg {
	struct gsrv *s;
	struct gsrv_turns *t;
	uint32_t cap; /* this graph's batch, units */
	uint32_t pad;
};

/*
 * The application's request reader (the receive node's): connection fd,
 * handed out, whose gsrv_turn_conn has no job; -EAGAIN keeps it (a job
 * was added with gsrv_turn_take or gsrv_turn_refuse, or bytes are
 * awaited), 0 or a negative errno closes it (gsrv_done's).
 */
typedef long (*gsrv_turn_read_fn)(struct gsock_dev gs,
				  const struct gsrv_turn_arg *a, int fd);
/*
 * The application's answer (the send node's) to job i of the turn, its
 * connection handed out again (gsrv_take): a batch job or a refusal;
 * what gsrv_done is to make of the connection.
 */
typedef long (*gsrv_turn_answer_fn)(struct gsock_dev gs,
				    const struct gsrv_turn_arg *a, uint32_t i);

/* Send n bytes within the turn's budget: n or a negative errno (-ETIMEDOUT). */
GSOCK_DEVICE long gsrv_turn_send_bytes(struct gsock_dev gs, int fd,
				       const void *p, uint64_t n)
{
	return gsrv_send_rate(gs, fd, p, n, GSRV_TURN_SEND_US,
			      GSRV_TURN_SEND_RATE);
}

/* Thread 0: a job of this block for fd (the block's next); its index. */
GSOCK_DEVICE uint32_t gs_turn_add_t0(struct gsrv *s, struct gsrv_turns *t,
				     struct gsrv_turn_conn *k, int fd, int e)
{
	uint32_t b = gs_bid(), i = b * s->per_block + t->njobs[b]++;

	t->job[i] = (struct gsrv_job){ 0 };
	t->job[i].fd = fd;
	t->job[i].e = e;
	k->job = 1;
	if (!atomicAdd(&t->jobs, 1u))
		t->clock.first = gs_now_ns();
	return i;
}

/*
 * Refuse the request of the connection handed out (fd) with the
 * application's code e (> 0): a job of this turn, which the send node
 * gives the answer function. Every thread of the block calls it;
 * returns -EAGAIN, for gsrv_done.
 */
GSOCK_DEVICE long gsrv_turn_refuse(struct gsock_dev gs,
				   const struct gsrv_turn_arg *a, int fd, int e)
{
	gs_sync();
	if (gs_tid() == 0)
		gs_turn_add_t0(a->s, a->t,
			       (struct gsrv_turn_conn *)gsrv_state(gs, a->s),
			       fd, e);
	gs_sync();
	return -EAGAIN;
}

/*
 * Thread 0: a job of `need` units that began to wait in turn wt waits
 * on; t->oldest_next keeps the oldest such turn and the units of the
 * jobs that began to wait in it.
 */
GSOCK_DEVICE void gs_turn_oldest_t0(struct gsrv_turns *t, uint32_t wt,
				    uint32_t need)
{
	unsigned long long cur = *(volatile unsigned long long *)&t->oldest_next;
	unsigned long long v, old;

	for (;;) {
		uint32_t cwt = (uint32_t)(cur >> 32);

		if (cur == ~0ull || (int32_t)(wt - cwt) < 0)
			v = (unsigned long long)wt << 32 | need;
		else if (wt == cwt) /* the units saturate: many blocks, large jobs */
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
 * A request of `units` units of the connection handed out (fd): a job
 * of the batch if this graph's size still holds it, its index returned
 * (the job's at says where its units begin; the application fills what
 * the compute needs of it); else -1, and it waits (gsrv_turn_conn.wait)
 * for a later turn, whose graph is chosen to hold it: the receive node
 * offers the connection again (the read function sees wait set and
 * calls this again). Room goes by age: a new request leaves t->reserved
 * free for the ones that waited, and one that waited leaves
 * t->reserved_old free for the ones that have waited longest. units
 * from 1 to the largest size (cap_max): -EMSGSIZE for others, no job
 * made. Every thread of the block calls it.
 */
GSOCK_DEVICE long gsrv_turn_take(struct gsock_dev gs,
				 const struct gsrv_turn_arg *a, int fd,
				 uint32_t units)
{
	struct gsrv_turns *t = a->t;
	struct gsrv_turn_conn *k = (struct gsrv_turn_conn *)gsrv_state(gs, a->s);
	uint32_t cap = a->cap, kept = t->reserved;
	int waited = k->wait != 0;
	long i = -1;

	if (!units || units > t->cap[t->sizes - 1])
		return -EMSGSIZE;
	if (waited && k->wt != t->oldest)
		kept = t->reserved_old;
	if (!waited || k->wt != t->oldest)
		cap = kept < cap ? cap - kept : 0;
	gs_sync();
	if (gs_tid() == 0) {
		uint32_t cur = *(volatile uint32_t *)&t->units, old;

		while (cur + units <= cap &&
		       (old = atomicCAS(&t->units, cur, cur + units)) != cur)
			cur = old;
		if (cur + units > cap) {
			if (!waited)
				k->wt = (uint32_t)t->turns;
			k->wait = units;
			atomicAdd(&t->want, (unsigned long long)units);
			gs_turn_oldest_t0(t, k->wt, units);
			gs_turn_add_t0(a->s, t, k, fd, GSRV_JOB_AGAIN);
		} else {
			i = gs_turn_add_t0(a->s, t, k, fd, 0);
			t->job[i].at = cur;
			t->job[i].units = units;
			k->wait = 0;
		}
	}
	i = gs_bcast(i);
	gs_sync();
	return i;
}

/* Whether the turn has a job, or has ended: a block that waits stops. */
GSOCK_DEVICE int gs_turn_over(const struct gsrv_turns *t)
{
	long v = 0;

	if (gs_tid() == 0)
		v = *(volatile const uint32_t *)&t->jobs ||
		    *(volatile const int32_t *)&t->end;
	return (int)gs_bcast(v);
}

/*
 * The receive node's body (the application's receive kernel calls it
 * with its argument and its read function): each block serves its
 * connections until the turn has a job (any block's), then returns; an
 * idle block waits in slices of GSRV_TURN_SLICE_NS so that it sees
 * another block's job. gsock_stop ends every block's gpoll at once
 * (-ECANCELED): the turn's end.
 */
GSOCK_DEVICE void gsrv_turn_receive(struct gsock_dev gs, void *arg,
				    gsrv_turn_read_fn read)
{
	const struct gsrv_turn_arg *a = (const struct gsrv_turn_arg *)arg;
	struct gsrv *s = a->s;
	struct gsrv_turns *t = a->t;
	struct gsrv_turn_clock *k = &t->clock;
	uint64_t by = (uint64_t)gs_bcast((long)gs_now_ns()) + GSRV_TURN_SLICE_NS;

	if (gs_tid() == 0) {
		atomicMin(&k->recv0, (unsigned long long)(by - GSRV_TURN_SLICE_NS));
		if (gs_bid() == 0 && k->send_end) {
			k->next += by - GSRV_TURN_SLICE_NS - k->send_end;
			k->nexts++;
			k->send_end = 0;
		}
	}
	for (;;) {
		int fd = gsrv_next_by(gs, s, by);

		if (fd >= 0) {
			/* answered by this turn's send node: its bytes wait */
			gsrv_done(gs, s, ((struct gsrv_turn_conn *)gsrv_state(gs, s))->job ?
					 -EAGAIN : read(gs, a, fd));
			if (gs_turn_over(t))
				by = 1; /* what is ready, then return */
			continue;
		}
		if (fd != -EAGAIN) {
			if (gs_tid() == 0)
				atomicCAS((unsigned *)&t->end, 0u, (unsigned)fd);
			break;
		}
		if (gs_turn_over(t))
			break;
		by = (uint64_t)gs_bcast((long)gs_now_ns()) + GSRV_TURN_SLICE_NS;
	}
	if (gs_tid() == 0)
		atomicMax(&k->recv1, (unsigned long long)gs_now_ns());
}

/*
 * Thread 0 of the send node: the next turn, in the graph of its size:
 * room for as much as came this turn and for every job that waits (up
 * to the largest graph), that room kept for the waiting ones.
 */
GSOCK_DEVICE void gs_turn_next_t0(struct gsrv_turns *t, uint32_t cap)
{
	unsigned long long need = t->units + t->want;
	uint32_t k = 0, top = t->cap[t->sizes - 1];
	struct gsrv_turn_clock *c = &t->clock;
	uint64_t now = gs_now_ns();
	cudaError_t e;

	if (c->recv0 <= c->first && c->first <= c->recv1 &&
	    c->recv1 <= c->send0 && c->send0 <= now) {
		c->wait += c->first - c->recv0;
		c->gather += c->recv1 - c->first;
		c->compute += c->send0 - c->recv1;
		c->send += now - c->send0;
		c->timed++;
		c->jobs += t->jobs;
		c->units += t->units;
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
	t->units = t->jobs = 0;
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
 * The send node's body (the application's send kernel calls it with its
 * argument and its answer function): each block answers its jobs of the
 * turn on their connections (gsrv_take, gsrv_done); a job that waits
 * for room is handed out at once in the next turn. Once the server ends
 * it answers nothing and closes them. Block 0 launches the next turn,
 * which starts when this graph is done.
 */
GSOCK_DEVICE void gsrv_turn_send(struct gsock_dev gs, void *arg,
				 gsrv_turn_answer_fn answer)
{
	const struct gsrv_turn_arg *a = (const struct gsrv_turn_arg *)arg;
	struct gsrv *s = a->s;
	struct gsrv_turns *t = a->t;
	uint32_t b = gs_bid(), n = t->njobs[b];
	/* one value for the whole block: its threads meet at barriers below */
	int end = (int)gs_bcast(gs_tid() == 0 ? *(volatile int32_t *)&t->end : 0);

	if (gs_tid() == 0)
		atomicMin(&t->clock.send0, (unsigned long long)gs_now_ns());
	for (uint32_t i = b * s->per_block; i < b * s->per_block + n && !end; i++) {
		long r = -EAGAIN;

		if (gsrv_take(gs, s, t->job[i].fd))
			continue;
		gs_sync();
		if (gs_tid() == 0)
			((struct gsrv_turn_conn *)gsrv_state(gs, s))->job = 0;
		gs_sync();
		if (t->job[i].e == GSRV_JOB_AGAIN) /* no room: at once in the next */
			gsrv_wake_at(gs, s, (uint64_t)gs_bcast((long)gs_now_ns()));
		else
			r = answer(gs, a, i);
		gsrv_done(gs, s, r);
	}
	/*
	 * The last turn: a receive block that stopped at its -EAGAIN (it saw
	 * a job, or another block's end) never reached gsrv_next_by's end,
	 * so its connections are closed here; again is harmless.
	 */
	if (end)
		gsrv_finish(gs, s);
	gs_sync();
	if (gs_tid() == 0)
		t->njobs[b] = 0;
	if (b == 0 && gs_tid() == 0)
		gs_turn_next_t0(t, a->cap);
}

/* ---- the host side ---- */

/*
 * What a turn server's host program gives the layer (app->data of its
 * struct gsrv_app, whose launch and wait are gsrv_turn_launch and
 * gsrv_turn_wait), and what the layer keeps there. One GPU's.
 */
struct gsrv_turn_host {
	/* the application's */
	const void *receive, *send; /* its kernels (GSOCK_KERNEL_FIT) */
	unsigned sizes; /* graphs, 2 to GSRV_TURN_SIZES */
	uint32_t cap_min, cap_max; /* the smallest and the largest batch, units */
	const char *units; /* what the units are, for the report ("units") */
	/*
	 * Before each size's capture, outside it: what a capture may not do
	 * (a library's choice and load of its kernels, lazy loading); 0 or
	 * -1 (say why on stderr). NULL: nothing.
	 */
	int (*prepare)(void *data, uint32_t cap);
	/*
	 * The compute of a batch of cap units, enqueued on st, which is being
	 * captured (the work of several streams forks from st and joins it):
	 * 0, or a negative errno. Kernels read how many units are in use as
	 * they run (units_p).
	 */
	int (*capture)(void *data, cudaStream_t st, uint32_t cap);
	void *data; /* the application's, for prepare and capture */
	/* the layer's, set by gsrv_turn_setup */
	struct gsock_ctx *ctx; /* the GPU's whose turns these are */
	struct gsrv_turns *t; /* device memory, as the next three */
	struct gsrv_job *job;
	uint32_t *njobs;
	const uint32_t *units_p; /* device memory: the units taken this turn */
	struct gsrv_turn_arg *args; /* device memory, one a size */
	/*
	 * Launches the first turn, captures (capture's st), waits. What the
	 * application binds to it (a library handle) it releases before
	 * gsrv_turn_teardown destroys it.
	 */
	cudaStream_t st;
	uint32_t cap[GSRV_TURN_SIZES];
	cudaGraphExec_t exec[GSRV_TURN_SIZES];
};

/*
 * From the application's setup: the turns' memory for s (its blocks,
 * per_block jobs a block) and the layer's stream, s->conn_size at least
 * a struct gsrv_turn_conn. 0, or a <sysexits.h> status (said on stderr;
 * a second GPU is refused: the turns are one GPU's).
 */
static inline int gsrv_turn_setup(struct gsrv_turn_host *h, const char *name,
				  struct gsock_ctx *ctx, struct gsrv *s)
{
	struct gsrv_turns t;
	uint32_t jobs = s->blocks * s->per_block;
	double f;

	if (h->t) {
		fprintf(stderr, "%s: serves from one GPU (-g takes one)\n", name);
		return EX_USAGE;
	}
	if (h->sizes < 2 || h->sizes > GSRV_TURN_SIZES || !h->cap_min ||
	    h->cap_max < h->cap_min) {
		fprintf(stderr, "%s: %u graph sizes of %u to %u units: 2 to %d sizes, the smallest at least 1\n",
			name, h->sizes, h->cap_min, h->cap_max, GSRV_TURN_SIZES);
		return EX_USAGE;
	}
	memset(&t, 0, sizeof(t));
	f = (double)h->cap_max / h->cap_min;
	for (unsigned k = 0; k < h->sizes; k++) /* cap_min, ..., cap_max */
		h->cap[k] = k == h->sizes - 1 ? h->cap_max :
			(uint32_t)(h->cap_min * pow(f, (double)k / (h->sizes - 1)));
	memcpy(t.cap, h->cap, sizeof(t.cap));
	t.sizes = h->sizes;
	t.clock.recv0 = t.clock.send0 = ~0ull;
	t.oldest_next = ~0ull;
	h->ctx = ctx;
	h->t = (struct gsrv_turns *)gsock_dev_alloc(ctx, sizeof(t));
	h->job = t.job = (struct gsrv_job *)gsock_dev_alloc(ctx, sizeof(*t.job) * jobs);
	h->njobs = t.njobs = (uint32_t *)gsock_dev_alloc(ctx, 4 * s->blocks);
	h->args = (struct gsrv_turn_arg *)gsock_dev_alloc(
		ctx, sizeof(*h->args) * GSRV_TURN_SIZES);
	if (!h->t || !t.job || !t.njobs || !h->args ||
	    gsock_memcpy(ctx, h->t, &t, sizeof(t)) ||
	    cudaStreamCreateWithFlags(&h->st, cudaStreamNonBlocking) != cudaSuccess) {
		fprintf(stderr, "%s: out of device memory for the turns\n", name);
		h->st = NULL;
		return EX_OSERR; /* the teardown frees what was made */
	}
	h->units_p = &h->t->units;
	if (s->conn_size < sizeof(struct gsrv_turn_conn))
		s->conn_size = sizeof(struct gsrv_turn_conn);
	return 0;
}

/*
 * From the application's teardown (any GPU's: only the one whose setup
 * made the turns frees them): what gsrv_turn_setup and the launch made.
 */
static inline void gsrv_turn_teardown(struct gsrv_turn_host *h,
				      struct gsock_ctx *ctx)
{
	void *mem[] = { h->t, h->job, h->njobs, h->args };

	if (ctx != h->ctx) /* a GPU whose setup was refused, or none made */
		return;
	for (int k = 0; k < GSRV_TURN_SIZES; k++)
		if (h->exec[k])
			cudaGraphExecDestroy(h->exec[k]);
	memset(h->exec, 0, sizeof(h->exec));
	for (size_t i = 0; i < sizeof(mem) / sizeof(mem[0]); i++)
		gsock_dev_free(ctx, mem[i]);
	if (h->st)
		cudaStreamDestroy(h->st);
	h->ctx = NULL;
	h->t = NULL;
	h->job = NULL;
	h->njobs = NULL;
	h->args = NULL;
	h->st = NULL;
}

/*
 * Capture the turn of size k: the receive node, the application's
 * compute of cap units, the send node; instantiate it for device launch.
 */
static inline int gs_turn_capture(struct gsrv_turn_host *h, const char *name,
				  struct gsock_ctx *ctx, unsigned blocks,
				  unsigned threads, int k)
{
	cudaGraph_t g = NULL;
	cudaError_t e = cudaSuccess;
	int r = h->prepare ? h->prepare(h->data, h->cap[k]) : 0;

	if (!r)
		e = cudaDeviceSynchronize();
	if (!r && e == cudaSuccess)
		e = cudaStreamBeginCapture(h->st, cudaStreamCaptureModeThreadLocal);
	if (r || e != cudaSuccess)
		goto out_cuda;
	r = gsock_launch_stream(ctx, h->st, 0, h->receive, blocks, threads,
				&h->args[k]);
	if (!r)
		r = h->capture(h->data, h->st, h->cap[k]);
	if (!r)
		r = gsock_launch_stream(ctx, h->st, 0, h->send, blocks, threads,
					&h->args[k]);
	e = cudaStreamEndCapture(h->st, &g);
	if (r || e != cudaSuccess) {
		fprintf(stderr, "%s: cannot capture the turn of %u %s: %s\n",
			name, h->cap[k], h->units ? h->units : "units",
			r ? strerror(-r) : cudaGetErrorString(e));
		cudaGraphDestroy(g);
		return -1;
	}
	e = cudaGraphInstantiateWithFlags(&h->exec[k], g,
					  cudaGraphInstantiateFlagDeviceLaunch);
	if (e != cudaSuccess) /* nothing to destroy */
		h->exec[k] = NULL;
	cudaGraphDestroy(g);
	if (e == cudaSuccess)
		e = cudaGraphUpload(h->exec[k], h->st);
	if (e == cudaSuccess)
		return 0;
out_cuda:
	fprintf(stderr, "%s: cannot make the turn of %u %s a graph launched from the device: %s\n",
		name, h->cap[k], h->units ? h->units : "units",
		r ? "the application's preparation failed" : cudaGetErrorString(e));
	return -1;
}

/*
 * struct gsrv_app's launch: capture every size's graph, tell the device
 * of them, launch the smallest (app->data is the struct gsrv_turn_host).
 * What it made is the teardown's to free.
 */
static inline int gsrv_turn_launch(struct gsrv_app *app, struct gsock_ctx *ctx,
				   struct gsrv *s, struct gsrv *dev_s,
				   unsigned blocks, unsigned threads)
{
	struct gsrv_turn_host *h = (struct gsrv_turn_host *)app->data;
	struct gsrv_turn_arg args[GSRV_TURN_SIZES];
	struct cudaFuncAttributes fa;
	cudaError_t e;

	(void)s;
	memset(args, 0, sizeof(args)); /* the sizes past h->sizes too */
	for (unsigned k = 0; k < h->sizes; k++)
		args[k] = (struct gsrv_turn_arg){ dev_s, h->t, h->cap[k], 0 };
	if (gsock_memcpy(ctx, h->args, args, sizeof(args)))
		goto out_copy;
	/* every kernel loaded before the captures (lazy loading) */
	cudaFuncGetAttributes(&fa, h->receive);
	cudaFuncGetAttributes(&fa, h->send);
	for (unsigned k = 0; k < h->sizes; k++)
		if (gs_turn_capture(h, app->name, ctx, blocks, threads, (int)k))
			return EX_SOFTWARE;
	if (gsock_memcpy(ctx, h->t->exec, h->exec, sizeof(h->exec)))
		goto out_copy;
	/*
	 * gsock_memcpy copies on stream 0 (cudaMemcpy, which may return
	 * before a pageable copy lands), which h->st does not wait for:
	 * every copy done before the launch.
	 */
	e = cudaDeviceSynchronize();
	if (e == cudaSuccess)
		e = cudaGraphLaunch(h->exec[0], h->st);
	if (e != cudaSuccess) {
		fprintf(stderr, "%s: cannot launch the first turn: %s\n",
			app->name, cudaGetErrorString(e));
		return EX_SOFTWARE;
	}
	return 0;
out_copy:
	fprintf(stderr, "%s: cannot copy the turns' graphs to the device\n", app->name);
	return EX_OSERR;
}

/*
 * struct gsrv_app's wait: sleep until the last turn ends (a stop,
 * gsockd's end, a failure); report the turns and where their time went.
 */
static inline int gsrv_turn_wait(struct gsrv_app *app, struct gsock_ctx *ctx,
				 struct gsrv *s)
{
	struct gsrv_turn_host *h = (struct gsrv_turn_host *)app->data;
	cudaError_t e = cudaStreamSynchronize(h->st);
	struct gsrv_turns t;
	const struct gsrv_turn_clock *k = &t.clock;
	double n;

	(void)s;
	if (e != cudaSuccess) {
		fprintf(stderr, "%s: a turn failed: %s\n", app->name,
			cudaGetErrorString(e));
		return EX_SOFTWARE;
	}
	if (gsock_memcpy(ctx, &t, h->t, sizeof(t))) {
		fprintf(stderr, "%s: cannot read the turns' counters\n", app->name);
		return EX_OSERR;
	}
	printf("%s: %llu turns\n", app->name, (unsigned long long)t.turns);
	n = k->timed ? (double)k->timed : 1;
	if (k->timed)
		printf("%s: a turn's mean: %.1f jobs, %.0f of %.0f %s; receive: wait %.1f us, gather %.1f us; compute %.1f us, block 0's sends %.1f us, to the next receive %.1f us\n",
		       app->name, k->jobs / n, k->units / n, k->cap / n,
		       h->units ? h->units : "units", k->wait / n / 1e3,
		       k->gather / n / 1e3, k->compute / n / 1e3,
		       k->send / n / 1e3,
		       k->nexts ? k->next / (double)k->nexts / 1e3 : 0.0);
	if (t.launch_err) {
		fprintf(stderr, "%s: the device could not launch the next turn: %s\n",
			app->name, cudaGetErrorString((cudaError_t)t.launch_err));
		return EX_SOFTWARE;
	}
	return 0;
}

#endif
