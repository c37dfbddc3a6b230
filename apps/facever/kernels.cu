/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-call face verification server G, written once with g-calls: nvcc
 * builds it for the GPU, the C compiler (kernels_host.c) for the host
 * backend. Each server block accepts a connection and serves its requests
 * one after another: read the request's header, ask its fetcher block for
 * the claimed person's reference features, receive the picture and compute
 * its features while the fetcher gets them from memcached (in one batch
 * with other blocks' requests), compare, reply. No CPU code is on this
 * path.
 *
 * Every wait that depends on a peer other than the client's next request
 * is bounded (a->timeout_ms): a stalled client or memcached costs that
 * connection or that answer, never the block.
 */
#include "fv_gpu.h"

/* Thread 0: where the first "\n" of line[0, n) ends, or 0. */
GSOCK_DEVICE uint32_t fv_line_end_t0(const uint8_t *line, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (line[i] == '\n')
			return i + 1;
	return 0;
}

/*
 * Thread 0: what a memcached reply line says: the value's length for
 * "VA <len>\r\n", FV_E_UNKNOWN for "EN\r\n", FV_E_STORE for anything else.
 */
GSOCK_DEVICE long fv_mc_parse_t0(const uint8_t *line, uint32_t len)
{
	long v = 0;
	uint32_t i = 3;

	if (len == 4 && line[0] == 'E' && line[1] == 'N')
		return FV_E_UNKNOWN;
	if (len < 6 || line[0] != 'V' || line[1] != 'A' || line[2] != ' ')
		return FV_E_STORE;
	for (; i < len - 2 && line[i] >= '0' && line[i] <= '9'; i++)
		v = v * 10 + (line[i] - '0');
	if (i == 3 || v > (1 << 20) || line[len - 2] != '\r')
		return FV_E_STORE;
	return v;
}

/* Open a memcached connection; the descriptor or FV_E_STORE. */
GSOCK_DEVICE int fv_mc_open(struct gsock_dev gs, struct fv_server_args *a)
{
	int family = ((struct sockaddr *)&a->mc)->sa_family, one = 1;
	int fd = gsocket(gs, family, SOCK_STREAM, 0);

	if (fd < 0)
		return FV_E_STORE;
	if (family != AF_UNIX)
		gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof(one));
	if (gconnect(gs, fd, (struct sockaddr *)&a->mc, a->mclen) < 0) {
		gclose(gs, fd);
		return FV_E_STORE;
	}
	return fd;
}

/*
 * ---- fetchers ----
 * A fetcher block takes the requests of its server blocks (b % fetchers)
 * that are waiting, asks memcached for all of them in one write ("mg
 * fv:<id> v" each) and reads the replies in order, straight into each
 * block's buffer; memcached reads and answers a batch with one system
 * call each way instead of one per request.
 */

/* Thread 0: one batch's text into out; its length. */
GSOCK_DEVICE uint32_t fv_batch_text_t0(struct fv_server_args *a,
				       const uint32_t *who, uint32_t nb,
				       char *out)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < nb; i++) {
		out[n++] = 'm';
		out[n++] = 'g';
		out[n++] = ' ';
		n += fv_key(out + n, gs_ld32(&a->asks[who[i]].id));
		out[n++] = ' ';
		out[n++] = 'v';
		out[n++] = '\r';
		out[n++] = '\n';
	}
	return n;
}

/*
 * Read the replies of a batch of nb on fd into the askers' buffers and
 * statuses. Returns how many replies were read before the connection
 * failed (nb when it did not).
 */
GSOCK_DEVICE uint32_t fv_batch_read(struct gsock_dev gs,
				    struct fv_server_args *a, int fd,
				    const uint32_t *who, uint32_t nb,
				    uint8_t *buf, uint32_t cap)
{
	uint32_t pos = 0, have = 0, i = 0;

	while (i < nb) {
		uint32_t end = 0;
		long v = 0, r;

		if (gs_tid() == 0)
			end = fv_line_end_t0(buf + pos, have - pos);
		end = (uint32_t)gs_bcast(end);
		if (end) {
			if (gs_tid() == 0)
				v = fv_mc_parse_t0(buf + pos, end);
			v = gs_bcast(v);
		}
		/* a whole reply in buf[pos, have)? */
		if (end && (v < 0 || pos + end + (uint32_t)v + 2 <= have)) {
			struct fv_ask *k = &a->asks[who[i]];
			int32_t status = v == FV_E_UNKNOWN ? FV_E_UNKNOWN : 0;

			if (v == FV_E_STORE)
				return i; /* not a reply we can read past */
			if (v >= 0 && v != FV_FEAT_BYTES)
				status = FV_E_STORE; /* a wrong value: this one */
			if (status == 0)
				gs_copy(a->feats +
						((size_t)who[i] * 2 + 1) * FV_NFEAT,
					buf + pos + end, FV_FEAT_BYTES);
			gs_sync();
			if (gs_tid() == 0)
				k->status = status;
			pos += end + (v >= 0 ? (uint32_t)v + 2 : 0);
			i++;
			continue;
		}
		if ((!end && have - pos >= FV_MCBUF) ||
		    (end && v > (long)cap - pos - end - 2))
			return i; /* a line or a value that cannot fit */
		r = app_recv_timed(gs, fd, buf + have, cap - have, 0,
				   a->timeout_ms);
		if (r <= 0)
			return i;
		have += (uint32_t)r;
	}
	return nb;
}

