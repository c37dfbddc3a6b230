/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MapReduce jobs as g-call kernels, written once (nvcc for the GPU,
 * kernels_host.c for the host backend).
 *
 * Word count: every thread counts the words that start in its stretch of
 * the split into a device-memory hash table (mr_insert); then the words
 * that belong to other workers are packed by destination; block 0
 * receives the other workers' streams and adds them into the table while
 * blocks 1..W-1 each send one stream. Left in the table for the host: the
 * words of this worker's part, counted over the whole input.
 *
 * k-means: every block assigns its share of the points and adds them
 * into the sums; block 0 exchanges the sums with the other workers (rank
 * 0 adds them all and sends back the new centroids); repeat.
 *
 * Every wait for a peer is bounded by timeout_ms of quiet, and every
 * block passes every grid barrier, so a dead or silent peer ends the job
 * with an error in mr_result and never hangs a block.
 */
#include "mr_gpu.h"

/* Record the job's first error (any thread; the first claim wins). */
GSOCK_DEVICE void mr_fail(struct mr_result *res, uint32_t what, long err,
			  uint32_t peer, uint64_t done, uint64_t total)
{
	if (gs_cas32(&res->claim, 0, 1) != 0)
		return;
	res->err = (int32_t)err;
	res->what = what;
	res->peer = peer;
	res->done = done;
	res->total = total;
	gs_fence_dev();
}

GSOCK_DEVICE int mr_failed(struct mr_result *res)
{
	return gs_ld_local32(&res->claim) != 0;
}

/*
 * Every block: wait until every block of the launch has arrived. Writes
 * before it are seen after it. Non-zero when the application stops or
 * gsockd is gone (then every block leaves).
 */
GSOCK_DEVICE int mr_grid_sync(struct gsock_dev gs, struct mr_result *res,
			      unsigned nblocks)
{
	uint32_t gen = 0, last = 0;
	long r;

	gs_sync();
	if (gs_tid() == 0) {
		gen = gs_ld_local32(&res->bar_gen);
		gs_fence();
		if (gs_fetch_add32(&res->bar_count, 1) == nblocks - 1) {
			gs_st32(&res->bar_count, 0);
			gs_fence();
			gs_fetch_add32(&res->bar_gen, 1);
			last = 1;
		}
	}
	r = gs_bcast(last) ? 0 : gsrv_wait_word(gs, &res->bar_gen, gen);
	if (gs_tid() == 0)
		gs_fence();
	gs_sync();
	return r < 0 ? (int)r : 0;
}

/*
 * Receive exactly n bytes from peer into buf, the part of a stream of
 * whole bytes that starts after its first before; record what failed.
 * 0, or -1 after mr_fail.
 */
GSOCK_DEVICE int mr_recv_part(struct gsock_dev gs, struct mr_job *j, int fd,
			      uint32_t peer, void *buf, uint64_t n,
			      uint64_t before, uint64_t whole)
{
	long r = gsrv_recv_all(gs, fd, buf, n, j->timeout_ms * 1000L);

	if (r == (long)n)
		return 0;
	if (gs_tid() == 0) {
		if (r >= 0)
			mr_fail(j->res, MR_E_SHORT, 0, peer,
				before + (uint64_t)r, whole);
		else
			mr_fail(j->res, MR_E_RECV, r, peer, before, whole);
	}
	return -1;
}

/* mr_recv_part of a whole message of n bytes. */
GSOCK_DEVICE int mr_recv_all(struct gsock_dev gs, struct mr_job *j, int fd,
			     uint32_t peer, void *buf, uint64_t n)
{
	return mr_recv_part(gs, j, fd, peer, buf, n, 0, n);
}

GSOCK_DEVICE int mr_send_all(struct gsock_dev gs, struct mr_job *j, int fd,
			     uint32_t peer, const void *buf, uint64_t n)
{
	long r = gsrv_send_all(gs, fd, buf, n, j->timeout_ms * 1000L);

	if (r == (long)n)
		return 0;
	if (gs_tid() == 0)
		mr_fail(j->res, MR_E_SEND, r < 0 ? r : -EPIPE, peer, 0, n);
	return -1;
}

