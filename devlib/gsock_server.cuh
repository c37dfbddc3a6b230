/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server layer, device side: a block's server loop and the message
 * helpers a request handler needs, so that a g-call server's kernel is
 * its handler and nothing else. Every call here is block-cooperative,
 * like a g-call: all threads of the block call it with the same
 * arguments and get the same result. gsock-server(3) is the manual.
 *
 *	GSOCK_KERNEL(echo_kernel, gs, arg)
 *	{
 *		struct gsrv *s = (struct gsrv *)arg;
 *		uint8_t *buf = (uint8_t *)gsrv_buf(gs, s);
 *		int fd;
 *
 *		while ((fd = gsrv_next(gs, s)) >= 0) {
 *			long n = grecv(gs, fd, buf, s->bufsize, MSG_DONTWAIT);
 *
 *			if (n > 0)
 *				n = gsend(gs, fd, buf, (size_t)n, 0);
 *			gsrv_done(gs, s, n);
 *		}
 *	}
 *
 * gsrv_next() owns the listener (block 0 opens it, the others share it),
 * the accept loop and the gpoll over the block's connections; it hands
 * out one connection at a time: a new one as soon as it is accepted (so
 * that a server may speak first), then whenever it has something to
 * read, or its end, or when a wake-up its handler set (gsrv_wake_at)
 * comes. gsrv_done() says what became of it: kept, or closed and counted.
 */
#ifndef GSOCK_SERVER_CUH
#define GSOCK_SERVER_CUH

#include <netinet/tcp.h>

#include "gsock.cuh"
#include "gsock_server.h"

GSOCK_DEVICE uint8_t *gs_srv_region(struct gsock_dev gs, const struct gsrv *s)
{
	(void)gs;
	return s->blk + (size_t)(gs_bid() / s->group_blocks) * s->blk_stride;
}

GSOCK_DEVICE struct gs_srv_blk *gs_srv_blk(struct gsock_dev gs,
					   const struct gsrv *s)
{
	return (struct gs_srv_blk *)gs_srv_region(gs, s);
}

GSOCK_DEVICE struct gpollfd *gs_srv_pfd(struct gsock_dev gs,
					const struct gsrv *s)
{
	return (struct gpollfd *)(gs_srv_region(gs, s) + s->pfd_off);
}

GSOCK_DEVICE int32_t *gs_srv_slots(struct gsock_dev gs, const struct gsrv *s)
{
	return (int32_t *)(gs_srv_region(gs, s) + s->slot_off);
}

/* When each connection was last handed out or accepted, by state slot. */
GSOCK_DEVICE uint64_t *gs_srv_last(struct gsock_dev gs, const struct gsrv *s)
{
	return (uint64_t *)(gs_srv_region(gs, s) + s->last_off);
}

/* When each connection is to be handed out (gsrv_wake_at), by slot; 0 none. */
GSOCK_DEVICE uint64_t *gs_srv_wake(struct gsock_dev gs, const struct gsrv *s)
{
	return (uint64_t *)(gs_srv_region(gs, s) + s->wake_off);
}

/* This block's (or group's) buffer: s->bufsize bytes of device memory. */
GSOCK_DEVICE void *gsrv_buf(struct gsock_dev gs, const struct gsrv *s)
{
	return gs_srv_region(gs, s) + s->buf_off;
}

/*
 * The state of the connection gsrv_next() handed out: s->conn_size bytes
 * of device memory, zeroed when the connection was accepted, kept
 * across its requests.
 */
GSOCK_DEVICE void *gsrv_state(struct gsock_dev gs, const struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);

	if (b->cur < 0)
		return NULL;
	return gs_srv_region(gs, s) + s->state_off +
	       (size_t)gs_srv_slots(gs, s)[b->cur] * s->conn_size;
}

/* This block's counters (device memory: gsrv_main reads them at the end). */
GSOCK_DEVICE struct gsrv_stats *gsrv_stats_of(struct gsock_dev gs,
					      const struct gsrv *s)
{
	(void)gs;
	return &s->stats[gs_bid() / s->group_blocks];
}

/* Add n to the block's bytes counter (what n counts is the handler's). */
GSOCK_DEVICE void gsrv_count(struct gsock_dev gs, const struct gsrv *s,
			     uint64_t n)
{
	if (gs_tid() == 0)
		gsrv_stats_of(gs, s)->bytes += n;
}

/*
 * Step timer: add the time since the last mark (the connection's hand-out
 * or the previous gsrv_step) to step i's sum, and mark now.
 */
GSOCK_DEVICE void gsrv_step(struct gsock_dev gs, const struct gsrv *s,
			    unsigned i)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);

	gs_sync();
	if (gs_tid() == 0 && i < GSRV_STEPS) {
		uint64_t now = gs_now_ns();

		gsrv_stats_of(gs, s)->step_ns[i] += now - b->t_step;
		b->t_step = now;
	}
	gs_sync();
}

/* gsrv_wait_word; dev: the word lies in device memory (gs_ld32_moved). */
GSOCK_DEVICE long gs_srv_wait_word(struct gsock_dev gs, const uint32_t *word,
				   uint32_t seen, int dev)
{
	long v = 0;
	unsigned turn = 0;

	while (gs_tid() == 0) {
		v = dev ? gs_ld32_moved(word, seen) : gs_ld32(word);
		if ((uint32_t)v != seen)
			break;
		v = gs_wait_turn(gs, &turn);
		if (v)
			break;
	}
	return gs_bcast(v);
}

/*
 * Wait until *word differs from seen (a word of device or host memory
 * that another block or the host writes): its new value, or a negative
 * errno when the application stops or gsockd goes.
 */
GSOCK_DEVICE long gsrv_wait_word(struct gsock_dev gs, const uint32_t *word,
				 uint32_t seen)
{
	return gs_srv_wait_word(gs, word, seen, 0);
}

/*
 * Every thread: wait about us microseconds; 0, or a negative errno when
 * the application stops or gsockd goes first.
 */
GSOCK_DEVICE long gsrv_sleep(struct gsock_dev gs, long us)
{
	long r = 0;
	unsigned turn = 0;

	if (gs_tid() == 0) {
		uint64_t until = gs_now_ns() + (uint64_t)(us > 0 ? us : 0) * 1000u;

		while (!r && gs_now_ns() < until)
			r = gs_wait_turn(gs, &turn);
	}
	return gs_bcast(r);
}

/* Every block's writes before, then thread 0 stores v at word. */
GSOCK_DEVICE void gs_srv_publish(struct gsock_dev gs, uint32_t *word,
				 uint32_t v)
{
	(void)gs;
	gs_fence();
	gs_sync();
	if (gs_tid() == 0)
		gs_st32(word, v);
	gs_sync();
}

/*
 * Groups (s->group_blocks > 1): the first block of each group of
 * group_blocks serves connections with gsrv_next; the others help it
 * compute. Their rank in the group; 0 is the serving block.
 */
GSOCK_DEVICE unsigned gsrv_rank(struct gsock_dev gs, const struct gsrv *s)
{
	(void)gs;
	return gs_bid() % s->group_blocks;
}

/*
 * The serving block: hand work (arg, any 32-bit value the group reads)
 * to the other blocks of its group; what this block wrote before is
 * visible to them.
 */
