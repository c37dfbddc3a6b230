/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Real sockets behind arena sockets: the socket commands (tcp over IPv4
 * and IPv6, unix), accepting ahead of gaccept, non-blocking connect, and
 * moving bytes between sockets and rings with one CPU copy each way
 * (readv into the rx ring, sendmsg from the tx ring). Flow control is the
 * rings: a full rx ring stops reading, so TCP back-pressure reaches the
 * sender. Everything here runs on the worker that owns the socket
 * (br_sock.owner), except where a function says otherwise; a listener's
 * worker hands accepted connections round the application's workers.
 */
#include <config.h>

#include <errno.h>
#include <stddef.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "../devlib/gsock_ctl.h"
#include "../devlib/gsock_ring.h"
#include "bridge.h"
#include "log.h"

static uint8_t *rx_ring(struct br_sock *s)
{
	return gs_sock_rx_ring(s->app->rings, s->id, s->app->ring_size);
}

static uint8_t *tx_ring(struct br_sock *s)
{
	return rx_ring(s) + s->app->ring_size;
}

/* The len bytes of ring from counter pos as iovecs; returns how many. */
static int ring_iov(struct br_sock *s, uint8_t *ring, uint64_t pos,
		    uint64_t len, struct iovec iov[2])
{
	uint64_t first;

	iov[0].iov_base = ring + gs_ring_split(pos, len, s->app->ring_size,
					       &first);
	iov[0].iov_len = first;
	iov[1].iov_base = ring;
	iov[1].iov_len = len - first;
	return len > first ? 2 : 1;
}

/* Whether the calling worker moves bytes with io_uring. */
static bool uring(void)
{
	struct br_worker *w = br_self();

	return w && w->ring;
}

/*
 * Tell gpoll that something of s changed (after publishing it): the
 * block that polls s (its poll_slot) and the application as a whole.
 * The fence pairs with gpoll's after it claims the socket: either the
 * bridge sees the claim, or the block sees the change when it scans.
 */
static void note_event(struct br_sock *s)
{
	struct br_app *a = s->app;
	uint32_t ps;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ps = __atomic_load_n(&br_sock_arena(s)->poll_slot, __ATOMIC_RELAXED);
	if (ps && gs_poll_slot(ps) < a->nslots) /* the application's word */
		__atomic_add_fetch(&a->slots[gs_poll_slot(ps)].wake, 1,
				   __ATOMIC_RELEASE);
	br_app_event_count(a);
}

static void publish_status(struct br_sock *s, uint32_t set, uint32_t clear)
{
	s->status = (s->status | set) & ~clear;
	__atomic_store_n(&br_sock_arena(s)->status, s->status, __ATOMIC_RELEASE);
	note_event(s);
}

/* The socket failed: kernels see err (negative errno) from now on. */
static void sock_fail(struct br_sock *s, int err)
{
	if (br_sock_arena(s)->error)
		return;
	br_dbg("pid %d socket %u: %s", (int)s->app->pid, s->id, strerror(-err));
	br_sock_arena(s)->error = err;
	publish_status(s, 0, 0);
}

/* Into the owning worker's epoll set (the caller's). */
static int epoll_watch(struct br_sock *s, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = &s->ev };

	if (epoll_ctl(br_self()->epfd,
		      s->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s->fd,
		      &ev) < 0)
		return -errno;
	s->in_epoll = true;
	return 0;
}

/* The worker a socket's doorbells go to, told to the application. */
static void set_queue(struct br_sock *s, uint32_t worker)
{
	__atomic_store_n(&br_sock_arena(s)->db_queue, worker, __ATOMIC_RELAXED);
}

/*
 * Make worker the owner of s: the last store of whoever set s up, since
 * the owner may act on s as soon as it sees its number here.
 */
static void set_owner(struct br_sock *s, uint32_t worker)
{
	__atomic_store_n(&s->owner, (int)worker, __ATOMIC_RELEASE);
}

/*
 * Take a free id and give it the real socket fd; arena entry reset. The
 * caller sets the owner when it is done setting the socket up.
 */
/* This turn's time, for gsock-stat's idle column: no clock read here. */
static uint64_t turn_ns(void)
{
	struct br_worker *w = br_self();

	return w ? w->now_ns : br_now_ns();
}

static struct br_sock *sock_alloc(struct br_app *a, int fd, int domain)
{
	struct br_sock *s;
	struct gs_sock *g;

	pthread_mutex_lock(&a->ids_lock);
	s = a->free_list;
	if (s)
		a->free_list = s->next_free;
	pthread_mutex_unlock(&a->ids_lock);
	if (!s)
		return NULL;
	__atomic_add_fetch(&s->gen, 1, __ATOMIC_RELAXED);
	s->adopted = false;
	s->next_worker = 0;
	s->fd = fd;
	s->domain = domain;
	s->state = BS_OPEN;
	s->readable = s->writable = s->in_epoll = s->shut_wr_pending = false;
	s->rdhup = false;
	s->io = 0;
	s->owed_in = 0;
	s->rx_tail = s->tx_head = 0;
	s->last_ns = turn_ns();
	s->wait_slot = -1;
	s->dseg = -1;
	s->dlisten = false;
	s->dhold = false;
	s->hold_until_ns = 0;
	s->unix_path[0] = 0;
	g = br_sock_arena(s);
	/* The id is free, so the application has no business in g now. */
	g->rx_tail = g->tx_head = g->rx_head = g->tx_tail = 0;
	g->poll_slot = 0;
	g->error = 0;
	g->rx_blocked = 0;
	g->accept_pending = 0;
	g->direct = 0;
	s->status = 0;
	publish_status(s, GS_ST_OPEN, 0);
	return s;
}