/*
 * A connection to worker peer, tried again while it refuses (it may not
 * listen yet) for up to timeout_ms; then our header. The descriptor, or
 * -1 after mr_fail.
 */
GSOCK_DEVICE int mr_connect(struct gsock_dev gs, struct mr_job *j,
			    uint32_t peer, uint64_t records)
{
	GS_SHARED struct mr_wire_hdr h;
	const struct mr_peer *p = &j->peer[peer];
	int fd = gsrv_connect(gs, &p->addr, p->len, j->timeout_ms * 1000L);

	if (fd < 0) {
		if (gs_tid() == 0)
			mr_fail(j->res, MR_E_CONNECT, fd, peer, 0, 0);
		return -1;
	}
	if (gs_tid() == 0)
		h = (struct mr_wire_hdr){ MR_WIRE_MAGIC, j->rank, records };
	gs_sync();
	if (mr_send_all(gs, j, fd, peer, &h, sizeof(h))) {
		gclose(gs, fd);
		return -1;
	}
	return fd;
}

/*
 * The next worker's connection on the listener, within timeout_ms, and
 * its header: the descriptor (*hdr filled, sender's rank checked), or -1
 * after mr_fail.
 */
GSOCK_DEVICE int mr_accept(struct gsock_dev gs, struct mr_job *j,
			   struct mr_wire_hdr *hdr)
{
	int lfd = (int)gs_ld_local32((const uint32_t *)&j->res->lfd);
	long fd = gsrv_accept(gs, lfd, j->timeout_ms * 1000L);

	if (fd < 0) {
		if (gs_tid() == 0)
			mr_fail(j->res, MR_E_ACCEPT, fd, 0, 0, 0);
		return -1;
	}
	if (mr_recv_all(gs, j, (int)fd, MR_MAX_PEERS, hdr, sizeof(*hdr))) {
		gclose(gs, (int)fd);
		return -1;
	}
	if (hdr->magic != MR_WIRE_MAGIC || hdr->rank >= j->workers ||
	    hdr->rank == j->rank) {
		if (gs_tid() == 0)
			mr_fail(j->res, MR_E_PROTO, -EPROTO, 0, 0, 0);
		gclose(gs, (int)fd);
		return -1;
	}
	return (int)fd;
}

/* Block 0 opens the listener other workers connect to. */
GSOCK_DEVICE void mr_listen(struct gsock_dev gs, struct mr_job *j)
{
	struct app_listener *l = &j->listen;
	int fd = gsrv_listen(gs, &l->addr, l->addrlen, l->reuseport, &l->bound,
			     &l->boundlen);

	if (gs_tid() == 0) {
		j->res->lfd = fd;
		if (fd < 0)
			mr_fail(j->res, MR_E_LISTEN, fd, j->rank, 0, 0);
	}
	gs_sync(); /* every thread reads lfd and the claim from here */
}

/* Block 0 of rank 0: the other workers connect; index them by rank. */
GSOCK_DEVICE int mr_km_gather_peers(struct gsock_dev gs, struct mr_job *j)
{
	GS_SHARED struct mr_wire_hdr h;

	for (uint32_t n = 1; n < j->workers; n++) {
		int fd = mr_accept(gs, j, &h);

		if (fd < 0)
			return -1;
		if (gs_tid() == 0)
			j->res->kfd[h.rank] = fd;
	}
	return 0;
}

/*
 * Block 0 of every worker, after rank 0 listens: meet the others before
 * the job's clock starts (the workers' kernels start tens of
 * milliseconds apart, and a worker's wait for a late peer is not the
 * job's time). The others connect to rank 0 and wait for its word that
 * all are there. The connections stay in res->kfd (rank 0: one per peer;
 * the others: kfd[0]). 0, or -1 after mr_fail.
 */