/*
 * Block-wide: take the waiting requests of fetcher f's blocks (at most
 * FV_BATCH) into who; how many. Each thread looks at its own blocks.
 */
GSOCK_DEVICE uint32_t fv_batch_take(struct fv_server_args *a, uint32_t f,
				    uint32_t *who)
{
	GS_SHARED unsigned long long nb;
	uint32_t mine = (a->blocks - f + a->fetchers - 1) / a->fetchers;

	if (gs_tid() == 0)
		nb = 0;
	gs_sync();
	for (uint32_t j = gs_tid(); j < mine; j += gs_bdim()) {
		uint32_t b = f + j * a->fetchers;
		struct fv_ask *k = &a->asks[b];
		uint64_t seq = gs_ld64(&k->seq), i;

		if (seq == k->taken)
			continue;
		i = gs_fetch_add64(&nb, 1);
		if (i < FV_BATCH) { /* else it waits for the next batch */
			k->taken = seq;
			who[i] = b;
		}
	}
	gs_sync();
	return nb < FV_BATCH ? (uint32_t)nb : FV_BATCH;
}

/* Fetcher f's loop, until the application stops. */
GSOCK_DEVICE void fv_fetcher(struct gsock_dev gs, struct fv_server_args *a,
			     uint32_t f)
{
	GS_SHARED uint32_t who[FV_BATCH];
	uint8_t *text = a->fetch_buf + (size_t)f * FV_FETCH_BUF;
	uint8_t *buf = text + FV_FETCH_TEXT;
	struct fv_block_stats *st = &a->stats[a->blocks + f];
	unsigned idle = 0;
	int fd = -1;

	for (;;) {
		uint32_t nb = 0, done = 0, len = 0;
		long err = 0;

		nb = fv_batch_take(a, f, who);
		if (gs_tid() == 0 && !nb) {
			err = gs_world_error(gs);
			if (!err)
				gs_relax(idle++);
		}
		if (gs_bcast(err))
			break;
		if (!nb)
			continue;
		idle = 0;
		if (gs_tid() == 0)
			len = fv_batch_text_t0(a, who, nb, (char *)text);
		len = (uint32_t)gs_bcast(len);
		/* a connection made earlier may be dead (memcached restarted): once more */
		for (int fresh = fd < 0, tries = 2; tries && done < nb;
		     tries--) {
			if (fd < 0) {
				fd = fv_mc_open(gs, a);
				fresh = 1;
			}
			if (fd < 0)
				break;
			if (gsend(gs, fd, text, len, 0) == (long)len)
				done = fv_batch_read(gs, a, fd, who, nb, buf,
						     FV_FETCH_BUF - FV_FETCH_TEXT);
			if (done < nb) {
				gclose(gs, fd);
				fd = -1;
			}
			if (done || fresh)
				break; /* asked again, the replies read would repeat */
		}
		if (gs_tid() == 0) {
			for (uint32_t i = 0; i < nb; i++) {
				struct fv_ask *k = &a->asks[who[i]];

				if (i >= done)
					k->status = FV_E_STORE;
				gs_st64(&k->done, k->taken);
			}
			st->conns++; /* batches */
			st->requests += nb; /* keys */
		}
		gs_sync();
	}
	if (fd >= 0)
		gclose(gs, fd);
}

/* The block's request for the features of id goes to its fetcher. */
GSOCK_DEVICE void fv_ask(struct fv_server_args *a, uint32_t b, uint32_t id,
			 uint64_t *seq)
{
	struct fv_ask *k = &a->asks[b];

	if (gs_tid() == 0) {
		gs_st32(&k->id, id);
		gs_st64(&k->seq, ++*seq);
	}
	gs_sync();
}

/*
 * Wait for the fetcher's answer to request seq of block b: 0 (the
 * features are in the block's buffer), FV_E_UNKNOWN or FV_E_STORE. The
 * fetcher bounds each memcached wait by the timeout; this wait by twice
 * that, in case the fetcher itself is stuck.
 */