static void acceptq_drop(struct br_sock *s)
{
	for (uint32_t i = 0; i < s->acceptq_len; i++) {
		close(s->acceptq[i]);
		br_direct_drop(s->acceptq_seg[i]);
	}
	free(s->acceptq);
	free(s->acceptq_seg);
	s->acceptq = NULL;
	s->acceptq_seg = NULL;
	s->acceptq_len = s->acceptq_cap = 0;
}

/* Whether the slot waits on socket s. */
static bool parked_on(struct br_app *a, uint32_t slot, struct br_sock *s)
{
	return __atomic_load_n(&a->slot[slot].parked_on, __ATOMIC_ACQUIRE) ==
	       s->id + 1;
}

/*
 * io_uring requests of s are in flight: cancel them; sock_free runs again
 * when the last completes (their buffers are s's rings, their user_data
 * s itself: neither may be reused before). Where the cancel cannot be
 * asked, shutting the socket down ends them as well.
 */
static void free_later(struct br_sock *s)
{
#ifdef HAVE_LIBURING
	struct io_uring_sqe *sqe;

	if (s->state == BS_CANCELLING)
		return;
	if (s->state == BS_CLOSING)
		br_self()->nclosing--;
	s->state = BS_CANCELLING;
	publish_status(s, 0, ~0u);
	sqe = br_uring_sqe(br_self());
	if (!sqe) {
		shutdown(s->fd, SHUT_RDWR);
		return;
	}
	io_uring_prep_cancel_fd(sqe, s->fd, IORING_ASYNC_CANCEL_ALL);
	io_uring_sqe_set_data64(sqe, (uintptr_t)s | BR_OP_CANCEL);
	s->io |= BR_OP_CANCEL;
#else
	(void)s;
#endif
}

/*
 * s's connect no longer waits for a preloaded accept; give_up: its
 * segment goes too, unless that accept took it already.
 */
static void unhold(struct br_sock *s, bool give_up)
{
	if (!s->dhold)
		return;
	if (give_up)
		br_direct_hold(s, true);
	if (s->hold_until_ns)
		br_self()->nheld--;
	s->dhold = false;
	s->hold_until_ns = 0;
}

/* Release the real socket and the id. */
static void sock_free(struct br_sock *s)
{
	struct br_app *a = s->app;

	if (s->io) {
		free_later(s);
		return;
	}
	if (s->state == BS_CLOSING)
		br_self()->nclosing--;
	unhold(s, true);
	if (s->wait_slot >= 0)
		br_app_complete(a, s->wait_slot, -EBADF, NULL, 0);
	for (uint32_t i = 0; s->state == BS_LISTEN && i < a->nslots; i++)
		if (parked_on(a, i, s))
			br_app_complete(a, i, -EBADF, NULL, 0);
	acceptq_drop(s);
	br_direct_unlisten(s);
	br_direct_close(s);
	if (s->fd >= 0)
		close(s->fd); /* and out of the epoll set */
	if (s->unix_path[0])
		unlink(s->unix_path);
	s->fd = -1;
	s->state = BS_FREE;
	s->adopted = s->in_epoll = false;
	publish_status(s, 0, ~0u);
	__atomic_store_n(&s->owner, -1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&a->ids_lock);
	s->next_free = a->free_list;
	a->free_list = s;
	pthread_mutex_unlock(&a->ids_lock);
}

/* Whether any socket of a the calling worker owns has requests in flight. */
static bool io_pending(struct br_app *a)
{
	for (uint32_t i = 0; i < a->nsocks; i++)
		if (br_sock_mine(&a->sk[i]) && a->sk[i].io)
			return true;
	return false;
}

/*
 * Worker: close its sockets of a dead application, and wait until the
 * kernel is done with their rings (the caller may unmap them next).
 */
void br_sock_close_owned(struct br_app *a)
{
	for (uint32_t i = 0; i < a->nsocks; i++)
		if (br_sock_mine(&a->sk[i]))
			sock_free(&a->sk[i]);
#ifdef HAVE_LIBURING
	while (uring() && io_pending(a))
		br_uring_turn(br_self(), -1);
#endif
}

/*
 * When a is freed (no thread knows it any more): close what is left, a
 * socket handed to a worker that had stopped.
 */
void br_sock_close_all(struct br_app *a)
{
	for (uint32_t i = 0; i < a->nsocks; i++) {
		struct br_sock *s = &a->sk[i];

		if (s->state == BS_FREE)
			continue;
		if (s->dhold)
			br_direct_hold(s, true);
		acceptq_drop(s);
		br_direct_unlisten(s);
		br_direct_close(s);
		if (s->fd >= 0)
			close(s->fd);
		if (s->unix_path[0])
			unlink(s->unix_path);
		s->fd = -1;
		s->state = BS_FREE;
	}
}