GSOCK_DEVICE int mr_meet(struct gsock_dev gs, struct mr_job *j)
{
	GS_SHARED uint64_t go;
	int fd;

	if (gs_tid() == 0)
		go = MR_WIRE_MAGIC;
	gs_sync();
	if (j->rank == 0) {
		if (mr_km_gather_peers(gs, j))
			return -1;
		gs_sync(); /* thread 0 wrote kfd: every thread sends on it */
		for (uint32_t p = 1; p < j->workers; p++)
			if (mr_send_all(gs, j, j->res->kfd[p], p, &go,
					sizeof(go)))
				return -1;
		return 0;
	}
	fd = mr_connect(gs, j, 0, 0);
	if (gs_tid() == 0)
		j->res->kfd[0] = fd;
	if (fd < 0 || mr_recv_all(gs, j, fd, 0, &go, sizeof(go)))
		return -1;
	if (go != MR_WIRE_MAGIC) {
		if (gs_tid() == 0)
			mr_fail(j->res, MR_E_PROTO, -EPROTO, 0, 0, 0);
		return -1;
	}
	return 0;
}

/* Block 0: close what mr_meet opened. */
GSOCK_DEVICE void mr_unmeet(struct gsock_dev gs, struct mr_job *j)
{
	for (uint32_t p = 0; p < j->workers; p++)
		if (p != j->rank && (j->rank == 0 || p == 0) &&
		    j->res->kfd[p] >= 0)
			gclose(gs, j->res->kfd[p]);
}

/* ---- word count ---- */

/* Whether table slot s holds key (len bytes, hash h); waits out a writer. */
GSOCK_DEVICE int mr_slot_is(struct mr_slot *s, uint32_t h, const uint32_t *key,
			    uint32_t len)
{
	if (gs_ld_local32(&s->hash) != h || gs_ld_local32(&s->w.len) != len)
		return 0;
	for (uint32_t i = 0; i < (MR_WORD_MAX + 1) / 4; i++)
		if (gs_ld_local32(&s->w.key[i]) != key[i])
			return 0;
	return 1;
}

/* Add n to key's count, inserting it: 0, or -ENOSPC when the table is full. */
GSOCK_DEVICE int mr_insert(struct mr_slot *t, uint32_t mask,
			   const uint32_t *key, uint32_t len, uint32_t h,
			   uint32_t n)
{
	uint32_t i = h & mask;

	for (uint32_t probe = 0; probe <= mask; probe++, i = (i + 1) & mask) {
		struct mr_slot *s = &t[i];
		uint32_t st = gs_ld_local32(&s->state);

		if (st == 0) {
			st = gs_cas32(&s->state, 0, 1);
			if (st == 0) {
				s->hash = h;
				s->w.len = len;
				for (uint32_t k = 0; k < (MR_WORD_MAX + 1) / 4;
				     k++)
					s->w.key[k] = key[k];
				s->w.count = n;
				gs_fence_dev();
				gs_st32(&s->state, 2);
				return 0;
			}
		}
		while (st == 1)
			st = gs_ld_local32(&s->state);
		if (mr_slot_is(s, h, key, len)) {
			gs_fetch_add32(&s->w.count, n);
			return 0;
		}
	}
	return -ENOSPC;
}

/* Every thread of the launch: count the words that start in its stretch. */
GSOCK_DEVICE void mr_map_words(struct mr_job *j, unsigned nblocks)
{
	uint64_t all = (uint64_t)nblocks * gs_bdim();
	uint64_t me = (uint64_t)gs_bid() * gs_bdim() + gs_tid();
	uint64_t per = (j->text_len + all - 1) / all;
	uint64_t p = me * per, end = p + per;
	const uint8_t *t = j->text;
	uint64_t len = j->text_len;

	if (end > len)
		end = len;
	if (p < end && p > 0 && mr_is_word_byte(t[p - 1]))
		p = mr_word_end(t, end, p); /* it started before us: not ours */
	while (p < end) {
		union {
			uint8_t b[MR_WORD_MAX + 1];
			uint32_t w[(MR_WORD_MAX + 1) / 4];
		} key;
		uint64_t q;
		uint32_t klen;

		if (!mr_is_word_byte(t[p])) {
			p++;
			continue;
		}
		q = mr_word_end(t, len, p);
		klen = mr_key(t + p, q - p, key.b);
		if (mr_insert(j->table, j->table_mask, key.w, klen,
			      mr_hash(key.b, klen), 1)) {
			mr_fail(j->res, MR_E_TABLE, -ENOSPC, j->rank, 0, 0);
			return;
		}
		p = q;
	}
}

