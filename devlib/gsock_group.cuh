/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Group g-calls (gsock.cuh includes this file): G blocks of one kernel
 * share the copying of one socket's bytes, because one block cannot copy
 * fast enough to fill NVLink (one connection between two H200s moved
 * ~11 GB/s with one block copying; the link's floor is 390 GB/s).
 *
 * Rank 0 owns the socket as gsend and grecv do: its thread 0 waits for
 * space or bytes, publishes tails and heads, rings doorbells. Each chunk
 * it is granted that is large enough (GGROUP_MIN_SLICE bytes a block) is
 * posted to the group through a struct ggroup_sync in device memory;
 * every block copies its slice, fences and acknowledges, and rank 0
 * publishes once all have. The call's result is posted last, so every
 * rank returns the same value. Small chunks rank 0 copies alone.
 *
 * The handshake (one writer per word, counters that only grow, so a
 * stale value from an earlier post can never pass for a new one):
 *
 *   | word     | writer         | meaning                                |
 *   |----------|----------------|----------------------------------------|
 *   | seq      | rank 0         | posts made; written last, after fence  |
 *   | acks     | ranks 1..G-1   | posts taken, summed (atomic add)       |
 *   | seen[r]  | rank r         | the last post rank r took (its own)    |
 *   | the rest | rank 0         | post seq's contents, fixed until acked |
 *
 * Rank 0 posts number s + 1 only when acks == (G - 1) * s: every rank
 * has taken post s, so no post is overwritten unread. Rank r waits for
 * seq != seen[r]; then seq is seen[r] + 1.
 */
#ifndef GSOCK_GROUP_CUH
#define GSOCK_GROUP_CUH

/* Blocks a group may have. */
#define GGROUP_MAX 64
/*
 * Bytes a block copies at least for a chunk to be shared: below this the
 * handshake (a few microseconds) would cost more than the copy saves.
 */
#ifndef GGROUP_MIN_SLICE
#define GGROUP_MIN_SLICE 65536
#endif

#define GS_GP_COPY 1 /* copy your slice of the chunk, then acknowledge */
#define GS_GP_RESULT 2 /* the call's result (or ggroup_bcast's value) */
#define GS_GP_STOP 3 /* ggroup_stop: ggroup_help returns */

/* One group's words: device memory, zeroed before the launch, one per group. */
struct ggroup_sync {
	uint64_t seq; /* posts made by rank 0; written last */
	uint64_t acks; /* posts taken, summed over ranks 1..G-1 */
	uint64_t shared; /* chunks that were shared (rank 0 counts) */
	int64_t value; /* RESULT: the value */
	uint32_t kind; /* GS_GP_* */
	uint32_t to_ring; /* COPY: 1 from buf into the ring (send) */
	uint32_t fence; /* COPY: the ring is another GPU's memory */
	uint32_t ring_size; /* COPY: the ring's bytes */
	uint8_t *ring; /* COPY: the ring */
	uint8_t *buf; /* COPY: the chunk's first byte in the caller's buffer */
	uint64_t pos; /* COPY: the ring counter of that byte */
	uint64_t n; /* COPY: bytes in the chunk */
	uint64_t seen[GGROUP_MAX]; /* rank r's: the last post it took */
};

/* A block's place in its group; the same sync for every block of it. */
struct ggroup {
	unsigned rank; /* 0 owns the socket; 0 .. size - 1 */
	unsigned size; /* blocks in the group, 1 .. GGROUP_MAX */
	struct ggroup_sync *sync; /* NULL allowed when size is 1 */
};

/* A post as a taking block sees it (its shared memory). */
struct gs_gpost {
	long kind, value;
	uint8_t *ring, *buf;
	uint64_t pos, n;
	uint32_t ring_size, to_ring, fence;
};

/* -EINVAL unless g is a group this file can serve. */
GSOCK_DEVICE int gs_group_bad(struct ggroup g)
{
	return !g.size || g.size > GGROUP_MAX || g.rank >= g.size ||
	       (g.size > 1 && !g.sync);
}

/* Into how many slices a chunk of n bytes is cut (1: rank 0 alone). */
GSOCK_DEVICE unsigned gs_group_parts(struct ggroup g, uint64_t n)
{
	uint64_t p = n / GGROUP_MIN_SLICE;

	return p >= g.size ? g.size : p ? (unsigned)p : 1;
}

/*
 * Rank `rank`'s slice [*lo, *hi) of a chunk of n bytes cut in parts:
 * 256-byte multiples from the chunk's start, so that neighbours' 16-byte
 * words do not share a slice edge; ranks past parts get nothing.
 */
GSOCK_DEVICE void gs_group_slice(uint64_t n, unsigned parts, unsigned rank,
				 uint64_t *lo, uint64_t *hi)
{
	uint64_t per = ((n + parts - 1) / parts + 255) & ~255ull;

	*lo = (uint64_t)rank * per < n ? (uint64_t)rank * per : n;
	*hi = *lo + per < n ? *lo + per : n;
}

/* Thread 0 of rank 0: wait until every other rank took post `seq`. */
GSOCK_DEVICE long gs_group_acked_t0(struct gsock_dev gs, struct ggroup g,
				    uint64_t seq)
{
	uint64_t want = (uint64_t)(g.size - 1) * seq;
	unsigned turn = 0;
	long r = 0;

	for (uint64_t v = gs_ld64(&g.sync->acks); v != want;
	     v = gs_ld64_moved(&g.sync->acks, v)) {
		r = gs_wait_turn(gs, &turn);
		if (r)
			break;
	}
	return r;
}

/*
 * Rank 0, block-wide: post p (kind, value, and for a COPY the chunk)
 * once the last post was taken by all. 0 or a negative errno.
 */
GSOCK_DEVICE long gs_group_post(struct gsock_dev gs, struct ggroup g,
				const struct gs_gpost *p)
{
	struct ggroup_sync *y = g.sync;
	long r = 0;

	/* What every thread wrote before (the buffer a send copies from). */
	gs_fence();
	gs_sync();
	if (gs_tid() == 0) {
		uint64_t seq = *(volatile uint64_t *)&y->seq;

		r = gs_group_acked_t0(gs, g, seq);
		if (!r) {
			*(volatile uint32_t *)&y->kind = (uint32_t)p->kind;
			*(volatile int64_t *)&y->value = p->value;
			*(uint8_t *volatile *)&y->ring = p->ring;
			*(uint8_t *volatile *)&y->buf = p->buf;
			*(volatile uint64_t *)&y->pos = p->pos;
			*(volatile uint64_t *)&y->n = p->n;
			*(volatile uint32_t *)&y->ring_size = p->ring_size;
			*(volatile uint32_t *)&y->to_ring = p->to_ring;
			*(volatile uint32_t *)&y->fence = p->fence;
			/*
			 * System scope: a COPY's other ranks read a ring
			 * that rank 0 saw filled by the host or another GPU.
			 */
			gs_st64(&y->seq, seq + 1);
		}
	}
	return gs_bcast(r);
}

/*
 * Every rank but 0, block-wide: wait for rank 0's next post and fill *p
 * (memory every thread of the block sees). 0 or a negative errno.
 */
GSOCK_DEVICE long gs_group_take(struct gsock_dev gs, struct ggroup g,
				struct gs_gpost *p)
{
	struct ggroup_sync *y = g.sync;
	unsigned turn = 0;
	long r = 0;

	if (gs_tid() == 0) {
		uint64_t seen = y->seen[g.rank];

		while (gs_ld64_moved(&y->seq, seen) == seen) {
			r = gs_wait_turn(gs, &turn);
			if (r)
				break;
		}
		if (!r) {
			p->kind = (long)*(volatile uint32_t *)&y->kind;
			p->value = (long)*(volatile int64_t *)&y->value;
			p->ring = *(uint8_t *volatile *)&y->ring;
			p->buf = *(uint8_t *volatile *)&y->buf;
			p->pos = *(volatile uint64_t *)&y->pos;
			p->n = *(volatile uint64_t *)&y->n;
			p->ring_size = *(volatile uint32_t *)&y->ring_size;
			p->to_ring = *(volatile uint32_t *)&y->to_ring;
			p->fence = *(volatile uint32_t *)&y->fence;
			y->seen[g.rank] = seen + 1;
		}
	}
	return gs_bcast(r);
}

/*
 * Every rank but 0, block-wide: the post is done with (a COPY's slice
 * copied by every thread): fence, then count it.
 */
GSOCK_DEVICE void gs_group_ack(struct ggroup g)
{
	gs_fence(); /* each thread's own stores, to the ring or the buffer */
	gs_sync();
	if (gs_tid() == 0) {
		/*
		 * After the barrier: a fence cumulative over the whole block's
		 * stores, so that rank 0's acquire of acks orders them too
		 * (the threads' own fences above only drain their stores).
		 */
		gs_fence();
		gs_fetch_add64((unsigned long long *)&g.sync->acks, 1);
	}
	gs_sync();
}

/* Block-wide: this block's slice of a COPY post (rank 0's too). */
GSOCK_DEVICE void gs_group_copy_slice(const struct gs_gpost *p, unsigned parts,
				      unsigned rank)
{
	uint64_t lo, hi;

	gs_group_slice(p->n, parts, rank, &lo, &hi);
	if (hi > lo)
		gs_ring_copy(p->ring_size, p->ring, p->pos + lo, p->buf + lo,
			     hi - lo, (int)p->to_ring);
}

/*
 * Rank 0, block-wide: copy n bytes between the ring at pos and buf, with
 * the group when the chunk is large enough; done on return, and with
 * fence (the ring is in another GPU's memory) every other rank's copy
 * fenced. The calling block's own stores need no fence of their own: the
 * barrier orders them before the publisher's system fence.
 * n, or a negative errno.
 */
GSOCK_DEVICE long gs_group_copy(struct gsock_dev gs, struct ggroup g,
				uint32_t ring_size, uint8_t *ring,
				uint64_t pos, uint8_t *buf, uint64_t n,
				int to_ring, int fence)
{
	GS_SHARED struct gs_gpost p;
	unsigned parts = gs_group_parts(g, n);
	long r;

	if (parts <= 1) {
		/* The block alone: the barrier orders its stores before the
		 * publisher's system fence (as in gsend), no thread fences. */
		gs_ring_copy(ring_size, ring, pos, buf, n, to_ring);
		gs_sync();
		return (long)n;
	}
	if (gs_tid() == 0) {
		p.kind = GS_GP_COPY;
		p.value = 0;
		p.ring = ring;
		p.buf = buf;
		p.pos = pos;
		p.n = n;
		p.ring_size = ring_size;
		p.to_ring = (uint32_t)to_ring;
		p.fence = (uint32_t)fence;
		g.sync->shared++;
	}
	gs_sync();
	r = gs_group_post(gs, g, &p);
	if (r)
		return r;
	gs_group_copy_slice(&p, parts, 0);
	if (fence)
		gs_fence();
	gs_sync();
	if (gs_tid() == 0)
		r = gs_group_acked_t0(gs, g, *(volatile uint64_t *)&g.sync->seq);
	r = gs_bcast(r);
	return r ? r : (long)n;
}

/*
 * Rank 0, block-wide: post the call's result r to the other ranks and
 * return it (or the error that kept it from them: the application stops
 * or gsockd went, which they see too).
 */
GSOCK_DEVICE long gs_group_result(struct gsock_dev gs, struct ggroup g, long r)
{
	GS_SHARED struct gs_gpost p;
	long e;

	if (g.size <= 1)
		return r;
	if (gs_tid() == 0) {
		memset(&p, 0, sizeof(p));
		p.kind = GS_GP_RESULT;
		p.value = r;
	}
	gs_sync();
	e = gs_group_post(gs, g, &p);
	return e ? e : r;
}

/*
 * Every rank but 0, block-wide: copy the slices of rank 0's posts until
 * its result (returned) or, with until_stop, its ggroup_stop (0).
 */
GSOCK_DEVICE long gs_group_follow(struct gsock_dev gs, struct ggroup g,
				  int until_stop)
{
	GS_SHARED struct gs_gpost p;

	for (;;) {
		long r = gs_group_take(gs, g, &p), kind, value;

		if (r)
			return r;
		kind = p.kind;
		value = p.value;
		if (kind == GS_GP_COPY)
			gs_group_copy_slice(&p, gs_group_parts(g, p.n), g.rank);
		gs_group_ack(g); /* p may change from here */
		if (kind == GS_GP_STOP)
			return 0;
		if (kind == GS_GP_RESULT && !until_stop)
			return value;
	}
}

/* ---- the group g-calls ---- */

/*
 * gsend with the group: every block of g calls with the same arguments;
 * rank 0 talks to the socket, all copy. Every rank returns rank 0's result.
 */
GSOCK_DEVICE long gsend_group(struct gsock_dev gs, int fd, const void *buf,
			      size_t len, int flags, struct ggroup g)
{
	struct gs_lsock *ls;
	size_t done = 0;
	long res = 0;

	if (gs_group_bad(g))
		return -EINVAL;
	if (g.size == 1)
		return gsend(gs, fd, buf, len, flags);
	if (g.rank)
		return gs_group_follow(gs, g, 0);
	ls = gs_lsock_of(gs, fd);
	if (!ls) {
		res = -EBADF;
		goto out;
	}
	do {
		long n = 0;
		uint64_t tail = 0;

		if (gs_tid() == 0) {
			tail = ls->tx_tail;
			n = gs_tx_wait_t0(gs, fd, ls,
					  (flags & MSG_DONTWAIT) != 0);
			if (n > (long)(len - done))
				n = (long)(len - done);
		}
		n = gs_bcast(n);
		tail = (uint64_t)gs_bcast((long)tail);
		if (n >= 0)
			n = gs_group_copy(gs, g, ls->ring_size, ls->tx_ring,
					  tail, (uint8_t *)buf + done,
					  (uint64_t)n, 1,
					  (ls->flags & GS_LS_DEV_TX) != 0);
		if (n >= 0 && gs_tid() == 0) {
			struct gs_pubw w;

			gs_pubw_of(ls, &w);
			if (gs_tx_publish_t0(gs, fd, ls, &w, tail, n,
					     gs_pub_late()))
				n = -ECONNABORTED;
		}
		n = gs_bcast(n);
		if (n < 0) {
			res = done ? (long)done : n;
			goto out;
		}
		done += (size_t)n;
	} while (done < len);
	res = (long)done;
out:
	return gs_group_result(gs, g, res);
}

/* grecv with the group, as gsend_group is gsend with it. */
GSOCK_DEVICE long grecv_group(struct gsock_dev gs, int fd, void *buf,
			      size_t len, int flags, struct ggroup g)
{
	struct gs_lsock *ls;
	size_t done = 0;
	long res = 0;

	if (gs_group_bad(g))
		return -EINVAL;
	if (g.size == 1)
		return grecv(gs, fd, buf, len, flags);
	if (g.rank)
		return gs_group_follow(gs, g, 0);
	ls = gs_lsock_of(gs, fd);
	if (!ls) {
		res = -EBADF;
		goto out;
	}
	while (done < len) {
		long n = 0, avail = 0;
		uint64_t head = 0;

		if (gs_tid() == 0) {
			head = ls->rx_head;
			n = avail = gs_rx_wait_t0(gs, fd, ls,
						  (flags & MSG_DONTWAIT) != 0);
			if (n > (long)(len - done))
				n = (long)(len - done);
		}
		n = gs_bcast(n);
		head = (uint64_t)gs_bcast((long)head);
		if (n > 0)
			n = gs_group_copy(gs, g, ls->ring_size, ls->rx_ring,
					  head, (uint8_t *)buf + done,
					  (uint64_t)n, 0, 0);
		if (n > 0 && gs_tid() == 0 &&
		    gs_rx_consume_t0(gs, fd, ls, (uint64_t)n, (uint64_t)avail))
			n = -ECONNABORTED;
		n = gs_bcast(n);
		if (n <= 0) {
			res = done ? (long)done : n;
			goto out;
		}
		done += (size_t)n;
		if (!(flags & MSG_WAITALL))
			break;
	}
	res = (long)done;
out:
	return gs_group_result(gs, g, res);
}

/*
 * Rank 0's v to every rank of the group (v as given, on rank 0): for the
 * decisions a group takes together between group calls (rank 0's gpoll,
 * gsocket, gconnect).
 */
GSOCK_DEVICE long ggroup_bcast(struct gsock_dev gs, struct ggroup g, long v)
{
	if (gs_group_bad(g))
		return -EINVAL;
	if (g.rank)
		return gs_group_follow(gs, g, 0);
	return gs_group_result(gs, g, v);
}

/*
 * Every rank but 0: copy for rank 0's group calls, whatever they are,
 * until rank 0 calls ggroup_stop (0) or the application stops (its
 * errno). A helper passes no arguments: rank 0's posts say it all.
 */
GSOCK_DEVICE long ggroup_help(struct gsock_dev gs, struct ggroup g)
{
	if (gs_group_bad(g) || !g.rank)
		return -EINVAL;
	return gs_group_follow(gs, g, 1);
}

/* Rank 0: end the other ranks' ggroup_help. 0 or a negative errno. */
GSOCK_DEVICE long ggroup_stop(struct gsock_dev gs, struct ggroup g)
{
	GS_SHARED struct gs_gpost p;

	if (gs_group_bad(g) || g.rank)
		return -EINVAL;
	if (g.size == 1)
		return 0;
	if (gs_tid() == 0) {
		memset(&p, 0, sizeof(p));
		p.kind = GS_GP_STOP;
	}
	gs_sync();
	return gs_group_post(gs, g, &p);
}

#endif /* GSOCK_GROUP_CUH */