/* Bytes waiting in the tx ring; -1 after rejecting a corrupt ring. */
static int64_t tx_pending(struct br_sock *s)
{
	uint64_t tail =
		__atomic_load_n(&br_sock_arena(s)->tx_tail, __ATOMIC_ACQUIRE);

	if (!gs_ring_sane(s->tx_head, tail, s->app->ring_size)) {
		br_app_reject(
			s->app,
			"socket %u tx ring counters are corrupt (head %llu, tail %llu)",
			s->id, (unsigned long long)s->tx_head,
			(unsigned long long)tail);
		return -1;
	}
	return (int64_t)gs_ring_used(s->tx_head, tail);
}

#ifdef HAVE_LIBURING
/*
 * io_uring: a request's entry, with msg describing len bytes of ring from
 * counter pos; NULL (the socket failed) where the ring has no room.
 */
static struct io_uring_sqe *uring_req(struct br_sock *s, struct msghdr *msg,
				      struct iovec iov[2], uint8_t *ring,
				      uint64_t pos, uint64_t len)
{
	struct io_uring_sqe *sqe = br_uring_sqe(br_self());

	if (!sqe) {
		sock_fail(s, -ENOBUFS);
		return NULL;
	}
	*msg = (struct msghdr){ .msg_iov = iov };
	msg->msg_iovlen = ring_iov(s, ring, pos, len, iov);
	return sqe;
}
#endif

/* io_uring: one send of what the tx ring holds, unless one is in flight. */
static void uring_tx(struct br_sock *s)
{
#ifdef HAVE_LIBURING
	struct io_uring_sqe *sqe;
	int64_t len;

	if ((s->io & BR_OP_TX) || br_sock_arena(s)->error)
		return;
	len = tx_pending(s);
	if (len <= 0)
		return;
	sqe = uring_req(s, &s->tx_msg, s->tx_iov, tx_ring(s), s->tx_head,
			(uint64_t)len);
	if (!sqe)
		return;
	io_uring_prep_sendmsg(sqe, s->fd, &s->tx_msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uintptr_t)s | BR_OP_TX);
	s->io |= BR_OP_TX;
#else
	(void)s;
#endif
}

/* Bytes the kernel took from the tx ring: tell the application. */
static void tx_sent(struct br_sock *s, uint64_t n)
{
	/* Space freed in a ring over half full: a kernel may wait for it. */
	if (2 * n >= s->app->ring_size)
		br_worker_owe(s);
	s->last_ns = turn_ns();
	s->tx_head += n;
	__atomic_store_n(&br_sock_arena(s)->tx_head, s->tx_head, __ATOMIC_RELEASE);
	note_event(s);
}

/* Move tx ring bytes to the socket until the ring is empty or EAGAIN. */
static void pump_tx(struct br_sock *s)
{
	struct gs_sock *g = br_sock_arena(s);
	bool batched = uring(); /* io_uring: one send in flight, no loop */

	if (batched)
		uring_tx(s);
	while (!batched && s->writable && !g->error) {
		int64_t len = tx_pending(s);
		struct iovec iov[2];
		struct msghdr msg = { .msg_iov = iov };
		ssize_t n;

		if (len < 0)
			return;
		if (!len)
			break;
		msg.msg_iovlen =
			ring_iov(s, tx_ring(s), s->tx_head, (uint64_t)len, iov);
		n = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				s->writable = false;
			else if (errno != EINTR)
				sock_fail(s, -errno);
			continue;
		}
		tx_sent(s, (uint64_t)n);
		/* Short: the socket buffer is full; the next edge says when not. */
		if (n < len)
			s->writable = false;
	}
	if (s->shut_wr_pending &&
	    s->tx_head == __atomic_load_n(&g->tx_tail, __ATOMIC_ACQUIRE)) {
		s->shut_wr_pending = false;
		shutdown(s->fd, SHUT_WR);
	}
}

/* Check rx counters; an application that broke them is rejected. */
static int rx_sane(struct br_sock *s, uint64_t head)
{
	if (gs_ring_sane(head, s->rx_tail, s->app->ring_size))
		return 1;
	br_app_reject(
		s->app,
		"socket %u rx ring counters are corrupt (head %llu, tail %llu)",
		s->id, (unsigned long long)head,
		(unsigned long long)s->rx_tail);
	return 0;
}

/*
 * Free rx space, or 0 after asking the application to ring when it frees
 * some (rx_blocked). The fence pairs with the one in grecv: either we see
 * its new head, or it sees rx_blocked.
 */
