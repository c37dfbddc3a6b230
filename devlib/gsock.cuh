/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-calls: the socket API for code running on the device. One source
 * for both backends (see gsock_port.h). Every g-call is threadblock-
 * cooperative: all threads of a block call it with the same arguments,
 * one thread talks to gsockd through the arena (thread 0; a send's
 * publish, the block's last thread), all threads copy data, and
 * every thread gets the same result: >= 0 on success, a negative errno on
 * failure, 0 from grecv at end of stream.
 *
 * Waiting is bounded by the world, never by luck: every wait loop checks
 * the world word in device memory, which libgsock's watcher thread sets
 * when gsockd dies (-ECONNABORTED) or the application stops its kernels
 * (-ECANCELED).
 *
 * This file holds the public types and the g-calls; their machinery is
 * gsock_internal.cuh (the arena's device view, commands, waits) and
 * gsock_copy.cuh (the block copy engine).
 */
#ifndef GSOCK_CUH
#define GSOCK_CUH

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "gsock_arena.h"
#include "gsock_port.h"
#include "gsock_ring.h"
/* gsetsockopt level for options that live on the device side. */
#define GSOCK_SOL 0x6773
#define GSOCK_NONBLOCK 1 /* int: non-zero makes every call on fd non-blocking */

/* gpoll's descriptor, as struct pollfd (POLLIN, POLLOUT, POLLHUP, POLLERR). */
struct gpollfd {
	int fd;
	short events;
	short revents;
};

/*
 * Byte order for sockaddr fields in device code, where htons and htonl do
 * not exist. Assumes little-endian, as every CUDA device and its host is.
 */
GSOCK_HD uint16_t gs_htons(uint16_t v)
{
	return (uint16_t)((v << 8) | (v >> 8));
}

GSOCK_HD uint32_t gs_htonl(uint32_t v)
{
	return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) |
	       (v << 24);
}

#include "gsock_internal.cuh" /* after the public types it uses */

/* ---- the g-calls ---- */

GSOCK_DEVICE int gsocket(struct gsock_dev gs, int domain, int type,
			 int protocol)
{
	long fd = gs_command(gs, GS_OP_SOCKET, -1, domain, type, protocol, 0, 0,
			     0, 0);

	return (int)gs_new_fd(gs, fd,
			      (type & SOCK_NONBLOCK) ? GS_LS_NONBLOCK : 0);
}

GSOCK_DEVICE int gbind(struct gsock_dev gs, int fd, const struct sockaddr *addr,
		       socklen_t len)
{
	return (int)gs_command(gs, GS_OP_BIND, fd, 0, 0, 0, addr, len, 0, 0);
}

GSOCK_DEVICE int glisten(struct gsock_dev gs, int fd, int backlog)
{
	return (int)gs_command(gs, GS_OP_LISTEN, fd, backlog, 0, 0, 0, 0, 0, 0);
}

/* Blocking unless fd is non-blocking; addr/len may be NULL. */
GSOCK_DEVICE int gaccept(struct gsock_dev gs, int fd, struct sockaddr *addr,
			 socklen_t *len)
{
	return gs_accept(gs, fd, addr, len, 0);
}

/* Never waits: -EAGAIN when no connection is pending. */
GSOCK_DEVICE int gaccept_nb(struct gsock_dev gs, int fd, struct sockaddr *addr,
			    socklen_t *len)
{
	return gs_accept(gs, fd, addr, len, 1);
}

/* Always waits for the connection to be made or refused. */
GSOCK_DEVICE int gconnect(struct gsock_dev gs, int fd,
			  const struct sockaddr *addr, socklen_t len)
{
	long r = gs_command(gs, GS_OP_CONNECT, fd, 0, 0, 0, addr, len, 0, 0);

	if (r == 0 && gs_tid() == 0) {
		gs.lsock[fd].flags |= GS_LS_CONNECTED;
		if (gs_direct_t0(gs, fd))
			gs.lsock[fd].error = -EIO;
	}
	gs_sync();
	return (int)r;
}

GSOCK_DEVICE int gshutdown(struct gsock_dev gs, int fd, int how)
{
	long r = gs_command(gs, GS_OP_SHUTDOWN, fd, how, 0, 0, 0, 0, 0, 0);

	if (r == 0 && how != SHUT_RD && gs_tid() == 0)
		gs.lsock[fd].flags |= GS_LS_TX_SHUT;
	gs_sync();
	return (int)r;
}

/*
 * Unsent bytes still go out: the bridge drains the tx ring before closing.
 * The device forgets fd before asking: once the bridge frees the id,
 * another block's gaccept may get it and set up fresh state.
 */
GSOCK_DEVICE int gclose(struct gsock_dev gs, int fd)
{
	if (!gs_lsock_of(gs, fd))
		return -EBADF;
	gs_sync();
	if (gs_tid() == 0)
		gs.lsock[fd].flags = 0;
	return (int)gs_command(gs, GS_OP_CLOSE, fd, 0, 0, 0, 0, 0, 0, 0);
}

GSOCK_DEVICE int ggetsockname(struct gsock_dev gs, int fd,
			      struct sockaddr *addr, socklen_t *len)
{
	return (int)gs_command(gs, GS_OP_GETSOCKNAME, fd, 0, 0, 0, 0, 0, addr,
			       len);
}

GSOCK_DEVICE int ggetpeername(struct gsock_dev gs, int fd,
			      struct sockaddr *addr, socklen_t *len)
{
	return (int)gs_command(gs, GS_OP_GETPEERNAME, fd, 0, 0, 0, 0, 0, addr,
			       len);
}

/*
 * Integer options only. GSOCK_SOL/GSOCK_NONBLOCK is kept on the device;
 * SOL_SOCKET, IPPROTO_TCP and IPPROTO_IPV6 options the bridge allows are
 * set on the real socket.
 */
GSOCK_DEVICE int gsetsockopt(struct gsock_dev gs, int fd, int level, int name,
			     const void *val, socklen_t len)
{
	struct gs_lsock *ls = gs_lsock_of(gs, fd);
	int v;

	if (!ls)
		return -EBADF;
	if (len != sizeof(int))
		return -EINVAL;
	v = *(const int *)val;
	if (level == GSOCK_SOL) {
		if (name != GSOCK_NONBLOCK)
			return -ENOPROTOOPT;
		if (gs_tid() == 0)
			ls->flags = v ? ls->flags | GS_LS_NONBLOCK :
					ls->flags & ~GS_LS_NONBLOCK;
		gs_sync();
		return 0;
	}
	return (int)gs_command(gs, GS_OP_SETSOCKOPT, fd, level, name, v, 0, 0,
			       0, 0);
}

/*
 * Receive up to len bytes into buf. MSG_WAITALL waits for all of them
 * (short only at EOF or error); MSG_DONTWAIT never waits.
 */
GSOCK_DEVICE long grecv(struct gsock_dev gs, int fd, void *buf, size_t len,
			int flags)
{
	struct gs_lsock *ls = gs_lsock_of(gs, fd);
	size_t done = 0;
	int ring = 0; /* the lane said the ring has bytes it has not */

	if (!ls)
		return -EBADF;
	while (done < len) {
		long n = 0, avail = 0;
		uint64_t head = 0;

		GS_TRACE(8);
		if (gs_tid() == 0) {
			head = ls->rx_head;
			/* An empty ring: the lane may have the bytes sooner. */
			if (ls->rx_lane && !ring && !gs_rx_avail(ls) &&
			    gs_bdim() >= GS_LANE_W) {
				n = GS_RX_LANE;
			} else {
				n = avail = gs_rx_wait_t0(
					gs, fd, ls, (flags & MSG_DONTWAIT) != 0);
				if (n > (long)(len - done))
					n = (long)(len - done);
			}
		}
		GS_TRACE(9);
		{
			long h = (long)head;

			gs_bcast2(&n, &h);
			head = (uint64_t)h;
		}
		ring = 0;
		if (n == GS_RX_LANE) {
			n = gs_rx_lane(gs, fd, ls, (uint8_t *)buf + done,
				       len - done, (flags & MSG_DONTWAIT) != 0);
			if (n == GS_RX_NONE) {
				ring = 1;
				continue;
			}
			if (n > 0) {
				done += (size_t)n;
				if (!(flags & MSG_WAITALL))
					break;
				continue;
			}
		}
		if (n <= 0)
			return done ? (long)done : n;
		GS_TRACE(10);
		/*
		 * far: a ring in host memory (bridged, a CPU sender's, or a
		 * direct segment's). Every thread must choose alike (the two
		 * copies share the bytes out differently): flags are set
		 * once, at connect.
		 */
		gs_ring_copy_at(ls->ring_size, ls->rx_ring, head,
				(uint8_t *)buf + done, (uint64_t)n, 0,
				!(ls->flags & GS_LS_DEV_RX));
		gs_sync();
		GS_TRACE(11);
		/* n is every thread's already: one barrier says whether it failed */
		if (gs_sync_or(gs_tid() == 0 &&
			       gs_rx_consume_t0(gs, fd, ls, (uint64_t)n,
						(uint64_t)avail)))
			n = -ECONNABORTED;
		GS_TRACE(12);
		GS_TRACE(13);
		if (n < 0)
			return done ? (long)done : n;
		done += (size_t)n;
		if (!(flags & MSG_WAITALL))
			break;
	}
	GS_TRACE(14);
	return (long)done;
}

/*
 * Send len bytes from buf. Blocking sends all of them (short only on an
 * error after some were queued); MSG_DONTWAIT queues what fits now.
 */
GSOCK_DEVICE long gsend(struct gsock_dev gs, int fd, const void *buf,
			size_t len, int flags)
{
	GS_SHARED struct gs_pubw pubw; /* the last thread's: gs_pub_begin */
	GS_SHARED struct gs_txb txb_s; /* thread 0's: gs_tx_begin_t0 */
	struct gs_lsock *ls;
	size_t done = 0;

	/* whether fd is open thread 0 says, in the loads it makes anyway */
	if (fd < 0 || (uint32_t)fd >= gs.nsocks)
		return -EBADF;
	ls = &gs.lsock[fd];
	do {
		struct gs_txb b;
		struct gs_pub pub = gs_pub_late();
		/* loaded beside thread 0's loads, not after the barrier */
		uint8_t *ring = ls->tx_ring;
		uint32_t ring_size = ls->ring_size;

		GS_TRACE(0);
		/*
		 * The block's last thread publishes, and reads a CPU reader's
		 * want first (gs_pub_begin): it copies nothing of a send
		 * under 16 bytes a thread, and what it reads of ls until the
		 * tail is read above and in gs_pub_begin, before want (but
		 * for the lane's words, and where the block is one thread),
		 * so no load of its own waits behind that read (a thread's
		 * loads return in order), and a barrier does not wait for a
		 * relaxed load (bench/probes/load-barrier.cu). A closed fd
		 * has no flags, so gs_pub_begin does nothing there.
		 */
		if (gs_tid() == gs_bdim() - 1)
			pub = gs_pub_begin(ls, &pubw, (long)(len - done));
		if (gs_tid() == 0) {
			gs_tx_begin_t0(gs, fd, ls, len - done,
				       !done && len <= GS_LANE_MAX,
				       (flags & MSG_DONTWAIT) != 0, &b);
			txb_s = b;
		}
		GS_TRACE(1);
		/*
		 * One barrier: thread 0 writes txb_s again only after the
		 * barriers below (or the one before an error's return),
		 * which every thread reaches after reading it.
		 */
		gs_sync();
		b = txb_s;
		if (b.n < 0) {
			if (gs_tid() == gs_bdim() - 1)
				gs_pub_drop(ls, pub);
			gs_sync(); /* every thread read txb_s: the next call may write it */
			return done ? (long)done : b.n;
		}
		GS_TRACE(2);
		/*
		 * A whole small send: its copy in the receiver's lane first.
		 * After the barrier, as the ring's copy: a caller's threads
		 * may have filled buf just before the call.
		 */
		if (b.lane) {
			gs_lane_put(b.lane, b.tag, b.tail, (const uint8_t *)buf,
				    (uint32_t)b.n);
			GS_TRACE(7);
		}
		gs_ring_copy(ring_size, ring, b.tail,
			     (uint8_t *)buf + done, (uint64_t)b.n, 1);
		/*
		 * No thread fences its own stores, into another GPU's memory
		 * or host memory alike: the barrier orders them before the
		 * publishing thread's system fence in gs_tx_publish_t0, which
		 * makes them visible before the tail (the fence is cumulative).
		 */
		gs_sync();
		GS_TRACE(3);
		/* the copy's ends, as thread 0 left them: fewer live registers */
		if (gs_tid() == 0 && txb_s.lane)
			ls->lane_seq = txb_s.tag;
		/*
		 * The block waits for the publish (a system fence: 2.2 us
		 * into a peer GPU over NVLink) by its last thread (see above;
		 * the barrier before orders every thread's copy before its
		 * fence). Leaving it to one thread while
		 * the others return was measured faster and broke callers:
		 * code after a g-call may read block state at once, relying
		 * on every thread having left the call together (the server
		 * layer's gsrv_done does), and the late thread read it after
		 * thread 0 had changed it.
		 */
		if (gs_sync_or(gs_tid() == gs_bdim() - 1 &&
			       gs_tx_publish_t0(gs, fd, ls, &pubw, txb_s.tail,
						txb_s.n, pub)))
			b.n = -ECONNABORTED;
		GS_TRACE(4);
		GS_TRACE(5);
		if (b.n < 0)
			return done ? (long)done : b.n;
		done += (size_t)b.n;
	} while (done < len);
	return (long)done;
}

/*
 * Wait until one of fds is ready or timeout_us passes (< 0: forever,
 * 0: never wait). fds must be memory every thread of the block sees
 * (shared or global). The block claims its descriptors (their poll_slot
 * names its command slot), so the bridge bumps this slot's wake counter
 * after every change to them; the threads check the set side by side,
 * then thread 0 watches that one counter until it moves. A block waiting
 * on a large idle set costs one PCIe read per turn, and other blocks'
 * traffic does not make it scan. The application-wide count is looked at
 * every GS_POLL_ALL_TURNS turns, for a descriptor another block claimed
 * since; a block that wants the others to look at once (a descriptor
 * they share, that it leaves to them) nudges them: gs_nudge. Returns the
 * number ready, 0 on timeout.
 */
#define GS_POLL_ALL_TURNS 128
#define GS_POLL_FULL_TURNS 8

/*
 * Thread 0: make every block of the application that waits in gpoll
 * look at its set again within a turn (what this thread wrote before is
 * seen by then).
 */
GSOCK_DEVICE void gs_nudge(struct gsock_dev gs)
{
	gs_fence();
	gs_fetch_add32(&gs.local->nudge, 1);
}

/* Thread 0 in gpoll's wait: whether the wake counter or a nudge moved. */
GSOCK_DEVICE int gs_poll_woken(struct gsock_dev gs, uint64_t *wake,
			       uint64_t *seen, uint32_t *nudged)
{
	uint64_t v = gs_ld64(wake);
	uint32_t n = gs_ld_local32(&gs.local->nudge);
	int woke = v != *seen || n != *nudged;

	*seen = v;
	*nudged = n;
	return woke;
}

#define GS_POLL_LIGHT_READY 2

/*
 * gpoll's wait over a set with direct descriptors, block-wide: each turn
 * the threads but 0 look at the direct descriptors' ring counters alone
 * (gs_poll_moved) while thread 0 reads the wake counter, so a turn costs
 * one read's time (one PCIe round trip, or none where the counters are
 * in this GPU's memory), not a full gs_poll_one per descriptor (four
 * reads one after another). Returns, to every thread:
 * GS_POLL_LIGHT_READY when counters alone made descriptors ready (their
 * revents set; an EOF or error behind the bytes shows at the next call,
 * as after a poll that came a moment sooner); 0 for a full scan, when
 * gsockd changed something (the wake counter moved) or every
 * GS_POLL_FULL_TURNS turns (for a reset bit in a segment, or a
 * descriptor another block claimed); 1 when timed out; a negative errno
 * when the wait must end.
 */
GSOCK_DEVICE long gs_poll_direct_wait(struct gsock_dev gs,
				      struct gpollfd *fds, int nfds,
				      uint64_t *wake, uint64_t *seen,
				      uint32_t *nudged, uint64_t start,
				      long timeout_us, unsigned *turn)
{
	unsigned first = gs_bdim() > 1, t = gs_tid();

	for (unsigned k = 0; k < GS_POLL_FULL_TURNS; k++) {
		long r = 0;
		int woke = 0, ready = 0;

		if (t == 0) {
			if (timeout_us > 0 &&
			    gs_now_ns() - start >= (uint64_t)timeout_us * 1000)
				r = 1;
			else
				r = gs_wait_turn(gs, turn); /* 0 or -errno */
		}
		gs_sync(); /* the reads after thread 0's back-off, not during it */
		if (t == 0 && !r)
			woke = gs_poll_woken(gs, wake, seen, nudged);
		if (t >= first)
			for (int i = (int)(t - first); i < nfds;
			     i += (int)(gs_bdim() - first)) {
				short ev = gs_poll_moved(gs, &fds[i]);

				if (ev) {
					fds[i].revents = ev;
					ready = 1;
				}
			}
		ready = gs_sync_or(ready);
		if (gs_sync_or(woke || r)) {
			r = gs_bcast(r);
			/* bytes found as the time ran out still count */
			return ready && r == 1 ? GS_POLL_LIGHT_READY : r;
		}
		if (ready)
			return GS_POLL_LIGHT_READY;
	}
	return 0;
}

GSOCK_DEVICE int gpoll(struct gsock_dev gs, struct gpollfd *fds, int nfds,
		       long timeout_us)
{
	uint32_t me = gs_poll_word(gs.slot_base + gs_bid());
	uint64_t *wake = &gs_my_slot(gs)->wake;
	uint64_t start = gs_tid() == 0 ? gs_now_ns() : 0, seen = 0, all = 0;
	uint32_t nudged = 0;
	unsigned turn = 0;
	long r = gs_bcast(gs_tid() == 0 ? gs_world_error(gs) : 0);
	int claimed = 0;

	if (r)
		return (int)r; /* stopped, or gsockd gone: as every wait */
	for (int k = (int)gs_tid(); k < nfds; k += (int)gs_bdim()) {
		struct gs_lsock *ls = gs_lsock_of(gs, fds[k].fd);

		if (ls && ls->poll_slot != me) {
			ls->poll_slot = me;
			gs_st32(&gs.socks[fds[k].fd].poll_slot, me);
			claimed = 1;
		}
	}
	if (claimed)
		gs_fence(); /* the claim before the scan (see bridge note_event) */
	for (int first = 1;; first = 0) {
		int mine = 0, direct = 0;

		/*
		 * What the bridge did before this scan is in it (the sum's
		 * barriers order these reads before the scan's). A scan after
		 * the wait has both: the wake counter's new value, loaded with
		 * acquire before the broadcast, and the count it compares.
		 */
		if (first) {
			if (gs_tid() == 0) {
				nudged = gs_ld_local32(&gs.local->nudge);
				seen = gs_ld64(wake);
			}
			all = gs_events_all_block(gs);
		}
		for (int k = (int)gs_tid(); k < nfds; k += (int)gs_bdim()) {
			struct gs_lsock *ls = gs_lsock_of(gs, fds[k].fd);

			fds[k].revents = gs_poll_one(gs, &fds[k]);
			mine |= fds[k].revents != 0;
			direct |= ls && (ls->flags & GS_LS_DIRECT);
		}
		if (gs_sync_or(mine) || timeout_us == 0)
			break;
		/*
		 * Direct sockets' bytes come with no wake: their counters are
		 * looked at every turn, their status every few (the wake
		 * counter says when gsockd changed one).
		 */
		if (gs_sync_or(direct)) {
			r = gs_poll_direct_wait(gs, fds, nfds, wake, &seen,
						&nudged, start, timeout_us,
						&turn);
			if (r == GS_POLL_LIGHT_READY) {
				r = 0;
				break;
			}
		} else if (gs_tid() == 0) {
			for (;;) {
				if (timeout_us > 0 &&
				    gs_now_ns() - start >=
					    (uint64_t)timeout_us * 1000) {
					r = 1; /* timed out */
					break;
				}
				uint64_t a;

				r = gs_wait_turn(gs, &turn); /* 0 or -errno */
				if (r ||
				    gs_poll_woken(gs, wake, &seen, &nudged))
					break;
				if (turn % GS_POLL_ALL_TURNS == 0 &&
				    (a = gs_events_all(gs)) != all) {
					all = a;
					break;
				}
			}
		}
		r = gs_bcast(r);
		if (r == 1)
			return 0;
		if (r < 0)
			return (int)r;
	}
	if (gs_tid() == 0)
		for (int k = 0; k < nfds; k++)
			r += fds[k].revents != 0;
	return (int)gs_bcast(r);
}

#include "gsock_group.cuh" /* gsend_group, grecv_group: after gsend, grecv */

#endif /* GSOCK_CUH */