/*
 * Every thread of the launch, over the table: count (fill == 0) or place
 * (fill != 0) the records bound for other workers.
 */
GSOCK_DEVICE void mr_pack(struct mr_job *j, unsigned nblocks, int fill)
{
	struct mr_result *res = j->res;
	uint64_t all = (uint64_t)nblocks * gs_bdim();

	for (uint64_t i = (uint64_t)gs_bid() * gs_bdim() + gs_tid();
	     i <= j->table_mask; i += all) {
		struct mr_slot *s = &j->table[i];
		uint32_t d;

		if (gs_ld_local32(&s->state) != 2)
			continue;
		d = mr_part(gs_ld_local32(&s->hash), j->workers);
		if (d == j->rank)
			continue;
		if (!fill)
			gs_fetch_add32(&res->nrec[d], 1);
		else
			j->out[res->off[d] + gs_fetch_add32(&res->cur[d], 1)] =
				s->w;
	}
}

/*
 * Threads tid, tid + nt, ... of some: add staged records from..n-1 into
 * the table.
 */
GSOCK_DEVICE void mr_insert_staged(struct mr_job *j, uint64_t from, uint64_t n,
				   uint64_t tid, uint64_t nt)
{
	for (uint64_t i = from + tid; i < n; i += nt) {
		const struct mr_word *w = &j->stage[i];

		if (mr_insert(j->table, j->table_mask, w->key, w->len,
			      mr_hash((const uint8_t *)w->key, w->len),
			      w->count))
			mr_fail(j->res, MR_E_TABLE, -ENOSPC, j->rank, 0, 0);
	}
}

/*
 * Block 0: receive the other workers' streams into the stage, which
 * holds a table's worth (one peer's, at most); res->staged says how many
 * records it holds at the end, for every block to add into the table
 * (one block adding them took most of the shuffle). Only a stage that
 * fills up before the streams end is added here, by this block.
 */
GSOCK_DEVICE void mr_gather_words(struct gsock_dev gs, struct mr_job *j)
{
	GS_SHARED struct mr_wire_hdr h;
	uint64_t got = 0, fill = 0;

	for (uint32_t n = 1; n < j->workers; n++) {
		int fd = mr_accept(gs, j, &h);

		if (fd < 0)
			return;
		gs_sync();
		for (uint64_t done = 0; done < h.records;) {
			uint64_t c = h.records - done;

			if (fill == j->stage_recs) {
				gs_fence_dev();
				gs_sync();
				mr_insert_staged(j, 0, fill, gs_tid(),
						 gs_bdim());
				gs_sync();
				fill = 0;
			}
			if (c > j->stage_recs - fill)
				c = j->stage_recs - fill;
			if (mr_recv_part(gs, j, fd, h.rank, j->stage + fill,
					 c * sizeof(struct mr_word),
					 done * sizeof(struct mr_word),
					 h.records * sizeof(struct mr_word))) {
				gclose(gs, fd);
				return;
			}
			fill += c;
			done += c;
			got += c * sizeof(struct mr_word);
		}
		gclose(gs, fd);
	}
	gs_fence_dev();
	gs_sync();
	if (gs_tid() == 0) {
		j->res->received = sizeof(h) * (j->workers - 1) + got;
		j->res->staged = fill;
	}
}

/* Block b in 1..W-1: send the records of worker (rank + b) % W. */
GSOCK_DEVICE void mr_scatter_words(struct gsock_dev gs, struct mr_job *j,
				   uint32_t b)
{
	uint32_t d = (j->rank + b) % j->workers;
	uint64_t n = j->res->nrec[d];
	const struct mr_word *w = j->out + j->res->off[d];
	uint64_t half = n / 2 * sizeof(*w);
	int fd = mr_connect(gs, j, d, n);

	if (fd < 0)
		return;
	if (j->hold_ms > 0) {
		if (mr_send_all(gs, j, fd, d, w, half))
			goto out;
		if (gs_tid() == 0)
			gs_st32(&j->holding, 1);
		if (gsrv_sleep(gs, j->hold_ms * 1000L))
			goto out;
	} else {
		half = 0;
	}
	if (mr_send_all(gs, j, fd, d, (const uint8_t *)w + half,
			n * sizeof(*w) - half))
		goto out;
	if (gs_tid() == 0)
		gs_fetch_add64((unsigned long long *)&j->res->sent,
			       sizeof(struct mr_wire_hdr) + n * sizeof(*w));
out:
	gclose(gs, fd);
}

