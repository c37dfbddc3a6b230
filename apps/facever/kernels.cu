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
 * A fetcher block serves the requests of its server blocks (b % fetchers)
 * over one memcached connection, pipelined: it takes every request that
 * waits, asks memcached for all of them in one write ("mg fv:<id> v"
 * each) without waiting for earlier answers, and reads the replies as
 * they come (memcached answers in order) straight into each block's
 * buffer. memcached then reads and answers many keys per system call.
 */

/* A fetcher's state (shared memory; thread 0 writes, all read after a sync). */
struct fv_fetch {
	uint32_t fifo[FV_FIFO]; /* blocks asked for, in order (| FV_RETRIED) */
	uint32_t head, tail; /* replies read, keys asked (counts) */
	uint32_t pos, have; /* reply buffer: parsed up to, received up to */
	int fd; /* memcached; >= 0 whenever head != tail */
	uint64_t quiet_since; /* ns: last reply byte, or first key in flight */
};

#define FV_RETRIED 0x80000000u /* asked again on a fresh connection once */

/* One thread (any): the answer for fifo entry e is in; its block may go on. */
GSOCK_DEVICE void fv_publish(struct fv_server_args *a, uint32_t e,
			     int32_t status)
{
	struct fv_ask *k = &a->asks[e & ~FV_RETRIED];

	k->status = status;
	gs_st_dev64(&k->done, k->taken);
}

/*
 * Block-wide: take the waiting requests of fetcher f's blocks into the
 * fifo (at most FV_BATCH, and what the fifo holds); how many. Each thread
 * looks at its own blocks.
 */
GSOCK_DEVICE uint32_t fv_take(struct fv_server_args *a, uint32_t f,
			      struct fv_fetch *fs)
{
	GS_SHARED unsigned long long nb;
	uint32_t mine = (a->blocks - f + a->fetchers - 1) / a->fetchers;
	uint32_t room = FV_FIFO - (fs->tail - fs->head), n;

	if (room > FV_BATCH)
		room = FV_BATCH;
	if (gs_tid() == 0)
		nb = 0;
	gs_sync();
	for (uint32_t j = gs_tid(); j < mine; j += gs_bdim()) {
		uint32_t b = f + j * a->fetchers;
		struct fv_ask *k = &a->asks[b];
		uint64_t seq = gs_ld64(&k->seq), i;

		/* nor while an earlier one of the block is in flight (it gave up) */
		if (seq == k->taken || k->done != k->taken)
			continue;
		i = gs_fetch_add64(&nb, 1);
		if (i < room) { /* else it waits for the next turn */
			k->taken = seq;
			fs->fifo[(fs->tail + (uint32_t)i) % FV_FIFO] = b;
		}
	}
	gs_sync();
	n = nb < room ? (uint32_t)nb : room;
	if (gs_tid() == 0) {
		if (n && fs->head == fs->tail)
			fs->quiet_since = gs_now_ns();
		fs->tail += n;
	}
	gs_sync();
	return n;
}

/*
 * Block-wide: ask for fifo entries [from, tail) on the connection,
 * opening one if there is none: 0, or -1 with the connection closed.
 */
GSOCK_DEVICE int fv_ask_batch(struct gsock_dev gs, struct fv_server_args *a,
			      struct fv_fetch *fs, uint32_t from, char *text)
{
	long len = 0;
	int fd;

	if (gs_tid() == 0)
		for (uint32_t i = from; i != fs->tail; i++) {
			uint32_t b = fs->fifo[i % FV_FIFO] & ~FV_RETRIED;

			text[len++] = 'm';
			text[len++] = 'g';
			text[len++] = ' ';
			len += fv_key(text + len, gs_ld32(&a->asks[b].id));
			text[len++] = ' ';
			text[len++] = 'v';
			text[len++] = '\r';
			text[len++] = '\n';
		}
	len = gs_bcast(len);
	fd = fs->fd;
	if (fd < 0)
		fd = fv_mc_open(gs, a);
	if (fd >= 0 && gsend(gs, fd, text, (size_t)len, 0) != len) {
		gclose(gs, fd);
		fd = -1;
	}
	if (gs_tid() == 0)
		fs->fd = fd;
	gs_sync();
	return fd < 0 ? -1 : 0;
}

/*
 * Block-wide: the connection failed. Keys asked on it once already get
 * FV_E_STORE; the others are asked once more on a fresh connection
 * (memcached may have restarted since it was opened), in order; if that
 * fails too, they all get FV_E_STORE.
 */