static uint64_t rx_space(struct br_sock *s)
{
	struct gs_sock *g = br_sock_arena(s);
	uint32_t size = s->app->ring_size;
	uint64_t head = __atomic_load_n(&g->rx_head, __ATOMIC_ACQUIRE);

	if (!rx_sane(s, head))
		return 0;
	if (!gs_ring_free(head, s->rx_tail, size)) {
		__atomic_store_n(&g->rx_blocked, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		head = __atomic_load_n(&g->rx_head, __ATOMIC_ACQUIRE);
		if (!rx_sane(s, head) || !gs_ring_free(head, s->rx_tail, size))
			return 0;
	}
	if (__atomic_load_n(&g->rx_blocked, __ATOMIC_RELAXED))
		__atomic_store_n(&g->rx_blocked, 0, __ATOMIC_RELAXED);
	return gs_ring_free(head, s->rx_tail, size);
}

/* Whether s may take more bytes from its socket. */
static bool rx_open(struct br_sock *s)
{
	return !(s->status & GS_ST_RX_EOF) && !br_sock_arena(s)->error &&
	       !br_app_dead(s->app);
}

/* Bytes the kernel put in the rx ring: tell the application. */
static void rx_received(struct br_sock *s, uint64_t n)
{
	br_worker_owe(s); /* a request, most often: its answer comes */
	s->last_ns = turn_ns();
	s->rx_tail += n;
	__atomic_store_n(&br_sock_arena(s)->rx_tail, s->rx_tail, __ATOMIC_RELEASE);
	note_event(s);
}

/*
 * io_uring: one receive into the rx ring's free space, unless one is in
 * flight or the ring is full (then the application rings when it reads).
 */
static void uring_rx(struct br_sock *s)
{
#ifdef HAVE_LIBURING
	struct io_uring_sqe *sqe;
	uint64_t space;

	if ((s->io & BR_OP_RX) || !rx_open(s))
		return;
	space = rx_space(s);
	if (!space)
		return;
	sqe = uring_req(s, &s->rx_msg, s->rx_iov, rx_ring(s), s->rx_tail,
			space);
	if (!sqe)
		return;
	io_uring_prep_recvmsg(sqe, s->fd, &s->rx_msg, 0);
	/* The peer answers what we sent: data is rarely there yet. */
	if (br_uring_poll_first())
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(sqe, (uintptr_t)s | BR_OP_RX);
	s->io |= BR_OP_RX;
#else
	(void)s;
#endif
}

/* Move socket bytes into the rx ring until EAGAIN, EOF or a full ring. */
static void pump_rx(struct br_sock *s)
{
	if (uring()) {
		uring_rx(s);
		return;
	}
	while (s->readable && rx_open(s)) {
		uint64_t space = rx_space(s);
		struct iovec iov[2];
		ssize_t n;

		if (!space)
			break;
		n = readv(s->fd, iov,
			  ring_iov(s, rx_ring(s), s->rx_tail, space, iov));
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				s->readable = false;
			else if (errno != EINTR)
				sock_fail(s, -errno);
			continue;
		}
		if (n == 0) {
			br_direct_peer_fin(s);
			publish_status(s, GS_ST_RX_EOF, 0);
			break;
		}
		rx_received(s, (uint64_t)n);
		/*
		 * Short: the socket had no more. Data arriving later is a new
		 * edge, so the readv that would say EAGAIN is saved; but a FIN
		 * that came with this data had its edge already: read on.
		 */
		if ((uint64_t)n < space && !s->rdhup)
			s->readable = false;
	}
}

/* A closing socket is done once its tx ring drained, failed or timed out. */
static void close_if_drained(struct br_sock *s)
{
	struct gs_sock *g = br_sock_arena(s);

	if (g->error || br_now_ns() >= s->close_deadline_ns ||
	    s->tx_head == __atomic_load_n(&g->tx_tail, __ATOMIC_ACQUIRE))
		sock_free(s);
}

void br_sock_pump(struct br_sock *s)
{
	if (br_app_dead(s->app))
		return;
	if (s->state == BS_CONNECTED) {
		pump_tx(s);
		pump_rx(s);
	} else if (s->state == BS_CLOSING) {
		pump_tx(s);
		close_if_drained(s);
	}
}

/*
 * io_uring: a request of s completed with res (bytes, or -errno). The
 * socket's rings move as they would after readv or sendmsg, and the next
 * request goes out at once.
 */
void br_sock_io_done(struct br_sock *s, unsigned op, int res)
{
	s->io &= ~op;
	if (s->state == BS_CANCELLING) {
		/* A kernel without cancel by descriptor (before 5.19). */
		if (op == BR_OP_CANCEL && res < 0 && res != -ENOENT &&
		    res != -EALREADY)
			shutdown(s->fd, SHUT_RDWR);
		if (!s->io)
			sock_free(s);
		return;
	}
	/* A dead application's sockets are freed by br_sock_close_owned. */
	if (br_app_dead(s->app) || op == BR_OP_CANCEL)
		return;
	if (res == -EINTR || res == -EAGAIN) {
		/* nothing moved: the pump below asks again */
	} else if (op == BR_OP_TX) {
		if (res < 0)
			sock_fail(s, res);
		else
			tx_sent(s, (uint64_t)res);
	} else if (s->state == BS_CONNECTED) {
		if (res < 0) {
			sock_fail(s, res);
		} else if (res == 0) {
			br_direct_peer_fin(s);
			publish_status(s, GS_ST_RX_EOF, 0);
		} else {
			rx_received(s, (uint64_t)res);
		}
	}
	br_sock_pump(s);
}

static void finish_connect(struct br_sock *s);

/*
 * Worker: give its closing sockets of a their chance (deadlines), and
 * its connects held for a preloaded accept theirs.
 */