GSOCK_KERNEL_FIT(mr_wordcount, gs, arg, MR_THREADS_MAX, 1)
{
	struct mr_job *j = (struct mr_job *)arg;
	struct mr_result *res = j->res;
	unsigned blocks = j->blocks, bid = gs_bid();

	if (bid == 0 && gs_tid() == 0)
		res->t_launch = gs_now_ns();
	if (j->workers > 1 && bid == 0) {
		mr_listen(gs, j);
		if (!mr_failed(res))
			mr_meet(gs, j);
	}
	if (mr_grid_sync(gs, res, blocks))
		return;
	if (bid == 0 && gs_tid() == 0)
		res->t_start = gs_now_ns();
	if (!mr_failed(res))
		mr_map_words(j, blocks);
	if (mr_grid_sync(gs, res, blocks))
		return;
	if (bid == 0 && gs_tid() == 0)
		res->t_map = gs_now_ns();
	if (j->workers > 1 && !mr_failed(res)) {
		mr_pack(j, blocks, 0);
		if (mr_grid_sync(gs, res, blocks))
			return;
		if (bid == 0 && gs_tid() == 0)
			for (uint32_t d = 0, o = 0; d < j->workers; d++) {
				res->off[d] = o;
				o += res->nrec[d];
			}
		if (mr_grid_sync(gs, res, blocks))
			return;
		mr_pack(j, blocks, 1);
		if (mr_grid_sync(gs, res, blocks))
			return;
		if (bid == 0)
			mr_gather_words(gs, j);
		else if (bid < j->workers)
			mr_scatter_words(gs, j, bid);
		if (mr_grid_sync(gs, res, blocks))
			return;
		mr_insert_staged(j, 0, gs_ld_local32(&res->staged),
				 (uint64_t)bid * gs_bdim() + gs_tid(),
				 (uint64_t)blocks * gs_bdim());
	}
	if (mr_grid_sync(gs, res, blocks))
		return;
	if (bid == 0 && gs_tid() == 0)
		res->t_end = gs_now_ns();
	if (bid == 0 && j->workers > 1)
		mr_unmeet(gs, j);
}

/* ---- k-means ---- */

/* Every block: assign its share of the points; add them into j->acc. */
GSOCK_DEVICE void mr_assign(struct mr_job *j, unsigned nblocks)
{
	GS_SHARED double sum[MR_KM_MAX_K * MR_KM_MAX_DIM];
	GS_SHARED unsigned long long cnt[MR_KM_MAX_K];
	uint32_t k = j->k, dim = j->dim;
	uint64_t all = (uint64_t)nblocks * gs_bdim();
	unsigned long long *gcnt =
		(unsigned long long *)(j->acc + (size_t)k * dim);

	for (uint32_t i = gs_tid(); i < k * dim; i += gs_bdim())
		sum[i] = 0;
	for (uint32_t i = gs_tid(); i < k; i += gs_bdim())
		cnt[i] = 0;
	gs_sync();
	for (uint64_t i = (uint64_t)gs_bid() * gs_bdim() + gs_tid();
	     i < j->npts; i += all) {
		const float *p = j->pts + i * dim;
		uint32_t c = mr_nearest(p, j->cent, k, dim);

		for (uint32_t d = 0; d < dim; d++)
			gs_add_f64(&sum[c * dim + d], (double)p[d]);
		gs_fetch_add64(&cnt[c], 1);
	}
	gs_sync();
	for (uint32_t i = gs_tid(); i < k * dim; i += gs_bdim())
		if (cnt[i / dim])
			gs_add_f64(&j->acc[i], sum[i]);
	for (uint32_t i = gs_tid(); i < k; i += gs_bdim())
		if (cnt[i])
			gs_fetch_add64(&gcnt[i], cnt[i]);
}

