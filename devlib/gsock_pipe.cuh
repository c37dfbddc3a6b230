/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server layer's batching client: pipes. A pipe is a block of its
 * own (launched after the serving blocks) that holds one connection to a
 * backend (memcached, say) and carries the requests of the serving
 * blocks that share it (serving block b uses pipe b % pipes). Each turn
 * it takes every ask that waits, writes them all in one gsend without
 * waiting for earlier replies, and hands the replies out in order as they
 * come, each straight into its asker's buffer. The backend then reads and
 * answers many requests per system call, and a serving block's ask costs
 * it a few stores and one wait.
 *
 *	serving block:	gsrv_mc_get(gs, s, key, klen, dst, cap);
 *			... other work while the answer travels ...
 *			n = gsrv_pipe_wait(gs, s, timeout_us);
 *	pipe block:	gsrv_mc_serve(gs, s);
 *
 * The protocol is a parse function (struct gsrv_reply); memcached's meta
 * get (gsrv_mc_get, gsrv_mc_reply, gsrv_mc_serve) is the one written
 * here. When the connection fails, its asks in flight are written once
 * more on a fresh connection (a backend may have restarted), so only
 * requests that may be repeated belong in a pipe. gsock-server(3) is the
 * manual.
 *
 * Included by gsock_server.cuh.
 */
#ifndef GSOCK_PIPE_CUH
#define GSOCK_PIPE_CUH

#define GS_SRV_RETRIED 0x80000000u /* a fifo entry written a second time */

/* What a parse function says about the reply at the head of the buffer. */
struct gsrv_reply {
	uint64_t size; /* all its bytes, from its first */
	uint32_t off; /* where its payload starts */
	uint32_t len; /* the payload's length */
	int32_t status; /* 0, or the negative errno the asker gets */
};

/*
 * Thread 0: the reply at buf[0, have): 1 when its size is known (r
 * filled; the payload need not be all there yet), 0 when more bytes are
 * needed for that, -1 when the bytes are no reply of the protocol.
 */
typedef int (*gsrv_parse_fn)(const uint8_t *buf, uint32_t have,
			     struct gsrv_reply *r, void *ctx);

/* Whether this block is a pipe (launched after the serving blocks). */
GSOCK_DEVICE int gsrv_pipe_block(struct gsock_dev gs, const struct gsrv *s)
{
	(void)gs;
	return gs_bid() >= s->blocks * s->group_blocks;
}

GSOCK_DEVICE struct gs_srv_ask *gs_srv_ask_of(struct gsock_dev gs,
					      const struct gsrv *s)
{
	(void)gs;
	return &s->asks[gs_bid() / s->group_blocks];
}

/*
 * Block-wide, after the request is in the ask's req: send it down the
 * block's pipe; the reply's payload is to go to dst (cap bytes).
 */
GSOCK_DEVICE void gs_srv_ask_post(struct gsock_dev gs, const struct gsrv *s,
				  uint32_t len, void *dst, uint32_t cap)
{
	struct gs_srv_ask *a = gs_srv_ask_of(gs, s);

	gs_sync();
	if (gs_tid() == 0) {
		a->len = len;
		a->dst = (uint8_t *)dst;
		a->cap = cap;
		gs_st_dev64(&a->seq, a->seq + 1); /* device scope: same GPU */
	}
	gs_sync();
}

/*
 * Send len bytes at req (a whole request of the backend's protocol) down
 * this block's pipe; the payload of its reply will go to dst, at most cap
 * bytes of device memory. Returns at once: 0, -EMSGSIZE when len exceeds
 * GSRV_ASK_MAX, -ENOTCONN when the server has no pipes. Wait for the
 * reply with gsrv_pipe_wait(); a block has one ask out at a time.
 */
GSOCK_DEVICE int gsrv_pipe_ask(struct gsock_dev gs, const struct gsrv *s,
			       const void *req, uint32_t len, void *dst,
			       uint32_t cap)
{
	if (!s->pipes)
		return -ENOTCONN;
	if (len > GSRV_ASK_MAX)
		return -EMSGSIZE;
	gs_sync();
	for (uint32_t i = gs_tid(); i < len; i += gs_bdim())
		gs_srv_ask_of(gs, s)->req[i] = ((const uint8_t *)req)[i];
	gs_srv_ask_post(gs, s, len, dst, cap);
	return 0;
}