GSOCK_DEVICE void gsrv_group_start(struct gsock_dev gs, struct gsrv *s,
				   uint32_t arg)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);

	if (gs_tid() == 0) {
		b->arg = arg;
		b->done = 0;
	}
	gs_srv_publish(gs, &b->gen, b->gen + 1);
}

/*
 * The serving block: wait until every other block of the group has
 * called gsrv_group_done for the work of gsrv_group_start; what they
 * wrote is visible then. 0, or a negative errno when the application
 * stops or gsockd goes.
 */
GSOCK_DEVICE int gsrv_group_wait(struct gsock_dev gs, struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	const uint64_t *done = (const uint64_t *)&b->done;
	long r = 0;
	unsigned turn = 0;

	if (gs_tid() == 0)
		for (uint64_t v = gs_ld64(done); v != s->group_blocks - 1;
		     v = gs_ld64_moved(done, v)) {
			r = gs_wait_turn(gs, &turn);
			if (r)
				break;
		}
	return (int)gs_bcast(r);
}

/*
 * Another block of a group: wait for the next work of its serving block
 * (*seen: the caller's, 0 at first): its arg, or a negative errno when
 * the server ends (-ECANCELED after the serving block's end, too).
 */
GSOCK_DEVICE long gsrv_group_next(struct gsock_dev gs, struct gsrv *s,
				  uint32_t *seen)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	long v = gs_srv_wait_word(gs, &b->gen, *seen, 1);

	if (v < 0)
		return v;
	*seen = (uint32_t)v;
	/*
	 * One read for the block: a serving block that ends early (the
	 * world stopped) sets stop meanwhile, and threads that saw it and
	 * threads that did not would part at the next barrier.
	 */
	if (gs_tid() == 0)
		v = gs_ld32(&b->stop) ? -ECANCELED : (long)gs_ld32(&b->arg);
	return gs_bcast(v);
}

/* Another block of a group: its part of the work is done and written. */
GSOCK_DEVICE void gsrv_group_done(struct gsock_dev gs, struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);

	gs_fence();
	gs_sync();
	if (gs_tid() == 0) {
		/*
		 * After the barrier: cumulative over the whole block's stores,
		 * so that the owner's read of done orders them (each thread's
		 * fence above only drains its own), as gs_group_ack does.
		 */
		gs_fence();
		gs_fetch_add64((unsigned long long *)&b->done, 1);
	}
	gs_sync();
}

/* Whether r ends the whole server, not one connection. */
GSOCK_DEVICE int gsrv_fatal(long r)
{
	return r == -ECANCELED || r == -ECONNABORTED;
}

/*
 * Open a listening TCP or unix socket on addr (TCP_NODELAY for what it
 * accepts, SO_REUSEPORT if asked, a backlog of 1024) and write the
 * address it got at bound (*boundlen: its length, thread 0 writes it):
 * its descriptor, or a negative errno with nothing left open.
 */
GSOCK_DEVICE int gsrv_listen(struct gsock_dev gs,
			     const struct sockaddr_storage *addr,
			     uint32_t addrlen, int reuseport,
			     struct sockaddr_storage *bound, uint32_t *boundlen)
{
	int family = ((const struct sockaddr *)addr)->sa_family;
	int one = 1, fd, r = 0;
	socklen_t blen = sizeof(*bound);

	fd = gsocket(gs, family, SOCK_STREAM, 0);
	if (fd < 0)
		return fd;
	if (family != AF_UNIX)
		gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof(one));
	if (reuseport)
		r = gsetsockopt(gs, fd, SOL_SOCKET, SO_REUSEPORT, &one,
				sizeof(one));
	if (r == 0)
		r = gbind(gs, fd, (const struct sockaddr *)addr, addrlen);
	if (r == 0)
		r = glisten(gs, fd, 1024);
	if (r == 0)
		r = ggetsockname(gs, fd, (struct sockaddr *)bound, &blen);
	if (r < 0) {
		gclose(gs, fd);
		return r;
	}
	if (gs_tid() == 0)
		*boundlen = blen;
	return fd;
}

/*
 * Connect to addr (TCP_NODELAY for TCP), trying again every 5 ms while it
 * is refused (a peer that does not listen yet), for up to timeout_us (< 0:
 * no limit): the descriptor, or a negative errno (-ETIMEDOUT when it was
 * still refused then; the application's end stops the tries too).
 */
GSOCK_DEVICE int gsrv_connect(struct gsock_dev gs,
			      const struct sockaddr_storage *addr,
			      uint32_t addrlen, long timeout_us)
{
	uint64_t until = gs_now_ns() + (uint64_t)timeout_us * 1000;

	for (;;) {
		int one = 1, fd = gsocket(gs, addr->ss_family, SOCK_STREAM, 0);
		long r;

		if (fd < 0)
			return fd;
		if (addr->ss_family != AF_UNIX)
			gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one,
				    sizeof(one));
		r = gconnect(gs, fd, (const struct sockaddr *)addr, addrlen);
		if (r == 0)
			return fd;
		gclose(gs, fd);
		if (r != -ECONNREFUSED && r != -ENOENT)
			return (int)r;
		if (gs_tid() == 0) {
			uint64_t next = gs_now_ns() + 5000000;
			unsigned turn = 0;

			r = timeout_us >= 0 && next > until ? -ETIMEDOUT : 0;
			while (!r && gs_now_ns() < next)
				r = gs_wait_turn(gs, &turn);
		}
		r = gs_bcast(r);
		if (r)
			return (int)r;
	}
}

/*
 * Every block: the shared listener (block 0 opens it and publishes it,
 * the others wait for that), or a negative errno.
 */
GSOCK_DEVICE int gsrv_listener(struct gsock_dev gs, struct gsrv *s)
{
	struct gsrv_pub *pub = s->pub;
	long r;

	if (gs_bid() == 0) {
		r = gsrv_listen(gs, &s->addr, s->addrlen, s->reuseport,
				&pub->bound, &pub->boundlen);
		if (gs_tid() == 0) {
			pub->listen_fd = (int32_t)r;
			gs_st32((uint32_t *)&pub->ready,
				(uint32_t)(r < 0 ? r : 1));
		}
		return (int)r;
	}
	r = (int32_t)gsrv_wait_word(gs, (const uint32_t *)&pub->ready, 0);
	return r == 1 ? pub->listen_fd : (int)r;
}

/*
 * Thread 0: a place was taken or freed, for the doorman (gs_srv_door):
 * while this count moves, clients that wait are waiting their turn.
 */
GSOCK_DEVICE void gs_srv_moved_t0(struct gsock_dev gs, const struct gsrv *s)
{
	(void)gs;
	if (s->moves)
		gs_fetch_add64((unsigned long long *)s->moves, 1);
}

/*
 * Thread 0: the block held `was` connections and now holds n (-1: it
 * ends), in s->held; a block not counted (not begun, or finished) counts
 * from now on, with n.
 */
GSOCK_DEVICE void gs_srv_held_t0(struct gsock_dev gs, const struct gsrv *s,
				 int was, int n)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);

	if (!s->held)
		return;
	if (!b->counted) /* not begun, or finished (and serving again) */
		was = -1;
	b->counted = n >= 0;
	if (was >= 0)
		gs_fetch_add32(&s->held[was], (uint32_t)-1);
	if (n >= 0)
		gs_fetch_add32(&s->held[n], 1);
}