/*
 * Block 0: one exchange. Rank 0 adds every worker's sums into its own,
 * moves the centroids and sends them back; the others send their sums
 * and take the centroids. Then the sums start again from zero.
 */
GSOCK_DEVICE int mr_exchange(struct gsock_dev gs, struct mr_job *j)
{
	uint32_t k = j->k, dim = j->dim, n = k * dim + k;
	size_t acc = mr_acc_bytes(k, dim), cent = (size_t)k * dim * 4;
	unsigned long long *cnt = (unsigned long long *)(j->acc + k * dim);

	if (j->rank == 0) {
		for (uint32_t p = 1; p < j->workers; p++) {
			if (mr_recv_all(gs, j, j->res->kfd[p], p, j->pacc, acc))
				return -1;
			gs_fence_dev();
			gs_sync();
			for (uint32_t i = gs_tid(); i < n; i += gs_bdim())
				if (i < k * dim)
					j->acc[i] += j->pacc[i];
				else
					cnt[i - k * dim] +=
						((unsigned long long *)
							 j->pacc)[i];
			gs_sync();
		}
		mr_centroids(j->cent, j->acc, cnt, k, dim, gs_tid(),
			     gs_bdim());
		gs_fence_dev();
		gs_sync();
		for (uint32_t p = 1; p < j->workers; p++)
			if (mr_send_all(gs, j, j->res->kfd[p], p, j->cent,
					cent))
				return -1;
	} else {
		if (mr_send_all(gs, j, j->res->kfd[0], 0, j->acc, acc) ||
		    mr_recv_all(gs, j, j->res->kfd[0], 0, j->cent, cent))
			return -1;
	}
	if (gs_tid() == 0)
		j->res->sent += j->rank ? acc : cent * (j->workers - 1);
	if (gs_tid() == 0)
		j->res->received += j->rank ? cent : acc * (j->workers - 1);
	gs_sync();
	for (uint32_t i = gs_tid(); i < n; i += gs_bdim())
		j->acc[i] = 0; /* a count of 0 is all-zero bits too */
	return 0;
}

GSOCK_KERNEL_FIT(mr_kmeans, gs, arg, MR_THREADS_MAX, 1)
{
	struct mr_job *j = (struct mr_job *)arg;
	struct mr_result *res = j->res;
	unsigned blocks = j->blocks, bid = gs_bid();
	int up = 0;

	if (bid == 0 && gs_tid() == 0)
		res->t_launch = gs_now_ns();
	if (bid == 0 && j->workers > 1) {
		if (j->rank == 0)
			mr_listen(gs, j);
		up = !mr_failed(res) && !mr_meet(gs, j);
	}
	if (mr_grid_sync(gs, res, blocks))
		return;
	if (bid == 0 && gs_tid() == 0)
		res->t_start = gs_now_ns();
	/*
	 * Every block leaves the loop at the same turn: an error is read
	 * only after a barrier, and set only before one (block 0's setup
	 * and exchanges).
	 */
	for (uint32_t it = 0; it < j->iters; it++) {
		mr_assign(j, blocks);
		if (mr_grid_sync(gs, res, blocks))
			return;
		if (bid == 0) {
			uint64_t t0 = gs_now_ns();

			if (j->workers == 1) {
				uint32_t k = j->k, dim = j->dim;

				mr_centroids(j->cent, j->acc,
					     (unsigned long long *)(j->acc +
								    k * dim),
					     k, dim, gs_tid(), gs_bdim());
				gs_sync();
				for (uint32_t i = gs_tid(); i < k * dim + k;
				     i += gs_bdim())
					j->acc[i] = 0;
			} else if (up) {
				mr_exchange(gs, j);
			}
			if (gs_tid() == 0)
				res->xchg_ns += gs_now_ns() - t0;
		}
		if (mr_grid_sync(gs, res, blocks))
			return;
		if (mr_failed(res))
			break;
	}
	if (bid == 0 && gs_tid() == 0)
		res->t_end = gs_now_ns();
	if (bid == 0 && j->workers > 1)
		mr_unmeet(gs, j);
}