/*
 * Wait up to timeout_us (< 0: no limit) for the reply to this block's
 * last ask: the length of its payload (now at the ask's dst), or a
 * negative errno: the protocol's (gsrv_mc_reply's, say), -EMSGSIZE when
 * the payload exceeds the ask's cap or the pipe's buffer, the error that
 * ended the backend connection twice (-ECONNREFUSED, -ETIMEDOUT,
 * -ECONNRESET, -EPROTO ...), -ETIMEDOUT when the wait ran out, or the
 * server's end.
 */
GSOCK_DEVICE long gsrv_pipe_wait(struct gsock_dev gs, const struct gsrv *s,
				 long timeout_us)
{
	struct gs_srv_ask *a = gs_srv_ask_of(gs, s);
	long r = 0;

	if (gs_tid() == 0) {
		uint64_t seq = a->seq;
		uint64_t until = gs_now_ns() + (uint64_t)timeout_us * 1000;
		unsigned turn = 0;

		for (uint64_t v = gs_ld64(&a->done); v != seq;
		     v = gs_ld64_moved(&a->done, v)) {
			r = gs_wait_turn(gs, &turn);
			if (!r && timeout_us >= 0 && gs_now_ns() > until)
				r = -ETIMEDOUT;
			if (r)
				break;
		}
		if (!r)
			r = (long)gs_ld64((const uint64_t *)&a->result);
	}
	return gs_bcast(r);
}

/* ---- the pipe block ---- */

/* Where a pipe writes a batch's text, and where its replies come in. */
GSOCK_DEVICE uint8_t *gs_srv_pipe_text(struct gs_srv_pipe *ps)
{
	return ps->mem;
}

GSOCK_DEVICE uint8_t *gs_srv_pipe_buf(struct gs_srv_pipe *ps)
{
	return ps->mem + GSRV_PIPE_BATCH * GSRV_ASK_MAX;
}

/* Thread 0: the time since the last split goes to step i. */
GSOCK_DEVICE void gs_srv_pipe_split_t0(struct gs_srv_pipe *ps, unsigned i)
{
	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns();

		ps->st.step_ns[i] += now - ps->t;
		ps->t = now;
	}
}

/* Any one thread: fifo entry e's answer is in; its block may go on. */
GSOCK_DEVICE void gs_srv_pipe_answer(const struct gsrv *s, uint32_t e,
				     long result)
{
	struct gs_srv_ask *a = &s->asks[e & ~GS_SRV_RETRIED];

	a->result = result;
	gs_st_dev64(&a->done, a->taken); /* after the payload, GPU scope */
}

/*
 * Block-wide: take the waiting asks of this pipe's blocks into the fifo
 * (at most GSRV_PIPE_BATCH, and what the fifo holds); how many. Each
 * thread looks at its own blocks.
 */
GSOCK_DEVICE uint32_t gs_srv_pipe_take(struct gsock_dev gs,
				       const struct gsrv *s,
				       struct gs_srv_pipe *ps)
{
	GS_SHARED unsigned long long nb;
	uint32_t p = gs_bid() - s->blocks * s->group_blocks;
	uint32_t mine = (s->blocks - p + s->pipes - 1) / s->pipes;
	uint32_t room = GSRV_PIPE_FIFO - (ps->tail - ps->head), n;

	(void)gs;
	if (room > GSRV_PIPE_BATCH)
		room = GSRV_PIPE_BATCH;
	if (gs_tid() == 0)
		nb = 0;
	gs_sync();
	for (uint32_t j = gs_tid(); j < mine; j += gs_bdim()) {
		uint32_t b = p + j * s->pipes;
		struct gs_srv_ask *a = &s->asks[b];
		uint64_t seq = gs_ld64(&a->seq), i;

		/* nor while an earlier one of the block is in flight (it gave up) */
		if (seq == a->taken || a->done != a->taken)
			continue;
		i = gs_fetch_add64(&nb, 1);
		if (i < room) { /* else it waits for the next turn */
			a->taken = seq;
			ps->fifo[(ps->tail + (uint32_t)i) % GSRV_PIPE_FIFO] = b;
		}
	}
	gs_sync();
	n = nb < room ? (uint32_t)nb : room;
	if (gs_tid() == 0) {
		if (n && ps->head == ps->tail)
			ps->quiet_since = gs_now_ns();
		ps->tail += n;
	}
	gs_sync();
	return n;
}

