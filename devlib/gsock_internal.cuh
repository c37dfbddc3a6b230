/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-calls' internals (gsock.cuh includes this file after its public
 * types): the device's view of an application's arena (struct gsock_dev,
 * each socket's device state), the world word, doorbells and command
 * slots, the block collectives gs_bcast and gs_sum64 (public:
 * gsock-server(3)), the direct path's set-up, and the waits behind grecv,
 * gsend, gaccept and gpoll. Thread 0 only unless named otherwise.
 */
#ifndef GSOCK_INTERNAL_CUH
#define GSOCK_INTERNAL_CUH

#include "gsock_arena.h"
#include "gsock_copy.cuh"
#include "gsock_port.h"
#include "gsock_ring.h"

/*
 * Device-memory state of one socket, written by the application only.
 * Keeping it off the arena means the fast path of gsend and grecv reads
 * nothing across PCIe but the one counter it waits on.
 *
 * Where the bytes move: a bridged socket's rings and counters are its
 * arena entry's (gs_sock and its two rings); a direct one's are its
 * segment of the direct pool (gs_dseg), where the other end reads and
 * writes them. The pointers below say which, so the g-calls read and
 * write the same way on both paths.
 */
struct gs_lsock {
	uint64_t rx_head; /* bytes consumed; published to *rx_head_p */
	uint64_t tx_tail; /* bytes queued; published to *tx_tail_p */
	uint64_t rx_tail_seen; /* *rx_tail_p when last read */
	uint64_t tx_head_seen; /* *tx_head_p when last read */
	int32_t error; /* a socket error already seen: sticky */
	uint32_t flags; /* GS_LS_* */
	uint32_t poll_slot; /* what we last wrote to the arena's poll_slot */
	uint32_t db_queue; /* the arena's db_queue, read once when fd is made */
	uint32_t ring_size; /* bytes per ring on its path */
	uint32_t peer_bit; /* direct: the other side's GS_DC_SIDE */
	uint64_t *rx_tail_p, *rx_head_p, *tx_tail_p, *tx_head_p;
	uint8_t *rx_ring, *tx_ring;
	uint32_t *closed_p; /* direct: the segment's closed word */
	uint32_t *reset_p; /* direct: the segment's reset word */
	uint32_t *want_rx_p, *want_tx_p; /* direct, a CPU peer: its want words */
	uint64_t *sending_p; /* direct, a CPU peer: our pipe's sending word */
	/*
	 * Direct, both rings in receive pools: the counters' copies
	 * (gsock_arena.h, gs_dctr), tagged with sgen; else NULL. The tail
	 * and head we read lie in our GPU's memory, the ones we write in
	 * the other side's.
	 */
	uint64_t *rx_tail_m, *tx_head_m, *tx_tail_m, *rx_head_m;
	uint64_t sgen; /* gs_dseg.sgen << GS_DCTR_BITS */
	/*
	 * Direct, the ring in a receive pool (gsock_arena.h, lanes): bytes
	 * taken from the rx lane may run ahead of the tail seen until the
	 * sender's tail catches up.
	 */
	uint64_t *rx_lane; /* the lane we look at, or NULL */
	uint64_t *tx_lane; /* direct: the lane our copies go to, or NULL */
	uint64_t *lane_ok_p; /* GS_LANE_TX_WAIT: the receiver's lane_ok */
	uint64_t lane_ok_v; /* GS_LANE_OK of this use of the segment */
	uint32_t lane_tx; /* GS_LANE_TX_*: the sending block's alone */
	uint32_t lane_seq; /* the tag of our last copy */
	uint32_t lane_asks; /* small sends while GS_LANE_TX_WAIT */
};

#define GS_LANE_TX_OFF 0 /* no copies */
#define GS_LANE_TX_WAIT 1 /* copies once the receiver's lane_ok says so */
#define GS_LANE_TX_ON 2 /* a copy with every whole small send */

#define GS_LS_OPEN 0x1 /* a descriptor of ours: gsocket/gaccept, not gclose */
#define GS_LS_CONNECTED 0x2 /* gconnect or gaccept succeeded */
#define GS_LS_TX_SHUT 0x4 /* gshutdown(SHUT_WR or SHUT_RDWR) */
#define GS_LS_NONBLOCK 0x8 /* SOCK_NONBLOCK or GSOCK_NONBLOCK: never wait */
#define GS_LS_DIRECT 0x10 /* its bytes move through a direct segment */
#define GS_LS_CPU_PEER 0x20 /* direct, and the other end is a CPU program */
#define GS_LS_DEV_TX 0x40 /* direct, its tx ring in the receiver's GPU memory */
#define GS_LS_DEV_RX 0x80 /* direct, its rx ring in our own GPU memory */

/* world bits: set by libgsock's watcher thread, read by every wait. */
#define GS_WORLD_BRIDGE_GONE 0x1 /* gsockd's control socket closed */
#define GS_WORLD_STOP 0x2 /* gsock_stop(): the application ends its kernels */

/* Device-memory state of the whole application. */
struct gs_local {
	uint32_t world; /* GS_WORLD_* */
	uint32_t nudge; /* bumped (gs_nudge): every waiting gpoll looks again */
	/* per doorbell queue: tickets taken, the arena's head when last read */
	unsigned long long db_ticket[GS_MAX_QUEUES];
	unsigned long long db_head_seen[GS_MAX_QUEUES];
};

/* What a kernel gets from gsock_launch(): where everything is, by value. */
struct gsock_dev {
	struct gs_arena_hdr *arena;
	struct gs_cmd *slots;
	struct gs_sock *socks;
	struct gs_dbq *dbq;
	uint64_t *db; /* nqueues x db_size cells */
	uint8_t *rings;
	struct gs_local *local; /* device memory */
	struct gs_lsock *lsock; /* device memory, nsocks */
	uint32_t slot_base; /* this launch's first command slot */
	uint32_t nsocks;
	uint32_t ring_size;
	uint32_t db_size;
	uint32_t nqueues;
	uint32_t poll_ns; /* gsock_opts.poll_ns */
	uint8_t *pool; /* the direct pool, or NULL: every socket bridged */
	uint32_t dsegs; /* its segments */
	uint32_t dring_size; /* bytes per ring in a segment */
	uint8_t *rxpool; /* this arena's receive pool in device memory, or NULL */
	uint64_t *peers; /* GS_MAX_PEERS: each receive pool's device view, or 0 */
	uint32_t lane; /* 1: direct connections use lanes ($GSOCK_DIRECT_LANE) */
};

/*
 * Timing points inside gsend (0-5, 7: a lane copy written) and grecv
 * (8-13, 6: a lane copy found, 14: the return): nothing unless the
 * including file defines GS_TRACE(k) first (bench/probes/direct-phases.cu
 * does, to see where a round trip goes).
 */
#ifndef GS_TRACE
#define GS_TRACE(k) do { } while (0)
#endif
/* Each turn of a wait for a lane copy, as it begins (the same probe). */
#ifndef GS_TRACE_TURN
#define GS_TRACE_TURN() do { } while (0)
#endif

/*
 * *p for a wait on a word that moves away from `seen`: a value equal to
 * seen comes back unordered (act on it only where an earlier acquire
 * load returned it, or not at all), one that differs is loaded again
 * with acquire, so what the caller reads next is ordered after it. A
 * turn that finds nothing pays no L1 invalidation (gs_peek64). For words
 * in device memory: one in host memory pays a second PCIe read for each
 * move found (a preloaded CPU client's 64 B round trip to a GPU echo
 * server, whose wait peeked at the ring's tail in host memory, took
 * 10.1-10.5 us against 8.8-9.2), so waits there load with acquire.
 */
GSOCK_DEVICE uint64_t gs_ld64_moved(const uint64_t *p, uint64_t seen)
{
	uint64_t v = gs_peek64(p);

	return v == seen ? v : gs_ld64(p);
}

GSOCK_DEVICE uint32_t gs_ld32_moved(const uint32_t *p, uint32_t seen)
{
	uint32_t v = gs_peek32(p);

	return v == seen ? v : gs_ld32(p);
}

/* 0 while the world word w says all is well, else the error to return. */
GSOCK_DEVICE int gs_world_err(uint32_t w)
{
	if (w & GS_WORLD_BRIDGE_GONE)
		return -ECONNABORTED;
	if (w & GS_WORLD_STOP)
		return -ECANCELED;
	return 0;
}

/* 0 while the world is well, else the error every wait must return. */
GSOCK_DEVICE int gs_world_error(struct gsock_dev gs)
{
	return gs_world_err(gs_ld_local32(&gs.local->world));
}

/*
 * Thread 0, once per turn of a wait loop, with the world word as loaded
 * this turn: the error that ends the wait, or 0 after backing off (turn
 * counts the turns).
 */
GSOCK_DEVICE int gs_wait_turn_w(struct gsock_dev gs, unsigned *turn,
				uint32_t world)
{
	int err = gs_world_err(world);

	if (err)
		return err;
	gs_relax((*turn)++);
	if (gs.poll_ns && *turn > 2)
		gs_pause(gs.poll_ns);
	return 0;
}

/* gs_wait_turn_w, loading the world word now. */
GSOCK_DEVICE int gs_wait_turn(struct gsock_dev gs, unsigned *turn)
{
	return gs_wait_turn_w(gs, turn, gs_ld_local32(&gs.local->world));
}

/*
 * Tell the bridge worker that serves queue q that `what` (socket id, or
 * GS_DB_CMD | slot) changed.
 */
GSOCK_DEVICE int gs_ring_doorbell(struct gsock_dev gs, uint32_t q,
				  uint32_t what)
{
	uint64_t t, *cells;
	unsigned i = 0;
	int err;

	q = q < gs.nqueues ? q : q % gs.nqueues;
	t = gs_fetch_add64(&gs.local->db_ticket[q], 1);
	cells = gs_db_cells(gs.db, q, gs.db_size);
	/* The cached head is behind the real one, never ahead: re-read it
	 * only when the queue looks full. */
	while (t - gs.local->db_head_seen[q] >= gs.db_size) {
		gs.local->db_head_seen[q] = gs_ld64(&gs.dbq[q].head);
		if (t - gs.local->db_head_seen[q] < gs.db_size)
			break;
		err = gs_wait_turn(gs, &i);
		if (err)
			return err;
	}
	/* Callers published what changed before; release orders it first. */
	gs_st_release64(&cells[t & (gs.db_size - 1)], gs_db_cell(t, what));
	return 0;
}

/*
 * The queue a command about fd goes to: the one of the worker that owns
 * fd (what the bridge said when fd was made), else one picked by block,
 * so sockets that blocks create spread over the workers.
 */
GSOCK_DEVICE uint32_t gs_cmd_queue(struct gsock_dev gs, int fd)
{
	if (fd >= 0 && (uint32_t)fd < gs.nsocks)
		return gs.lsock[fd].db_queue;
	return (gs.slot_base + gs_bid()) % gs.nqueues;
}

GSOCK_DEVICE struct gs_cmd *gs_my_slot(struct gsock_dev gs)
{
	return &gs.slots[gs.slot_base + gs_bid()];
}

/*
 * Post a command from this block's slot: *seq is what its reply's
 * done_seq will be. Returns 0, or a negative errno with nothing posted
 * (or, from the doorbell, the request written but never rung).
 */
GSOCK_DEVICE long gs_command_post_t0(struct gsock_dev gs, uint32_t op, int fd,
				     int64_t a0, int64_t a1, int64_t a2,
				     const void *addr, uint32_t addrlen,
				     uint64_t *seq)
{
	struct gs_cmd *c = gs_my_slot(gs);
	long err;

	if (addrlen > GS_ADDR_MAX)
		return -EINVAL;
	err = gs_world_error(gs);
	if (err)
		return err;
	*seq = gs_ld64(&c->seq) + 1;
	c->op = op;
	c->fd = fd;
	c->arg[0] = a0;
	c->arg[1] = a1;
	c->arg[2] = a2;
	c->addrlen = addrlen;
	for (uint32_t k = 0; k < addrlen; k++)
		c->addr[k] = ((const uint8_t *)addr)[k];
	gs_st64(&c->seq, *seq);
	return gs_ring_doorbell(gs, gs_cmd_queue(gs, fd),
				GS_DB_CMD | (gs.slot_base + gs_bid()));
}

/* Post a command from this block's slot and wait for its reply. */
GSOCK_DEVICE long gs_command_t0(struct gsock_dev gs, uint32_t op, int fd,
				int64_t a0, int64_t a1, int64_t a2,
				const void *addr, uint32_t addrlen)
{
	struct gs_cmd *c = gs_my_slot(gs);
	uint64_t seq = 0;
	unsigned i = 0;
	long err =
		gs_command_post_t0(gs, op, fd, a0, a1, a2, addr, addrlen, &seq);

	if (err)
		return err;
	while (gs_ld64(&c->done_seq) != seq) {
		err = gs_wait_turn(gs, &i);
		if (err)
			return err;
	}
	return (long)c->result;
}

/* Broadcast thread 0's value to the block. */
GSOCK_DEVICE long gs_bcast(long v)
{
	GS_SHARED long shared_v;

	if (gs_tid() == 0)
		shared_v = v;
	gs_sync();
	v = shared_v;
	gs_sync();
	return v;
}

/* Thread 0's *a, *b and *c, to every thread: one barrier pair. */
GSOCK_DEVICE void gs_bcast3(long *a, long *b, long *c)
{
	GS_SHARED long shared_abc[3];

	if (gs_tid() == 0) {
		shared_abc[0] = *a;
		shared_abc[1] = *b;
		shared_abc[2] = *c;
	}
	gs_sync();
	*a = shared_abc[0];
	*b = shared_abc[1];
	*c = shared_abc[2];
	gs_sync();
}

/* Thread 0's *a and *b, to every thread. */
GSOCK_DEVICE void gs_bcast2(long *a, long *b)
{
	long c = 0;

	gs_bcast3(a, b, &c);
}

/* The sum of every thread's v, to every thread. */
GSOCK_DEVICE uint64_t gs_sum64(uint64_t v)
{
	GS_SHARED unsigned long long shared_sum;

	if (gs_tid() == 0)
		shared_sum = 0;
	gs_sync();
	if (v)
		gs_fetch_add64(&shared_sum, v);
	gs_sync();
	v = shared_sum;
	gs_sync();
	return v;
}

/* Block-wide command; out_addr (any thread's own) receives the reply's sockaddr. */
GSOCK_DEVICE long gs_command(struct gsock_dev gs, uint32_t op, int fd,
			     int64_t a0, int64_t a1, int64_t a2,
			     const void *addr, uint32_t addrlen,
			     struct sockaddr *out_addr, socklen_t *out_len)
{
	long r = 0;

	if (gs_tid() == 0)
		r = gs_command_t0(gs, op, fd, a0, a1, a2, addr, addrlen);
	r = gs_bcast(r);
	if (r >= 0 && out_addr && out_len) {
		struct gs_cmd *c = gs_my_slot(gs);
		uint32_t n = c->out_addrlen;

		if (n > GS_ADDR_MAX)
			n = GS_ADDR_MAX;
		memcpy(out_addr, c->out_addr, n < *out_len ? n : *out_len);
		*out_len = n;
	}
	gs_sync();
	return r;
}

/* Thread 0: a new descriptor from the bridge starts with fresh state. */
GSOCK_DEVICE void gs_lsock_reset_t0(struct gsock_dev gs, int fd, uint32_t flags)
{
	struct gs_lsock *ls = &gs.lsock[fd];
	struct gs_sock *s = &gs.socks[fd];

	ls->rx_head = ls->tx_tail = ls->rx_tail_seen = ls->tx_head_seen = 0;
	ls->error = 0;
	ls->flags = GS_LS_OPEN | flags;
	ls->poll_slot = 0;
	ls->db_queue = gs_ld32(&s->db_queue);
	ls->ring_size = gs.ring_size;
	ls->peer_bit = 0;
	ls->rx_tail_p = &s->rx_tail;
	ls->rx_head_p = &s->rx_head;
	ls->tx_tail_p = &s->tx_tail;
	ls->tx_head_p = &s->tx_head;
	ls->rx_ring = gs_sock_rx_ring(gs.rings, (uint32_t)fd, gs.ring_size);
	ls->tx_ring = ls->rx_ring + gs.ring_size;
	ls->closed_p = 0;
	ls->reset_p = 0;
	ls->want_rx_p = ls->want_tx_p = 0;
	ls->sending_p = 0;
	ls->rx_tail_m = ls->tx_head_m = ls->tx_tail_m = ls->rx_head_m = 0;
	ls->rx_lane = ls->tx_lane = ls->lane_ok_p = 0;
	ls->lane_ok_v = 0;
	ls->lane_tx = GS_LANE_TX_OFF;
	ls->lane_seq = ls->lane_asks = 0;
	gs_st32(&s->poll_slot, 0);
}

/*
 * Thread 0, fd direct (gs_direct_t0 below): its lanes (gsock_arena.h),
 * where a pipe's ring lies in its receiver's pool, and the lane in the
 * segment of our pipe to a CPU side. Ours we zero first and then say so
 * in lane_ok, as the sender writes there only after.
 */
GSOCK_DEVICE void gs_lane_setup_t0(struct gsock_dev gs, struct gs_lsock *ls,
				   struct gs_dseg *g, uint32_t seg,
				   uint32_t side, uint32_t dev, uint8_t *peer)
{
	ls->lane_ok_v = GS_LANE_OK(gs_ld32(&g->sgen) & GS_SGEN_MASK);
	if (dev & GS_DC_SIDE(side ^ 1)) {
		uint64_t *l = GS_RXPOOL_CTR(gs.rxpool, gs.dsegs, gs.dring_size,
					    seg)->lane;

		for (unsigned u = 0; u < GS_LANE_UNITS; u++)
			gs_st_unit(l + u, 0);
		gs_st64(&g->lane_ok[side ^ 1], ls->lane_ok_v); /* after a fence */
		ls->rx_lane = l;
	}
	if (dev & GS_DC_SIDE(side))
		ls->tx_lane = GS_RXPOOL_CTR(peer, gs.dsegs, gs.dring_size,
					    seg)->lane;
	else if (ls->flags & GS_LS_CPU_PEER)
		ls->tx_lane = g->lane[side];
	if (ls->tx_lane) {
		ls->lane_ok_p = &g->lane_ok[side];
		ls->lane_tx = GS_LANE_TX_WAIT;
	}
}

/*
 * Thread 0, once fd is connected: if gsockd made it direct, its bytes
 * move through that segment from now on: a pipe's ring in the segment,
 * or in the receiver's receive pool where the segment says so. Returns
 * 0, or -EIO when gsockd named a segment or a pool this application
 * cannot reach (both are mapped before gsockd may name them, so only a
 * broken gsockd does that).
 */
GSOCK_DEVICE int gs_direct_t0(struct gsock_dev gs, int fd)
{
	struct gs_lsock *ls = &gs.lsock[fd];
	uint32_t d = gs_ld32(&gs.socks[fd].direct), seg, side, dev;
	uint8_t *peer = 0;
	struct gs_dseg *g;
	uint8_t *rings;

	if (!d)
		return 0;
	seg = (d - 1) >> 1;
	side = (d - 1) & 1;
	if (!gs.pool || seg >= gs.dsegs)
		return -EIO;
	g = (struct gs_dseg *)(gs.pool + (uint64_t)seg *
						 GS_DSEG_STRIDE(gs.dring_size));
	rings = (uint8_t *)g + GS_DSEG_HDR;
	ls->ring_size = gs.dring_size;
	ls->peer_bit = GS_DC_SIDE(side ^ 1);
	ls->tx_tail_p = &g->pipe[side].tail;
	ls->tx_head_p = &g->pipe[side].head;
	ls->rx_tail_p = &g->pipe[side ^ 1].tail;
	ls->rx_head_p = &g->pipe[side ^ 1].head;
	ls->tx_ring = rings + (uint64_t)side * gs.dring_size;
	ls->rx_ring = rings + (uint64_t)(side ^ 1) * gs.dring_size;
	dev = gs_ld32(&g->dev);
	if (dev & GS_DC_SIDE(side)) { /* into the other side's GPU memory */
		uint32_t p = gs_ld32(&g->dpeer[side ^ 1]);

		peer = p && p <= GS_MAX_PEERS && gs.peers ?
			       (uint8_t *)gs_ld64(&gs.peers[p - 1]) :
			       0;
		if (!peer)
			return -EIO;
		ls->tx_ring = peer + (uint64_t)seg * gs.dring_size;
		ls->flags |= GS_LS_DEV_TX;
	}
	if (dev & GS_DC_SIDE(side ^ 1)) { /* out of our own */
		if (!gs.rxpool)
			return -EIO;
		ls->rx_ring = gs.rxpool + (uint64_t)seg * gs.dring_size;
		ls->flags |= GS_LS_DEV_RX;
	}
	if (dev == (GS_DC_SIDE(0) | GS_DC_SIDE(1))) {
		struct gs_dctr *mine = GS_RXPOOL_CTR(gs.rxpool, gs.dsegs,
						     gs.dring_size, seg);
		struct gs_dctr *theirs = GS_RXPOOL_CTR(peer, gs.dsegs,
						       gs.dring_size, seg);

		ls->rx_tail_m = &mine->tail;
		ls->tx_head_m = &mine->head;
		ls->tx_tail_m = &theirs->tail;
		ls->rx_head_m = &theirs->head;
		ls->sgen = (uint64_t)(gs_ld32(&g->sgen) & GS_SGEN_MASK)
			   << GS_DCTR_BITS;
	}
	ls->closed_p = &g->closed;
	ls->reset_p = &g->reset;
	ls->want_rx_p = &g->want[side ^ 1];
	ls->want_tx_p = &g->want[side];
	ls->sending_p = &g->pipe[side].sending;
	ls->flags |= GS_LS_DIRECT;
	if (gs_ld32(&g->cpu) & GS_DC_SIDE(side ^ 1))
		ls->flags |= GS_LS_CPU_PEER;
	if (gs.lane)
		gs_lane_setup_t0(gs, ls, g, seg, side, dev, peer);
	return 0;
}

/*
 * The publishing thread, direct with a CPU peer, after publishing a
 * counter: if the peer sleeps on its descriptor for it (want has bit),
 * ring so gsockd wakes it. The fence pairs with the peer's between
 * setting the bit and reading the counter again (preload/direct.c), so
 * one of the two sees the other. Returns 0 or the doorbell's error.
 */
GSOCK_DEVICE int gs_wake_cpu_t0(struct gsock_dev gs, int fd,
				struct gs_lsock *ls, uint32_t *want,
				uint32_t bit)
{
	if (!(ls->flags & GS_LS_CPU_PEER))
		return 0;
	gs_fence();
	if (!(gs_ld32(want) & bit))
		return 0;
	return gs_ring_doorbell(gs, ls->db_queue, (uint32_t)fd);
}

/* The device-side state of fd, or NULL if fd is not an open descriptor. */
GSOCK_DEVICE struct gs_lsock *gs_lsock_of(struct gsock_dev gs, int fd)
{
	if (fd < 0 || (uint32_t)fd >= gs.nsocks ||
	    !(gs.lsock[fd].flags & GS_LS_OPEN))
		return 0;
	return &gs.lsock[fd];
}

/*
 * The stream position a counter's copy v (gs_dctr: its low GS_DCTR_BITS)
 * names, for a copy known to lie within 2^31 of pos.
 */
GSOCK_DEVICE uint64_t gs_dctr_near(uint64_t pos, uint64_t v)
{
	return pos + (uint64_t)(int64_t)(int32_t)(uint32_t)(v - pos);
}

/*
 * Bytes in the rx ring as last seen: none while bytes taken from the lane
 * are ahead of the tail seen.
 */
GSOCK_DEVICE uint64_t gs_rx_avail(const struct gs_lsock *ls)
{
	uint64_t d = ls->rx_tail_seen - ls->rx_head;

	return (int64_t)d > 0 ? d : 0;
}

/*
 * Bytes in the rx ring, reading its tail. A tail below one seen before
 * (no sender does that) is more than the ring holds where strict
 * (thread 0's waits: callers say -EIO); gpoll, whose threads may share a
 * descriptor listed twice and so read it out of turn, leaves it for them.
 */
GSOCK_DEVICE uint64_t gs_rx_read_tail(struct gs_lsock *ls, int strict)
{
	uint64_t t;

	if (ls->rx_tail_m) {
		/*
		 * Our GPU's copy: the tail lies in [head - bytes taken from
		 * the lane, head + ring], well within 2^31 of the head.
		 */
		uint64_t seen = ls->sgen | (ls->rx_tail_seen & GS_DCTR_MASK);
		uint64_t v = gs_peek64(ls->rx_tail_m);

		/* nothing new, or no tail of this use of the segment yet */
		if (v == seen || (v & ~GS_DCTR_MASK) != ls->sgen)
			return gs_rx_avail(ls);
		v = gs_ld64(ls->rx_tail_m); /* moved: ordered before the bytes */
		if ((v & ~GS_DCTR_MASK) != ls->sgen)
			return gs_rx_avail(ls);
		t = gs_dctr_near(ls->rx_head, v);
	} else {
		t = gs_ld64(ls->rx_tail_p);
	}
	if ((int64_t)(t - ls->rx_tail_seen) < 0)
		return strict ? ~0ull : gs_rx_avail(ls);
	ls->rx_tail_seen = t;
	return gs_rx_avail(ls);
}

/* Thread 0: gs_rx_read_tail, strict. */
GSOCK_DEVICE uint64_t gs_rx_refresh_t0(struct gs_lsock *ls)
{
	return gs_rx_read_tail(ls, 1);
}

/* Thread 0: the tx ring's head as the receiver last published it. */
GSOCK_DEVICE uint64_t gs_tx_head_t0(struct gs_lsock *ls)
{
	if (ls->tx_head_m) {
		/* our GPU's copy: the head lies in [tail - ring, tail] */
		uint64_t seen = ls->sgen | (ls->tx_head_seen & GS_DCTR_MASK);
		uint64_t v = gs_peek64(ls->tx_head_m);

		if (v == seen || (v & ~GS_DCTR_MASK) != ls->sgen)
			return ls->tx_head_seen;
		v = gs_ld64(ls->tx_head_m);
		if ((v & ~GS_DCTR_MASK) == ls->sgen)
			return ls->tx_tail - ((ls->tx_tail - v) & GS_DCTR_MASK);
		return ls->tx_head_seen;
	}
	return gs_ld64(ls->tx_head_p);
}

#define GS_RX_STATUS_TURNS 8
/*
 * gs_rx_lane's turns are one trip to L2, not across PCIe: it looks
 * (gs_rx_look_t0) and reads the status every GS_LANE_LOOK_TURNS turns
 * where it holds the tail's copy in our GPU memory, and every turn but
 * with the status every GS_LANE_STATUS_TURNS where it does not.
 */
#define GS_LANE_LOOK_TURNS 64
#define GS_LANE_STATUS_TURNS 32

/* gs_rx_look_t0: nothing yet; grecv: look at the lane (no errno is this large). */
#define GS_RX_NONE (-0x7fffffffL)
#define GS_RX_LANE (-0x7ffffffeL)

/*
 * Thread 0, turn i of a wait for rx bytes (`waits`: the caller waits
 * rather than say EAGAIN). Returns bytes available (> 0), 0 at EOF, a
 * negative errno, or GS_RX_NONE.
 */
GSOCK_DEVICE long gs_rx_look_t0(struct gsock_dev gs, int fd,
				struct gs_lsock *ls, unsigned i, int waits)
{
	struct gs_sock *s = &gs.socks[fd];
	uint64_t avail = gs_rx_avail(ls);
	uint32_t st;

	if (!avail)
		avail = gs_rx_refresh_t0(ls);
	if (avail > ls->ring_size)
		return -EIO;
	if (avail)
		return (long)avail;
	if (ls->error)
		return ls->error;
	/*
	 * Slow path, on the first turn and every GS_RX_STATUS_TURNS after:
	 * status first, then the tail it covers. The turns between read the
	 * tail alone, one PCIe read each.
	 */
	if (i % GS_RX_STATUS_TURNS)
		return GS_RX_NONE;
	/*
	 * Direct, a wait: not on the first turn either. The tail alone
	 * answers sooner (1-1.7 us a round trip on an H100), and an EOF or
	 * error waits GS_RX_STATUS_TURNS reads more.
	 */
	if (i == 0 && (ls->flags & GS_LS_DIRECT) && waits)
		return GS_RX_NONE;
	st = gs_ld32(&s->status);
	avail = gs_rx_refresh_t0(ls);
	if (avail > ls->ring_size)
		return -EIO;
	if (avail)
		return (long)avail;
	if (!(st & GS_ST_OPEN))
		return -EBADF;
	/*
	 * Direct: a peer that reset the connection in the segment (a CPU
	 * program that wrote around the preload, or went with our bytes
	 * unread) may have left its kernel socket alive or ended with a FIN:
	 * the reset comes first.
	 */
	if (ls->reset_p && (gs_ld32(ls->reset_p) & ls->peer_bit))
		return ls->error = -ECONNRESET;
	if (st & GS_ST_RX_EOF)
		return 0;
	if (s->error)
		return ls->error = s->error;
	if (!(st & GS_ST_CONNECTED))
		return -ENOTCONN;
	/* An empty ring: a stalled bridge would wait for us forever. */
	if (i == 0 && !(ls->flags & GS_LS_DIRECT) && gs_ld32(&s->rx_blocked)) {
		int err = gs_ring_doorbell(gs, ls->db_queue, (uint32_t)fd);

		if (err)
			return err;
	}
	return GS_RX_NONE;
}

/*
 * Thread 0: wait until the rx ring has bytes, EOF or an error. Returns
 * bytes available (> 0), 0 at EOF, or a negative errno.
 */
GSOCK_DEVICE long gs_rx_wait_t0(struct gsock_dev gs, int fd,
				struct gs_lsock *ls, int dontwait)
{
	int waits = !dontwait && !(ls->flags & GS_LS_NONBLOCK);
	unsigned i = 0;

	for (;;) {
		long r = gs_rx_look_t0(gs, fd, ls, i, waits);
		int err;

		if (r != GS_RX_NONE)
			return r;
		if (!waits)
			return -EAGAIN;
		err = gs_wait_turn(gs, &i);
		if (err)
			return err;
	}
}

/*
 * Thread 0: mark n rx bytes consumed. If the ring was at least half full,
 * the bridge may have stalled on it: ring if it says so (the fence pairs
 * with the bridge's, see bridge/sock.c rx_space). A smaller ring state is
 * caught by the empty-ring check in gs_rx_wait_t0.
 */
GSOCK_DEVICE int gs_rx_consume_t0(struct gsock_dev gs, int fd,
				  struct gs_lsock *ls, uint64_t n,
				  uint64_t avail)
{
	struct gs_sock *s = &gs.socks[fd];

	/* The copy's loads have returned: no fence before freeing the space. */
	ls->rx_head += n;
	if (ls->rx_head_m)
		gs_st_plain64(ls->rx_head_m,
			      ls->sgen | (ls->rx_head & GS_DCTR_MASK));
	gs_st_plain64(ls->rx_head_p, ls->rx_head);
	/*
	 * Direct: the sender looks at the head itself. A CPU sender sleeps
	 * only on a full ring, and is rung when the ring drains below half:
	 * as it cannot write while asleep, the bytes seen here only fall,
	 * and cross half once (a view of the tail from before it filled the
	 * ring is followed by a fresh one above half). So the fence and the
	 * read of want are paid once per half ring, not per grecv.
	 */
	if (ls->flags & GS_LS_DIRECT)
		return avail >= ls->ring_size / 2 && avail - n < ls->ring_size / 2 ?
			       gs_wake_cpu_t0(gs, fd, ls, ls->want_rx_p,
					      GS_DW_WRITER) :
			       0;
	if (avail < ls->ring_size / 2)
		return 0;
	gs_fence();
	if (gs_ld32(&s->rx_blocked))
		return gs_ring_doorbell(gs, ls->db_queue, (uint32_t)fd);
	return 0;
}

/*
 * Who reads a lane (gs_rx_lane): on CUDA the block's first warp, a unit a
 * thread, in two waves: the header and 120 bytes first, and the rest
 * only for a longer copy; the host backend's one thread reads them all.
 * A CUDA block under 32 threads leaves the lane alone.
 */
#ifdef __CUDACC__
#define GS_LANE_W 32
#else
#define GS_LANE_W 1
#endif
#define GS_LANE_SLOTS (GS_LANE_UNITS / GS_LANE_W) /* units a reader holds */
#define GS_LANE_WAVE 32 /* units of the first wave */

/* Thread 0: gs_lane_hdr where we stand. */
GSOCK_DEVICE long gs_lane_hdr_t0(const struct gs_lsock *ls, uint64_t h0,
				 uint64_t h1)
{
	return (long)gs_lane_hdr(h0, h1, ls->rx_head, ls->rx_tail_seen,
				 ls->ring_size);
}

/*
 * Load the lane's units [from, to) that this thread holds (v[k]: unit
 * t + k x GS_LANE_W); no ordering, so they travel side by side.
 */
GSOCK_DEVICE void gs_lane_load(const uint64_t *lane, uint64_t *v,
			       unsigned from, unsigned to)
{
	unsigned t = gs_tid();

	GS_UNROLL
	for (unsigned k = 0; k < GS_LANE_SLOTS; k++) {
		unsigned u = t + k * GS_LANE_W;

		if (t < GS_LANE_W && u >= from && u < to)
			v[k] = gs_ld_unit(lane + u);
	}
}

/*
 * Direct, fd has a lane and the ring is empty as far as we know: wait
 * for bytes as gs_rx_wait_t0 does (but for how often it reads the
 * status: GS_LANE_LOOK_TURNS), looking at the lane each turn beside
 * thread 0's read of the ring's counters, so one round trip both finds
 * the bytes and brings them. A copy at our position is taken even when
 * the tail shows its bytes too: they are here already, the ring's would
 * cost another crossing. The block's first warp alone waits, checks and
 * copies, with warp votes and shuffles, while the other threads wait at
 * one block barrier at the end: a turn with nothing took four block
 * barriers and a found copy five (direct-phases showed each broadcast,
 * a barrier pair, at ~0.3 us of a call). Every thread
 * returns the same: bytes taken from the lane into buf and consumed
 * (> 0); GS_RX_NONE when the ring has bytes the lane does not
 * (gs_rx_wait_t0 then returns them at once); 0 at EOF; or a negative
 * errno. The block has GS_LANE_W threads at least.
 */
GSOCK_DEVICE long gs_rx_lane(struct gsock_dev gs, int fd, struct gs_lsock *ls,
			     uint8_t *buf, size_t len, int dontwait)
{
	const uint64_t *lane = ls->rx_lane;
	unsigned t = gs_tid(), i = 0;
	int waits = !dontwait && !(ls->flags & GS_LS_NONBLOCK);
	long res = 0;
	/*
	 * Thread 0's view of ls between its looks (gs_rx_look_t0), for the
	 * turns that only peek: the tail's copy in our GPU memory (or NULL:
	 * every turn looks), its value as last seen, and what the lane's
	 * header is checked against.
	 */
	const uint64_t *tail_m = t == 0 ? ls->rx_tail_m : 0;
	uint64_t seen = 0, head = 0, tseen = 0, sgen = 0;
	uint32_t size = 0;
	int32_t err = 0;

	if (tail_m) {
		head = ls->rx_head;
		tseen = ls->rx_tail_seen;
		size = ls->ring_size;
		sgen = ls->sgen;
		err = ls->error;
		seen = sgen | (tseen & GS_DCTR_MASK);
	}

	while (t < GS_LANE_W) { /* the first warp, in step */
		uint64_t v[GS_LANE_SLOTS];
		long r = 0, hdr = 0;
		uint32_t world = 0;

		GS_TRACE_TURN();
		gs_lane_load(lane, v, 0, GS_LANE_WAVE);
		if (t == 0) {
			uint64_t h1 = gs_ld_unit(lane + 1);
			/* issued beside the lane's loads, used after them */
			uint64_t tv = tail_m ? gs_peek64(tail_m) : 0;

			/*
			 * A turn is one round trip to L2: the lane, the tail's
			 * copy and the world word travel side by side, and
			 * what the checks need of ls thread 0 holds. A turn
			 * that read ls (a chain of dependent loads, each a
			 * trip to L2 where another's acquire or fence had
			 * emptied the SM's L1) took 0.7-1.4 us on an H100.
			 * gs_rx_look_t0 looks when the tail moved past what
			 * the lane brought, and at the first turn of a call
			 * that does not wait and every GS_LANE_LOOK_TURNS-th,
			 * where it reads the status too (EOF, a reset, a
			 * closed peer: 64 turns take 20-40 us, and 0.5 ms
			 * once a long wait sleeps 8 us a turn in gs_relax).
			 */
			int lean = tail_m && !err;

			world = gs_ld_local32(&gs.local->world);
			if (lean && tv != seen) {
				/*
				 * The tail moved. Up to bytes the lane already
				 * brought (a copy's tail follows it), there is
				 * nothing of the ring to read, so nothing to
				 * order after it: no acquire, no look. Past
				 * them, or odd, gs_rx_look_t0 sees to it.
				 */
				uint64_t tn = gs_dctr_near(head, tv);

				if ((tv & ~GS_DCTR_MASK) == sgen &&
				    (int64_t)(tn - tseen) >= 0 &&
				    (int64_t)(tn - head) <= 0) {
					tseen = tn;
					seen = tv;
					ls->rx_tail_seen = tn;
				} else {
					lean = 0;
				}
			}
			if (lean && (i % GS_LANE_LOOK_TURNS || (i == 0 && waits))) {
				r = GS_RX_NONE;
				hdr = (long)gs_lane_hdr(v[0], h1, head, tseen,
							size);
			} else {
				/* the turn index gs_rx_look_t0 reads status at */
				unsigned k = tail_m ? GS_LANE_LOOK_TURNS :
						      GS_LANE_STATUS_TURNS;

				r = gs_rx_look_t0(gs, fd, ls,
						  i % k ? 1 :
							  i / k * GS_RX_STATUS_TURNS,
						  waits);
				if (r > 0 || r == GS_RX_NONE)
					hdr = gs_lane_hdr_t0(ls, v[0], h1);
				if (tail_m) {
					head = ls->rx_head;
					tseen = ls->rx_tail_seen;
					err = ls->error;
					seen = sgen | (tseen & GS_DCTR_MASK);
				}
			}
		}
		r = gs_warp_bcast(r);
		hdr = gs_warp_bcast(hdr);
		if (r != GS_RX_NONE && r <= 0) {
			res = r;
			break;
		}
		if (hdr) {
			uint32_t tag = (uint32_t)((uint64_t)hdr >> 32);
			uint32_t n = (uint32_t)hdr & 0xff;
			unsigned end = GS_LANE_HDR + (n + 3) / 4;
			size_t k = n < len ? n : len;
			int bad = 0;

			if (end > GS_LANE_WAVE)
				gs_lane_load(lane, v, GS_LANE_WAVE, end);
			GS_UNROLL
			for (unsigned j = 0; j < GS_LANE_SLOTS; j++) {
				unsigned u = t + j * GS_LANE_W;

				if (u >= GS_LANE_HDR && u < end &&
				    (uint32_t)(v[j] >> 32) != tag)
					bad = 1;
			}
			/* a unit of another copy: the sender is mid-write */
			if (!gs_warp_any(bad)) {
				GS_TRACE(6);
				GS_UNROLL
				for (unsigned j = 0; j < GS_LANE_SLOTS; j++) {
					unsigned u = t + j * GS_LANE_W;
					size_t o = (size_t)(u - GS_LANE_HDR) * 4;

					if (u < GS_LANE_HDR || u >= end)
						continue;
					for (unsigned b = 0; b < 4 && o + b < k; b++)
						buf[o + b] = (uint8_t)(v[j] >> 8 * b);
				}
				/* r: the ring's bytes, where the tail showed them */
				if (t == 0)
					res = gs_rx_consume_t0(gs, fd, ls, k,
							       r > 0 ? r : 0) ?
						      -ECONNABORTED :
						      (long)k;
				break;
			}
		}
		if (r > 0) {
			res = GS_RX_NONE;
			break;
		}
		if (!waits) {
			res = -EAGAIN;
			break;
		}
		if (t == 0)
			r = gs_wait_turn_w(gs, &i, world);
		r = gs_warp_bcast(r);
		if (r) {
			res = r;
			break;
		}
	}
	/* thread 0's result to all; the warp's stores to buf before any return */
	return gs_bcast(res);
}

/*
 * Thread 0, before a whole send of at most GS_LANE_MAX bytes: while our
 * copies wait for the receiver's lane_ok, read it at the 1st, 2nd, 4th,
 * 8th ... such send (a PCIe read each; a receiver that never says so
 * costs few).
 */
GSOCK_DEVICE void gs_lane_ask_t0(struct gs_lsock *ls)
{
	uint32_t a = ++ls->lane_asks;

	if (a & (a - 1))
		return;
	if (gs_ld64(ls->lane_ok_p) == ls->lane_ok_v)
		ls->lane_tx = GS_LANE_TX_ON;
}

/*
 * Every thread: the copy of a whole send of n <= GS_LANE_MAX bytes of buf,
 * at stream position pos, into lane with tag (gs_lane_unit). No fence:
 * the units carry their own validity, and the ring's copy and tail follow
 * as always.
 */
GSOCK_DEVICE void gs_lane_put(uint64_t *lane, uint32_t tag, uint64_t pos,
			      const uint8_t *buf, uint32_t n)
{
	unsigned end = gs_lane_units(tag, n);

	for (unsigned u = gs_tid(); u < end; u += gs_bdim())
		gs_st_unit(lane + u, gs_lane_unit(tag, pos, buf, n, u));
}

/* Thread 0: after a command that returned a new descriptor. */
GSOCK_DEVICE long gs_new_fd(struct gsock_dev gs, long fd, uint32_t flags)
{
	if (gs_tid() == 0 && fd >= 0 && (uint32_t)fd < gs.nsocks)
		gs_lsock_reset_t0(gs, (int)fd, flags);
	gs_sync();
	return fd;
}

GSOCK_DEVICE int gs_accept(struct gsock_dev gs, int fd, struct sockaddr *addr,
			   socklen_t *len, int dontwait)
{
	struct gs_lsock *ls = gs_lsock_of(gs, fd);
	long c;

	if (!ls)
		return -EBADF;
	dontwait |= (ls->flags & GS_LS_NONBLOCK) != 0;
	c = gs_command(gs, GS_OP_ACCEPT, fd, dontwait, 0, 0, 0, 0, addr, len);
	/*
	 * The listener gone while this block still holds it (gclose clears
	 * the flags first): gsockd closed it, going away, before its world
	 * bit reached us. Say so now, not at the next call.
	 */
	if (c == -EBADF)
		c = gs_bcast(gs_tid() == 0 && (ls->flags & GS_LS_OPEN) ?
				     -ECONNABORTED :
				     -EBADF);
	c = gs_new_fd(gs, c, GS_LS_CONNECTED);
	if (c >= 0 && gs_tid() == 0 && gs_direct_t0(gs, (int)c))
		gs.lsock[c].error = -EIO;
	gs_sync();
	return (int)c;
}

/*
 * Thread 0: wait for tx space. Returns free bytes (> 0) or a negative
 * errno. The fast path reads only device memory: errors the device has
 * not seen yet are reported by a later call, as the kernel's send does.
 */
GSOCK_DEVICE long gs_tx_wait_t0(struct gsock_dev gs, int fd,
				struct gs_lsock *ls, int dontwait)
{
	struct gs_sock *s = &gs.socks[fd];
	uint64_t used = ls->tx_tail - ls->tx_head_seen;
	unsigned i = 0;
	int err = gs_world_error(gs);

	if (err)
		return err; /* bytes queued now could never leave */
	if (ls->error)
		return ls->error;
	if (ls->flags & GS_LS_TX_SHUT)
		return -EPIPE;
	if (!(ls->flags & GS_LS_CONNECTED))
		return -ENOTCONN;
	if (used < ls->ring_size)
		return (long)(ls->ring_size - used);
	for (;;) {
		uint32_t st = gs_ld32(&s->status);

		ls->tx_head_seen = gs_tx_head_t0(ls);
		used = ls->tx_tail - ls->tx_head_seen;
		if (!(st & GS_ST_OPEN))
			return -EBADF;
		if (s->error)
			return ls->error = s->error;
		if (used > ls->ring_size)
			return -EIO;
		if (used < ls->ring_size)
			return (long)(ls->ring_size - used);
		/* Direct, a full ring the other end will never read. */
		if (ls->closed_p && (gs_ld32(ls->closed_p) & ls->peer_bit))
			return ls->error = -EPIPE;
		if (dontwait || (ls->flags & GS_LS_NONBLOCK))
			return -EAGAIN;
		err = gs_wait_turn(gs, &i);
		if (err)
			return err;
	}
}

/*
 * What gsend's thread 0 tells its block for one turn (gs_tx_begin_t0).
 */
struct gs_txb {
	long n; /* bytes to queue now, or a negative errno */
	uint64_t tail; /* where they go in the ring */
	uint64_t *lane; /* the receiver's lane, for a copy of them too, or NULL */
	uint32_t tag; /* that copy's tag */
};

/*
 * Thread 0, at each turn of gsend, left bytes still to send (`whole`:
 * they are the whole send, of at most GS_LANE_MAX bytes, so a lane may
 * take them): room in the ring, where, and whether a lane copy goes too;
 * -EBADF where fd is not open. Every word of ls the common case needs is
 * loaded before any is looked at: after an acquire or a fence emptied
 * the SM's L1 that is one round trip to L2, where a check and then the
 * next load took one each (0.5 us from gsend's call to its broadcast, of
 * a 6.2 us round trip between two GPU processes on an H100).
 */
GSOCK_DEVICE void gs_tx_begin_t0(struct gsock_dev gs, int fd,
				 struct gs_lsock *ls, size_t left, int whole,
				 int dontwait, struct gs_txb *b)
{
	uint32_t world = gs_ld_local32(&gs.local->world);
	uint32_t flags = ls->flags, ring = ls->ring_size;
	uint32_t lane_tx = ls->lane_tx, seq = ls->lane_seq;
	int32_t error = ls->error;
	uint64_t tail = ls->tx_tail, used = tail - ls->tx_head_seen;
	uint64_t *lane = ls->tx_lane;
	long n;

	if (!(flags & GS_LS_OPEN))
		n = -EBADF;
	else if (!(world & (GS_WORLD_BRIDGE_GONE | GS_WORLD_STOP)) && !error &&
		 (flags & (GS_LS_TX_SHUT | GS_LS_CONNECTED)) ==
			 GS_LS_CONNECTED &&
		 used < ring)
		n = (long)(ring - used);
	else
		n = gs_tx_wait_t0(gs, fd, ls, dontwait);
	if (n > (long)left)
		n = (long)left;
	if (whole && n > 0 && lane_tx == GS_LANE_TX_WAIT) {
		gs_lane_ask_t0(ls);
		lane_tx = ls->lane_tx;
	}
	b->n = n;
	b->tail = tail;
	b->lane = whole && n > 0 && n == (long)left &&
				  lane_tx == GS_LANE_TX_ON ?
			  lane :
			  0;
	b->tag = gs_lane_tag(seq);
}

/*
 * What the thread that publishes a send holds: the socket's words the
 * publish needs (struct gs_pubw, gs_pubw_of) and a CPU reader's want word
 * as read early (struct gs_pub, gs_pub_begin), or GS_WANT_LATE (read it
 * after the tail as gs_wake_cpu_t0 does). gsend reads the words before
 * want and keeps them in shared memory: read after want they come back
 * after it (a thread's loads return in order), and the barrier after the
 * copy waited for them; kept in registers they cost every thread of a
 * g-call kernel ten more (the echo server's kernel: 138 against 128).
 */
struct gs_pubw {
	uint64_t *tail_p, *tail_m;
	uint64_t sgen;
	uint32_t flags;
};

struct gs_pub {
	uint32_t want; /* the word as read, or GS_WANT_LATE */
	uint64_t at; /* gs_now_ns() when read */
};

#define GS_WANT_LATE 0xffffffffu

GSOCK_DEVICE void gs_pubw_of(const struct gs_lsock *ls, struct gs_pubw *w)
{
	w->tail_p = ls->tx_tail_p;
	w->tail_m = ls->tx_tail_m;
	w->sgen = ls->sgen;
	w->flags = ls->flags;
}

/* No early read: want is read after the tail. */
GSOCK_DEVICE struct gs_pub gs_pub_late(void)
{
	struct gs_pub p = { GS_WANT_LATE, 0 };

	return p;
}

/* Sends larger than this read want after their tail: their copy is long. */
#define GS_WANT_EARLY_MAX 65536
/*
 * An early read older than this at the publish (a long copy, a block
 * preempted) is made again after the tail: the preload's reader waits
 * for an announced send's tail twice as long before it sleeps.
 */
#define GS_WANT_EARLY_NS (GS_DW_FLIGHT_NS / 2)

/*
 * The thread that will publish a send of at most n bytes, as the send
 * begins: the socket's words into *w (gs_pubw_of) and, to a CPU reader,
 * the reader's want word, read now so that the PCIe read travels beside
 * the copy instead of after the tail (a fence and a read of host memory,
 * 2.5 us of a 64 B send on an H100). The send is announced first
 * (gsock_arena.h): a reader that arms after this read sees it and waits
 * for our tail rather than sleep unrung. gs_pub_drop withdraws the
 * announce of a send that queues nothing.
 */
GSOCK_DEVICE struct gs_pub gs_pub_begin(const struct gs_lsock *ls,
					struct gs_pubw *w, long n)
{
	struct gs_pub p = gs_pub_late();
	uint32_t flags = ls->flags;
	uint64_t *sending = ls->sending_p;
	uint32_t *want = ls->want_tx_p;
	uint64_t from = ls->tx_tail + 1;

	gs_pubw_of(ls, w);
	if ((flags & (GS_LS_DIRECT | GS_LS_CPU_PEER)) ==
		    (GS_LS_DIRECT | GS_LS_CPU_PEER) &&
	    n > 0 && n <= GS_WANT_EARLY_MAX) {
		gs_st_plain64(sending, from);
		gs_fence();
		p.want = gs_peek32(want);
		p.at = gs_now_ns();
	}
	return p;
}

GSOCK_DEVICE void gs_pub_drop(const struct gs_lsock *ls, struct gs_pub p)
{
	if (p.want != GS_WANT_LATE)
		gs_st_plain64(ls->sending_p, 0);
}

/*
 * One thread (gsend's last, gsend_group's thread 0), after a barrier that
 * follows the block's copy: publish n bytes queued at tail and tell
 * whoever reads them, with w's words (gs_pubw_of's) and p (gs_pub_begin's
 * or gs_pub_late's), loading nothing of ls before the tail. 0, or
 * -ECONNABORTED when the doorbell cannot be rung.
 */
GSOCK_DEVICE int gs_tx_publish_t0(struct gsock_dev gs, int fd,
				  struct gs_lsock *ls,
				  const struct gs_pubw *w, uint64_t tail,
				  long n, struct gs_pub p)
{
	uint64_t t = tail + (uint64_t)n;
	uint64_t *tail_m = w->tail_m;
	uint32_t flags = w->flags;

	ls->tx_tail = t;
	gs_st64(w->tail_p, t);
	if (tail_m) /* after the fence gs_st64 paid */
		gs_st_plain64(tail_m, w->sgen | (t & GS_DCTR_MASK));
	/* Direct: the receiver looks at the tail itself. */
	if (!(flags & GS_LS_DIRECT))
		return gs_ring_doorbell(gs, ls->db_queue, (uint32_t)fd);
	if (p.want != GS_WANT_LATE && gs_now_ns() - p.at < GS_WANT_EARLY_NS)
		return p.want & GS_DW_READER ?
			       gs_ring_doorbell(gs, ls->db_queue,
						(uint32_t)fd) :
			       0;
	return gs_wake_cpu_t0(gs, fd, ls, ls->want_tx_p, GS_DW_READER);
}

/*
 * Whether a connection's tx ring has room for a send, from the head its
 * receiver last published (any one thread per descriptor, as gpoll's).
 */
GSOCK_DEVICE int gs_poll_room(struct gs_lsock *ls)
{
	if (!(ls->flags & GS_LS_CONNECTED) || (ls->flags & GS_LS_TX_SHUT))
		return 0;
	ls->tx_head_seen = gs_tx_head_t0(ls);
	return ls->tx_tail - ls->tx_head_seen < ls->ring_size;
}

/*
 * The poll events that are true of one descriptor now. Any one thread
 * may ask about a given descriptor (it refreshes that socket's cached
 * counters), so gpoll spreads a set over the block's threads.
 */
GSOCK_DEVICE short gs_poll_one(struct gsock_dev gs, struct gpollfd *p)
{
	struct gs_lsock *ls = gs_lsock_of(gs, p->fd);
	struct gs_sock *s;
	uint32_t st;
	short ev = 0;

	if (!ls)
		return POLLNVAL;
	s = &gs.socks[p->fd];
	st = gs_ld32(&s->status);
	if (!(st & GS_ST_OPEN))
		return POLLNVAL;
	if (st & GS_ST_LISTENING)
		return gs_ld32(&s->accept_pending) ? (p->events & POLLIN) : 0;
	if (gs_rx_read_tail(ls, 0) || (st & GS_ST_RX_EOF))
		ev |= POLLIN;
	/* Each read here is a PCIe round trip: none for events not asked. */
	if ((p->events & POLLOUT) && gs_poll_room(ls))
		ev |= POLLOUT;
	ev &= p->events;
	if (st & GS_ST_RX_EOF)
		ev |= POLLHUP;
	if (s->error || ls->error ||
	    (ls->reset_p && (gs_ld32(ls->reset_p) & ls->peer_bit)))
		ev |= POLLERR;
	return ev;
}

/*
 * The POLLIN and POLLOUT of p->events that a direct descriptor's ring
 * counters alone make true (gpoll's light turns; any one thread per
 * descriptor, as gs_poll_one). Bridged descriptors: 0, their changes
 * move the wake counter.
 */
GSOCK_DEVICE short gs_poll_moved(struct gsock_dev gs, const struct gpollfd *p)
{
	struct gs_lsock *ls = gs_lsock_of(gs, p->fd);
	short ev = 0;

	if (!ls || !(ls->flags & GS_LS_DIRECT))
		return 0;
	if ((p->events & POLLIN) && gs_rx_read_tail(ls, 0))
		ev |= POLLIN;
	if ((p->events & POLLOUT) && gs_poll_room(ls))
		ev |= POLLOUT;
	return ev;
}

/* Thread 0: the application-wide event count, summed over the workers. */
GSOCK_DEVICE uint64_t gs_events_all(struct gsock_dev gs)
{
	uint64_t n = 0;

	for (uint32_t q = 0; q < gs.nqueues; q++)
		n += gs_ld64(&gs.dbq[q].events);
	return n;
}

/*
 * The same count, read by the block's threads side by side (one PCIe
 * round trip, not one per worker), leaving thread 0 free for a read of
 * its own meanwhile where the block has other threads; every thread
 * gets it.
 */
GSOCK_DEVICE uint64_t gs_events_all_block(struct gsock_dev gs)
{
	unsigned n = gs_bdim(), first = n > 1, t = gs_tid();
	uint64_t v = 0;

	if (t >= first)
		for (uint32_t q = t - first; q < gs.nqueues; q += n - first)
			v += gs_ld64(&gs.dbq[q].events);
	return gs_sum64(v);
}

#endif /* GSOCK_INTERNAL_CUH */