GSOCK_DEVICE void fv_fetch_fail(struct gsock_dev gs, struct fv_server_args *a,
				struct fv_fetch *fs, char *text)
{
	if (fs->fd >= 0)
		gclose(gs, fs->fd);
	if (gs_tid() == 0) {
		uint32_t n = 0;

		fs->fd = -1;
		for (uint32_t i = fs->head; i != fs->tail; i++) {
			uint32_t e = fs->fifo[i % FV_FIFO];

			if (e & FV_RETRIED)
				fv_publish(a, e, FV_E_STORE);
			else
				fs->fifo[(fs->head + n++) % FV_FIFO] =
					e | FV_RETRIED;
		}
		fs->tail = fs->head + n;
		fs->pos = fs->have = 0;
		fs->quiet_since = gs_now_ns();
	}
	gs_sync();
	if (fs->head != fs->tail && fv_ask_batch(gs, a, fs, fs->head, text)) {
		if (gs_tid() == 0) {
			for (; fs->head != fs->tail; fs->head++)
				fv_publish(a, fs->fifo[fs->head % FV_FIFO],
					   FV_E_STORE);
		}
		gs_sync();
	}
}

/*
 * Thread 0: find the whole replies at the start of the buffer, at most
 * FV_BATCH: where each one's value starts (val), the answer it gives
 * (status: a value of the wrong size fails that key only) and where the
 * next reply starts (*next). Their count, or -1 - count when memcached
 * said something that is no reply to "mg" after them. Only line heads
 * are read: the values are skipped.
 */
GSOCK_DEVICE long fv_fetch_scan_t0(const struct fv_fetch *fs,
				   const uint8_t *buf, uint32_t cap,
				   uint32_t *val, int32_t *status,
				   uint32_t *next)
{
	uint32_t pos = fs->pos, n = 0;

	*next = pos;
	while (n < FV_BATCH && fs->head + n != fs->tail) {
		uint32_t end = fv_line_end_t0(buf + pos, fs->have - pos);
		long v;

		if (!end)
			return fs->have - pos >= FV_MCBUF ? -1 - (long)n : n;
		v = fv_mc_parse_t0(buf + pos, end);
		if (v == FV_E_STORE || (v > 0 && end + v + 2 > cap))
			return -1 - (long)n;
		if (v >= 0 && pos + end + v + 2 > fs->have)
			break; /* the value is not all here yet */
		val[n] = pos + end;
		status[n++] = v == FV_FEAT_BYTES ? 0 :
			      v == FV_E_UNKNOWN	 ? FV_E_UNKNOWN :
						   FV_E_STORE;
		pos += end + (v >= 0 ? (uint32_t)v + 2 : 0);
		*next = pos;
	}
	return n;
}

/*
 * Block-wide: hand out every whole reply in the buffer; -1 when memcached
 * said something that is no reply to "mg" (the replies before it are
 * handed out). One thread walks the reply lines; the block copies all
 * their values at once; then each thread publishes one answer.
 */
GSOCK_DEVICE int fv_fetch_parse(struct fv_server_args *a, struct fv_fetch *fs,
				const uint8_t *buf, uint32_t cap)
{
	GS_SHARED uint32_t val[FV_BATCH];
	GS_SHARED int32_t status[FV_BATCH];
	GS_SHARED uint32_t next;

	for (;;) {
		long r = 0;
		uint32_t n;

		if (gs_tid() == 0)
			r = fv_fetch_scan_t0(fs, buf, cap, val, status, &next);
		r = gs_bcast(r);
		n = (uint32_t)(r < 0 ? -1 - r : r);
		for (uint32_t i = 0; i < n; i++) {
			size_t b = fs->fifo[(fs->head + i) % FV_FIFO] &
				   ~FV_RETRIED;

			/* block b's stored features follow its query's */
			if (!status[i])
				gs_copy(a->feats + (b * 2 + 1) * FV_NFEAT,
					buf + val[i], FV_FEAT_BYTES);
		}
		gs_sync();
		for (uint32_t i = gs_tid(); i < n; i += gs_bdim())
			fv_publish(a, fs->fifo[(fs->head + i) % FV_FIFO],
				   status[i]);
		gs_sync();
		if (gs_tid() == 0 && n) {
			fs->head += n;
			fs->pos = next;
			if (fs->pos == fs->have)
				fs->pos = fs->have = 0;
		}
		gs_sync();
		if (r < 0)
			return -1;
		if (n < FV_BATCH)
			return 0;
	}
}