/* Open the backend connection: its descriptor or a negative errno. */
GSOCK_DEVICE int gs_srv_pipe_open(struct gsock_dev gs, const struct gsrv *s)
{
	int family = ((const struct sockaddr *)&s->backend)->sa_family;
	int one = 1, fd = gsocket(gs, family, SOCK_STREAM, 0), r;

	if (fd < 0)
		return fd;
	if (family != AF_UNIX)
		gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof(one));
	r = gconnect(gs, fd, (const struct sockaddr *)&s->backend,
		     s->backendlen);
	if (r < 0) {
		gclose(gs, fd);
		return r;
	}
	return fd;
}

/*
 * Block-wide: write fifo entries [from, from + n), n <= GSRV_PIPE_BATCH,
 * on the connection, opening one if there is none: 0, or a negative
 * errno with the connection closed.
 */
GSOCK_DEVICE int gs_srv_pipe_write_some(struct gsock_dev gs,
					const struct gsrv *s,
					struct gs_srv_pipe *ps, uint32_t from,
					uint32_t n)
{
	GS_SHARED uint32_t at[GSRV_PIPE_BATCH + 1];
	uint8_t *text = gs_srv_pipe_text(ps);
	long r = 0;
	int fd;

	if (gs_tid() == 0) { /* where each request goes in the text */
		at[0] = 0;
		for (uint32_t i = 0; i < n; i++)
			at[i + 1] = at[i] + s->asks[ps->fifo[(from + i) %
						       GSRV_PIPE_FIFO] &
					       ~GS_SRV_RETRIED]
						    .len;
	}
	gs_sync();
	for (uint32_t i = 0; i < n; i++) {
		const struct gs_srv_ask *a =
			&s->asks[ps->fifo[(from + i) % GSRV_PIPE_FIFO] &
				 ~GS_SRV_RETRIED];

		/* at[], thread 0's one read of len, bounds every thread */
		for (uint32_t k = gs_tid(); k < at[i + 1] - at[i];
		     k += gs_bdim())
			text[at[i] + k] = a->req[k];
	}
	gs_sync();
	fd = ps->fd;
	if (fd < 0) {
		fd = gs_srv_pipe_open(gs, s);
		if (gs_tid() == 0 && fd >= 0)
			ps->st.conns++;
	}
	if (fd >= 0) {
		r = gsrv_send_all(gs, fd, text, at[n],
				  (long)(s->pipe_quiet_ns / 1000));
		if (r < 0) {
			gclose(gs, fd);
			fd = (int)r;
		}
	}
	if (gs_tid() == 0) {
		ps->fd = fd < 0 ? -1 : fd;
		ps->st.batches++;
	}
	gs_sync();
	return fd < 0 ? fd : 0;
}

/*
 * Block-wide: write fifo entries [from, tail), GSRV_PIPE_BATCH at a time
 * (after a failure, every ask in flight is written again): 0, or a
 * negative errno with the connection closed.
 */
GSOCK_DEVICE int gs_srv_pipe_write(struct gsock_dev gs, const struct gsrv *s,
				   struct gs_srv_pipe *ps, uint32_t from)
{
	int r = 0;

	while (from != ps->tail && !r) {
		uint32_t n = ps->tail - from;

		n = n < GSRV_PIPE_BATCH ? n : GSRV_PIPE_BATCH;
		r = gs_srv_pipe_write_some(gs, s, ps, from, n);
		from += n;
	}
	return r;
}

/*
 * Block-wide: the connection failed with err. Asks written on it once
 * already get err; the others are written once more on a fresh
 * connection, in order; if that fails too, they get its error.
 */
GSOCK_DEVICE void gs_srv_pipe_fail(struct gsock_dev gs, const struct gsrv *s,
				   struct gs_srv_pipe *ps, long err)
{
	if (ps->fd >= 0)
		gclose(gs, ps->fd);
	if (gs_tid() == 0) {
		uint32_t n = 0;

		ps->fd = -1;
		for (uint32_t i = ps->head; i != ps->tail; i++) {
			uint32_t e = ps->fifo[i % GSRV_PIPE_FIFO];

			if (e & GS_SRV_RETRIED)
				gs_srv_pipe_answer(s, e, err);
			else
				ps->fifo[(ps->head + n++) % GSRV_PIPE_FIFO] =
					e | GS_SRV_RETRIED;
		}
		ps->st.errors += ps->tail - ps->head - n;
		ps->tail = ps->head + n;
		ps->pos = ps->have = 0;
		ps->skip = 0;
		ps->quiet_since = gs_now_ns();
	}
	gs_sync();
	if (ps->head == ps->tail)
		return;
	err = gs_srv_pipe_write(gs, s, ps, ps->head);
	if (err < 0 && gs_tid() == 0) {
		ps->st.errors += ps->tail - ps->head;
		for (; ps->head != ps->tail; ps->head++)
			gs_srv_pipe_answer(s, ps->fifo[ps->head % GSRV_PIPE_FIFO],
					   err);
	}
	gs_sync();
}