/* Thread 0: take connection c into pfd[n], its state slot zeroed below. */
GSOCK_DEVICE void gs_srv_hold_t0(struct gsock_dev gs, struct gsrv *s, int c)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gsrv_stats *st = gsrv_stats_of(gs, s);

	gs_srv_pfd(gs, s)[b->n] = (struct gpollfd){ c, POLLIN, 0 };
	gs_srv_last(gs, s)[gs_srv_slots(gs, s)[b->n]] = gs_now_ns();
	gs_srv_wake(gs, s)[gs_srv_slots(gs, s)[b->n]] = 0;
	gs_srv_held_t0(gs, s, b->n, b->n + 1);
	b->n++;
	b->spread_since = 0;
	if ((uint64_t)b->n > st->most)
		st->most = (uint64_t)b->n;
	gs_srv_moved_t0(gs, s);
}

/* The block: zero the state of the connection just taken (pfd[n - 1]). */
GSOCK_DEVICE void gs_srv_zero_state(struct gsock_dev gs, struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	uint8_t *st = gs_srv_region(gs, s) + s->state_off +
		      (size_t)gs_srv_slots(gs, s)[b->n - 1] * s->conn_size;

	for (uint32_t i = gs_tid(); i < s->conn_size; i += gs_bdim())
		st[i] = 0;
	gs_sync();
}

/* Start: the listener, an empty set, the slots in order. 0 or -errno. */
GSOCK_DEVICE int gs_srv_begin(struct gsock_dev gs, struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	int lfd = gsrv_listener(gs, s);

	for (uint32_t i = gs_tid(); i < s->per_block; i += gs_bdim())
		gs_srv_slots(gs, s)[i] = (int32_t)i;
	if (gs_tid() == 0) {
		b->lfd = lfd;
		b->n = b->k = b->lrev = b->wakes = b->polled = 0;
		b->cur = -1;
		b->end = lfd < 0 ? lfd : 0;
		b->spread_since = 0;
		b->started = 1;
		if (lfd >= 0)
			gs_srv_held_t0(gs, s, -1, 0);
	}
	gs_sync();
	return lfd < 0 ? lfd : 0;
}

/* The end: close what the block holds; the error that ended it. */
GSOCK_DEVICE int gs_srv_finish(struct gsock_dev gs, struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	int end = b->end;

	for (int k = 0; k < b->n; k++)
		gclose(gs, gs_srv_pfd(gs, s)[k].fd);
	gs_sync();
	if (gs_tid() == 0) {
		gs_srv_held_t0(gs, s, b->n, -1);
		b->n = 0;
		b->cur = -1;
		b->stop = 1;
	}
	if (s->group_blocks > 1) /* the other blocks' gsrv_group_next ends */
		gs_srv_publish(gs, &b->gen, b->gen + 1);
	gs_sync();
	return end;
}

/*
 * Thread 0: count connection pfd[i] closed (with r: 0, or its error)
 * and move the last one into its place; its state slot is freed.
 */
GSOCK_DEVICE void gs_srv_drop_t0(struct gsock_dev gs, struct gsrv *s, int i,
				 long r)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gsrv_stats *st = gsrv_stats_of(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);
	int32_t *slot = gs_srv_slots(gs, s), last = b->n - 1, t;

	st->conns++;
	if (r < 0) {
		st->errors++;
		st->last_error = r;
	}
	p[i] = p[last];
	t = slot[i];
	slot[i] = slot[last];
	slot[last] = t;
	if (b->counted)
		gs_srv_held_t0(gs, s, b->n, last);
	b->n = last;
	gs_srv_moved_t0(gs, s);
}

/*
 * With s->idle_ns: close the connections nothing came from for that long
 * (-ETIMEDOUT, counted), so that idle clients cannot hold a block's
 * places forever. Returns the microseconds until the next one would be
 * idle that long, for gpoll's timeout (-1: none held).
 */
GSOCK_DEVICE long gs_srv_reap(struct gsock_dev gs, struct gsrv *s)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);

	for (;;) {
		long idle = -1, wait = -1;

		if (gs_tid() == 0) {
			uint64_t now = gs_now_ns(), *last = gs_srv_last(gs, s);

			for (int k = 0; k < b->n && idle < 0; k++) {
				uint64_t age =
					now - last[gs_srv_slots(gs, s)[k]];
				long left = age >= s->idle_ns ?
						    0 :
						    (long)((s->idle_ns - age) /
							   1000) +
							    1;

				if (!left)
					idle = k;
				else if (wait < 0 || left < wait)
					wait = left;
			}
		}
		idle = gs_bcast(idle);
		if (idle < 0)
			return gs_bcast(wait);
		gclose(gs, p[idle].fd);
		if (gs_tid() == 0)
			gs_srv_drop_t0(gs, s, (int)idle, -ETIMEDOUT);
		gs_sync();
	}
}

/*
 * Thread 0 marks the connections whose gsrv_wake_at time has come for
 * handing out (their revents, from the first): whether any was; else
 * lowers *wait (microseconds, -1 none) to the next wake-up's. A block
 * whose handler never set one (b->wakes, written before a barrier)
 * skips it all: no loop, no broadcast before its gpoll.
 */
GSOCK_DEVICE int gs_srv_wakes(struct gsock_dev gs, struct gsrv *s, long *wait)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);
	long due = 0, w = *wait;

	if (!b->wakes)
		return 0;
	gs_sync(); /* every thread has read b->k and revents this turn */
	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns(), *wake = gs_srv_wake(gs, s);
		int set = 0;

		for (int k = 0; k < b->n; k++) {
			uint64_t t = wake[gs_srv_slots(gs, s)[k]];
			long left = t > now ? (long)((t - now) / 1000) + 1 : 0;

			p[k].revents = t && !left ? POLLIN : 0;
			due |= t && !left;
			set |= t != 0;
			if (left && (w < 0 || left < w))
				w = left;
		}
		if (due)
			b->k = 0;
		if (!set)
			b->wakes = 0;
	}
	*wait = gs_bcast(w);
	return (int)gs_bcast(due);
}

/*
 * Block 0 is the doorman of a server with s->queue_ns: while it has no
 * room itself (a block with room takes waiting clients in its turn), it
 * watches the listener for clients that wait while no block takes or
 * lets go of a connection, and refuses them once that has lasted
 * queue_ns. A full server that let them wait would hang every client
 * whose connect or request has no bound of its own (t/crowded-server.t),
 * and tell nobody.
 */
GSOCK_DEVICE int gs_srv_doorman(struct gsock_dev gs, const struct gsrv *s)
{
	(void)gs;
	return s->queue_ns && s->moves && gs_bid() == 0;
}

/* How many waiting clients the doorman refuses before its own turn. */
#define GSRV_REFUSE_BURST 64

/*
 * The doorman's turn, before its gpoll: it reads the listener's queue
 * and never gpolls the listener. Returns 0 (*wait cut to when it is to
 * look again: a quarter of queue_ns, or when waiting clients' queue_ns
 * is up); -1 after refusing up to GSRV_REFUSE_BURST clients (the block then looks
 * at its own connections without waiting, and refuses more next turn):
 * they waited queue_ns with no place taken or freed, so each is
 * accepted and closed at once (counted in refused; gsockd closes those
 * it had no socket for, -EMFILE, as well). When
 * none is left, the next client to wait gets queue_ns of its own.
 */