void br_sock_tick(struct br_app *a)
{
	struct br_worker *w = br_self();

	for (uint32_t i = 0; i < a->nsocks && (w->nclosing || w->nheld); i++) {
		struct br_sock *s = &a->sk[i];

		if (!br_sock_mine(s))
			continue;
		if (s->state == BS_CLOSING)
			br_sock_pump(s);
		else if (s->state == BS_CONNECTING && s->hold_until_ns &&
			 w->now_ns >= s->hold_until_ns)
			finish_connect(s); /* a claim comes as a message */
	}
}

/* Worker: a preloaded accept took held socket id's segment. */
void br_sock_claimed(struct br_app *a, uint32_t id, uint32_t gen)
{
	struct br_sock *s = &a->sk[id];

	if (br_app_dead(a) || __atomic_load_n(&s->gen, __ATOMIC_RELAXED) != gen ||
	    !br_sock_mine(s))
		return;
	/* Not complete in the kernel yet: its epoll edge finishes it. */
	if (s->state == BS_CONNECTING && s->hold_until_ns)
		finish_connect(s);
}

/* The owner takes s into its epoll set and moves what is waiting. */
static void adopt(struct br_sock *s)
{
	int r;

	s->adopted = true;
	if (s->state != BS_CONNECTED)
		return; /* made by this worker: watched from listen or connect */
	/* io_uring: the requests in flight are the watch. */
	r = uring() ? 0 :
		      epoll_watch(s, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
	if (r < 0)
		sock_fail(s, r);
	br_sock_pump(s);
}

/* Worker: a doorbell for socket id (the application's word: checked). */
void br_sock_doorbell(struct br_app *a, uint32_t id)
{
	struct br_sock *s = &a->sk[id];

	/* Not ours: stale, or rung before its owner's turn (it pumps then). */
	if (!br_sock_mine(s))
		return;
	br_worker_paid(s);
	if (s->dseg >= 0)
		br_direct_kick(s); /* a CPU peer that waits */
	if (!s->adopted)
		adopt(s);
	else
		br_sock_pump(s);
}

/* Worker: a connection handed over by a listener's worker. */
void br_sock_adopt(struct br_app *a, uint32_t id, uint32_t gen)
{
	struct br_sock *s = &a->sk[id];

	if (__atomic_load_n(&s->gen, __ATOMIC_RELAXED) != gen || !br_sock_mine(s))
		return; /* closed since, or adopted and closed */
	if (br_app_dead(a))
		sock_free(s);
	else if (!s->adopted)
		adopt(s);
}

static void sock_connected(struct br_sock *s)
{
	s->state = BS_CONNECTED;
	/* io_uring: epoll watched the connect; requests watch from now on. */
	if (uring() && s->in_epoll) {
		epoll_ctl(br_self()->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		s->in_epoll = false;
	}
	publish_status(s, GS_ST_CONNECTED, 0);
}

/*
 * Hand an accepted fd to a slot waiting in gaccept. The connection goes
 * to the application's workers in turn: the listener's worker sets it up
 * and gives it away (an "adopt" message) before the application learns
 * its id, so its first doorbell finds the new owner.
 */
static void accept_complete(struct br_sock *ls, uint32_t slot, int fd,
			    int seg)
{
	struct br_app *a = ls->app;
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	uint32_t to = ls->next_worker++ % a->nworkers, id, gen;
	struct br_msg *m = NULL;
	struct br_sock *s;
	int one = 1;

	if (to != br_self()->idx) {
		m = calloc(1, sizeof(*m));
		if (!m)
			to = br_self()->idx;
	}
	s = sock_alloc(a, fd, ls->domain);
	if (!s) {
		free(m);
		close(fd);
		br_direct_drop(seg);
		br_app_complete(a, slot, -EMFILE, NULL, 0);
		return;
	}
	if (ls->domain != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (getpeername(fd, (struct sockaddr *)&peer, &plen) < 0)
		plen = 0;
	sock_connected(s);
	s->readable = s->writable = true;
	s->dseg = seg;
	s->dside = 1;
	br_direct_publish(s);
	set_queue(s, to);
	id = s->id;
	gen = __atomic_load_n(&s->gen, __ATOMIC_RELAXED);
	set_owner(s, to);
	if (m) { /* s is not ours to touch from here on */
		m->kind = BR_MSG_ADOPT;
		m->app = a;
		m->id = id;
		m->gen = gen;
		br_app_get(a);
		br_worker_post(&br.workers[to], m);
		br_app_complete(a, slot, id, &peer, plen);
		return;
	}
	br_app_complete(a, slot, id, &peer, plen);
	adopt(s);
}

static int parked_accept(struct br_sock *ls)
{
	struct br_app *a = ls->app;

	for (uint32_t i = 0; i < a->nslots; i++)
		if (parked_on(a, i, ls))
			return (int)i;
	return -1;
}

/* Accept what the kernel has: to waiting slots first, then the queue. */
static void pump_accept(struct br_sock *ls)
{
	while (ls->readable && ls->acceptq_len < ls->acceptq_cap) {
		int fd = accept4(ls->fd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		int slot, seg;

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				ls->readable = false;
			else if (errno != EINTR && errno != ECONNABORTED)
				br_warn("accept on socket %u of pid %d: %s",
					ls->id, (int)ls->app->pid,
					strerror(errno));
			if (errno != EINTR && errno != ECONNABORTED)
				break;
			continue;
		}
		seg = br_direct_accepted(ls, fd);
		slot = parked_accept(ls);
		if (slot >= 0) {
			accept_complete(ls, slot, fd, seg);
		} else {
			ls->acceptq_seg[ls->acceptq_len] = seg;
			ls->acceptq[ls->acceptq_len++] = fd;
		}
	}
	__atomic_store_n(&br_sock_arena(ls)->accept_pending, ls->acceptq_len,
			 __ATOMIC_RELEASE);
	note_event(ls);
}

static void finish_connect(struct br_sock *s)
{
	int err = 0;
	socklen_t len = sizeof(err);
	int slot = s->wait_slot;

	if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == EINPROGRESS || err == EALREADY)
		return;
	if (err) {
		bool held = s->dhold;

		s->wait_slot = -1;
		s->state = BS_OPEN;
		unhold(s, true);
		/* a segment a preloaded accept took: its side 1 sees the end */
		if (held)
			br_direct_close(s);
		br_direct_abandon(s);
		br_app_complete(s->app, slot, -err, NULL, 0);
		return;
	}
	/*
	 * Connected, to a preloaded program's listener: held until its
	 * accept takes the segment, or direct_accept_ms (then the bridge
	 * carries it, no byte having moved either way).
	 */
	if (s->dhold) {
		uint64_t now = br_now_ns();

		if (!s->hold_until_ns) {
			s->hold_until_ns =
				now + (uint64_t)br.conf.direct_accept_ms * 1000000u;
			br_self()->nheld++;
		}
		if (br_direct_hold(s, now >= s->hold_until_ns))
			return;
		unhold(s, false);
	}
	s->wait_slot = -1;
	sock_connected(s);
	br_direct_publish(s);
	br_app_complete(s->app, slot, 0, NULL, 0);
	br_sock_pump(s);
}

void br_sock_event(struct br_sock *s, uint32_t events)
{
	/* An event for a socket closed earlier in the same batch: not ours. */
	if (br_app_dead(s->app) || !br_sock_mine(s) || s->state == BS_FREE ||
	    s->state == BS_CANCELLING)
		return;
	if (!s->adopted) {
		adopt(s);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		s->readable = true;
	if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		s->rdhup = true;
	if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		s->writable = true;
	if (s->state == BS_LISTEN)
		pump_accept(s);
	else if (s->state == BS_CONNECTING)
		finish_connect(s);
	else
		br_sock_pump(s);
}

/* ---- commands ---- */

/* A handler's result meaning: the slot is completed already, or parked. */
#define BR_LATER INT64_MIN

/* Check a sockaddr from the arena against the socket's family. */
static int check_addr(struct br_sock *s, const struct gs_cmd *c)
{
	sa_family_t fam;

	if (c->addrlen < sizeof(sa_family_t))
		return -EINVAL;
	memcpy(&fam, c->addr, sizeof(fam));
	if (fam != s->domain)
		return -EAFNOSUPPORT;
	if (fam == AF_INET && c->addrlen < sizeof(struct sockaddr_in))
		return -EINVAL;
	if (fam == AF_INET6 && c->addrlen < sizeof(struct sockaddr_in6))
		return -EINVAL;
	return 0;
}

static int port_of(const struct gs_cmd *c)
{
	struct sockaddr_in6 a6;
	struct sockaddr_in a4;

	if (c->addrlen >= sizeof(a6) &&
	    ((const struct sockaddr *)c->addr)->sa_family == AF_INET6) {
		memcpy(&a6, c->addr, sizeof(a6));
		return ntohs(a6.sin6_port);
	}
	memcpy(&a4, c->addr, sizeof(a4));
	return ntohs(a4.sin_port);
}

static int64_t cmd_socket(struct br_app *a, const struct gs_cmd *c)
{
	int domain = (int)c->arg[0], type = (int)c->arg[1];
	int proto = (int)c->arg[2];
	struct br_sock *s;
	int fd;

	if (c->arg[0] != domain || c->arg[1] != type || c->arg[2] != proto)
		return -EINVAL;
	if (domain != AF_INET && domain != AF_INET6 && domain != AF_UNIX)
		return -EAFNOSUPPORT;
	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM)
		return -EPROTONOSUPPORT;
	if (proto != 0 && !(domain != AF_UNIX && proto == IPPROTO_TCP))
		return -EPROTONOSUPPORT;
	fd = socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
	if (fd < 0)
		return -errno;
	s = sock_alloc(a, fd, domain);
	if (!s) {
		close(fd);
		return -EMFILE;
	}
	/* Made here, owned here: the queue of the worker serving this. */
	set_queue(s, br_self()->idx);
	s->adopted = true;
	set_owner(s, br_self()->idx);
	return s->id;
}

static int64_t cmd_bind(struct br_sock *s, const struct gs_cmd *c)
{
	int one = 1, r = check_addr(s, c);

	if (r)
		return r;
	if (s->state != BS_OPEN)
		return -EINVAL;
	if (s->domain == AF_UNIX) {
		const struct sockaddr_un *un = (const void *)c->addr;
		size_t plen =
			c->addrlen - offsetof(struct sockaddr_un, sun_path);

		/* gsockd's working directory is not the application's. */
		if (plen == 0 || plen > sizeof(s->unix_path) ||
		    (un->sun_path[0] != '/' && un->sun_path[0] != 0))
			return -EINVAL;
		/*
		 * The path is unlinked on close: it must fit unix_path whole.
		 * One that fills sun_path has no NUL to spare, was kept cut
		 * short, and a different file was unlinked (t/fuzz/arena/
		 * crash-unix-path-108).
		 */
		if (strnlen(un->sun_path, plen) >= sizeof(s->unix_path))
			return -ENAMETOOLONG;
		if (bind(s->fd, (const void *)c->addr, c->addrlen) < 0)
			return -errno;
		if (un->sun_path[0] == '/')
			snprintf(s->unix_path, sizeof(s->unix_path), "%.*s",
				 (int)plen, un->sun_path);
		return 0;
	}
	/* The port needs the privilege the application itself would need. */
	if (port_of(c) && port_of(c) < br.unpriv_port && s->app->uid != 0)
		return -EACCES;
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s->fd, (const void *)c->addr, c->addrlen) < 0)
		return -errno;
	return 0;
}