/*
 * Thread 0: find the whole replies from pos, at most GSRV_PIPE_BATCH:
 * each one's payload (off, len) and status. Their count, or -1 - count
 * when the bytes after them are no reply. A reply larger than the buffer
 * is answered -EMSGSIZE and its bytes are dropped as they come.
 */
GSOCK_DEVICE long gs_srv_pipe_scan_t0(struct gs_srv_pipe *ps,
				      const uint8_t *buf, uint32_t cap,
				      gsrv_parse_fn parse, void *ctx,
				      struct gsrv_reply *out)
{
	uint32_t n = 0;

	while (n < GSRV_PIPE_BATCH && ps->head + n != ps->tail) {
		uint32_t have = ps->have - ps->pos;
		struct gsrv_reply *r = &out[n];
		int k = parse(buf + ps->pos, have, r, ctx);

		if (k < 0 || (k == 0 && have == cap))
			return -1 - (long)n;
		if (k == 0 || (r->size > have && r->size <= cap))
			break; /* not all here yet */
		if (r->size > cap || (uint64_t)r->off + r->len > r->size) {
			r->status = -EMSGSIZE;
			ps->skip = r->size - have;
			ps->pos = ps->have;
			n++;
			break;
		}
		r->off += ps->pos;
		ps->pos += (uint32_t)r->size;
		n++;
	}
	return n;
}

/*
 * Block-wide: hand out every whole reply in the buffer: 0, or -EPROTO
 * when the backend said something that is no reply (the replies before
 * it are handed out).
 */
GSOCK_DEVICE int gs_srv_pipe_hand_out(struct gsock_dev gs,
				      const struct gsrv *s,
				      struct gs_srv_pipe *ps,
				      gsrv_parse_fn parse, void *ctx)
{
	GS_SHARED struct gsrv_reply rep[GSRV_PIPE_BATCH];
	GS_SHARED uint8_t *dst[GSRV_PIPE_BATCH];
	uint8_t *buf = gs_srv_pipe_buf(ps);

	(void)gs;
	for (;;) {
		long r = 0;
		uint32_t n;

		if (gs_tid() == 0) {
			r = gs_srv_pipe_scan_t0(ps, buf, s->pipe_bufsize,
						parse, ctx, rep);
			/*
			 * One read of each ask for the block: an ask whose
			 * wait timed out is posted again meanwhile, and
			 * threads must not pair its old room with its new
			 * buffer.
			 */
			for (long i = 0; i < (r < 0 ? -1 - r : r); i++) {
				const struct gs_srv_ask *a =
					&s->asks[ps->fifo[(ps->head + i) %
							  GSRV_PIPE_FIFO] &
						 ~GS_SRV_RETRIED];

				dst[i] = a->dst;
				if (rep[i].status == 0 && rep[i].len > a->cap)
					rep[i].status = -EMSGSIZE;
			}
		}
		r = gs_bcast(r);
		n = (uint32_t)(r < 0 ? -1 - r : r);
		for (uint32_t i = 0; i < n; i++)
			if (rep[i].status == 0)
				gs_copy(dst[i], buf + rep[i].off, rep[i].len);
		gs_sync();
		if (gs_tid() == 0) {
			struct gsrv_stats *st = &ps->st;

			for (uint32_t i = 0; i < n; i++) {
				uint32_t e = ps->fifo[(ps->head + i) %
						      GSRV_PIPE_FIFO];
				long res = rep[i].status ? rep[i].status :
								 (long)rep[i].len;

				st->requests++;
				st->errors += res < 0;
				st->bytes += res > 0 ? (uint64_t)res : 0;
				gs_srv_pipe_answer(s, e, res);
			}
			ps->head += n;
			if (ps->pos == ps->have)
				ps->pos = ps->have = 0;
		}
		gs_sync();
		if (r < 0)
			return -EPROTO;
		if (n < GSRV_PIPE_BATCH)
			return 0;
	}
}