GSOCK_DEVICE int gs_srv_door(struct gsock_dev gs, struct gsrv *s, long *wait)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	long act = 0, w = *wait;

	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns(), moves = gs_ld64(s->moves);
		long look = (long)(s->queue_ns / 4000) + 1;

		/*
		 * The listener's queue read, not gpolled: a gpoll would make
		 * the doorman the block its clients wake, and the blocks with
		 * room would find them late (and be refused for it).
		 */
		b->lrev = gs_ld32(&gs.socks[b->lfd].accept_pending) ? POLLIN : 0;
		if (moves != b->door_moves || !b->lrev) { /* they wait their turn */
			b->door_moves = moves;
			b->door_since = 0;
		}
		if (b->lrev && !b->door_since)
			b->door_since = now;
		if (b->door_since && now - b->door_since < s->queue_ns)
			look = (long)((b->door_since + s->queue_ns - now) / 1000) + 1;
		else if (b->door_since)
			act = -1;
		/*
		 * Look at the queue again by then; a block holding its one
		 * connection waits on it alone, watching the queue itself
		 * (gs_srv_wait_one), until a client waits.
		 */
		if ((w < 0 || look < w) && (b->door_since || b->n != 1))
			w = look;
	}
	act = gs_bcast(act);
	*wait = gs_bcast(w);
	for (int i = 0; act < 0 && i < GSRV_REFUSE_BURST; i++) {
		int c = gaccept_nb(gs, b->lfd, 0, 0);

		if (c >= 0)
			gclose(gs, c);
		if (gs_tid() == 0) {
			if (c >= 0 || c == -EMFILE)
				gsrv_stats_of(gs, s)->refused++;
			else if (gsrv_fatal(c) || c == -EBADF)
				b->end = c == -EBADF ? -ECONNABORTED : c;
			else if (c == -EAGAIN) /* all gone */
				b->door_since = 0;
		}
		gs_sync();
		if (c < 0 && c != -EMFILE)
			break;
	}
	return (int)act;
}

/*
 * Thread 0 of the doorman holding one connection: gs_rx_wait_t0's wait,
 * which also ends (*queued set, 0 returned) when clients wait at the
 * listener, looked at every GS_RX_STATUS_TURNS turns between reads of
 * the ring's tail alone.
 */
GSOCK_DEVICE long gs_srv_wait_door_t0(struct gsock_dev gs,
				      const struct gsrv *s, int fd,
				      struct gs_lsock *ls, int *queued)
{
	const struct gs_srv_blk *b = gs_srv_blk(gs, s);
	unsigned turn = 0;

	for (;;) {
		long w = gs_rx_wait_t0(gs, fd, ls, 1);

		if (w != -EAGAIN)
			return w;
		if (gs_ld32(&gs.socks[b->lfd].accept_pending)) {
			*queued = 1;
			return 0;
		}
		for (unsigned i = 0;
		     i < GS_RX_STATUS_TURNS && !gs_rx_refresh_t0(ls); i++) {
			w = gs_wait_turn(gs, &turn);
			if (w)
				return w;
		}
	}
}

/*
 * Tests (t/server-lag.t): with GSRV_DEBUG_LAG_NS every warp of a block
 * but the first comes that late into gsrv_next and gsrv_done, and a pipe
 * block's to its choice to hand replies out, so that a read of block
 * state that thread 0 may already have changed shows.
 */
#if defined(GSRV_DEBUG_LAG_NS) && defined(__CUDACC__)
#define GS_SRV_DEBUG_LAG()                                                     \
	do {                                                                   \
		uint64_t lag_t0 = gs_now_ns(); /* __nanosleep may be shorter */ \
		while (gs_tid() >= 32 &&                                       \
		       gs_now_ns() - lag_t0 < (uint64_t)GSRV_DEBUG_LAG_NS)     \
			;                                                      \
	} while (0)
#else
#define GS_SRV_DEBUG_LAG() ((void)0)
#endif

/*
 * A block that holds its one connection and no room for more waits for
 * it as grecv does, on the ring's own counter, not on gpoll's wake word:
 * one PCIe read a turn, and no gsockd work per wake-up. At bytes, the
 * end or an error the connection is handed out (grecv says which); the
 * doorman (door) stops waiting for clients at the listener too.
 */
GSOCK_DEVICE void gs_srv_wait_one(struct gsock_dev gs, struct gsrv *s,
				  int door)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);
	long w = 0;

	/*
	 * Every thread has read b->end and b->k this turn (gsrv_next_by)
	 * before thread 0 writes them: a warp that came late would see
	 * k = 0, hand the connection out a barrier early and stay a barrier
	 * behind its block (as gsrv_done's cur could).
	 */
	gs_sync();
	if (gs_tid() == 0) {
		struct gs_lsock *ls = gs_lsock_of(gs, p[0].fd);
		int queued = 0;

		if (!ls)
			w = -EBADF;
		else if (door)
			w = gs_srv_wait_door_t0(gs, s, p[0].fd, ls, &queued);
		else
			w = gs_rx_wait_t0(gs, p[0].fd, ls, 0);
		if (gsrv_fatal(w))
			b->end = (int32_t)w;
		p[0].revents = queued ? 0 : POLLIN;
		b->lrev = queued ? POLLIN : 0;
		b->k = 0;
	}
	gs_sync();
}

/*
 * Whether the block takes a waiting client this turn (1), or leaves it
 * for now to the blocks that hold fewer connections (0: *wait cut to
 * when it looks again). Clients spread over the blocks this way: a block
 * serves its connections' requests one after another, so two on one
 * block while another holds none would halve what they get. The others
 * are nudged to look: only the block that gpolled the listener last is
 * woken by its clients, and that is the one that holds connections as
 * often as not. A block still takes the client once it has left it
 * GSRV_SPREAD_US (x 20 on the host backend) to blocks that did not take
 * it (busy with a long request, say); one that holds none always does.
 */
#ifdef __CUDACC__
#define GS_SRV_SPREAD_NS (GSRV_SPREAD_US * 1000ull)
#define GS_SRV_LOOK 1
#else
/* a host backend's block is a thread that may wait that long for a core */
#define GS_SRV_SPREAD_NS (GSRV_SPREAD_US * 20000ull)
/*
 * and its scan of the listener costs no PCIe read, while a wait cut every
 * GSRV_LOOK_US would spin and yield each time instead of sleeping
 */
#define GS_SRV_LOOK 0
#endif

GSOCK_DEVICE int gs_srv_spread(struct gsock_dev gs, struct gsrv *s, long *wait)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	long take = 1, w = *wait;

	if (gs_tid() == 0 && b->n > 0 && s->held) {
		uint64_t now = gs_now_ns(), end, span;
		int fewer = 0;

		for (int k = 0; k < b->n && !fewer; k++)
			fewer = gs_ld32(&s->held[k]) != 0;
		if (fewer && !b->spread_since) { /* they look at it now */
			b->spread_since = now;
			gs_nudge(gs);
		}
		/* well within -Q: a client left to others is no place taken */
		span = GS_SRV_SPREAD_NS;
		if (s->queue_ns && s->queue_ns / 2 < span)
			span = s->queue_ns / 2;
		end = b->spread_since + span;
		if (fewer && now < end) {
			long left = (long)((end - now) / 1000) + 1;

			take = 0;
			b->look_at = end; /* gs_srv_look's next look */
			if (w < 0 || left < w)
				w = left;
		}
	}
	*wait = gs_bcast(w);
	return (int)gs_bcast(take);
}