static int64_t cmd_listen(struct br_sock *s, const struct gs_cmd *c)
{
	long backlog = c->arg[0];
	int r;

	if (s->state == BS_LISTEN)
		return 0;
	if (s->state != BS_OPEN)
		return -EINVAL;
	if (backlog < 1 || backlog > br.conf.accept_queue)
		backlog = br.conf.accept_queue;
	s->acceptq = calloc(backlog, sizeof(int));
	s->acceptq_seg = calloc(backlog, sizeof(int));
	if (!s->acceptq || !s->acceptq_seg) {
		free(s->acceptq);
		free(s->acceptq_seg);
		s->acceptq = s->acceptq_seg = NULL;
		return -ENOMEM;
	}
	s->acceptq_cap = (uint32_t)backlog;
	if (listen(s->fd, (int)backlog) < 0)
		goto err_free;
	r = epoll_watch(s, EPOLLIN | EPOLLET);
	if (r) {
		errno = -r;
		goto err_free;
	}
	s->state = BS_LISTEN;
	br_direct_listen(s);
	publish_status(s, GS_ST_LISTENING, 0);
	return 0;
err_free:
	r = -errno;
	free(s->acceptq);
	free(s->acceptq_seg);
	s->acceptq = s->acceptq_seg = NULL;
	s->acceptq_cap = 0;
	return r;
}