/* Block-wide: move the unparsed bytes of a full buffer to its start. */
GSOCK_DEVICE void gs_srv_pipe_compact(struct gs_srv_pipe *ps, uint8_t *buf)
{
	uint32_t pos = ps->pos, n = ps->have - ps->pos;

	/* in pieces no longer than the gap, so that no piece overlaps itself */
	for (uint32_t o = 0; o < n; o += pos) {
		gs_copy(buf + o, buf + pos + o, n - o < pos ? n - o : pos);
		gs_sync();
	}
	if (gs_tid() == 0) {
		ps->pos = 0;
		ps->have = n;
	}
	gs_sync();
}

/*
 * Block-wide: receive what the backend sent (dropping what a too-large
 * reply still owes) and hand out the whole replies. 1 when bytes came, 0
 * when none did, or a negative errno: the connection failed.
 */
GSOCK_DEVICE long gs_srv_pipe_recv(struct gsock_dev gs, const struct gsrv *s,
				   struct gs_srv_pipe *ps, gsrv_parse_fn parse,
				   void *ctx)
{
	uint8_t *buf = gs_srv_pipe_buf(ps);
	uint32_t cap = s->pipe_bufsize;
	uint64_t want;
	long r, gone = 0;

	if (ps->have == cap && ps->pos)
		gs_srv_pipe_compact(ps, buf);
	want = ps->skip ? (ps->skip < cap ? ps->skip : cap) : cap - ps->have;
	r = grecv(gs, ps->fd, ps->skip ? buf : buf + ps->have, want,
		  MSG_DONTWAIT);
	gs_srv_pipe_split_t0(ps, GSRV_PIPE_RECV);
	if (r == -EAGAIN) {
		if (gs_tid() == 0 &&
		    gs_now_ns() - ps->quiet_since > s->pipe_quiet_ns)
			gone = -ETIMEDOUT;
		return gs_bcast(gone);
	}
	if (r <= 0)
		return r < 0 ? r : -ECONNRESET;
	if (gs_tid() == 0) {
		if (ps->skip)
			ps->skip -= (uint64_t)r;
		else
			ps->have += (uint32_t)r;
		ps->quiet_since = gs_now_ns();
	}
	/*
	 * One choice for the block: thread 0 may set skip in hand_out's
	 * scan before a late warp has read it (t/server-lag.t makes warps
	 * late here).
	 */
	GS_SRV_DEBUG_LAG();
	r = gs_bcast(ps->skip != 0) ? 0 :
				    gs_srv_pipe_hand_out(gs, s, ps, parse, ctx);
	gs_srv_pipe_split_t0(ps, GSRV_PIPE_HAND);
	return r < 0 ? r : 1;
}

/*
 * A pipe block's whole life: carry its serving blocks' asks to the
 * backend and their replies back, parse telling where each reply ends,
 * until the server ends. Every thread of the block calls it.
 */
GSOCK_DEVICE void gsrv_pipe_serve(struct gsock_dev gs, const struct gsrv *s,
				  gsrv_parse_fn parse, void *ctx)
{
	GS_SHARED struct gs_srv_pipe pipe;
	struct gs_srv_pipe *ps = &pipe;
	uint32_t p = gs_bid() - s->blocks * s->group_blocks;
	unsigned idle = 0;

	if (gs_tid() == 0) {
		for (size_t i = 0; i < sizeof(*ps); i++)
			((uint8_t *)ps)[i] = 0;
		ps->mem = s->pipe_mem + (size_t)p * s->pipe_stride;
		ps->fd = -1;
		ps->t = gs_now_ns();
	}
	gs_sync();
	for (;;) {
		uint32_t from = ps->tail, nb = gs_srv_pipe_take(gs, s, ps);
		long busy = nb, r, err = 0;

		if (nb) {
			r = gs_srv_pipe_write(gs, s, ps, from);
			if (r < 0)
				gs_srv_pipe_fail(gs, s, ps, r);
		}
		gs_srv_pipe_split_t0(ps,
				     nb ? GSRV_PIPE_ASK : GSRV_PIPE_IDLE);
		if (ps->head != ps->tail) {
			r = gs_srv_pipe_recv(gs, s, ps, parse, ctx);
			if (r < 0)
				gs_srv_pipe_fail(gs, s, ps, r);
			busy |= r;
		}
		if (busy) {
			idle = 0;
			continue;
		}
		if (gs_tid() == 0) {
			err = gs_world_error(gs);
			if (!err)
				gs_relax(idle++);
			gs_srv_pipe_split_t0(ps, GSRV_PIPE_IDLE);
		}
		if (gs_bcast(err))
			break;
	}
	if (gs_tid() == 0) {
		for (; ps->head != ps->tail; ps->head++)
			gs_srv_pipe_answer(s, ps->fifo[ps->head % GSRV_PIPE_FIFO],
					   -ECANCELED);
		s->stats[s->blocks + p] = ps->st; /* for gsrv_main's report */
	}
	if (ps->fd >= 0)
		gclose(gs, ps->fd);
}