/*
 * A block that holds connections, has room for more and served one
 * within GSRV_IDLE_LOOK_US reads the listener's queue itself every
 * GSRV_LOOK_US instead of gpolling the listener: a gpoll's scan of it is
 * reads of host memory (over PCIe) every few turns, the same words from
 * every such block (with a hundred busy blocks a GPU, on two GPUs, they
 * doubled every step of a request), and its claim takes the listener's
 * wake-ups from the blocks that hold none, which are the ones to take a
 * client (gs_srv_spread). 1 when clients wait (b->lrev set, for the
 * accept); 0 when none does (*wait cut to the next look); -1 when the
 * block has been idle that long: then the listener is in its gpoll, whose
 * wait backs off (a wait cut every GSRV_LOOK_US would not). The CUDA
 * backend's; a host backend's block always gpolls the listener.
 */
GSOCK_DEVICE int gs_srv_look(struct gsock_dev gs, struct gsrv *s, long *wait)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	long w = *wait, found = 0;

	gs_sync(); /* every thread has read b->lrev this turn */
	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns();

		if (!GS_SRV_LOOK ||
		    now - b->t_next >= GSRV_IDLE_LOOK_US * 1000ull) {
			found = -1;
			if (!gs_ld32(&gs.socks[b->lfd].accept_pending))
				b->spread_since = 0; /* a client found is new */
		} else if (now >= b->look_at) {
			const struct gs_sock *l = &gs.socks[b->lfd];

			found = gs_ld32(&l->accept_pending) != 0;
			b->look_at = now + GSRV_LOOK_US * 1000ull;
			b->lrev = found ? POLLIN : 0;
			if (!found) /* a client found later is a new one */
				b->spread_since = 0;
			/* a listener gsockd closed (gpoll: POLLNVAL) */
			if (!(gs_ld32(&l->status) & GS_ST_OPEN)) {
				b->end = -ECONNABORTED;
				found = 1;
			}
		}
		if (!found && b->look_at > now) {
			long left = (long)((b->look_at - now) / 1000) + 1;

			if (w < 0 || left < w)
				w = left;
		}
	}
	*wait = gs_bcast(w);
	return (int)gs_bcast(found);
}

/*
 * gsrv_next_by's turn: at the point where the block would gpoll again,
 * -EAGAIN once by_ns has passed and the block has polled since its last
 * -EAGAIN (so that every call that returns -EAGAIN has looked at the
 * connections once); otherwise the gpoll's timeout, in microseconds, cut
 * to end by by_ns. Returns 0 to go on polling.
 */
GSOCK_DEVICE int gs_srv_by(struct gsock_dev gs, struct gsrv *s,
			   uint64_t by_ns, long *wait)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	uint64_t now = (uint64_t)gs_bcast((long)gs_now_ns());
	long left = by_ns > now ? (long)((by_ns - now) / 1000) + 1 : 0;

	if (b->polled && !left) {
		gs_sync(); /* every thread has read b->polled */
		if (gs_tid() == 0)
			b->polled = 0;
		gs_sync();
		return -EAGAIN;
	}
	if (*wait < 0 || left < *wait)
		*wait = left;
	return 0;
}

/*
 * The next connection to serve (gsrv_next), or -EAGAIN instead of
 * waiting past by_ns (gs_now_ns()'s clock; 0: no bound), for a kernel
 * that must return: a CUDA graph's receive node. Each call that returns
 * -EAGAIN has polled the block's connections and listener once at least;
 * its place in the loop (device memory) is where the next call, in this
 * launch or a later one, goes on.
 */
GSOCK_DEVICE int gsrv_next_by(struct gsock_dev gs, struct gsrv *s,
			      uint64_t by_ns)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);

	GS_SRV_DEBUG_LAG();
	if (!b->started && gs_srv_begin(gs, s) < 0)
		return gs_srv_finish(gs, s);
	for (;;) {
		long wait = -1;
		int room, lrev, door, lpoll, leave, look, r;

		if (b->end < 0)
			return gs_srv_finish(gs, s);
		if (b->k < b->n) { /* the rest of the last gpoll's finds */
			int k = b->k;

			gs_sync();
			if (gs_tid() == 0)
				b->k = k + 1;
			if (!p[k].revents) {
				gs_sync();
				continue;
			}
			if (gs_tid() == 0) {
				b->cur = k;
				b->t_next = b->t_step = gs_now_ns();
				gs_srv_last(gs, s)[gs_srv_slots(gs, s)[k]] =
					b->t_next;
				gs_srv_wake(gs, s)[gs_srv_slots(gs, s)[k]] = 0;
			}
			gs_sync();
			return p[k].fd;
		}
		/*
		 * One accept a turn, after the held connections: every block
		 * polls the listener, and a block that holds connections
		 * leaves a client to those that hold fewer for a while
		 * (gs_srv_spread), so a burst of clients spreads over the
		 * blocks instead of filling the first ones.
		 */
		room = b->n < (int)s->per_block;
		lrev = b->lrev && room;
		leave = lrev && !gs_srv_spread(gs, s, &wait);
		if (lrev && !leave) {
			int c = gaccept_nb(gs, b->lfd, 0, 0);

			if (gs_tid() == 0) {
				b->lrev = 0;
				if (c >= 0)
					gs_srv_hold_t0(gs, s, c);
				else if (gsrv_fatal(c) || c == -EBADF)
					b->end = c == -EBADF ? -ECONNABORTED :
							       c;
			}
			gs_sync();
			if (c >=
			    0) { /* hand it out first: a server may speak first */
				gs_srv_zero_state(gs, s);
				if (gs_tid() == 0) {
					p[b->n - 1].revents = POLLOUT;
					b->k = b->n - 1;
				}
				gs_sync();
				continue;
			}
		}
		if (b->end < 0)
			continue;
		if (s->idle_ns) {
			long w = gs_srv_reap(gs, s);

			if (w >= 0 && (wait < 0 || w < wait))
				wait = w;
			room = b->n < (int)s->per_block;
		}
		if (gs_srv_wakes(gs, s, &wait))
			continue;
		door = !room && gs_srv_doorman(gs, s);
		look = room && !leave && b->n ? gs_srv_look(gs, s, &wait) : -1;
		if (look > 0)
			continue; /* clients wait: the accept above */
		/*
		 * The listener is in the gpoll of a block that holds none, or
		 * has been idle; not of one that left a client to others, or
		 * looks at the queue itself.
		 */
		lpoll = door ? gs_srv_door(gs, s, &wait) :
			       room && !leave && look < 0;
		if (lpoll < 0) { /* refused a burst of waiting clients */
			/*
			 * Then the block's own turn, without waiting: a flood
			 * of reconnecting clients must not keep block 0 from
			 * its connections or from its caller's by_ns.
			 */
			lpoll = 0;
			wait = 0;
		}
		if (by_ns && gs_srv_by(gs, s, by_ns, &wait))
			return -EAGAIN;
		if (!by_ns && !s->idle_ns && wait < 0 && b->n == 1 &&
		    !room) { /* one connection, no room, no wake-up */
			gs_srv_wait_one(gs, s, door);
			continue;
		}
		if (gs_tid() == 0 && lpoll)
			p[b->n] = (struct gpollfd){ b->lfd, POLLIN, 0 };
		gs_sync();
		r = gpoll(gs, p, b->n + lpoll, wait);
		if (gs_tid() == 0) {
			b->k = 0;
			b->polled = 1;
			b->lrev = lpoll ? p[b->n].revents : 0;
			if (r < 0)
				b->end = r;
			/* a listener gsockd closed: the server's end */
			if (b->lrev & POLLNVAL)
				b->end = -ECONNABORTED;
		}
		gs_sync();
	}
}