static int64_t cmd_accept(struct br_sock *s, uint32_t slot,
			  const struct gs_cmd *c)
{
	struct br_app *a = s->app;
	int fd, seg;

	if (s->state != BS_LISTEN)
		return -EINVAL;
	pump_accept(s);
	if (s->acceptq_len) {
		fd = s->acceptq[0];
		seg = s->acceptq_seg[0];
		--s->acceptq_len;
		memmove(s->acceptq, s->acceptq + 1,
			s->acceptq_len * sizeof(int));
		memmove(s->acceptq_seg, s->acceptq_seg + 1,
			s->acceptq_len * sizeof(int));
		__atomic_store_n(&br_sock_arena(s)->accept_pending, s->acceptq_len,
				 __ATOMIC_RELEASE);
		accept_complete(s, slot, fd, seg);
		pump_accept(s);
		return BR_LATER;
	}
	if (c->arg[0])
		return -EAGAIN;
	__atomic_store_n(&a->slot[slot].parked_on, s->id + 1, __ATOMIC_RELEASE);
	return BR_LATER;
}

static int64_t cmd_connect(struct br_sock *s, uint32_t slot,
			   const struct gs_cmd *c)
{
	int r = check_addr(s, c), one = 1;

	if (r)
		return r;
	if (s->state == BS_CONNECTED)
		return -EISCONN;
	if (s->state != BS_OPEN)
		return -EALREADY;
	if (s->domain != AF_UNIX)
		setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r = epoll_watch(s, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
	if (r)
		return r;
	br_direct_connect(s, (const void *)c->addr, c->addrlen);
	r = connect(s->fd, (const void *)c->addr, c->addrlen);
	/* Held for a preloaded accept: its epoll edge comes all the same. */
	if (r == 0 && !s->dhold) {
		sock_connected(s);
		br_direct_connected(s);
		br_direct_publish(s);
		s->readable = s->writable = true;
		if (uring())
			br_sock_pump(s); /* no epoll edge will come */
		return 0;
	}
	if (r < 0 && errno != EINPROGRESS) {
		r = -errno;
		s->dhold = false;
		br_direct_abandon(s);
		return r;
	}
	s->state = BS_CONNECTING;
	s->wait_slot = (int)slot;
	__atomic_store_n(&s->app->slot[slot].parked_on, s->id + 1,
			 __ATOMIC_RELEASE);
	return BR_LATER;
}

static int64_t cmd_shutdown(struct br_sock *s, const struct gs_cmd *c)
{
	int64_t how = c->arg[0];

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	if (s->state != BS_CONNECTED)
		return -ENOTCONN;
	if (how != SHUT_WR)
		shutdown(s->fd, SHUT_RD);
	br_direct_shutdown(s, (int)how);
	if (how != SHUT_RD) {
		publish_status(s, GS_ST_TX_SHUT, 0);
		s->shut_wr_pending = true;
		br_sock_pump(s);
	}
	return 0;
}

static int64_t cmd_close(struct br_sock *s)
{
	if (s->state != BS_CONNECTED) {
		sock_free(s);
		return 0;
	}
	/* The kernel sends unsent bytes after close(); so do we. */
	s->state = BS_CLOSING;
	br_self()->nclosing++;
	s->close_deadline_ns = br_now_ns() + br.conf.linger_ms * 1000000ull;
	publish_status(s, 0, ~0u);
	br_sock_pump(s);
	return 0;
}

/* The options a kernel may set on its real socket, all int-valued. */
static int opt_allowed(int64_t level, int64_t name)
{
	switch (level) {
	case SOL_SOCKET:
		return name == SO_REUSEADDR || name == SO_REUSEPORT ||
		       name == SO_KEEPALIVE || name == SO_RCVBUF ||
		       name == SO_SNDBUF || name == SO_PRIORITY;
	case IPPROTO_TCP:
		return name == TCP_NODELAY || name == TCP_KEEPIDLE ||
		       name == TCP_KEEPINTVL || name == TCP_KEEPCNT ||
		       name == TCP_USER_TIMEOUT || name == TCP_QUICKACK;
	case IPPROTO_IPV6:
		return name == IPV6_V6ONLY;
	default:
		return 0;
	}
}

static int64_t cmd_setsockopt(struct br_sock *s, const struct gs_cmd *c)
{
	int v = (int)c->arg[2];

	if (!opt_allowed(c->arg[0], c->arg[1]))
		return -ENOPROTOOPT;
	if (s->domain == AF_UNIX && c->arg[0] != SOL_SOCKET)
		return -EOPNOTSUPP;
	if (setsockopt(s->fd, (int)c->arg[0], (int)c->arg[1], &v, sizeof(v)))
		return -errno;
	return 0;
}

static int64_t cmd_name(struct br_app *a, uint32_t slot, struct br_sock *s,
			int peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r = peer ? getpeername(s->fd, (struct sockaddr *)&ss, &len) :
		       getsockname(s->fd, (struct sockaddr *)&ss, &len);

	if (r < 0)
		return -errno;
	br_app_complete(a, slot, 0, &ss, len);
	return BR_LATER;
}

/* Pass a request about a socket another worker owns to that worker. */
static void forward(struct br_app *a, uint32_t slot, const struct gs_cmd *c,
		    int owner)
{
	struct br_msg *m = calloc(1, sizeof(*m));

	if (!m) {
		br_app_complete(a, slot, -ENOMEM, NULL, 0);
		return;
	}
	m->kind = BR_MSG_CMD;
	m->app = a;
	m->slot = slot;
	m->req = *c;
	br_app_get(a);
	br_worker_post(&br.workers[owner], m);
}

/*
 * Serve one request. Handlers return a result to complete the slot with,
 * or BR_LATER where they completed it themselves or parked it (accept,
 * connect, name lookups). A request about another worker's socket goes
 * to that worker.
 */
void br_sock_command(struct br_app *a, uint32_t slot, const struct gs_cmd *c)
{
	struct br_sock *s = NULL;
	int64_t r;

	if (c->op != GS_OP_SOCKET) {
		int owner = c->fd < 0 || (uint32_t)c->fd >= a->nsocks ?
				    -1 :
				    __atomic_load_n(&a->sk[c->fd].owner,
						    __ATOMIC_ACQUIRE);

		if (owner >= 0 && (uint32_t)owner != br_self()->idx) {
			forward(a, slot, c, owner);
			return;
		}
		s = owner < 0 ? NULL : &a->sk[c->fd];
		if (s && !s->adopted)
			adopt(s);
		if (!s || s->state == BS_FREE || s->state == BS_CLOSING ||
		    s->state == BS_CANCELLING) {
			br_app_complete(a, slot, -EBADF, NULL, 0);
			return;
		}
	}
	switch (c->op) {
	case GS_OP_SOCKET:
		r = cmd_socket(a, c);
		break;
	case GS_OP_BIND:
		r = cmd_bind(s, c);
		break;
	case GS_OP_LISTEN:
		r = cmd_listen(s, c);
		break;
	case GS_OP_ACCEPT:
		r = cmd_accept(s, slot, c);
		break;
	case GS_OP_CONNECT:
		r = cmd_connect(s, slot, c);
		break;
	case GS_OP_SHUTDOWN:
		r = cmd_shutdown(s, c);
		break;
	case GS_OP_CLOSE:
		r = cmd_close(s);
		break;
	case GS_OP_SETSOCKOPT:
		r = cmd_setsockopt(s, c);
		break;
	case GS_OP_GETSOCKNAME:
	case GS_OP_GETPEERNAME:
		r = cmd_name(a, slot, s, c->op == GS_OP_GETPEERNAME);
		break;
	default:
		r = -ENOSYS; /* unreachable: slot_doorbell checked the opcode */
		break;
	}
	if (r != BR_LATER)
		br_app_complete(a, slot, r, NULL, 0);
}
