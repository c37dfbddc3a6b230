/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-calls: the socket API for code running on the device. One source
 * for both backends (see gsock_port.h). Every g-call is threadblock-
 * cooperative: all threads of a block call it with the same arguments,
 * thread 0 talks to gsockd through the arena, all threads copy data, and
 * every thread gets the same result: >= 0 on success, a negative errno on
 * failure, 0 from grecv at end of stream.
 *
 * Waiting is bounded by the world, never by luck: every wait loop checks
 * the arena's app_flags, which libgsock sets when gsockd dies
 * (-ECONNABORTED) or the application stops its kernels (-ECANCELED).
 */
#ifndef GSOCK_CUH
#define GSOCK_CUH

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "gsock_arena.h"
#include "gsock_port.h"
#include "gsock_ring.h"

/* What a kernel gets from gsock_launch(): where the arena is, by value. */
struct gsock_dev {
	struct gs_arena_hdr *arena;
	struct gs_cmd *slots;
	struct gs_sock *socks;
	uint64_t *db;
	uint8_t *rings;
	unsigned long long *db_ticket; /* device memory: doorbell tickets */
	uint32_t slot_base; /* this launch's first command slot */
	uint32_t nsocks;
	uint32_t ring_size;
	uint32_t db_size;
};

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

/* ---- internals: thread 0 only unless named otherwise ---- */

/* 0 while the world is well, else the error every wait must return. */
GSOCK_DEVICE int gs_world_error(struct gsock_dev gs)
{
	uint64_t f = gs_ld64(&gs.arena->app_flags);

	if (f & GS_APP_BRIDGE_GONE)
		return -ECONNABORTED;
	if (f & GS_APP_STOP)
		return -ECANCELED;
	return 0;
}

/* Tell the bridge that `what` (socket id, or GS_DB_CMD | slot) changed. */
GSOCK_DEVICE int gs_ring_doorbell(struct gsock_dev gs, uint32_t what)
{
	uint64_t t = gs_fetch_add64(gs.db_ticket, 1);
	unsigned i = 0;
	int err;

	while (t - gs_ld64(&gs.arena->db_head) >= gs.db_size) {
		err = gs_world_error(gs);
		if (err)
			return err;
		gs_relax(i++);
	}
	gs_st64(&gs.db[t & (gs.db_size - 1)],
		((uint64_t)(uint32_t)(t + 1) << 32) | what);
	return 0;
}

GSOCK_DEVICE struct gs_sock *gs_sock_of(struct gsock_dev gs, int fd)
{
	if (fd < 0 || (uint32_t)fd >= gs.nsocks)
		return 0;
	return &gs.socks[fd];
}

GSOCK_DEVICE struct gs_cmd *gs_my_slot(struct gsock_dev gs)
{
	return &gs.slots[gs.slot_base + gs_bid()];
}