/*
 * The next connection to serve: one just accepted, or one with something
 * to read, or with its end or an error to see (grecv says which): its
 * descriptor. A request handler's grecv(MSG_DONTWAIT) may find nothing
 * yet (-EAGAIN, for gsrv_done to keep it). A negative errno when
 * the server ends: -ECANCELED (gsock_stop), -ECONNABORTED (gsockd gone),
 * or why the listener could not be opened; the block's connections are
 * closed by then. Waits in gpoll while nothing is ready.
 */
GSOCK_DEVICE int gsrv_next(struct gsock_dev gs, struct gsrv *s)
{
	return gsrv_next_by(gs, s, 0);
}

/*
 * Make the block's connection fd the one being served again, as if
 * gsrv_next had handed it out (its wake-up cleared), for a handler that
 * answers later than it read: a graph's send node after the receive
 * node and the model. gsrv_state, gsrv_wake_at and gsrv_done then act on
 * it. 0, or -EBADF when the block does not hold fd.
 */
GSOCK_DEVICE int gsrv_take(struct gsock_dev gs, struct gsrv *s, int fd)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);
	long k = -1;

	gs_sync();
	if (gs_tid() == 0) {
		for (int i = 0; i < b->n && k < 0; i++)
			if (p[i].fd == fd)
				k = i;
		if (k >= 0) {
			b->cur = (int32_t)k;
			b->t_next = b->t_step = gs_now_ns();
			gs_srv_last(gs, s)[gs_srv_slots(gs, s)[k]] = b->t_next;
			gs_srv_wake(gs, s)[gs_srv_slots(gs, s)[k]] = 0;
		}
	}
	return gs_bcast(k) < 0 ? -EBADF : 0;
}

/*
 * End the block's serving where its loop is not gsrv_next's (a graph's
 * send node on the last turn): close every connection it holds. The
 * error that ended it (0: a stop); again, it closes nothing more.
 */
GSOCK_DEVICE int gsrv_finish(struct gsock_dev gs, struct gsrv *s)
{
	return gs_srv_finish(gs, s);
}

/*
 * Hand the connection being served out again at t_ns (gs_now_ns()'s
 * clock) even if nothing comes from it; 0: no wake-up. For a handler's
 * own deadlines: a request that must arrive whole in time, say. Once:
 * every hand-out clears it, so a handler that still waits sets it again.
 */
GSOCK_DEVICE void gsrv_wake_at(struct gsock_dev gs, const struct gsrv *s,
			       uint64_t t_ns)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);

	gs_sync();
	if (gs_tid() == 0 && b->cur >= 0) {
		gs_srv_wake(gs, s)[gs_srv_slots(gs, s)[b->cur]] = t_ns;
		if (t_ns)
			b->wakes = 1;
	}
	gs_sync();
}

/*
 * A request's deadline, for the connection being served: pending says
 * whether bytes of a request wait (a head begun, a body awaited), and
 * *since (the connection's own word, 0 at first) keeps when they began
 * to wait (0: none wait). Returns 1 once they have waited past
 * timeout_us (the handler answers 408, say); else 0, with the
 * connection's wake-up (gsrv_wake_at) set for when they will have,
 * since a client gone quiet brings no bytes to wake the block, or
 * cleared when none wait. timeout_us < 0: never late, no wake-up.
 * Every thread of the block calls it.
 */
GSOCK_DEVICE int gsrv_late(struct gsock_dev gs, const struct gsrv *s,
			   uint64_t *since, int pending, long timeout_us)
{
	long late = 0, due = 0;

	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns();

		if (!pending)
			*since = 0;
		else if (!*since)
			*since = now;
		late = *since && timeout_us >= 0 &&
		       now - *since > timeout_us * 1000ull;
		due = *since && timeout_us >= 0 ?
			      (long)(*since + timeout_us * 1000ull + 1) :
			      0;
	}
	if (gs_bcast(late))
		return 1;
	gsrv_wake_at(gs, s, (uint64_t)gs_bcast(due));
	return 0;
}

/*
 * What became of the connection gsrv_next() handed out: r > 0 (a request
 * served; bytes, a count, anything positive) or -EAGAIN (nothing was
 * there after all) keeps it; 0 (its end) or another negative errno
 * closes it, counting the error. -ECANCELED and -ECONNABORTED end the
 * server: the next gsrv_next() returns them.
 */
GSOCK_DEVICE void gsrv_done(struct gsock_dev gs, struct gsrv *s, long r)
{
	struct gs_srv_blk *b = gs_srv_blk(gs, s);
	struct gsrv_stats *st = gsrv_stats_of(gs, s);
	struct gpollfd *p = gs_srv_pfd(gs, s);
	int cur, fd, keep = r > 0 || r == -EAGAIN;

	GS_SRV_DEBUG_LAG();
	cur = b->cur;
	fd = cur >= 0 ? p[cur].fd : -1; /* gs_srv_drop_t0 may move p[cur] */
	/*
	 * Every thread reads cur before thread 0 writes -1 there below.
	 * Without this barrier a warp that came late read -1, returned
	 * without the barrier at the end, and stayed one barrier behind its
	 * block for good (its gs_bcast results read early, its barriers
	 * paired with others', bar.red meeting bar.sync): the likeliest
	 * cause found of the "illegal instruction" face verification's G
	 * died of on two H200, not yet confirmed on a GPU.
	 */
	gs_sync();
	if (cur < 0)
		return;
	if (gsrv_fatal(r)) {
		if (gs_tid() == 0) {
			b->end = (int32_t)r;
			b->cur = -1;
		}
		gs_sync();
		return;
	}
	if (!keep)
		gclose(gs, fd);
	if (gs_tid() == 0) {
		st->busy_ns += gs_now_ns() - b->t_next;
		if (r > 0)
			st->requests++;
		if (!keep) {
			gs_srv_drop_t0(gs, s, cur, r);
			b->k = cur; /* look at the one moved in, too */
		}
		b->cur = -1;
	}
	gs_sync();
}

/* ---- message helpers: bounded waits, whole messages ---- */

/* Wait up to timeout_us (< 0: no limit) for events on fd: 0 or -errno. */
GSOCK_DEVICE int gsrv_wait(struct gsock_dev gs, int fd, short events,
			   long timeout_us)
{
	GS_SHARED struct gpollfd pfd;
	int r;

	if (gs_tid() == 0)
		pfd = (struct gpollfd){ fd, events, 0 };
	gs_sync();
	r = gpoll(gs, &pfd, 1, timeout_us);
	return r < 0 ? r : r == 0 ? -ETIMEDOUT : 0;
}

/*
 * The next connection on listener lfd within timeout_us (< 0: no limit):
 * its descriptor, or a negative errno (-ETIMEDOUT when none came).
 */