GSOCK_DEVICE int fv_answer(struct gsock_dev gs, struct fv_server_args *a,
			   uint32_t b, uint64_t seq)
{
	struct fv_ask *k = &a->asks[b];
	long r = 0;

	if (gs_tid() == 0) {
		uint64_t until = gs_now_ns() + 2000000ull * a->timeout_ms;
		unsigned turn = 0;

		while (gs_ld64(&k->done) != seq) {
			if (gs_world_error(gs) || gs_now_ns() > until) {
				r = FV_E_STORE;
				break;
			}
			gs_relax(turn++);
		}
		if (!r)
			r = (int32_t)gs_ld32((const uint32_t *)&k->status);
	}
	return (int)gs_bcast(r);
}

/* Answer one request; < 0 when the connection is gone. */
GSOCK_DEVICE long fv_reply(struct gsock_dev gs, int c, struct fv_resp *resp,
			   uint32_t seq, int32_t status, float distance)
{
	if (gs_tid() == 0)
		*resp = (struct fv_resp){ FV_RESP_MAGIC, seq, status,
					  distance };
	gs_sync();
	return gsend(gs, c, resp, sizeof(*resp), 0);
}

/* Serve connection c until it ends; the error that ended it, or 0. */
GSOCK_DEVICE long fv_serve(struct gsock_dev gs, struct fv_server_args *a, int c,
			   uint64_t *seq)
{
	GS_SHARED uint32_t hist[FV_NFEAT], cellsum[FV_GRID * FV_GRID];
	GS_SHARED float scratch[1024];
	uint32_t b = gs_bid();
	struct fv_block_stats *st = &a->stats[b];
	uint8_t *img = a->imgs + (size_t)b * FV_MAX_PIXELS;
	float *query = a->feats + (size_t)b * 2 * FV_NFEAT;
	float *stored = query + FV_NFEAT;
	uint8_t *io = a->io + (size_t)b * FV_IO_BYTES;
	struct fv_req *req = (struct fv_req *)io;
	struct fv_resp *resp = (struct fv_resp *)(io + 16);

	for (;;) {
		uint32_t w, h, seqno;
		int32_t status = 0;
		float d = 0.0f;
		long n = grecv(gs, c, req, sizeof(*req), 0); /* idle: wait */

		if (n > 0 && n < (long)sizeof(*req)) { /* the rest is owed */
			long more = app_recv_timed(gs, c, (uint8_t *)req + n,
						   sizeof(*req) - (uint64_t)n,
						   1, a->timeout_ms);

			n = more < 0 ? more : n + more;
		}
		if (n != (long)sizeof(*req))
			return n < 0 ? n : 0;
		w = req->w;
		h = req->h;
		seqno = req->seq;
		if (req->magic != FV_REQ_MAGIC)
			status = FV_E_PROTO;
		else if (!fv_side_ok(w) || !fv_side_ok(h))
			status = FV_E_SIZE;
		if (status) {
			fv_reply(gs, c, resp, seqno, status, 0.0f);
			return status == FV_E_PROTO ? -EPROTO : -EMSGSIZE;
		}
		/* asked now, the answer travels while the picture comes in */
		fv_ask(a, b, req->id, seq);
		n = app_recv_timed(gs, c, img, (uint64_t)w * h, 1,
				   a->timeout_ms);
		if (n != (long)(w * h))
			return n < 0 ? n : -EPIPE;
		fv_features(img, w, h, query, hist, cellsum);
		status = fv_answer(gs, a, b, *seq);
		if (status == 0) {
			d = fv_chi2(query, stored, scratch);
			status = d <= a->threshold ? FV_MATCH : FV_NO_MATCH;
		}
		n = fv_reply(gs, c, resp, seqno, status, d);
		if (gs_tid() == 0) {
			st->requests++;
			st->matches += status == FV_MATCH;
			st->errors += status < 0;
		}
		if (n < 0)
			return n;
	}
}

GSOCK_KERNEL_FIT(fv_server_kernel, gs, arg, FV_THREADS, FV_PER_SM)
{
	struct fv_server_args *a = (struct fv_server_args *)arg;
	struct fv_block_stats *st = &a->stats[gs_bid()];
	uint64_t seq = 0; /* this block's requests to its fetcher */
	long lfd;

	if (gs_bid() >= a->blocks) {
		fv_fetcher(gs, a, gs_bid() - a->blocks);
		return;
	}
	lfd = app_get_listener(gs, &a->listen);
	if (lfd < 0)
		return;
	for (;;) {
		int c = gaccept(gs, (int)lfd, 0, 0);
		long r;

		if (c == -ECANCELED || c == -ECONNABORTED || c == -EBADF)
			break;
		if (c < 0)
			continue;
		r = fv_serve(gs, a, c, &seq);
		gclose(gs, c);
		if (gs_tid() == 0) {
			st->conns++;
			if (r < 0)
				st->last_error = r;
		}
		if (r == -ECANCELED || r == -ECONNABORTED)
			break;
	}
}