/* Block-wide: move the unparsed bytes of a full buffer to its start. */
GSOCK_DEVICE void fv_fetch_compact(struct fv_fetch *fs, uint8_t *buf)
{
	uint32_t pos = fs->pos, n = fs->have - fs->pos;

	/* in pieces no longer than the gap, so that no piece overlaps itself */
	for (uint32_t o = 0; o < n; o += pos) {
		gs_copy(buf + o, buf + pos + o, n - o < pos ? n - o : pos);
		gs_sync();
	}
	if (gs_tid() == 0) {
		fs->pos = 0;
		fs->have = n;
	}
	gs_sync();
}

/* Thread 0 of a fetcher: what it has done, and where its time went. */
struct fv_fetch_count {
	uint64_t batches, keys, ns_ask, ns_recv, ns_parse, ns_idle;
	uint64_t t; /* the clock at the last split */
};

/* Thread 0 (the others do nothing): the time since *t goes to *to. */
GSOCK_DEVICE void fv_split_t0(uint64_t *t, uint64_t *to)
{
	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns();

		*to += now - *t;
		*t = now;
	}
}

/* Thread 0: the counts to the block's report (stores only), as it stops. */
GSOCK_DEVICE void fv_count_out_t0(const struct fv_fetch_count *c,
				  struct fv_block_stats *st)
{
	st->conns = c->batches;
	st->requests = c->keys;
	st->ns_ask = c->ns_ask;
	st->ns_recv = c->ns_recv;
	st->ns_parse = c->ns_parse;
	st->ns_idle = c->ns_idle;
}

/* Fetcher f's loop, until the application stops. */
GSOCK_DEVICE void fv_fetcher(struct gsock_dev gs, struct fv_server_args *a,
			     uint32_t f)
{
	GS_SHARED struct fv_fetch fs;
	char *text = (char *)a->fetch_buf + (size_t)f * FV_FETCH_BUF;
	uint8_t *buf = (uint8_t *)text + FV_FETCH_TEXT;
	const uint32_t cap = FV_FETCH_BUF - FV_FETCH_TEXT;
	struct fv_block_stats *st = &a->stats[a->blocks + f];
	struct fv_fetch_count cnt = { 0, 0, 0, 0, 0, 0, gs_now_ns() };
	unsigned idle = 0;

	if (gs_tid() == 0) {
		fs.head = fs.tail = fs.pos = fs.have = 0;
		fs.fd = -1;
	}
	gs_sync();
	for (;;) {
		uint32_t from = fs.tail, nb = fv_take(a, f, &fs);
		int busy = nb != 0;
		long r, err = 0;

		if (nb) {
			if (gs_tid() == 0) {
				cnt.batches++;
				cnt.keys += nb;
			}
			if (fv_ask_batch(gs, a, &fs, from, text))
				fv_fetch_fail(gs, a, &fs, text);
		}
		/* looking for requests is idle time */
		fv_split_t0(&cnt.t, nb ? &cnt.ns_ask : &cnt.ns_idle);
		if (fs.head != fs.tail) {
			if (fs.have == cap && fs.pos)
				fv_fetch_compact(&fs, buf);
			r = grecv(gs, fs.fd, buf + fs.have, cap - fs.have,
				  MSG_DONTWAIT);
			fv_split_t0(&cnt.t, &cnt.ns_recv);
			if (r > 0) {
				if (gs_tid() == 0) {
					fs.have += (uint32_t)r;
					fs.quiet_since = gs_now_ns();
				}
				gs_sync();
				busy = 1;
				if (fv_fetch_parse(a, &fs, buf, cap) < 0)
					fv_fetch_fail(gs, a, &fs, text);
				fv_split_t0(&cnt.t, &cnt.ns_parse);
			} else {
				long gone = r != -EAGAIN;

				if (gs_tid() == 0 && !gone)
					gone = gs_now_ns() - fs.quiet_since >
					       1000000ull * a->timeout_ms;
				if (gs_bcast(gone)) /* gone, or silent too long */
					fv_fetch_fail(gs, a, &fs, text);
			}
		}
		if (busy) {
			idle = 0;
			continue;
		}
		if (gs_tid() == 0) {
			err = gs_world_error(gs);
			if (!err)
				gs_relax(idle++);
			fv_split_t0(&cnt.t, &cnt.ns_idle);
		}
		if (gs_bcast(err))
			break;
	}
	if (gs_tid() == 0) {
		for (; fs.head != fs.tail; fs.head++)
			fv_publish(a, fs.fifo[fs.head % FV_FIFO], FV_E_STORE);
		fv_count_out_t0(&cnt, st);
	}
	if (fs.fd >= 0)
		gclose(gs, fs.fd);
}