GSOCK_DEVICE int gsrv_accept(struct gsock_dev gs, int lfd, long timeout_us)
{
	for (;;) {
		int fd = gaccept_nb(gs, lfd, NULL, NULL);

		if (fd != -EAGAIN)
			return fd;
		fd = gsrv_wait(gs, lfd, POLLIN, timeout_us);
		if (fd < 0)
			return fd;
	}
}

/*
 * Receive exactly n bytes into buf, each wait at most timeout_us of
 * quiet (< 0: no limit). Returns n, fewer at the peer's end, or a
 * negative errno (-ETIMEDOUT when the peer stalled).
 */
GSOCK_DEVICE long gsrv_recv_all(struct gsock_dev gs, int fd, void *buf,
				uint64_t n, long timeout_us)
{
	uint64_t got = 0;

	while (got < n) {
		long r = grecv(gs, fd, (uint8_t *)buf + got, n - got,
			       MSG_DONTWAIT);

		if (r > 0) {
			got += (uint64_t)r;
			continue;
		}
		if (r == 0)
			break;
		if (r != -EAGAIN)
			return r;
		r = gsrv_wait(gs, fd, POLLIN, timeout_us);
		if (r < 0)
			return r;
	}
	return (long)got;
}

/*
 * Send all n bytes by by_ns (gs_now_ns()'s clock; 0: no limit), each
 * wait for ring space at most timeout_us (< 0: no limit). Returns n or a
 * negative errno (-ETIMEDOUT: the peer does not read, or too slowly to
 * be done by by_ns). A per-wait bound alone lets a reader that takes a
 * byte now and then hold the block for as long as it likes.
 */
GSOCK_DEVICE long gsrv_send_by(struct gsock_dev gs, int fd, const void *buf,
			       uint64_t n, long timeout_us, uint64_t by_ns)
{
	uint64_t sent = 0;

	while (sent < n) {
		long r = gsend(gs, fd, (const uint8_t *)buf + sent, n - sent,
			       MSG_DONTWAIT), wait = timeout_us;

		if (r > 0) {
			sent += (uint64_t)r;
			continue;
		}
		if (r != -EAGAIN)
			return r;
		if (by_ns) { /* the wait ends by by_ns too */
			uint64_t now = (uint64_t)gs_bcast((long)gs_now_ns());
			long left = now < by_ns ? (long)((by_ns - now) / 1000) + 1 : 0;

			if (!left)
				return -ETIMEDOUT;
			if (wait < 0 || left < wait)
				wait = left;
		}
		r = gsrv_wait(gs, fd, POLLOUT, wait);
		if (r < 0)
			return r;
	}
	return (long)n;
}

/*
 * Send all n bytes within timeout_us plus n bytes at rate bytes a second,
 * for answers that a reader which takes a byte now and then must not
 * hold the block's other connections behind: n or a negative errno
 * (-ETIMEDOUT: too slow). timeout_us < 0: no bound at all (as
 * gsrv_send_all); rate 0: no time for the bytes, timeout_us alone.
 */
GSOCK_DEVICE long gsrv_send_rate(struct gsock_dev gs, int fd, const void *buf,
				 uint64_t n, long timeout_us, uint32_t rate)
{
	uint64_t by = (uint64_t)gs_bcast((long)gs_now_ns()) +
		      (uint64_t)timeout_us * 1000u;

	if (rate) /* n / rate seconds, without overflow */
		by += n / rate * 1000000000u + n % rate * 1000000000u / rate;
	return gsrv_send_by(gs, fd, buf, n, timeout_us, timeout_us < 0 ? 0 : by);
}

/*
 * Send all n bytes, each wait for ring space at most timeout_us (< 0: no
 * limit). Returns n or a negative errno (-ETIMEDOUT: the peer does not
 * read).
 */
GSOCK_DEVICE long gsrv_send_all(struct gsock_dev gs, int fd, const void *buf,
				uint64_t n, long timeout_us)
{
	return gsrv_send_by(gs, fd, buf, n, timeout_us, 0);
}

/*
 * A fixed header, then a body whose length the header gives: receive
 * hdr_len bytes into buf, ask body_len(buf, ctx) for the body's length
 * (a negative errno rejects the header; buf holds it), and receive the
 * body after the header in buf if it fits in cap. With MSG_DONTWAIT in
 * flags, -EAGAIN when not even the header's first byte is there (a
 * request handler's poll); once a message has begun, each wait is
 * bounded by timeout_us. Returns the message's length (header and body),
 * 0 at the peer's end before a header, or a negative errno: -EMSGSIZE
 * when the body does not fit (the header is in buf, the body unread),
 * -ECONNRESET when the peer ended mid-message.
 */
GSOCK_DEVICE long gsrv_recv_msg(struct gsock_dev gs, int fd, void *buf,
				uint64_t cap, uint32_t hdr_len,
				long (*body_len)(const void *hdr, void *ctx),
				void *ctx, int flags, long timeout_us)
{
	long got = 0, r, body = 0;

	if (flags & MSG_DONTWAIT) {
		got = grecv(gs, fd, buf, hdr_len, MSG_DONTWAIT);
		if (got <= 0)
			return got;
	}
	r = gsrv_recv_all(gs, fd, (uint8_t *)buf + got, hdr_len - got,
			  timeout_us);
	if (r < 0)
		return r;
	if ((uint64_t)(got + r) < hdr_len)
		return got + r == 0 ? 0 : -ECONNRESET;
	if (gs_tid() == 0)
		body = body_len(buf, ctx);
	body = gs_bcast(body);
	if (body < 0)
		return body;
	if ((uint64_t)body > cap - hdr_len)
		return -EMSGSIZE;
	r = gsrv_recv_all(gs, fd, (uint8_t *)buf + hdr_len, (uint64_t)body,
			  timeout_us);
	if (r < 0)
		return r;
	return r < body ? -ECONNRESET : (long)hdr_len + body;
}