/* ---- memcached's meta protocol on a pipe ---- */

/*
 * Thread 0: a meta reply to "mg <key> v" (gsrv_parse_fn): "VA <len> ...",
 * then the value, is a hit; "HD" a hit without a value; "EN" a miss
 * (-ENOENT); "CLIENT_ERROR ..." and "ERROR" -EINVAL; "SERVER_ERROR ..."
 * -EIO. Anything else is no reply.
 */
GSOCK_DEVICE int gsrv_mc_reply(const uint8_t *buf, uint32_t have,
			       struct gsrv_reply *r, void *ctx)
{
	uint32_t e = 0, i = 3;
	uint64_t v = 0;

	(void)ctx;
	while (e < have && buf[e] != '\n')
		if (++e > 1024)
			return -1;
	if (e == have)
		return 0;
	e++; /* the line, "\r\n" included */
	if (e < 4 || buf[e - 2] != '\r')
		return -1;
	*r = (struct gsrv_reply){ e, e, 0, 0 };
	if (buf[0] == 'V' && buf[1] == 'A' && buf[2] == ' ') {
		for (; buf[i] >= '0' && buf[i] <= '9' && v < 1ull << 40; i++)
			v = v * 10 + (uint64_t)(buf[i] - '0');
		if (i == 3 || (buf[i] != ' ' && buf[i] != '\r'))
			return -1;
		r->size = e + v + 2;
		r->len = v > 0xffffffffull ? 0xffffffffu : (uint32_t)v;
		return 1;
	}
	if (buf[0] == 'H' && buf[1] == 'D' && (buf[2] == ' ' || e == 4))
		return 1;
	if (buf[0] == 'E' && buf[1] == 'N' && e == 4)
		r->status = -ENOENT;
	else if (buf[0] == 'S' && e > 12 && buf[1] == 'E' && buf[6] == '_')
		r->status = -EIO; /* SERVER_ERROR */
	else if ((buf[0] == 'C' && e > 12 && buf[6] == '_') ||
		 (e == 7 && buf[0] == 'E' && buf[1] == 'R'))
		r->status = -EINVAL; /* CLIENT_ERROR, ERROR */
	else
		return -1;
	return 1;
}

/*
 * Ask memcached, through this block's pipe, for key's value ("mg <key>
 * v"), to go to dst (at most cap bytes of device memory); wait for it
 * with gsrv_pipe_wait(), which returns the value's length or -ENOENT for
 * a miss. Returns at once: 0, -EINVAL for a key memcached refuses (empty,
 * over 250 bytes, spaces or control characters), -ENOTCONN without pipes.
 */
GSOCK_DEVICE int gsrv_mc_get(struct gsock_dev gs, const struct gsrv *s,
			     const char *key, uint32_t klen, void *dst,
			     uint32_t cap)
{
	struct gs_srv_ask *a = gs_srv_ask_of(gs, s);
	long bad = 0;

	if (!s->pipes)
		return -ENOTCONN;
	if (klen == 0 || klen > 250)
		return -EINVAL;
	if (gs_tid() == 0) {
		a->req[0] = 'm';
		a->req[1] = 'g';
		a->req[2] = ' ';
		for (uint32_t i = 0; i < klen; i++) {
			bad |= (uint8_t)key[i] <= ' ' || key[i] == 0x7f;
			a->req[3 + i] = (uint8_t)key[i];
		}
		a->req[3 + klen] = ' ';
		a->req[4 + klen] = 'v';
		a->req[5 + klen] = '\r';
		a->req[6 + klen] = '\n';
	}
	if (gs_bcast(bad))
		return -EINVAL;
	gs_srv_ask_post(gs, s, klen + 7, dst, cap);
	return 0;
}

/* A pipe block's whole life with memcached as its backend. */
GSOCK_DEVICE void gsrv_mc_serve(struct gsock_dev gs, const struct gsrv *s)
{
	gsrv_pipe_serve(gs, s, gsrv_mc_reply, NULL);
}

#endif /* GSOCK_PIPE_CUH */