/* The block's request for the features of id goes to its fetcher. */
GSOCK_DEVICE void fv_ask(struct fv_server_args *a, uint32_t b, uint32_t id,
			 uint64_t *seq)
{
	struct fv_ask *k = &a->asks[b];

	if (gs_tid() == 0) {
		k->id = id;
		gs_st_dev64(&k->seq, ++*seq);
	}
	gs_sync();
}

/*
 * Wait for the fetcher's answer to request seq of block b: 0 (the
 * features are in the block's buffer), FV_E_UNKNOWN or FV_E_STORE. The
 * fetcher bounds its memcached waits by the timeout (twice, when it asks
 * again on a fresh connection); this wait by three times that, in case the
 * fetcher itself is stuck.
 */
GSOCK_DEVICE int fv_answer(struct gsock_dev gs, struct fv_server_args *a,
			   uint32_t b, uint64_t seq)
{
	struct fv_ask *k = &a->asks[b];
	long r = 0;

	if (gs_tid() == 0) {
		uint64_t until = gs_now_ns() + 3000000ull * a->timeout_ms;
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

/*
 * Serve connection c until it ends; the error that ended it, or 0. Thread
 * 0 counts what it served in *mine.
 */
GSOCK_DEVICE long fv_serve(struct gsock_dev gs, struct fv_server_args *a, int c,
			   uint64_t *seq, struct fv_block_stats *mine)
{
	GS_SHARED uint32_t hist[FV_NFEAT], cellsum[FV_GRID * FV_GRID];
	GS_SHARED float scratch[1024];
	uint32_t b = gs_bid();
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
		uint64_t t = gs_now_ns(); /* thread 0 splits the time */
		long n = grecv(gs, c, req, sizeof(*req), 0); /* idle: wait */

		if (n > 0 && n < (long)sizeof(*req)) { /* the rest is owed */
			long more = gsrv_recv_all(gs, c, (uint8_t *)req + n,
						  sizeof(*req) - (uint64_t)n,
						  a->timeout_ms * 1000L);

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
		fv_split_t0(&t, &mine->ns_step[FV_WAIT]);
		n = gsrv_recv_all(gs, c, img, (uint64_t)w * h,
				  a->timeout_ms * 1000L);
		if (n != (long)(w * h))
			return n < 0 ? n : -EPIPE;
		fv_split_t0(&t, &mine->ns_step[FV_PIC]);
		fv_features(img, w, h, query, hist, cellsum);
		fv_split_t0(&t, &mine->ns_step[FV_COMPUTE]);
		status = fv_answer(gs, a, b, *seq);
		fv_split_t0(&t, &mine->ns_step[FV_ANSWER]);
		if (status == 0) {
			d = fv_chi2(query, stored, scratch);
			status = d <= a->threshold ? FV_MATCH : FV_NO_MATCH;
		}
		fv_split_t0(&t, &mine->ns_step[FV_COMPUTE]);
		n = fv_reply(gs, c, resp, seqno, status, d);
		fv_split_t0(&t, &mine->ns_step[FV_REPLY]);
		if (gs_tid() == 0) {
			mine->requests++;
			mine->matches += status == FV_MATCH;
			mine->errors += status < 0;
		}
		if (n < 0)
			return n;
	}
}

GSOCK_KERNEL_FIT(fv_server_kernel, gs, arg, FV_THREADS, FV_PER_SM)
{
	struct fv_server_args *a = (struct fv_server_args *)arg;
	struct fv_block_stats *st = &a->stats[gs_bid()];
	uint64_t seq = 0; /* requests to the fetcher: thread 0 counts, reads */
	struct fv_block_stats mine = { 0 }; /* thread 0's; stored at each end */
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
		r = fv_serve(gs, a, c, &seq, &mine);
		gclose(gs, c);
		if (gs_tid() == 0) {
			mine.conns++;
			if (r < 0)
				mine.last_error = r;
			*st = mine;
		}
		if (r == -ECANCELED || r == -ECONNABORTED)
			break;
	}
}