/* The length of a frame: its first 4 bytes, big-endian. */
GSOCK_DEVICE long gsrv_frame_len(const void *hdr, void *ctx)
{
	const uint8_t *h = (const uint8_t *)hdr;

	(void)ctx;
	return (long)((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 |
		      (uint32_t)h[2] << 8 | h[3]);
}

/*
 * Length-prefixed frames: a 4-byte big-endian length, then that many
 * bytes. Receives one frame into buf (cap bytes at most, the prefix
 * included), flags and waits as gsrv_recv_msg's: returns the frame's
 * length, prefix included (so an empty frame is 4: its payload is r - 4
 * bytes at buf + 4), 0 at the peer's end between frames, or a negative
 * errno (-EMSGSIZE: too large).
 */
GSOCK_DEVICE long gsrv_recv_frame(struct gsock_dev gs, int fd, void *buf,
				  uint64_t cap, int flags, long timeout_us)
{
	return gsrv_recv_msg(gs, fd, buf, cap, 4, gsrv_frame_len, NULL, flags,
			     timeout_us);
}

/*
 * Send one frame: payload n bytes at buf + 4, its length written at buf.
 * The frame's length (n + 4), or a negative errno.
 */
GSOCK_DEVICE long gsrv_send_frame(struct gsock_dev gs, int fd, void *buf,
				  uint32_t n, long timeout_us)
{
	long r;

	if (gs_tid() == 0) {
		uint8_t *h = (uint8_t *)buf;

		h[0] = (uint8_t)(n >> 24);
		h[1] = (uint8_t)(n >> 16);
		h[2] = (uint8_t)(n >> 8);
		h[3] = (uint8_t)n;
	}
	gs_sync();
	r = gsrv_send_all(gs, fd, buf, (uint64_t)n + 4, timeout_us);
	return r < 0 ? r : (long)n + 4;
}

/*
 * Delimited input: lines, HTTP header blocks, anything that ends with a
 * known byte string. A connection's input comes through a buffer it
 * keeps between calls (in its gsrv_state(), say): data[cap], of which
 * data[off, have) is read but not yet handed out. gsrv_recv_until,
 * gsrv_recv_line and gsrv_recv_bytes share it, so a protocol may take a
 * header by its delimiter and then a body by its length.
 */
struct gsrv_lines {
	uint32_t off, have;
	uint32_t found; /* scratch: where the delimiter is */
	uint32_t scan; /* gsrv_recv_until: no delimiter starts in [off, scan) */
};

/* The block: move data[off, have) to the front of data. */
GSOCK_DEVICE void gs_srv_lines_front(struct gsock_dev gs, struct gsrv_lines *lb,
				     uint8_t *data)
{
	uint32_t off = lb->off, have = lb->have;

	(void)gs;
	/* off bytes a step: no thread reads what another writes */
	for (uint32_t c = 0; off && c < have - off; c += off) {
		uint32_t end = c + off < have - off ? c + off : have - off;

		for (uint32_t t = c + gs_tid(); t < end; t += gs_bdim())
			data[t] = data[off + t];
		gs_sync();
	}
	gs_sync();
	if (gs_tid() == 0) {
		lb->have = have - off;
		lb->scan = lb->scan > off ? lb->scan - off : 0;
		lb->off = 0;
	}
	gs_sync();
}

/*
 * The block: receive more into data[have, cap) (have < cap): the bytes
 * added, 0 at the peer's end, -EAGAIN (MSG_DONTWAIT in flags, nothing
 * there) or another negative errno; without MSG_DONTWAIT each wait is
 * bounded by timeout_us (-ETIMEDOUT).
 */
GSOCK_DEVICE long gs_srv_lines_fill(struct gsock_dev gs, int fd,
				    struct gsrv_lines *lb, uint8_t *data,
				    uint32_t cap, int flags, long timeout_us)
{
	for (;;) {
		uint32_t have = lb->have;
		long r = grecv(gs, fd, data + have, cap - have, MSG_DONTWAIT);

		if (r == -EAGAIN && !(flags & MSG_DONTWAIT)) {
			r = gsrv_wait(gs, fd, POLLIN, timeout_us);
			if (r == 0)
				continue;
		}
		if (r > 0) {
			gs_sync();
			if (gs_tid() == 0)
				lb->have = have + (uint32_t)r;
			gs_sync();
		}
		return r;
	}
}

/*
 * The next piece of input that ends with the dlen bytes at delim, the
 * delimiter included, at data + *at: its length; 0 at the peer's end (a
 * last piece without the delimiter is handed out first); -EMSGSIZE when
 * cap bytes hold no delimiter; -EAGAIN (flags MSG_DONTWAIT) when no
 * whole piece is there yet; another negative errno. Each wait is bounded
 * by timeout_us. The piece stays valid until the next call. A call goes
 * on scanning where the last one stopped (so a piece that comes in many
 * parts is scanned once): until a piece is handed out, keep its delimiter.
 */
GSOCK_DEVICE long gsrv_recv_until(struct gsock_dev gs, int fd,
				  struct gsrv_lines *lb, uint8_t *data,
				  uint32_t cap, const char *delim,
				  uint32_t dlen, uint32_t *at, int flags,
				  long timeout_us)
{
	for (;;) {
		uint32_t off = lb->off, have = lb->have, found;
		uint32_t from = lb->scan > off ? lb->scan : off;
		long r;

		gs_sync();
		if (gs_tid() == 0) {
			lb->found = have;
			/* the next scan starts where this one stops */
			lb->scan = have >= dlen && have - dlen + 1 > from ?
					   have - dlen + 1 :
					   from;
		}
		gs_sync();
		for (uint32_t i = from + gs_tid(); i + dlen <= have;
		     i += gs_bdim()) {
			uint32_t cur, d = 0;

			while (d < dlen && data[i + d] == (uint8_t)delim[d])
				d++;
			if (d < dlen)
				continue;
			/* keep the first one: lower the mark while above */
			while ((cur = gs_ld_local32(&lb->found)) > i &&
			       gs_cas32(&lb->found, cur, i) != cur)
				;
			break;
		}
		gs_sync();
		found = lb->found;
		if (found < have) {
			gs_sync();
			if (gs_tid() == 0)
				lb->off = lb->scan = found + dlen;
			gs_sync();
			*at = off;
			return (long)(found + dlen - off);
		}
		if (off > 0) { /* the partial piece to the front */
			gs_srv_lines_front(gs, lb, data);
			continue;
		}
		if (have >= cap)
			return -EMSGSIZE;
		r = gs_srv_lines_fill(gs, fd, lb, data, cap, flags, timeout_us);
		if (r < 0 || (r == 0 && have == 0))
			return r;
		if (r == 0) { /* at the end, the last piece has no delimiter */
			gs_sync();
			if (gs_tid() == 0)
				lb->have = lb->scan = 0;
			gs_sync();
			*at = 0;
			return (long)have;
		}
	}
}

/*
 * The next line, newline included, at data + *at: gsrv_recv_until with
 * the delimiter "\n" (its length, 0 at the end, -EMSGSIZE, -EAGAIN, ...).
 */
GSOCK_DEVICE long gsrv_recv_line(struct gsock_dev gs, int fd,
				 struct gsrv_lines *lb, uint8_t *data,
				 uint32_t cap, uint32_t *at, int flags,
				 long timeout_us)
{
	return gsrv_recv_until(gs, fd, lb, data, cap, "\n", 1, at, flags,
			       timeout_us);
}

/*
 * The next n bytes of input at data + *at, from what the buffer holds
 * first (a body after a header gsrv_recv_until handed out): n; 0 at the
 * peer's end before any of them; -ECONNRESET when it ended part way;
 * -EMSGSIZE when n > cap; -EAGAIN (flags MSG_DONTWAIT) when not all are
 * there yet (those that are stay buffered); another negative errno. Each
 * wait is bounded by timeout_us. Valid until the next call.
 */
GSOCK_DEVICE long gsrv_recv_bytes(struct gsock_dev gs, int fd,
				  struct gsrv_lines *lb, uint8_t *data,
				  uint32_t cap, uint32_t n, uint32_t *at,
				  int flags, long timeout_us)
{
	if (n > cap)
		return -EMSGSIZE;
	for (;;) {
		uint32_t off = lb->off, have = lb->have;
		long r;

		if (have - off >= n) {
			gs_sync();
			if (gs_tid() == 0)
				lb->off = off + n;
			gs_sync();
			*at = off;
			return (long)n;
		}
		if (off > 0 && (off + n > cap || have == cap)) {
			gs_srv_lines_front(gs, lb, data);
			continue;
		}
		r = gs_srv_lines_fill(gs, fd, lb, data, cap, flags, timeout_us);
		if (r == 0)
			return have == off ? 0 : -ECONNRESET;
		if (r < 0)
			return r;
	}
}

#include "gsock_http.cuh"
#include "gsock_pipe.cuh"

#endif /* GSOCK_SERVER_CUH */