/* Post a command from this block's slot and wait for its reply. */
GSOCK_DEVICE long gs_command_t0(struct gsock_dev gs, uint32_t op, int fd,
				int64_t a0, int64_t a1, int64_t a2,
				const void *addr, uint32_t addrlen)
{
	struct gs_cmd *c = gs_my_slot(gs);
	uint64_t seq = gs_ld64(&c->seq) + 1;
	unsigned i = 0;
	long err;

	if (addrlen > GS_ADDR_MAX)
		return -EINVAL;
	err = gs_world_error(gs);
	if (err)
		return err;
	c->op = op;
	c->fd = fd;
	c->arg[0] = a0;
	c->arg[1] = a1;
	c->arg[2] = a2;
	c->addrlen = addrlen;
	for (uint32_t k = 0; k < addrlen; k++)
		c->addr[k] = ((const uint8_t *)addr)[k];
	gs_st64(&c->seq, seq);
	err = gs_ring_doorbell(gs, GS_DB_CMD | (gs.slot_base + gs_bid()));
	if (err)
		return err;
	while (gs_ld64(&c->done_seq) != seq) {
		err = gs_world_error(gs);
		if (err)
			return err;
		gs_relax(i++);
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

/*
 * Block-wide copy of n bytes with the widest access both pointers allow:
 * arena memory is reached over PCIe, where a 16-byte access costs about
 * what a byte costs.
 */
#ifdef __CUDACC__
#define GS_COPY_WORDS(T)                                                     \
	do {                                                                 \
		size_t lead = (sizeof(T) - (d & (sizeof(T) - 1))) &          \
			      (sizeof(T) - 1);                               \
		size_t words;                                                \
		if (lead > n)                                                \
			lead = n;                                            \
		words = (n - lead) / sizeof(T);                              \
		for (size_t k = tid; k < lead; k += nt)                      \
			((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];     \
		for (size_t k = tid; k < words; k += nt)                     \
			((T *)(d + lead))[k] = ((const T *)(s + lead))[k];   \
		for (size_t k = lead + words * sizeof(T) + tid; k < n;       \
		     k += nt)                                                \
			((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];     \
	} while (0)

GSOCK_DEVICE void gs_copy(void *dst, const void *src, size_t n)
{
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
	unsigned tid = gs_tid(), nt = gs_bdim();

	if (((d ^ s) & 15) == 0)
		GS_COPY_WORDS(uint4);
	else if (((d ^ s) & 7) == 0)
		GS_COPY_WORDS(uint2);
	else if (((d ^ s) & 3) == 0)
		GS_COPY_WORDS(uint32_t);
	else
		for (size_t k = tid; k < n; k += nt)
			((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];
}
#else
GSOCK_DEVICE void gs_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#endif

/* Copy between a ring (at counter pos) and a flat buffer, block-wide. */
GSOCK_DEVICE void gs_ring_copy(struct gsock_dev gs, uint8_t *ring,
			       uint64_t pos, uint8_t *buf, uint64_t n,
			       int to_ring)
{
	uint64_t first;
	uint32_t off = gs_ring_split(pos, n, gs.ring_size, &first);

	if (to_ring) {
		gs_copy(ring + off, buf, first);
		gs_copy(ring, buf + first, n - first);
	} else {
		gs_copy(buf, ring + off, first);
		gs_copy(buf + first, ring, n - first);
	}
}

GSOCK_DEVICE uint8_t *gs_rx_ring(struct gsock_dev gs, int fd)
{
	return gs.rings + (uint64_t)fd * 2 * gs.ring_size;
}

GSOCK_DEVICE uint8_t *gs_tx_ring(struct gsock_dev gs, int fd)
{
	return gs_rx_ring(gs, fd) + gs.ring_size;
}

/*
 * Thread 0: wait until the rx ring of s has bytes, EOF or an error.
 * Returns bytes available (> 0), 0 at EOF, or a negative errno.
 */
GSOCK_DEVICE long gs_rx_wait_t0(struct gsock_dev gs, struct gs_sock *s,
				int dontwait)
{
	unsigned i = 0;

	for (;;) {
		uint32_t st = gs_ld32(&s->status);
		uint64_t avail = gs_ld64(&s->rx_tail) - s->rx_head;
		int err;

		if (!(st & GS_ST_OPEN))
			return -EBADF;
		if (avail > gs.ring_size)
			return -EIO;
		if (avail)
			return (long)avail;
		if (st & GS_ST_RX_EOF)
			return 0;
		if (s->error)
			return s->error;
		if (!(st & GS_ST_CONNECTED))
			return -ENOTCONN;
		if (dontwait || (s->opts & GS_OPT_NONBLOCK))
			return -EAGAIN;
		err = gs_world_error(gs);
		if (err)
			return err;
		gs_relax(i++);
	}
}

/* Thread 0: mark n rx bytes consumed; wake the bridge if it stalled. */
GSOCK_DEVICE int gs_rx_consume_t0(struct gsock_dev gs, int fd,
				  struct gs_sock *s, uint64_t n)
{
	gs_st64(&s->rx_head, s->rx_head + n);
	gs_fence();
	if (gs_ld32(&s->rx_blocked))
		return gs_ring_doorbell(gs, (uint32_t)fd);
	return 0;
}

/* ---- the g-calls ---- */

GSOCK_DEVICE int gsocket(struct gsock_dev gs, int domain, int type,
			 int protocol)
{
	return (int)gs_command(gs, GS_OP_SOCKET, -1, domain, type, protocol,
			       0, 0, 0, 0);
}

GSOCK_DEVICE int gbind(struct gsock_dev gs, int fd, const struct sockaddr *addr,
		       socklen_t len)
{
	return (int)gs_command(gs, GS_OP_BIND, fd, 0, 0, 0, addr, len, 0, 0);
}

GSOCK_DEVICE int glisten(struct gsock_dev gs, int fd, int backlog)
{
	return (int)gs_command(gs, GS_OP_LISTEN, fd, backlog, 0, 0, 0, 0, 0,
			       0);
}

/* Blocking unless fd is non-blocking; addr/len may be NULL. */
GSOCK_DEVICE int gaccept(struct gsock_dev gs, int fd, struct sockaddr *addr,
			 socklen_t *len)
{
	return (int)gs_command(gs, GS_OP_ACCEPT, fd, 0, 0, 0, 0, 0, addr, len);
}

/* Never waits: -EAGAIN when no connection is pending. */
GSOCK_DEVICE int gaccept_nb(struct gsock_dev gs, int fd,
			    struct sockaddr *addr, socklen_t *len)
{
	return (int)gs_command(gs, GS_OP_ACCEPT, fd, 1, 0, 0, 0, 0, addr, len);
}

GSOCK_DEVICE int gconnect(struct gsock_dev gs, int fd,
			  const struct sockaddr *addr, socklen_t len)
{
	return (int)gs_command(gs, GS_OP_CONNECT, fd, 0, 0, 0, addr, len, 0, 0);
}

GSOCK_DEVICE int gshutdown(struct gsock_dev gs, int fd, int how)
{
	return (int)gs_command(gs, GS_OP_SHUTDOWN, fd, how, 0, 0, 0, 0, 0, 0);
}

/* Unsent bytes still go out: the bridge drains the tx ring before closing. */
GSOCK_DEVICE int gclose(struct gsock_dev gs, int fd)
{
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
GSOCK_DEVICE int gsetsockopt(struct gsock_dev gs, int fd, int level,
			     int name, const void *val, socklen_t len)
{
	struct gs_sock *s = gs_sock_of(gs, fd);
	int v;

	if (!s)
		return -EBADF;
	if (len != sizeof(int))
		return -EINVAL;
	v = *(const int *)val;
	if (level == GSOCK_SOL) {
		if (name != GSOCK_NONBLOCK)
			return -ENOPROTOOPT;
		if (gs_tid() == 0)
			s->opts = v ? s->opts | GS_OPT_NONBLOCK :
				      s->opts & ~GS_OPT_NONBLOCK;
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
	struct gs_sock *s = gs_sock_of(gs, fd);
	size_t done = 0;

	if (!s)
		return -EBADF;
	while (done < len) {
		long n = 0;
		uint64_t head = 0;

		if (gs_tid() == 0) {
			head = s->rx_head;
			n = gs_rx_wait_t0(gs, s, (flags & MSG_DONTWAIT) != 0);
			if (n > (long)(len - done))
				n = (long)(len - done);
		}
		n = gs_bcast(n);
		if (n <= 0)
			return done ? (long)done : n;
		head = (uint64_t)gs_bcast((long)head);
		gs_ring_copy(gs, gs_rx_ring(gs, fd), head, (uint8_t *)buf + done,
			     (uint64_t)n, 0);
		gs_sync();
		if (gs_tid() == 0 && gs_rx_consume_t0(gs, fd, s, (uint64_t)n))
			n = -ECONNABORTED;
		n = gs_bcast(n);
		if (n < 0)
			return done ? (long)done : n;
		done += (size_t)n;
		if (!(flags & MSG_WAITALL))
			break;
	}
	return (long)done;
}

/*
 * Thread 0: wait for tx space. Returns free bytes (> 0) or a negative
 * errno.
 */
GSOCK_DEVICE long gs_tx_wait_t0(struct gsock_dev gs, struct gs_sock *s,
				int dontwait)
{
	unsigned i = 0;

	for (;;) {
		uint32_t st = gs_ld32(&s->status);
		uint64_t used = s->tx_tail - gs_ld64(&s->tx_head);
		int err = gs_world_error(gs);

		if (err)
			return err; /* bytes queued now could never leave */
		if (!(st & GS_ST_OPEN))
			return -EBADF;
		if (s->error)
			return s->error;
		if (st & GS_ST_TX_SHUT)
			return -EPIPE;
		if (!(st & GS_ST_CONNECTED))
			return -ENOTCONN;
		if (used > gs.ring_size)
			return -EIO;
		if (used < gs.ring_size)
			return (long)(gs.ring_size - used);
		if (dontwait || (s->opts & GS_OPT_NONBLOCK))
			return -EAGAIN;
		gs_relax(i++);
	}
}

/*
 * Send len bytes from buf. Blocking sends all of them (short only on an
 * error after some were queued); MSG_DONTWAIT queues what fits now.
 */
GSOCK_DEVICE long gsend(struct gsock_dev gs, int fd, const void *buf,
			size_t len, int flags)
{
	struct gs_sock *s = gs_sock_of(gs, fd);
	size_t done = 0;

	if (!s)
		return -EBADF;
	do {
		long n = 0;
		uint64_t tail = 0;

		if (gs_tid() == 0) {
			tail = s->tx_tail;
			n = gs_tx_wait_t0(gs, s, (flags & MSG_DONTWAIT) != 0);
			if (n > (long)(len - done))
				n = (long)(len - done);
		}
		n = gs_bcast(n);
		if (n < 0)
			return done ? (long)done : n;
		tail = (uint64_t)gs_bcast((long)tail);
		gs_ring_copy(gs, gs_tx_ring(gs, fd), tail,
			     (uint8_t *)buf + done, (uint64_t)n, 1);
		gs_sync();
		if (gs_tid() == 0) {
			gs_st64(&s->tx_tail, tail + (uint64_t)n);
			if (gs_ring_doorbell(gs, (uint32_t)fd))
				n = -ECONNABORTED;
		}
		n = gs_bcast(n);
		if (n < 0)
			return done ? (long)done : n;
		done += (size_t)n;
	} while (done < len);
	return (long)done;
}

/* Thread 0: the poll events that are true of one descriptor now. */
GSOCK_DEVICE short gs_poll_one_t0(struct gsock_dev gs, struct gpollfd *p)
{
	struct gs_sock *s = gs_sock_of(gs, p->fd);
	uint32_t st;
	short ev = 0;

	if (!s)
		return POLLNVAL;
	st = gs_ld32(&s->status);
	if (!(st & GS_ST_OPEN))
		return POLLNVAL;
	if (st & GS_ST_LISTENING)
		return gs_ld32(&s->accept_pending) ? (p->events & POLLIN) : 0;
	if (gs_ld64(&s->rx_tail) != s->rx_head || (st & GS_ST_RX_EOF))
		ev |= POLLIN;
	if ((st & GS_ST_CONNECTED) &&
	    s->tx_tail - gs_ld64(&s->tx_head) < gs.ring_size)
		ev |= POLLOUT;
	ev &= p->events;
	if (st & GS_ST_RX_EOF)
		ev |= POLLHUP;
	if (s->error)
		ev |= POLLERR;
	return ev;
}

/*
 * Wait until one of fds is ready or timeout_us passes (< 0: forever,
 * 0: never wait). fds must be memory every thread of the block sees
 * (shared or global). Returns the number ready, 0 on timeout.
 */
GSOCK_DEVICE int gpoll(struct gsock_dev gs, struct gpollfd *fds, int nfds,
		       long timeout_us)
{
	long r = 0;

	if (gs_tid() == 0) {
		uint64_t start = gs_now_ns();
		unsigned i = 0;

		for (;;) {
			r = 0;
			for (int k = 0; k < nfds; k++) {
				fds[k].revents = gs_poll_one_t0(gs, &fds[k]);
				r += fds[k].revents != 0;
			}
			if (r || timeout_us == 0)
				break;
			if (timeout_us > 0 &&
			    gs_now_ns() - start >= (uint64_t)timeout_us * 1000)
				break;
			r = gs_world_error(gs);
			if (r)
				break;
			gs_relax(i++);
		}
	}
	return (int)gs_bcast(r);
}

#endif /* GSOCK_CUH */
