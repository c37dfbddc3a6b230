/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-call matrix product server G, written once with g-calls (nvcc for
 * the GPU, kernels_host.c for the host backend). A group's leader block
 * does the network: accept, receive A and B straight into device memory,
 * hand the product to its group, compute its share of the tiles, wait for
 * the others, send C straight from device memory. No CPU code is on this
 * path. Blocks of a group meet through device-memory words: the leader
 * publishes a generation after a fence, the others count themselves done
 * after a fence, so every block sees the bytes the others wrote.
 */
#include "mm_gpu.h"

/* Block r of a group of k: its tiles of the product of side n. */
GSOCK_DEVICE void mm_share(const float *A, const float *B, float *C, uint32_t n,
			   uint32_t r, uint32_t k)
{
	GS_SHARED float sa[MM_BK * MM_TILE], sb[MM_BK * MM_TILE];

	for (uint32_t t = r; t < mm_tiles(n); t += k)
		mm_tile(A, B, C, n, t, sa, sb);
}

/* Every block: make this block's writes visible, then thread 0 stores. */
GSOCK_DEVICE void mm_publish(uint32_t *word, uint32_t v)
{
	gs_fence();
	gs_sync();
	if (gs_tid() == 0)
		gs_st32(word, v);
}

/* Thread 0 waits until *word != seen; the new value, or -errno. */
GSOCK_DEVICE long mm_wait_change_t0(struct gsock_dev gs, const uint32_t *word,
				    uint32_t seen)
{
	unsigned turn = 0;

	for (;;) {
		uint32_t v = gs_ld32(word);
		int err;

		if (v != seen)
			return v;
		err = gs_wait_turn(gs, &turn);
		if (err)
			return err;
	}
}

/* The blocks of a group other than the leader: compute until stopped. */
GSOCK_DEVICE void mm_follow(struct gsock_dev gs, struct mm_server_args *a,
			    struct mm_group *grp, float *A, uint32_t r)
{
	uint32_t seen = 0;

	for (;;) {
		long v = 0;
		uint32_t n;

		if (gs_tid() == 0) {
			v = mm_wait_change_t0(gs, &grp->gen, seen);
			if (v >= 0 && gs_ld32(&grp->stop))
				v = -ECANCELED; /* one decision for the block */
		}
		v = gs_bcast(v);
		if (v < 0)
			return;
		seen = (uint32_t)v;
		n = gs_ld32(&grp->n);
		mm_share(A, A + (size_t)n * n, A + 2 * (size_t)n * n, n, r,
			 a->group_blocks);
		gs_fence();
		gs_sync();
		if (gs_tid() == 0)
			gs_fetch_add64(&grp->done, 1);
	}
}

/* Answer: the header, then C for status 0; < 0 when the connection is gone. */
GSOCK_DEVICE long mm_reply(struct gsock_dev gs, int c, struct mm_hdr *h,
			   uint32_t seq, int32_t status, uint32_t n,
			   const float *C)
{
	long r;

	if (gs_tid() == 0)
		*h = (struct mm_hdr){ MM_RESP_MAGIC, seq, (uint32_t)status, n };
	gs_sync();
	r = gsend(gs, c, h, sizeof(*h), 0);
	if (r >= 0 && status == MM_OK)
		r = gsend(gs, c, C, (size_t)n * n * sizeof(float), 0);
	return r;
}

/* The leader: serve connection c; the error that ended it, or 0. */
GSOCK_DEVICE long mm_serve(struct gsock_dev gs, struct mm_server_args *a,
			   struct mm_group *grp, uint32_t *gen, int c, float *A,
			   struct mm_hdr *h)
{
	struct mm_group_stats *st = &a->stats[gs_bid() / a->group_blocks];

	for (;;) {
		uint32_t n, seq;
		uint64_t bytes;
		int proto;
		long r = grecv(gs, c, h, sizeof(*h), 0); /* idle: wait */

		if (r > 0 && r < (long)sizeof(*h)) { /* the rest is owed */
			long more = app_recv_timed(gs, c, (uint8_t *)h + r,
						   sizeof(*h) - (uint64_t)r, 1,
						   a->timeout_ms);

			r = more < 0 ? more : r + more;
		}
		if (r != (long)sizeof(*h))
			return r < 0 ? r : 0;
		n = h->n_or_status;
		seq = h->seq;
		proto = h->magic != MM_REQ_MAGIC;
		gs_sync(); /* every thread has read h before it is reused */
		if (proto || n == 0 || n > a->max_n) {
			mm_reply(gs, c, h, seq, proto ? MM_E_PROTO : MM_E_SIZE,
				 n, A);
			return proto ? -EPROTO : -EMSGSIZE;
		}
		bytes = 2 * (uint64_t)n * n * sizeof(float);
		r = app_recv_timed(gs, c, (uint8_t *)A, bytes, 1,
				   a->timeout_ms);
		if (r != (long)bytes)
			return r < 0 ? r : -EPIPE;
		if (gs_tid() == 0) {
			grp->n = n;
			grp->done = 0;
		}
		mm_publish(&grp->gen, ++*gen);
		mm_share(A, A + (size_t)n * n, A + 2 * (size_t)n * n, n, 0,
			 a->group_blocks);
		if (gs_tid() == 0) {
			unsigned turn = 0;

			r = 0;
			while (!r && gs_ld64((const uint64_t *)&grp->done) !=
					     a->group_blocks - 1)
				r = gs_wait_turn(gs, &turn);
		}
		r = gs_bcast(r);
		if (r < 0)
			return r;
		r = mm_reply(gs, c, h, seq, MM_OK, n, A + 2 * (size_t)n * n);
		if (r < 0)
			return r;
		if (gs_tid() == 0)
			st->products++;
	}
}

GSOCK_KERNEL_FIT(mm_server_kernel, gs, arg, MM_THREADS, 2)
{
	struct mm_server_args *a = (struct mm_server_args *)arg;
	uint32_t g = gs_bid() / a->group_blocks, r = gs_bid() % a->group_blocks;
	struct mm_group *grp = &a->groups[g];
	struct mm_group_stats *st = &a->stats[g];
	float *A = a->bufs + (size_t)g * 3 * a->max_n * a->max_n;
	struct mm_hdr *h = (struct mm_hdr *)(a->io + (size_t)g * 64);
	uint32_t gen = 0;
	long lfd;

	if (r) {
		mm_follow(gs, a, grp, A, r);
		return;
	}
	lfd = app_get_listener(gs, &a->listen);
	for (; lfd >= 0;) {
		int c = gaccept(gs, (int)lfd, 0, 0);
		long e;

		if (c == -ECANCELED || c == -ECONNABORTED || c == -EBADF)
			break;
		if (c < 0)
			continue;
		e = mm_serve(gs, a, grp, &gen, c, A, h);
		gclose(gs, c);
		if (gs_tid() == 0) {
			st->conns++;
			if (e < 0)
				st->last_error = e;
		}
		if (e == -ECANCELED || e == -ECONNABORTED)
			break;
	}
	if (gs_tid() == 0)
		grp->stop = 1;
	mm_publish(&grp->gen, ++gen);
}
