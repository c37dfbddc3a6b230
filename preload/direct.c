/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The direct route (direct.h): a preloaded client's bytes move through a
 * segment of gsockd's direct pool, to and from a GPU application's
 * listener on this host.
 *
 * Setup: before connect(2), the preload binds the socket to a port of
 * its own on the address the peer is reached from, makes a socketpair,
 * and asks gsockd on a control connection of its own (gsock_ctl.h,
 * gs_ctl_dconnect) with one end of it. If a GPU application's listener
 * gets the connection, gsockd takes a segment for it (side 0 is ours)
 * and keeps that end; the kernel's connect(2) then goes ahead as always.
 * The TCP socket moves to a descriptor of the preload's own and the
 * socketpair's other end takes the application's descriptor number.
 *
 * Readiness: the application's descriptor (A) is readable when a byte
 * sits in it, and the preload keeps that true of the ring: a reader that
 * finds the ring empty sets want's READER bit, looks again (waiting for
 * a GPU send announced in the pipe's sending word: flight_landed), and
 * sleeps; the GPU side rings gsockd on seeing the bit (before or after
 * publishing bytes: gsock_arena.h), and gsockd writes a byte into A
 * (cpu_token in bridge/direct.c).
 * Before every poll, select and epoll wait the preload sets the bit of
 * each connection (the bytes of a connection nobody reads from now still
 * make it readable) and writes the byte itself when bytes came in
 * meanwhile. A writer that finds the ring full fills A's small send
 * buffer (the spill) so A turns unwritable, sets WRITER and looks again;
 * gsockd takes the spill back out when the GPU side frees room.
 *
 * The preload keeps the other end of the socketpair too (hidden), so it
 * can raise A itself; the kernel connection, hidden as well, says when
 * gsockd died (its sockets close). Poll-family waits are cut into
 * slices while direct connections exist, so such a death wakes them.
 *
 * Threads and forked processes that share a connection take turns on
 * each pipe (the segment's lock words); all state that must be shared is
 * in the segment.
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#ifdef __x86_64__
#include <emmintrin.h>
#endif

#include "../devlib/ctl_peer.h"
#include "../devlib/gsock_arena.h"
#include "../devlib/gsock_ctl.h"
#include "../devlib/gsock_ring.h"
#include "direct.h"
#include "flight.h"
#include "route.h"

/* A direct connection, as this process sees it. */
struct pl_dconn {
	struct gs_dseg *d;
	uint8_t *rx, *tx; /* its rings: the peer's pipe (to us), ours */
	uint32_t ring;
	/*
	 * Our side of the segment (gsock_arena.h): 0, the connecting end.
	 * Pipe k carries side k's bytes: pipe side is ours, the other the
	 * peer's (peer_of).
	 */
	unsigned side;
	int tcp; /* the kernel connection, hidden */
	int pair; /* the socketpair's other end, hidden */
	int rd_shut; /* shutdown(SHUT_RD) */
	int dead_seen; /* the kernel connection ended: waiters woken once */
	/*
	 * atomic: O_NONBLOCK of A's open file as this process last set it
	 * (0 or 1; -1: unknown), so a read that finds the ring empty asks
	 * no fcntl. Not trusted once the process forked: another process
	 * may change the flag of the file they share.
	 */
	int nonblock;
	/* atomic: when a non-blocking read that found the ring empty last asked the kernel connection (tcp_end), ns */
	long long tcp_look_ns;
	uint64_t serial; /* this process's count of direct connections, from 1 */
	/*
	 * An answer is owed (a request-response guess): bytes went out
	 * since bytes last came in; when the first of them went (ns, 0:
	 * none owed). Atomic: senders and waiters are any threads.
	 */
	long long out_ns;
	/* atomic: of 256 answers owed past the nap window, how many came late or never (look_in) */
	unsigned slow_rate;
	int sleepers; /* atomic: this process's threads asleep on its READER */
	uint64_t lane_bytes; /* atomic: bytes taken from the peer's lane (lane_take) */
	struct pl_dconn *prev, *next;
};

static uint64_t serials; /* atomic: the last pl_dconn.serial given */

/* The peer's side of c's segment, whose pipe brings its bytes to us. */
static inline unsigned peer_of(const struct pl_dconn *c)
{
	return c->side ^ 1u;
}

/* How long a wait that may sleep spins on the rings first. */
#define SPIN_US_DEFAULT 50
/*
 * How long after a send a wait expects its answer and naps (a kernel
 * wait with a short timeout, armed on nothing) to look at the rings
 * itself, rather than leave the answer to gsockd's doorbell watch: a
 * GPU answer took the watch, a gsockd worker and a byte in the
 * socketpair, three wake-ups where a nap is one.
 */
#define NAP_US_DEFAULT 200
#define NAP_MIN_NS 4000LL /* a shorter nap costs more than a spin */
/*
 * The most bytes one copy moves before its counter is published: a
 * quarter of the ring (at least 64 KiB), so that the GPU reads (or
 * refills) one part while this side copies the next. Publishing the
 * whole ring at once left each side idle while the other copied.
 */
#define STEP_MIN 65536

static size_t step_of(const struct pl_dconn *c)
{
	size_t q = c->ring / 4;

	return q > STEP_MIN ? q : STEP_MIN;
}

/* Longest kernel wait while a direct connection exists. */
#define SLICE_MS 250
/* A's send buffer: the spill that makes it unwritable is about this. */
#define SPILL_SNDBUF 4096

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * hint_lock (below): written by epoll_ctl, epoll_create, closes and
 * forks; read by every epoll wait (several times), whose own words under
 * it (a set's waiters, a hint's from and turn) are atomic. A mutex there
 * made the client threads of one process take turns at every wait.
 * Writers first, so that a busy process's epoll_ctl is not starved.
 */
static pthread_rwlock_t hint_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static struct pl_dconn *conns;
static int nconns; /* atomic for readers without the lock */
static long spin_ns = -1;
static long long nap_win_ns = -1; /* GSOCK_DIRECT_NAP_US */
static int lane_off; /* GSOCK_DIRECT_LANE=off: no lane offered to a GPU sender */
/*
 * The process's answers: how long one takes (an average, ns), and how
 * many of 256 owed answers came after the window (one that never comes
 * is not counted). Racy updates lose a sample now and then, no more.
 */
static long long answer_ns = 20000;
static unsigned miss_rate;
/*
 * How late a nap's wake-up comes, on average (ns): a kernel timer fires
 * when asked, but an idle core takes its time to run the thread again
 * (tens of microseconds on some virtual machines). A nap ends that much
 * earlier, and a wait spins instead where the nap would be shorter than
 * NAP_MIN_NS. Racy updates lose a sample now and then, no more.
 */
static long long nap_late_ns;
static unsigned long naps_taken; /* said at exit, GSOCK_LOG=debug */
/*
 * Answers later than the nap window (a GPU that computes before it
 * answers): a wait that sleeps owing one looks at its rings itself now
 * and then (look_in), rather than leave the answer to gsockd's doorbell
 * watch alone, whose period grows to 4 ms while gsockd is quiet. The
 * first look comes at three quarters of such an answer's usual time
 * (slow_ns), the next a quarter of the time owed so far apart (at least
 * LOOK_MIN_NS), so an answer is found a quarter late at most; none past
 * LOOK_HORIZON_NS, and none on a connection where most of the answers
 * owed past the window came past the horizon or never (its slow_rate: a
 * connection whose sends are answers, whose next request may come in a
 * minute, or one that only sends; each connection learns its own, so
 * that one such connection does not turn the looks off for the others).
 * GSOCK_DIRECT_NAP_US=0 (no naps) means no looks either.
 * Racy updates lose a sample now and then, no more.
 */
#define LOOK_MIN_NS 20000LL
#define LOOK_HORIZON_NS 20000000LL
static long long slow_ns = 1000000;
/* said at exit, GSOCK_LOG=debug: sleeps that looked, looks that found bytes */
static unsigned long looks_taken, looks_found;
static unsigned long quiet_reports; /* pl_direct_epoll_merge's, said at exit */
/*
 * Threads of this process asleep in a kernel wait over every direct
 * connection (atomic; one over named ones counts in each connection's
 * sleepers), and whether the process forked while it had direct
 * connections (then another process may sleep on them too): a nap
 * disarms a connection it looks at itself only where none is so
 * (disarm).
 */
static int sleepers_all, forked;
int pl_plain_waits;
/* atomic: connections published in their socket but not yet in the list */
static int publishing;

/* The pool as this process maps it (one per gsockd it met). */
static struct {
	uint8_t *base;
	uint64_t size;
	uint32_t dsegs, dring;
	dev_t dev;
	ino_t ino;
} pool;

/*
 * Addresses where gsockd said no GPU application listens, each with the
 * pool's listen_gen when it was asked: while that stays, and for a
 * second at most (a gsockd started anew has a pool of its own, which
 * this process meets only by asking), a connect there takes the kernel's
 * path without asking again (an ask is a control connection to gsockd:
 * hundreds of microseconds). Under list_lock.
 */
#define NOPE_MAX 64
#define NOPE_NS 1000000000LL

static struct {
	struct sockaddr_storage a;
	socklen_t len;
	uint32_t gen;
	long long at; /* when gsockd said no */
} nope[NOPE_MAX];
static int nnope, nope_next;

struct pl_real pl_direct_calls;
static pthread_once_t calls_once = PTHREAD_ONCE_INIT;

/*
 * This thread is forking: from list_lock_fork to the end of
 * list_unlock_fork it holds hint_lock, and other fork handlers (a
 * library's, registered earlier, runs inside that stretch) may close,
 * dup or make epoll sets: the set bookkeeping leaves them be (made_fork
 * forgets every set anyway).
 */
static __thread int in_fork;

static void list_lock_fork(void)
{
	in_fork = 1;
	pthread_mutex_lock(&list_lock);
	pthread_rwlock_wrlock(&hint_lock); /* never taken with list_lock held otherwise */
}

static void made_fork(void);

static void list_unlock_fork(void)
{
	/* Both sides of a fork may wait on the connections now: see disarm. */
	if (conns || __atomic_load_n(&publishing, __ATOMIC_SEQ_CST))
		__atomic_store_n(&forked, 1, __ATOMIC_RELAXED);
	made_fork();
	pthread_rwlock_unlock(&hint_lock);
	pthread_mutex_unlock(&list_lock);
	in_fork = 0;
}

/*
 * The child's side: hint_lock made anew, not unlocked. glibc knows a
 * write lock's holder by its thread id, which the child's one thread does
 * not share with its parent, so an unlock there would be taken for a
 * reader's and leave the lock held (nginx's workers hung).
 */
static void list_unlock_fork_child(void)
{
	pthread_rwlock_t fresh = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

	if (conns || __atomic_load_n(&publishing, __ATOMIC_SEQ_CST))
		__atomic_store_n(&forked, 1, __ATOMIC_RELAXED);
	made_fork();
	hint_lock = fresh;
	pthread_mutex_unlock(&list_lock);
	in_fork = 0;
}

/* With the first direct connection or the first epoll set, whichever first. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_setup(void)
{
	pthread_atfork(list_lock_fork, list_unlock_fork, list_unlock_fork_child);
}

static void setup_once(void)
{
	const char *e = secure_getenv("GSOCK_DIRECT_SPIN_US");
	long us = e && *e ? strtol(e, NULL, 10) : SPIN_US_DEFAULT;

	spin_ns = (us < 0 ? 0 : us > 100000 ? 100000 : us) * 1000;
	e = secure_getenv("GSOCK_DIRECT_NAP_US");
	us = e && *e ? strtol(e, NULL, 10) : NAP_US_DEFAULT;
	nap_win_ns = (us < 0 ? 0 : us > 100000 ? 100000 : us) * 1000LL;
	e = secure_getenv("GSOCK_DIRECT_LANE");
	lane_off = e && !strcmp(e, "off");
	if (e && *e && !lane_off && strcmp(e, "on"))
		pl_log(PL_LOG_WARN, "GSOCK_DIRECT_LANE=%s is not on or off; on", e);
	pthread_once(&fork_once, fork_setup);
}

int pl_direct_active(void)
{
	return __atomic_load_n(&nconns, __ATOMIC_RELAXED) > 0;
}

/* ---- the segment ---- */

static void pipe_lock(uint32_t *l)
{
	unsigned spins = 0;

	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
		if (++spins % 256 == 0)
			sched_yield();
		else
			pl_relax();
	}
}

static void pipe_unlock(uint32_t *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* Clear bit of *want; whether this call is the one that cleared it. */
static int took(uint32_t *want, uint32_t bit)
{
	return (__atomic_load_n(want, __ATOMIC_ACQUIRE) & bit) &&
	       (__atomic_fetch_and(want, ~bit, __ATOMIC_ACQ_REL) & bit);
}

/* Bytes in the peer's ring (pl_unread). More than the ring: a broken peer. */
static uint64_t rx_avail(const struct pl_dconn *c)
{
	return pl_unread(
		__atomic_load_n(&c->d->pipe[peer_of(c)].tail, __ATOMIC_ACQUIRE),
		__atomic_load_n(&c->d->pipe[peer_of(c)].head, __ATOMIC_RELAXED),
		c->ring);
}

/* A sleep of the calling thread on c begins (1) or ends (-1). */
static void sleep_count(struct pl_dconn *c, int d)
{
	__atomic_fetch_add(&c->sleepers, d, __ATOMIC_SEQ_CST);
}

/*
 * Whether no wait of this process covers every connection, none of the
 * kernel's alone is in flight, and no other process may wait on them.
 */
static int none_unseen(void)
{
	return !__atomic_load_n(&forked, __ATOMIC_RELAXED) &&
	       !__atomic_load_n(&sleepers_all, __ATOMIC_SEQ_CST) &&
	       !__atomic_load_n(&pl_plain_waits, __ATOMIC_SEQ_CST);
}

/*
 * Whether no other thread of this process sleeps on c, and no other
 * process may: a wait may then report c's bytes itself, with no wake-up
 * byte, and a read that says EAGAIN need not arm c.
 */
static int unwatched(struct pl_dconn *c)
{
	return none_unseen() && !__atomic_load_n(&c->sleepers, __ATOMIC_SEQ_CST);
}

/* An answer owed on c past the nap window came d ns after its send: looks learn. */
static void slow_answer(struct pl_dconn *c, long long d)
{
	unsigned r = __atomic_load_n(&c->slow_rate, __ATOMIC_RELAXED);
	long long a = __atomic_load_n(&slow_ns, __ATOMIC_RELAXED);

	if (d > LOOK_HORIZON_NS) {
		__atomic_store_n(&c->slow_rate, r + (256 - r) / 8,
				 __ATOMIC_RELAXED);
		return;
	}
	__atomic_store_n(&c->slow_rate, r - r / 8, __ATOMIC_RELAXED);
	__atomic_store_n(&slow_ns, a + (d - a) / 8, __ATOMIC_RELAXED);
}

/*
 * A wait that sleeps on c owing an answer past the nap window: in how
 * many ns it should look at c's ring itself (see slow_ns), or 0: none.
 */
static long long look_in(struct pl_dconn *c, long long now)
{
	long long t = __atomic_load_n(&c->out_ns, __ATOMIC_RELAXED), e, first;

	if (!t || !nap_win_ns ||
	    __atomic_load_n(&c->slow_rate, __ATOMIC_RELAXED) >= 192)
		return 0;
	e = now - t;
	if (e >= LOOK_HORIZON_NS)
		return 0;
	first = __atomic_load_n(&slow_ns, __ATOMIC_RELAXED) * 3 / 4 - e;
	e = e / 4 > LOOK_MIN_NS ? e / 4 : LOOK_MIN_NS;
	return first > e ? first : e;
}

/*
 * Bytes went out on c: an answer is owed from now, unless one was within
 * the window (a stream that only sends starts a new one now and then).
 */
static void owe(struct pl_dconn *c)
{
	long long t = __atomic_load_n(&c->out_ns, __ATOMIC_RELAXED);
	long long now = pl_now_ns();

	if (t && now - t <= nap_win_ns)
		return;
	if (__atomic_compare_exchange_n(&c->out_ns, &t, now, 0,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED) &&
	    t && nap_win_ns) /* the answer owed before never came: looks would not pay */
		slow_answer(c, LOOK_HORIZON_NS + 1);
}

/*
 * Bytes came in on c: what was owed is answered. An answer within the
 * window teaches the naps how long answers take; a later one is a miss.
 */
static void answered(struct pl_dconn *c)
{
	long long t = __atomic_load_n(&c->out_ns, __ATOMIC_RELAXED), d;
	long long a = __atomic_load_n(&answer_ns, __ATOMIC_RELAXED);
	unsigned m = __atomic_load_n(&miss_rate, __ATOMIC_RELAXED);

	if (!t || !__atomic_exchange_n(&c->out_ns, 0, __ATOMIC_RELAXED))
		return;
	d = pl_now_ns() - t;
	if (d > nap_win_ns) {
		__atomic_store_n(&miss_rate, m + (256 - m) / 8,
				 __ATOMIC_RELAXED);
		if (nap_win_ns)
			slow_answer(c, d);
		return;
	}
	__atomic_store_n(&miss_rate, m - m / 8, __ATOMIC_RELAXED);
	__atomic_store_n(&answer_ns, a + (d - a) / 8, __ATOMIC_RELAXED);
}

/*
 * The wake-up bytes in A or on their way (the segment's tokens, a count:
 * whoever writes one adds 1 first and takes it back if the write fails,
 * whoever reads n takes n). A flag set before each write and cleared
 * before each drain was wrong after a drain that read a byte written
 * meanwhile: set with A empty, so no waiter wrote the byte the ring's
 * bytes needed, and the program slept on A for good.
 */
static void tokens_sub(struct pl_dconn *c, uint32_t n)
{
	uint32_t v =
		__atomic_load_n(&c->d->tokens[peer_of(c)], __ATOMIC_ACQUIRE);

	/* never below 0, whatever a broken peer wrote */
	while (!__atomic_compare_exchange_n(&c->d->tokens[peer_of(c)], &v,
					    v > n ? v - n : 0, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

/* Make A readable ourselves (bytes came in after the READER bit was ours). */
static void self_token(struct pl_dconn *c)
{
	__atomic_fetch_add(&c->d->tokens[peer_of(c)], 1, __ATOMIC_ACQ_REL);
	/* EAGAIN: A is full of them, readable already */
	if (pl_real.send(c->pair, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		tokens_sub(c, 1);
}

/* Read every wake-up byte out of A. */
static void drain_tokens(struct pl_dconn *c, int fd)
{
	char buf[256];
	ssize_t n;

	/*
	 * The count is never below A's bytes (added before each write,
	 * taken after each read): none counted, none there, and no system
	 * call. A read short of the buffer took all there were; a byte
	 * written after it is a new wake-up, not an old one left behind.
	 * (A peer that zeroes the count leaves A readable with nothing to
	 * read: its own connection's waits spin, and no byte is lost.)
	 */
	while (__atomic_load_n(&c->d->tokens[peer_of(c)], __ATOMIC_ACQUIRE) &&
	       (n = pl_real.recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		tokens_sub(c, (uint32_t)n);
		if (n < (ssize_t)sizeof(buf))
			break;
	}
}

/*
 * Whether a raise_one or arm_rx of this thread's wait took a byte for
 * A's on trust (the count says one is there or on its way): a reader
 * between its read and its count's update leaves the count above A's
 * bytes for a moment, so such a wait sleeps a short slice.
 */
static __thread int trusted;

/* After READER was set and fenced, with no bytes seen: see flight.h. */
static int flight_landed(struct pl_dconn *c)
{
	return pl_flight_landed(&c->d->pipe[peer_of(c)], &c->d->closed,
				GS_DC_SIDE(peer_of(c)), c->ring);
}

/*
 * Set READER and look at the ring again. Returns whether bytes are
 * there (then A is made readable, by us, by gsockd, or by the byte
 * another counted: taken on trust, as raise_one takes it).
 */
static int arm_rx(struct pl_dconn *c)
{
	__atomic_fetch_or(&c->d->want[peer_of(c)], GS_DW_READER,
			  __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!rx_avail(c) && !flight_landed(c))
		return 0;
	if (took(&c->d->want[peer_of(c)], GS_DW_READER)) {
		if (!__atomic_load_n(&c->d->tokens[peer_of(c)],
				     __ATOMIC_ACQUIRE))
			self_token(c);
		else /* no second byte: the wait sleeps in short slices */
			trusted = 1;
	}
	return 1;
}

/* Take our own spill back out of the socketpair: A is writable again. */
static void unspill(struct pl_dconn *c)
{
	char buf[4096];
	ssize_t n;

	while ((n = pl_real.recv(c->pair, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		__atomic_add_fetch(&c->d->spill_out[c->side], (uint64_t)n,
				   __ATOMIC_RELEASE);
}

static uint64_t tx_room(const struct pl_dconn *c)
{
	return c->ring -
	       (__atomic_load_n(&c->d->pipe[c->side].tail, __ATOMIC_RELAXED) -
		__atomic_load_n(&c->d->pipe[c->side].head, __ATOMIC_ACQUIRE));
}

/*
 * The ring is full: fill A's send buffer so A is unwritable, set WRITER
 * and look again. Returns whether there is room now (A then writable).
 */
static int arm_tx(struct pl_dconn *c, int fd)
{
	static const char spill[1024];

	for (;;) {
		ssize_t n;

		__atomic_add_fetch(&c->d->spill_in[c->side], sizeof(spill),
				   __ATOMIC_SEQ_CST);
		n = pl_real.send(fd, spill, sizeof(spill),
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < (ssize_t)sizeof(spill))
			__atomic_sub_fetch(&c->d->spill_in[c->side],
					   sizeof(spill) - (n > 0 ? n : 0),
					   __ATOMIC_SEQ_CST);
		if (n <= 0)
			break;
	}
	__atomic_fetch_or(&c->d->want[c->side], GS_DW_WRITER, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!tx_room(c))
		return 0;
	if (took(&c->d->want[c->side], GS_DW_WRITER))
		unspill(c);
	return 1;
}

/*
 * The kernel connection's end, when the ring says nothing: 0 (none), 1
 * (EOF) or a negative errno. gsockd's death shows only here.
 */
static int tcp_end(struct pl_dconn *c)
{
	char b;
	ssize_t n = pl_real.recv(c->tcp, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n == 0)
		return 1;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return -errno;
	return 0;
}

/* Why an empty ring stays empty: 0 (it may fill), 1 (EOF), -errno. */
static int rx_end(struct pl_dconn *c, int look_at_tcp)
{
	uint32_t reset = __atomic_load_n(&c->d->reset, __ATOMIC_ACQUIRE);
	uint32_t gone = __atomic_load_n(&c->d->eof, __ATOMIC_ACQUIRE) |
			__atomic_load_n(&c->d->closed, __ATOMIC_ACQUIRE);

	if (reset & GS_DC_SIDE(c->side))
		return -ECONNRESET; /* gsockd reset it (bytes around us) */
	if (c->rd_shut)
		return 1;
	if (reset & GS_DC_SIDE(peer_of(c)))
		return -ECONNRESET;
	if (gone & GS_DC_SIDE(peer_of(c)))
		return 1;
	return look_at_tcp ? tcp_end(c) : 0;
}

/*
 * Why our sends fail: 0 (they may go), or a negative errno. full: the
 * ring is full; look_at_tcp: and we are about to sleep on it.
 */
static int tx_end(struct pl_dconn *c, int full, int look_at_tcp)
{
	uint32_t reset = __atomic_load_n(&c->d->reset, __ATOMIC_ACQUIRE);
	int t;

	if (reset & GS_DC_SIDE(c->side))
		return -ECONNRESET;
	if (__atomic_load_n(&c->d->eof, __ATOMIC_ACQUIRE) & GS_DC_SIDE(c->side))
		return -EPIPE;
	if (!full)
		return 0;
	/* A peer gone: bytes that fit are lost as over TCP; then EPIPE. */
	if ((reset | __atomic_load_n(&c->d->closed, __ATOMIC_ACQUIRE)) &
	    GS_DC_SIDE(peer_of(c)))
		return reset & GS_DC_SIDE(peer_of(c)) ? -ECONNRESET : -EPIPE;
	/*
	 * The kernel connection ended though the peer did not shut its
	 * sending down through gsockd: gsockd died, nobody drains the ring.
	 */
	if (look_at_tcp && (t = tcp_end(c)) &&
	    !(__atomic_load_n(&c->d->eof, __ATOMIC_ACQUIRE) &
	      GS_DC_SIDE(peer_of(c))))
		return t < 0 ? t : -EPIPE;
	return 0;
}

/*
 * Whether a call on fd with flags must not wait. *nb caches it for the
 * call (-1: not asked yet): the fast path, bytes or room at hand, pays
 * no fcntl.
 */
static int nonblocking(struct pl_dconn *c, int fd, int flags, int *nb)
{
	int fl;

	if (*nb < 0) {
		fl = __atomic_load_n(&c->nonblock, __ATOMIC_RELAXED);
		if (flags & MSG_DONTWAIT)
			fl = O_NONBLOCK;
		else if (fl >= 0 && !__atomic_load_n(&forked, __ATOMIC_RELAXED))
			fl = fl ? O_NONBLOCK : 0;
		else
			fl = pl_real.fcntl(fd, F_GETFL);
		*nb = fl >= 0 && (fl & O_NONBLOCK);
	}
	return *nb;
}

/*
 * A's O_NONBLOCK changed through this process (fcntl F_SETFL, ioctl
 * FIONBIO): the cache follows.
 */
void pl_direct_nonblock(struct pl_sock *s, int on)
{
	struct pl_dconn *c = __atomic_load_n(&s->dc, __ATOMIC_ACQUIRE);

	if (c)
		__atomic_store_n(&c->nonblock, on != 0, __ATOMIC_RELAXED);
}

/*
 * Whether a non-blocking read that found the ring empty asks the kernel
 * connection whether it ended (tcp_end, a system call): when A is
 * readable (a wake-up byte counted: the program will read again at
 * once) or at most every TCP_LOOK_NS. A program that waits on A before
 * reading again learns of gsockd's death from its wait (wake_dead); one
 * that only polls by reading, within TCP_LOOK_NS.
 */
#define TCP_LOOK_NS 10000000LL

static int tcp_due(struct pl_dconn *c)
{
	long long now, t;

	if (__atomic_load_n(&c->d->tokens[peer_of(c)], __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->dead_seen, __ATOMIC_ACQUIRE))
		return 1;
	now = pl_now_ns();
	t = __atomic_load_n(&c->tcp_look_ns, __ATOMIC_RELAXED);
	if (t && now - t < TCP_LOOK_NS)
		return 0;
	__atomic_store_n(&c->tcp_look_ns, now, __ATOMIC_RELAXED);
	return 1;
}

/* SO_RCVTIMEO or SO_SNDTIMEO of the kernel socket, in ms; -1: none. */
static int timeout_of(struct pl_dconn *c, int opt)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);

	if (pl_real.getsockopt(c->tcp, SOL_SOCKET, opt, &tv, &len) < 0 ||
	    (!tv.tv_sec && !tv.tv_usec))
		return -1;
	return (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

/*
 * Whether a signal that interrupted a blocking call restarts it, as the
 * kernel's own send and recv do under SA_RESTART. Which signal came is
 * not known here, so: when every handler the process has installed asks
 * for SA_RESTART. A process that mixes handlers with and without it gets
 * EINTR from the ones with it too, never a restart the kernel would not
 * make.
 */
static int sa_restart(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		if (sig == SIGKILL || sig == SIGSTOP ||
		    sigaction(sig, NULL, &sa))
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN &&
		    !(sa.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}

/*
 * Sleep until A has events, at most ms (-1: no limit); a reader owed a
 * slow answer wakes sooner, in look_in's time, to look at the ring
 * itself. A reader wakes
 * when the kernel connection ends too (FIN or RST: gsockd died); a
 * writer, whose peer may have shut only its own sending down, wakes
 * every slice to look. Returns 0, or -1 with errno (EINTR): a signal
 * whose handler has SA_RESTART returns 0 where no timeout is set, as the
 * kernel restarts the call (with SO_RCVTIMEO or SO_SNDTIMEO it does not).
 */
static int sleep_on(struct pl_dconn *c, int fd, short events, int ms)
{
	struct pollfd p[2] = { { fd, events, 0 },
			       { c->tcp, POLLIN | POLLRDHUP, 0 } };
	int r, e;

	if (events & POLLOUT) {
		r = pl_real.poll(p, 1, ms < 0 || ms > SLICE_MS ? SLICE_MS : ms);
	} else {
		/*
		 * Counted, then armed again: a nap's disarm (which looks at
		 * the count after clearing the bit) cannot leave this sleep
		 * without READER. Bytes already there end it at once.
		 */
		sleep_count(c, 1);
		__atomic_fetch_or(&c->d->want[peer_of(c)], GS_DW_READER,
				  __ATOMIC_SEQ_CST);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		/*
		 * For ever is slices: another reader of the connection (a
		 * thread, a forked process) may drain the byte meant for
		 * this sleep after the bytes it announced, leaving READER
		 * clear and bytes that come later unannounced; the caller
		 * looks at the ring after each slice.
		 */
		long long look = look_in(c, pl_now_ns());
		struct timespec ts = { (time_t)(look / 1000000000LL),
				       (long)(look % 1000000000LL) };

		if (rx_avail(c)) {
			r = 0;
		} else if (flight_landed(c)) {
			/*
			 * Bytes nobody rang for: another waiter that found
			 * READER set and armed nothing wakes by our byte.
			 */
			r = 0;
			if (took(&c->d->want[peer_of(c)], GS_DW_READER) &&
			    !__atomic_load_n(&c->d->tokens[peer_of(c)],
					     __ATOMIC_ACQUIRE))
				self_token(c);
		} else if (look > 0 && look < SLICE_MS * 1000000LL &&
			   (ms < 0 || look < ms * 1000000LL)) {
			__atomic_fetch_add(&looks_taken, 1, __ATOMIC_RELAXED);
			r = pl_real.ppoll(p, 2, &ts, NULL);
			if (r == 0 && rx_avail(c)) /* the look, not gsockd, found them */
				__atomic_fetch_add(&looks_found, 1,
						   __ATOMIC_RELAXED);
		} else {
			r = pl_real.poll(p, 2, ms < 0 ? SLICE_MS : ms);
		}
		e = errno;
		sleep_count(c, -1);
		errno = e;
	}
	if (r >= 0)
		return 0;
	e = errno; /* sigaction() of glibc's own signals sets EINVAL */
	if (e == EINTR && ms < 0 && sa_restart())
		return 0;
	errno = e;
	return -1;
}

/* ---- the data calls ---- */

static size_t iov_len(const struct iovec *iov, int n)
{
	size_t t = 0;

	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

#ifndef PL_NT_COPY
#define PL_NT_COPY 1
#endif
#if PL_NT_COPY && defined(__x86_64__)
/*
 * Into a ring that a GPU reads, copies of PL_NT_MIN bytes or more go by
 * non-temporal stores: no read for ownership of each line first, and
 * nothing left dirty in this CPU's cache for the GPU's reads to fetch
 * from it. Such stores are not ordered with later ones, so the copy ends
 * with a store fence, before the counter that publishes it. Built with
 * -DPL_NT_COPY=0, memcpy.
 */
#define PL_NT_MIN 4096
static void ring_write(uint8_t *r, const uint8_t *b, size_t k)
{
	size_t head = (16 - ((uintptr_t)r & 15)) & 15;

	if (k < PL_NT_MIN) {
		memcpy(r, b, k);
		return;
	}
	memcpy(r, b, head);
	r += head;
	b += head;
	k -= head;
	for (; k >= 64; k -= 64, r += 64, b += 64) {
		__m128i x0 = _mm_loadu_si128((const __m128i *)b);
		__m128i x1 = _mm_loadu_si128((const __m128i *)(b + 16));
		__m128i x2 = _mm_loadu_si128((const __m128i *)(b + 32));
		__m128i x3 = _mm_loadu_si128((const __m128i *)(b + 48));

		_mm_stream_si128((__m128i *)r, x0);
		_mm_stream_si128((__m128i *)(r + 16), x1);
		_mm_stream_si128((__m128i *)(r + 32), x2);
		_mm_stream_si128((__m128i *)(r + 48), x3);
	}
	memcpy(r, b, k);
	_mm_sfence();
}
#else
#define ring_write memcpy
#endif

/*
 * Copy n bytes between a ring of size bytes (from its counter pos) and
 * iov (from its byte off): into the ring if in, else out of it.
 */
static void ring_copy(uint8_t *ring, uint32_t size, uint64_t pos,
		      const struct iovec *iov, int iovcnt, size_t off,
		      size_t n, int in)
{
	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len;

		if (off >= l) {
			off -= l;
			continue;
		}
		while (off < l && n) {
			uint8_t *b = (uint8_t *)iov[i].iov_base + off;
			uint64_t k;
			uint8_t *r = ring + gs_ring_split(pos, l - off < n ? l - off : n,
							  size, &k);

			if (in)
				ring_write(r, b, k);
			else
				memcpy(b, r, k);
			pos += k;
			off += k;
			n -= k;
		}
		off = 0;
	}
}

/*
 * Under the peer's pipe lock, its ring empty as far as the tail says: a
 * GPU sender's copy of a small send in the lane (gsock_arena.h) that
 * starts at head, whole (every unit of one tag). Its bytes go to iov from
 * its byte off (at most n of them) and are consumed; the head may pass
 * the tail until the sender publishes it. Returns the bytes taken, or 0.
 */
_Static_assert(GS_LANE_MAX <= 256, "a lane copy fits lane_take's buffer");

static size_t lane_take(struct pl_dconn *c, uint64_t head, uint64_t tail,
			const struct iovec *iov, int iovcnt, size_t off,
			size_t n)
{
	const uint64_t *lane = c->d->lane[peer_of(c)];
	uint8_t b[256]; /* GS_LANE_MAX, as a ring of a power of two for ring_copy */
	uint64_t hdr = gs_lane_hdr(__atomic_load_n(&lane[0], __ATOMIC_ACQUIRE),
				   __atomic_load_n(&lane[1], __ATOMIC_RELAXED),
				   head, tail, c->ring);
	uint32_t tag = (uint32_t)(hdr >> 32), len = (uint32_t)hdr;
	size_t k = len < n ? len : n;

	if (!hdr)
		return 0;
	for (unsigned u = GS_LANE_HDR; u < GS_LANE_HDR + (len + 3) / 4; u++) {
		uint64_t v = __atomic_load_n(&lane[u], __ATOMIC_RELAXED);

		if ((uint32_t)(v >> 32) != tag)
			return 0; /* the sender is mid-write */
		for (unsigned i = 0; i < 4; i++)
			b[(u - GS_LANE_HDR) * 4 + i] = (uint8_t)(v >> 8 * i);
	}
	ring_copy(b, sizeof(b), 0, iov, iovcnt, off, k, 0);
	__atomic_store_n(&c->d->pipe[peer_of(c)].head, head + k,
			 __ATOMIC_RELEASE);
	__atomic_add_fetch(&c->lane_bytes, k, __ATOMIC_RELAXED);
	return k;
}

static ssize_t fail(int e)
{
	errno = e;
	return -1;
}

static ssize_t recv_iov(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct pl_dconn *c = pl_cur_sock->dc;
	struct gs_dpipe *p = &c->d->pipe[peer_of(c)];
	size_t want = iov_len(iov, iovcnt), got = 0;
	long long spin_until = 0, rcv_end = 0; /* rcv_end: SO_RCVTIMEO's, ns */
	int err = 0, nb = -1, armed;

	if (flags & MSG_OOB)
		return fail(EINVAL); /* no urgent data ever comes this way */
	if (!want)
		return 0;
	pipe_lock(&c->d->lock[peer_of(c)]);
	for (;;) {
		uint64_t head = __atomic_load_n(&p->head, __ATOMIC_RELAXED);
		uint64_t tail = __atomic_load_n(&p->tail, __ATOMIC_ACQUIRE);
		uint64_t avail = pl_unread(tail, head, c->ring);
		int end, ms;

		if (avail > c->ring) {
			if (!got) /* else the bytes taken first, EIO next time */
				err = EIO; /* a peer that broke the ring */
			break;
		}
		if (avail) {
			size_t n = avail < want - got ? avail : want - got;
			int more = 0;

			if (!got)
				answered(c);
			/* A part at a time, each freed for the writer at once;
			 * a peek frees nothing, so it takes what it wants. */
			if (!(flags & MSG_PEEK) && n > step_of(c)) {
				n = step_of(c);
				more = 1;
			}
			if (!(flags & MSG_TRUNC))
				ring_copy(c->rx, c->ring, head, iov, iovcnt,
					  got, n, 0);
			got += n;
			if (flags & MSG_PEEK)
				break;
			__atomic_store_n(&p->head, head + n, __ATOMIC_RELEASE);
			if (got == want || (!(flags & MSG_WAITALL) && !more))
				break;
			spin_until = 0; /* progress: the next wait spins afresh */
			continue;
		}
		/* The ring is empty: a GPU sender's copy may be here sooner. */
		if (!lane_off && !(flags & (MSG_PEEK | MSG_TRUNC))) {
			size_t n = lane_take(c, head, tail, iov, iovcnt, got,
					     want - got);

			if (n) {
				if (!got)
					answered(c);
				got += n;
				if (got == want || !(flags & MSG_WAITALL))
					break;
				spin_until = 0;
				continue;
			}
		}
		end = rx_end(c, 0);
		armed = 0;
		if (!end && (nonblocking(c, fd, flags, &nb) || !spin_ns ||
			     (spin_until && pl_now_ns() >= spin_until))) {
			/*
			 * About to say EAGAIN or sleep: A must tell the truth.
			 * An EAGAIN arms c only while another waiter sleeps on
			 * it (gsockd may have taken that waiter's READER for a
			 * byte this read then drained): every wait of this
			 * process arms before it sleeps (pl_direct_prewait),
			 * and a READER bit left by each EAGAIN had the GPU side
			 * ring gsockd for answers that came while the program
			 * was awake (a closed loop of 256 connections: about a
			 * core of gsockd's, 0.01 without).
			 */
			drain_tokens(c, fd);
			armed = !nb || !unwatched(c);
			if (armed ? arm_rx(c) : rx_avail(c) != 0)
				continue;
			end = rx_end(c, !nb || tcp_due(c));
		}
		if (end) {
			if (rx_avail(c))
				continue; /* bytes before the end */
			if (end < 0 && !got)
				err = -end;
			break;
		}
		if (got && !(flags & MSG_WAITALL))
			break;
		if (nonblocking(c, fd, flags, &nb)) {
			err = got ? 0 : EAGAIN;
			break;
		}
		if (!spin_until) {
			spin_until = pl_now_ns() + spin_ns;
			continue;
		}
		if (!armed) { /* spinning; sleep only right after arming */
			pl_relax();
			continue;
		}
		/*
		 * SO_RCVTIMEO bounds the call's sleeps together (a look for a
		 * slow answer ends one early): what is left of it now.
		 */
		ms = timeout_of(c, SO_RCVTIMEO);
		if (ms >= 0) {
			long long now = pl_now_ns();

			if (!rcv_end)
				rcv_end = now + ms * 1000000LL;
			ms = rcv_end > now ?
				     (int)((rcv_end - now + 999999) / 1000000) :
				     0;
		}
		pipe_unlock(&c->d->lock[peer_of(c)]);
		if (sleep_on(c, fd, POLLIN, ms) < 0) {
			if (got)
				return (ssize_t)got;
			return -1; /* EINTR */
		}
		pipe_lock(&c->d->lock[peer_of(c)]);
		if (ms >= 0 && pl_now_ns() >= rcv_end && !rx_avail(c) &&
		    !rx_end(c, 1)) {
			struct pollfd q = { fd, POLLIN, 0 };

			/* still nothing: was that the timeout? */
			if (pl_real.poll(&q, 1, 0) == 0) {
				err = got ? 0 : EAGAIN;
				break;
			}
		}
	}
	/*
	 * Emptied by us after a wake-up: the byte that woke us goes too.
	 * It may have been written for another thread asleep on c, whose
	 * READER gsockd took: that sleeper's bit comes back.
	 */
	if (!err && got && !(flags & MSG_PEEK) && !rx_avail(c) &&
	    __atomic_load_n(&c->d->tokens[peer_of(c)], __ATOMIC_ACQUIRE)) {
		drain_tokens(c, fd);
		if (!unwatched(c))
			arm_rx(c);
	}
	pipe_unlock(&c->d->lock[peer_of(c)]);
	if (err)
		return fail(err);
	return (ssize_t)got;
}

static ssize_t send_iov(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct pl_dconn *c = pl_cur_sock->dc;
	struct gs_dpipe *p = &c->d->pipe[c->side];
	size_t len = iov_len(iov, iovcnt), done = 0;
	long long spin_until = 0, deadline = 0;
	int err = 0, nb = -1, slept = 0;

	if (flags & MSG_OOB)
		return fail(EOPNOTSUPP); /* urgent data: see gsock-preload(8) */
	pipe_lock(&c->d->lock[c->side]);
	while (done < len || !len) {
		uint64_t tail = __atomic_load_n(&p->tail, __ATOMIC_RELAXED);
		uint64_t used = tail - __atomic_load_n(&p->head, __ATOMIC_ACQUIRE);
		int e = tx_end(c, used >= c->ring, slept), ms;

		if (e) {
			err = -e;
			break;
		}
		if (used > c->ring) {
			err = EIO;
			break;
		}
		if (!len)
			break;
		if (used < c->ring) {
			size_t n = c->ring - used;

			if (n > len - done)
				n = len - done;
			if (n > step_of(c))
				n = step_of(c); /* published at once: see step_of */
			ring_copy(c->tx, c->ring, tail, iov, iovcnt, done, n,
				  1);
			if (!done) /* before the bytes show: see answered */
				owe(c);
			__atomic_store_n(&p->tail, tail + n, __ATOMIC_RELEASE);
			done += n;
			/*
			 * Progress: the next full ring spins afresh. A send
			 * larger than the ring fills it again and again; had
			 * the spin counted from its first wait, every later
			 * wait would arm and sleep, and each would cost a
			 * doorbell and a wake-up through gsockd.
			 */
			spin_until = 0;
			continue;
		}
		if (nonblocking(c, fd, flags, &nb)) {
			if (arm_tx(c, fd))
				continue;
			if (!done)
				err = EAGAIN;
			break;
		}
		if (!spin_until)
			spin_until = pl_now_ns() + spin_ns;
		if (pl_now_ns() < spin_until) {
			pl_relax();
			continue;
		}
		if (arm_tx(c, fd))
			continue;
		if (!deadline) {
			ms = timeout_of(c, SO_SNDTIMEO);
			deadline = ms < 0 ? -1 : pl_now_ns() + ms * 1000000LL;
		}
		if (deadline > 0 && pl_now_ns() >= deadline) {
			if (!done)
				err = EAGAIN; /* SO_SNDTIMEO */
			break;
		}
		ms = deadline < 0 ? -1 :
				    (int)((deadline - pl_now_ns()) / 1000000 + 1);
		pipe_unlock(&c->d->lock[c->side]);
		if (sleep_on(c, fd, POLLOUT, ms) < 0) {
			if (done)
				return (ssize_t)done;
			return -1; /* EINTR */
		}
		pipe_lock(&c->d->lock[c->side]);
		slept = 1;
	}
	pipe_unlock(&c->d->lock[c->side]);
	if (done)
		return (ssize_t)done;
	if (err == EPIPE && !(flags & MSG_NOSIGNAL))
		pthread_kill(pthread_self(), SIGPIPE); /* as the kernel's */
	return err ? fail(err) : 0;
}

static ssize_t d_read(int fd, void *buf, size_t n)
{
	struct iovec v = { buf, n };

	return recv_iov(fd, &v, 1, 0);
}

static ssize_t d_readv(int fd, const struct iovec *iov, int n)
{
	if (n < 0 || n > IOV_MAX)
		return fail(EINVAL);
	return recv_iov(fd, iov, n, 0);
}

static ssize_t d_recv(int fd, void *buf, size_t n, int flags)
{
	struct iovec v = { buf, n };

	return recv_iov(fd, &v, 1, flags);
}

static ssize_t d_recvfrom(int fd, void *buf, size_t n, int flags,
			  struct sockaddr *sa, socklen_t *len)
{
	struct iovec v = { buf, n };

	(void)sa;
	if (len)
		*len = 0; /* a connected TCP socket names no sender */
	return recv_iov(fd, &v, 1, flags);
}

static ssize_t d_recvmsg(int fd, struct msghdr *m, int flags)
{
	ssize_t r;

	if (m->msg_iovlen > IOV_MAX)
		return fail(EMSGSIZE);
	r = recv_iov(fd, m->msg_iov, (int)m->msg_iovlen, flags);
	if (r >= 0) {
		m->msg_namelen = 0;
		m->msg_controllen = 0;
		m->msg_flags = 0;
	}
	return r;
}

static int d_recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
		      struct timespec *t)
{
	unsigned int i;

	(void)t;
	for (i = 0; i < n; i++) {
		ssize_t r = d_recvmsg(fd, &v[i].msg_hdr,
				      i ? flags | MSG_DONTWAIT : flags);

		if (r < 0)
			return i ? (int)i : -1;
		v[i].msg_len = (unsigned int)r;
		if (!r)
			return (int)i + 1;
	}
	return (int)i;
}

static ssize_t d_write(int fd, const void *buf, size_t n)
{
	struct iovec v = { (void *)buf, n };

	return send_iov(fd, &v, 1, 0);
}

static ssize_t d_writev(int fd, const struct iovec *iov, int n)
{
	if (n < 0 || n > IOV_MAX)
		return fail(EINVAL);
	return send_iov(fd, iov, n, 0);
}

static ssize_t d_send(int fd, const void *buf, size_t n, int flags)
{
	struct iovec v = { (void *)buf, n };

	return send_iov(fd, &v, 1, flags);
}

static ssize_t d_sendto(int fd, const void *buf, size_t n, int flags,
			const struct sockaddr *sa, socklen_t len)
{
	(void)sa; /* a connected TCP socket ignores it */
	(void)len;
	return d_send(fd, buf, n, flags);
}

static ssize_t d_sendmsg(int fd, const struct msghdr *m, int flags)
{
	if (m->msg_iovlen > IOV_MAX)
		return fail(EMSGSIZE);
	return send_iov(fd, m->msg_iov, (int)m->msg_iovlen, flags);
}

static int d_sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		ssize_t r = d_sendmsg(fd, &v[i].msg_hdr, flags);

		if (r < 0)
			return i ? (int)i : -1;
		v[i].msg_len = (unsigned int)r;
	}
	return (int)i;
}

/* sendfile to a direct descriptor: read the file, then send. */
static ssize_t d_sendfile(int fd, int in, off_t *off, size_t n)
{
	char buf[65536];
	size_t done = 0;

	while (done < n) {
		size_t k = n - done < sizeof(buf) ? n - done : sizeof(buf);
		ssize_t r = off ? pread(in, buf, k, *off) :
				  pl_real.read(in, buf, k);
		ssize_t w;

		if (r <= 0) {
			if (r < 0 && !done)
				return -1;
			break;
		}
		w = d_send(fd, buf, (size_t)r, done ? MSG_DONTWAIT : 0);
		if (w < 0) {
			if (!off && !done)
				return -1;
			if (!off) /* read but not sent: put the file back */
				lseek(in, -r, SEEK_CUR);
			break;
		}
		if (off)
			*off += w;
		else if (w < r)
			lseek(in, w - r, SEEK_CUR);
		done += (size_t)w;
		if (w < r)
			break;
	}
	return (ssize_t)done;
}

static ssize_t d_read_chk(int fd, void *buf, size_t n, size_t size)
{
	if (n > size)
		abort(); /* as glibc's __chk_fail */
	return d_read(fd, buf, n);
}

static ssize_t d_recv_chk(int fd, void *buf, size_t n, size_t size, int flags)
{
	if (n > size)
		abort();
	return d_recv(fd, buf, n, flags);
}

static ssize_t d_recvfrom_chk(int fd, void *buf, size_t n, size_t size,
			      int flags, struct sockaddr *sa, socklen_t *len)
{
	if (n > size)
		abort();
	return d_recvfrom(fd, buf, n, flags, sa, len);
}

static int d_shutdown(int fd, int how)
{
	struct pl_dconn *c = pl_cur_sock->dc;

	(void)fd;
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return (int)fail(EINVAL);
	if (pl_real.shutdown(c->tcp, how) < 0)
		return -1;
	if (how != SHUT_WR)
		c->rd_shut = 1;
	if (how != SHUT_RD) /* the kernel's FIN tells the GPU side */
		__atomic_or_fetch(&c->d->eof, GS_DC_SIDE(c->side),
				  __ATOMIC_RELEASE);
	/* Sleepers look again. */
	self_token(c);
	return 0;
}

/* Names and options are the kernel connection's. */
static int d_getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	(void)fd;
	return pl_real.getsockname(pl_cur_sock->dc->tcp, sa, len);
}

static int d_getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	(void)fd;
	return pl_real.getpeername(pl_cur_sock->dc->tcp, sa, len);
}

static int d_getsockopt(int fd, int level, int name, void *v, socklen_t *len)
{
	(void)fd;
	return pl_real.getsockopt(pl_cur_sock->dc->tcp, level, name, v, len);
}

static int d_setsockopt(int fd, int level, int name, const void *v,
			socklen_t len)
{
	(void)fd;
	return pl_real.setsockopt(pl_cur_sock->dc->tcp, level, name, v, len);
}

static int d_bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	(void)fd;
	(void)sa;
	(void)len;
	return (int)fail(EINVAL); /* bound already, as the kernel says */
}

static int d_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	(void)fd;
	(void)sa;
	(void)len;
	return (int)fail(EISCONN);
}

static int d_listen(int fd, int backlog)
{
	(void)fd;
	(void)backlog;
	return (int)fail(EINVAL);
}

static int d_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	(void)fd;
	(void)sa;
	(void)len;
	(void)flags;
	return (int)fail(EINVAL);
}

static int d_accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return d_accept4(fd, sa, len, 0);
}

static int d_ioctl(int fd, unsigned long req, ...)
{
	struct pl_dconn *c = pl_cur_sock->dc;
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	switch (req) {
	case FIONREAD: /* SIOCINQ */
		*(int *)arg = (int)rx_avail(c);
		return 0;
	case SIOCOUTQ:
		*(int *)arg = (int)(c->ring - tx_room(c));
		return 0;
	case FIONBIO: {
		int r = pl_real.ioctl(fd, req, arg);

		if (r == 0)
			__atomic_store_n(&c->nonblock, *(int *)arg != 0,
					 __ATOMIC_RELAXED);
		return r;
	}
	case FIOCLEX:
	case FIONCLEX:
		return pl_real.ioctl(fd, req, arg); /* the descriptor's */
	default:
		return pl_real.ioctl(c->tcp, req, arg);
	}
}

static void calls_init(void)
{
	pl_sock_release_direct = pl_direct_release;
	pl_direct_calls = pl_real;
	pl_direct_calls.bind = d_bind;
	pl_direct_calls.listen = d_listen;
	pl_direct_calls.accept = d_accept;
	pl_direct_calls.accept4 = d_accept4;
	pl_direct_calls.connect = d_connect;
	pl_direct_calls.read = d_read;
	pl_direct_calls.readv = d_readv;
	pl_direct_calls.recv = d_recv;
	pl_direct_calls.recvfrom = d_recvfrom;
	pl_direct_calls.recvmsg = d_recvmsg;
	pl_direct_calls.recvmmsg = d_recvmmsg;
	pl_direct_calls.write = d_write;
	pl_direct_calls.writev = d_writev;
	pl_direct_calls.send = d_send;
	pl_direct_calls.sendto = d_sendto;
	pl_direct_calls.sendmsg = d_sendmsg;
	pl_direct_calls.sendmmsg = d_sendmmsg;
	pl_direct_calls.sendfile = d_sendfile;
	pl_direct_calls.sendfile64 = d_sendfile;
	pl_direct_calls.shutdown = d_shutdown;
	pl_direct_calls.ioctl = d_ioctl;
	pl_direct_calls.setsockopt = d_setsockopt;
	pl_direct_calls.getsockopt = d_getsockopt;
	pl_direct_calls.getsockname = d_getsockname;
	pl_direct_calls.getpeername = d_getpeername;
	pl_direct_calls.__read_chk = d_read_chk;
	pl_direct_calls.__recv_chk = d_recv_chk;
	pl_direct_calls.__recvfrom_chk = d_recvfrom_chk;
}

/* ---- setup ---- */

/*
 * This host's addresses as IPv6 (IPv4 mapped), read again at most once a
 * second: a connect to a remote address must not pay getifaddrs.
 */
static struct {
	uint8_t a[64][16];
	int n;
	long long at_ns;
} local; /* under list_lock */

static void local_refresh(void)
{
	struct ifaddrs *ifs, *i;

	local.n = 0;
	local.at_ns = pl_now_ns();
	if (getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i && local.n < 64; i = i->ifa_next) {
		uint8_t *a = local.a[local.n];

		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			memset(a, 0, 10);
			a[10] = a[11] = 0xff;
			memcpy(a + 12, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
			local.n++;
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			memcpy(a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
			local.n++;
		}
	}
	freeifaddrs(ifs);
}

/* Whether sa is an address of this host (127/8, ::1, an interface's). */
static int addr_local(const struct sockaddr *sa)
{
	static const uint8_t loop6[16] = { [15] = 1 };
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	uint8_t a[16];
	int found = 0;

	if (sa->sa_family == AF_INET) {
		memcpy(a, mapped, 12);
		memcpy(a + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else {
		memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
	if ((!memcmp(a, mapped, 12) && a[12] == 127) || !memcmp(a, loop6, 16))
		return 1;
	pthread_mutex_lock(&list_lock);
	if (!local.at_ns || pl_now_ns() - local.at_ns > 1000000000LL)
		local_refresh();
	for (int i = 0; i < local.n && !found; i++)
		found = !memcmp(local.a[i], a, 16);
	pthread_mutex_unlock(&list_lock);
	return found;
}

/* A control connection's descriptor to the pool: mapped (or already). */
static int map_pool(int memfd, const struct gs_ctl_welcome *w)
{
	struct stat st;
	void *base;
	int r = -1;

	if (fstat(memfd, &st) < 0 || (uint64_t)st.st_size != w->pool_size ||
	    !w->dsegs || !gs_pow2(w->dring_size) ||
	    w->pool_size != GS_DPOOL_SIZE(w->dsegs, w->dring_size))
		return -1;
	pthread_mutex_lock(&list_lock);
	if (pool.base && pool.dev == st.st_dev && pool.ino == st.st_ino) {
		r = 0;
		goto out;
	}
	base = mmap(NULL, w->pool_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    memfd, 0);
	if (base == MAP_FAILED)
		goto out;
	/*
	 * A new gsockd: the old pool stays mapped while connections of it
	 * live (it is never unmapped; a restart is rare).
	 */
	pool.base = base;
	pool.size = w->pool_size;
	pool.dsegs = w->dsegs;
	pool.dring = w->dring_size;
	pool.dev = st.st_dev;
	pool.ino = st.st_ino;
	nnope = 0; /* what the old gsockd said no to */
	r = 0;
out:
	pthread_mutex_unlock(&list_lock);
	return r;
}

/* Under list_lock, the pool mapped: its listen_gen now. */
static uint32_t listen_gen(void)
{
	return __atomic_load_n(&GS_DPOOL_OF(pool.base, pool.dsegs, pool.dring)
					->listen_gen,
			       __ATOMIC_ACQUIRE);
}

static int same_dst(const struct sockaddr_storage *a, socklen_t alen,
		    const struct sockaddr *b, socklen_t blen)
{
	if (a->ss_family != b->sa_family)
		return 0;
	if (b->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port &&
		       x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (b->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       x->sin6_scope_id == y->sin6_scope_id &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
	}
	return alen == blen && !memcmp(a, b, blen);
}

/* Whether gsockd said no to sa and its listeners have not moved since. */
static int nope_known(const struct sockaddr *sa, socklen_t len)
{
	long long now = pl_now_ns();
	int r = 0;

	pthread_mutex_lock(&list_lock);
	if (pool.base) {
		uint32_t gen = listen_gen();

		for (int i = 0; i < nnope && !r; i++)
			r = nope[i].gen == gen && now - nope[i].at < NOPE_NS &&
			    same_dst(&nope[i].a, nope[i].len, sa, len);
	}
	pthread_mutex_unlock(&list_lock);
	return r;
}

static void nope_add(const struct sockaddr *sa, socklen_t len, uint32_t gen)
{
	int i;

	if (len > sizeof(nope[0].a))
		return;
	pthread_mutex_lock(&list_lock);
	for (i = 0; i < nnope; i++)
		if (same_dst(&nope[i].a, nope[i].len, sa, len))
			break;
	if (i == nnope) { /* a new one: a free place, else the oldest's */
		i = nnope < NOPE_MAX ? nnope++ : nope_next;
		nope_next = (i + 1) % NOPE_MAX;
	}
	memcpy(&nope[i].a, sa, len);
	nope[i].len = len;
	nope[i].gen = gen;
	nope[i].at = pl_now_ns();
	pthread_mutex_unlock(&list_lock);
}

/* Wait up to ms for fd to be readable: 1, or 0 on timeout or error. */
static int readable_within(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	int r;

	while ((r = pl_real.poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	return r > 0;
}

/*
 * Set by ctl_open's -1 where nothing listens at gsockd's control socket
 * (none runs, or it is between a stop and a start), not where gsockd
 * answered otherwise.
 */
static __thread int ctl_absent;

/*
 * A control connection to gsockd, welcomed, whose pool is mapped: its
 * descriptor, or -1 (why in the log; ctl_absent). fd names the caller's
 * socket there.
 */
static int ctl_open(int fd)
{
	const char *path = pl_route_control();
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	struct gs_ctl_welcome w;
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 }, why[256];
	struct iovec iov = { &w, sizeof(w) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int ctl, memfd = -1;
	ssize_t n;

	ctl_absent = 0;
	if (strlen(path) >= sizeof(un.sun_path))
		return -1;
	strcpy(un.sun_path, path);
	ctl = pl_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (ctl < 0)
		return -1;
	if (pl_real.connect(ctl, (struct sockaddr *)&un, sizeof(un)) < 0) {
		ctl_absent = errno == ENOENT || errno == ECONNREFUSED;
		pl_log(PL_LOG_DEBUG, "fd %d: no gsockd at %s (%s): the kernel's path",
		       fd, path, strerror(errno));
		goto err;
	}
	if (!gs_ctl_peer_ok(ctl, path, why, sizeof(why))) {
		pl_log(PL_LOG_WARN, "fd %d: not asking for the direct path: %s",
		       fd, why);
		goto err;
	}
	if (!readable_within(ctl, 1000)) {
		pl_log(PL_LOG_WARN, "fd %d: gsockd at %s did not welcome the direct request within 1 s: the kernel's path",
		       fd, path);
		goto err;
	}
	n = pl_real.recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	for (cm = CMSG_FIRSTHDR(&msg); n > 0 && cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&memfd, CMSG_DATA(cm), sizeof(int));
	if (n != (ssize_t)sizeof(w) || w.magic != GS_CTL_WELCOME_MAGIC ||
	    w.version != GS_CTL_VERSION || memfd < 0) {
		pl_log(PL_LOG_DEBUG, "fd %d: gsockd at %s offers no direct pool (version %u, %s)",
		       fd, path, n == (ssize_t)sizeof(w) ? w.version : 0,
		       memfd < 0 ? "no pool" : "pool");
		goto err;
	}
	if (map_pool(memfd, &w) < 0) {
		pl_log(PL_LOG_WARN, "fd %d: cannot map gsockd's direct pool (%llu bytes): %s",
		       fd, (unsigned long long)w.pool_size, strerror(errno));
		goto err;
	}
	pl_real.close(memfd);
	return ctl;
err:
	if (memfd >= 0)
		pl_real.close(memfd);
	pl_real.close(ctl);
	return -1;
}

/*
 * Send req on ctl (with the socketpair end pair, unless -1) and read
 * gsockd's answer into rep: 0; -1, not sent; -2, sent but no answer
 * came (gsockd may have acted on it). Why in the log.
 */
static int ctl_ask(int fd, int ctl, const struct gs_ctl_dconnect *req,
		   int pair, struct gs_ctl_dreply *rep)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)req, sizeof(*req) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	if (pair >= 0) {
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pair, sizeof(int));
	}
	if (pl_real.sendmsg(ctl, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof(*req)) {
		pl_log(PL_LOG_WARN, "fd %d: cannot send gsockd the direct request: %s",
		       fd, strerror(errno));
		return -1;
	}
	if (!readable_within(ctl, 2000) ||
	    pl_real.recv(ctl, rep, sizeof(*rep), 0) != (ssize_t)sizeof(*rep) ||
	    rep->magic != GS_CTL_DCONN_MAGIC) {
		pl_log(PL_LOG_WARN, "fd %d: gsockd at %s did not answer the direct request",
		       fd, pl_route_control());
		return -2;
	}
	rep->msg[sizeof(rep->msg) - 1] = 0;
	return 0;
}

/*
 * Ask gsockd for a segment for a connection from src to dst; pair is
 * the socketpair end gsockd keeps. Returns the segment; -1, the kernel's
 * path; -2, asked and no clear answer (gsockd may hold a segment for
 * it: the connection cannot go either way). Why in the log.
 */
static int ask(int fd, const struct sockaddr *dst, socklen_t dlen,
	       const struct sockaddr_storage *src, socklen_t slen, int pair)
{
	struct gs_ctl_dconnect req = { .magic = GS_CTL_DCONN_MAGIC,
				       .version = GS_CTL_VERSION,
				       .dst_len = dlen,
				       .src_len = slen };
	struct gs_ctl_dreply rep;
	int ctl, seg = -1;
	uint32_t gen;

	if (dlen > sizeof(req.dst) || slen > sizeof(req.src) ||
	    (ctl = ctl_open(fd)) < 0)
		return -1;
	pthread_mutex_lock(&list_lock);
	gen = listen_gen(); /* before gsockd looks */
	pthread_mutex_unlock(&list_lock);
	memcpy(req.dst, dst, dlen);
	memcpy(req.src, src, slen);
	seg = ctl_ask(fd, ctl, &req, pair, &rep);
	if (seg < 0)
		goto out;
	seg = -1;
	if (rep.status) {
		pl_log(PL_LOG_DEBUG, "fd %d: no direct path: %s", fd, rep.msg);
		if (rep.status == -ENOENT)
			nope_add(dst, dlen, gen);
		goto out;
	}
	if (rep.side != 0 || rep.seg >= pool.dsegs) {
		pl_log(PL_LOG_WARN, "fd %d: gsockd's answer to a connect is malformed (segment %u, side %u)",
		       fd, rep.seg, rep.side);
		seg = -2;
		goto out;
	}
	seg = (int)rep.seg;
out:
	pl_real.close(ctl);
	return seg;
}

/* Bind fd to a port of its own on the address dst is reached from. */
static int bind_source(int fd, const struct sockaddr *dst, socklen_t dlen,
		       struct sockaddr_storage *src, socklen_t *slen)
{
	struct sockaddr_storage ss;

	memcpy(&ss, dst, dlen);
	if (dst->sa_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	if (pl_real.bind(fd, (struct sockaddr *)&ss, dlen) < 0)
		return -1;
	*slen = sizeof(*src);
	return pl_real.getsockname(fd, (struct sockaddr *)src, slen);
}

/* A descriptor of the preload's own: high, close-on-exec; old closed. */
static int hide(int fd)
{
	int h = pl_real.fcntl(fd, F_DUPFD_CLOEXEC, 1000);

	if (h < 0)
		h = pl_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (h >= 0)
		pl_real.close(fd);
	return h < 0 ? fd : h;
}

/*
 * fd's connection takes segment seg, c->side its side: the socketpair
 * sp's first end takes fd's number (its flags), the kernel connection
 * and sp[1] are hidden, and s carries c. 0, or -1 with errno (c freed,
 * sp closed; gsockd lets the segment go).
 */
static int attach(int fd, struct pl_sock *s, struct pl_dconn *c, int seg,
		  int sp[2])
{
	int fl, fdfl, tcp, e, sndbuf = SPILL_SNDBUF;

	pthread_once(&calls_once, calls_init);
	c->d = (struct gs_dseg *)(pool.base +
				  (uint64_t)seg * GS_DSEG_STRIDE(pool.dring));
	c->tx = (uint8_t *)c->d + GS_DSEG_HDR + (uint64_t)c->side * pool.dring;
	c->rx = (uint8_t *)c->d + GS_DSEG_HDR +
		(uint64_t)peer_of(c) * pool.dring;
	c->ring = pool.dring;
	/*
	 * The GPU sender's lane to us: zeroed, then offered for this use of
	 * the segment; it writes no copy before it reads that.
	 */
	if (!lane_off) {
		uint64_t *l = c->d->lane[peer_of(c)];

		for (unsigned u = 0; u < GS_LANE_UNITS; u++)
			__atomic_store_n(&l[u], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&c->d->lane_ok[peer_of(c)],
				 GS_LANE_OK(__atomic_load_n(&c->d->sgen,
							    __ATOMIC_RELAXED) &
					    GS_SGEN_MASK),
				 __ATOMIC_RELEASE);
	}
	fl = pl_real.fcntl(fd, F_GETFL);
	fdfl = pl_real.fcntl(fd, F_GETFD);
	pl_real.setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
			   sizeof(sndbuf));
	if (fl >= 0 && (fl & O_NONBLOCK))
		pl_real.fcntl(sp[0], F_SETFL, O_NONBLOCK);
	c->nonblock = fl < 0 ? -1 : (fl & O_NONBLOCK) != 0;
	tcp = pl_real.fcntl(fd, F_DUPFD_CLOEXEC, 1000);
	if (tcp < 0)
		tcp = pl_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (tcp < 0 ||
	    pl_real.dup3(sp[0], fd,
			 fdfl >= 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		/* Out of descriptors: the kernel carries it, the segment idles. */
		e = errno;
		if (tcp >= 0)
			pl_real.close(tcp);
		pl_real.close(sp[0]);
		pl_real.close(sp[1]);
		free(c);
		pl_log(PL_LOG_WARN, "fd %d: cannot take the direct path (%s): resetting the connection",
		       fd, strerror(e));
		errno = e;
		return -1;
	}
	pl_real.close(sp[0]);
	c->tcp = tcp;
	c->pair = hide(sp[1]);
	__atomic_add_fetch(&publishing, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&s->lock);
	s->dc = c;
	s->route = GS_ROUTE_DIRECT;
	s->state = PL_DECIDED;
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_lock(&list_lock);
	c->next = conns;
	if (conns)
		conns->prev = c;
	conns = c;
	__atomic_add_fetch(&nconns, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&publishing, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&list_lock);
	pl_log(PL_LOG_INFO, "fd %d: direct path, segment %d (%s end)", fd, seg,
	       c->side ? "accepted" : "connecting");
	return 0;
}

int pl_direct_connect(int fd, struct pl_sock *s, const struct sockaddr *sa,
		      socklen_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct sockaddr_storage src;
	socklen_t slen = sizeof(src);
	struct pl_dconn *c;
	int sp[2], seg = -1, r, e;

	if ((sa->sa_family == AF_INET && len < sizeof(struct sockaddr_in)) ||
	    (sa->sa_family == AF_INET6 && len < sizeof(struct sockaddr_in6)) ||
	    s->in_epoll)
		return PL_DIRECT_NO;
	pthread_once(&once, setup_once);
	if (!addr_local(sa) || !pl_route_direct(fd, sa) || nope_known(sa, len))
		return PL_DIRECT_NO;
	/* A socket the application bound: its choice of port stands. */
	if (pl_real.getsockname(fd, (struct sockaddr *)&src, &slen) < 0 ||
	    (src.ss_family == AF_INET ?
		     ((struct sockaddr_in *)&src)->sin_port :
		     ((struct sockaddr_in6 *)&src)->sin6_port))
		return PL_DIRECT_NO;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return PL_DIRECT_NO;
	if (bind_source(fd, sa, len, &src, &slen) < 0 ||
	    (seg = ask(fd, sa, len, &src, slen, sp[1])) < 0) {
		pl_real.close(sp[0]);
		pl_real.close(sp[1]);
		if (seg == -2) {
			/* the listener's end may be the segment's: no TCP */
			errno = ETIMEDOUT;
			return -1;
		}
		return PL_DIRECT_NO;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		/* gsockd holds the segment for a connection we cannot carry */
		pl_real.close(sp[0]);
		pl_real.close(sp[1]);
		errno = ENOMEM;
		return -1;
	}
	c->side = 0; /* ask() took side 0, the connecting end's */
	c->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
	/* From here the connection is the direct path's, whatever connect says. */
	r = pl_real.connect(fd, sa, len);
	e = errno;
	if (r < 0 && e != EINPROGRESS && e != EINTR) {
		pl_real.close(sp[0]); /* gsockd lets the segment go */
		pl_real.close(sp[1]);
		free(c);
		errno = e;
		return -1;
	}
	if (attach(fd, s, c, seg, sp) < 0)
		return -1;
	errno = e;
	return r;
}

/*
 * Descriptors of listeners named to gsockd (a bit each): only their
 * accepts ask. A number closed or duplicated over is forgotten, one
 * duplicated to gets the bit (preload.c); a forked child keeps its
 * parent's. The same for listeners that found nothing listening at
 * gsockd's control socket (it had not started, or was restarting):
 * their accepts try again, at most once every PL_RENAME_NS in the
 * process (pl_direct_accepted). Any other failure or refusal stands.
 */
#define NAMED_MAX 65536
#define PL_RENAME_NS 1000000000ull
static uint32_t named[NAMED_MAX / 32], unnamed[NAMED_MAX / 32];
static uint64_t rename_ns; /* the last try, CLOCK_MONOTONIC */
/*
 * The pool's inode and gsockd's control socket file when a listener was
 * last named (atomic), and when an accept last looked whether they are
 * still so: a gsockd started since knows none of our listeners
 * (gsockd_moved).
 */
static uint64_t named_pool, named_dev, named_ino, named_ctime, moved_ns;

/*
 * Whether PL_RENAME_NS have passed since *last (CLOCK_MONOTONIC ns), and
 * this thread is the one that takes the turn (*last set to now).
 */
static int once_a_second(uint64_t *last)
{
	uint64_t now = (uint64_t)pl_now_ns(), was = __atomic_load_n(last, __ATOMIC_RELAXED);

	return now - was >= PL_RENAME_NS &&
	       __atomic_compare_exchange_n(last, &was, now, 0, __ATOMIC_RELAXED,
					   __ATOMIC_RELAXED);
}

/* A file's identity for gsockd_moved: inode and change time (a new file may reuse the inode). */
static uint64_t ctime_ns(const struct stat *st)
{
	return (uint64_t)st->st_ctim.tv_sec * 1000000000ull +
	       (uint64_t)st->st_ctim.tv_nsec;
}

static int bit_of(const uint32_t *map, int fd)
{
	return fd >= 0 && fd < NAMED_MAX &&
	       (__atomic_load_n(&map[fd / 32], __ATOMIC_RELAXED) >> (fd % 32) &
		1);
}

static void bit_set(uint32_t *map, int fd, int on)
{
	if (fd < 0 || fd >= NAMED_MAX)
		return;
	if (on)
		__atomic_or_fetch(&map[fd / 32], 1u << (fd % 32), __ATOMIC_RELAXED);
	else
		__atomic_and_fetch(&map[fd / 32], ~(1u << (fd % 32)),
				   __ATOMIC_RELAXED);
}

static int is_named(int fd)
{
	return bit_of(named, fd);
}

static int any_in(const uint32_t *map, int lo, int hi)
{
	for (int fd = lo; fd <= hi; fd += 32 - fd % 32) {
		uint32_t w = __atomic_load_n(&map[fd / 32], __ATOMIC_RELAXED);

		w &= ~0u << (fd % 32);
		if (hi / 32 == fd / 32)
			w &= ~0u >> (31 - hi % 32);
		if (w)
			return 1;
	}
	return 0;
}

int pl_direct_named_in(int lo, int hi)
{
	if (lo < 0)
		lo = 0;
	if (hi >= NAMED_MAX)
		hi = NAMED_MAX - 1;
	return any_in(named, lo, hi) || any_in(unnamed, lo, hi);
}

void pl_direct_named_gone(int lo, int hi)
{
	if (lo < 0)
		lo = 0;
	if (hi >= NAMED_MAX)
		hi = NAMED_MAX - 1;
	for (int fd = lo; fd <= hi; fd++) {
		if (bit_of(named, fd))
			bit_set(named, fd, 0);
		if (bit_of(unnamed, fd))
			bit_set(unnamed, fd, 0);
	}
}

void pl_direct_named_copy(int oldfd, int newfd)
{
	if (is_named(oldfd))
		bit_set(named, newfd, 1);
	if (bit_of(unnamed, oldfd))
		bit_set(unnamed, newfd, 1);
}

/*
 * Every named listener unnamed: the gsockd they were named to has gone,
 * and each is named to the one that runs at its next accept.
 */
static void unname_all(void)
{
	int any = 0;

	for (int i = 0; i < NAMED_MAX / 32; i++) {
		uint32_t w = __atomic_exchange_n(&named[i], 0, __ATOMIC_RELAXED);

		if (w)
			__atomic_or_fetch(&unnamed[i], w, __ATOMIC_RELAXED);
		any |= w != 0;
	}
	if (any)
		pl_log(PL_LOG_INFO, "gsockd's control socket is not the one our listeners were named at: each is named again at its next accept");
}

/*
 * The other way round: a GPU application's gconnect to a listener of
 * ours. gsockd holds such a gconnect only where every listener the
 * kernel has on the port was named to it (pl_direct_listen), and while
 * it holds any to a port, the pool's page says so (pend_port): then each
 * connection a named listener of ours accepts there from this host is
 * asked after.
 */
void pl_direct_listen(int fd)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct gs_ctl_dconnect req = { .magic = GS_CTL_DLISTEN_MAGIC,
				       .version = GS_CTL_VERSION };
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss), ol = sizeof(int);
	struct gs_ctl_dreply rep;
	struct stat st;
	struct stat st2;
	int reuse = 0, v6only = 1, ctl, r, absent;

	if (pl_real.getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) ||
	    len > sizeof(req.dst) || fstat(fd, &st) < 0)
		return;
	pthread_once(&once, setup_once);
	if (!pl_route_direct(fd, (struct sockaddr *)&ss))
		return;
	if (pl_real.getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &ol) == 0 &&
	    reuse)
		req.flags |= GS_DL_REUSEPORT;
	ol = sizeof(int);
	if (ss.ss_family == AF_INET6 &&
	    (pl_real.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) <
		     0 ||
	     !v6only) &&
	    IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr))
		req.flags |= GS_DL_V4_TOO;
	req.dst_len = len;
	memcpy(req.dst, &ss, len);
	req.ino = st.st_ino;
	ctl = ctl_open(fd);
	absent = ctl < 0 && ctl_absent;
	r = ctl < 0 ? -1 : ctl_ask(fd, ctl, &req, -1, &rep);
	if (ctl >= 0)
		pl_real.close(ctl);
	if (r == 0)
		pl_log(rep.status ? PL_LOG_DEBUG : PL_LOG_INFO,
		       "fd %d: listener named to gsockd for GPU clients' direct path: %s",
		       fd, rep.status ? rep.msg : "ok");
	/*
	 * The bits are fd's only while fd is still this listener: a close
	 * or dup2 during the exchange may have given the number to another.
	 */
	if (fstat(fd, &st2) < 0 || st2.st_ino != st.st_ino ||
	    st2.st_dev != st.st_dev)
		return;
	if (r == 0 && !rep.status) {
		struct stat cs;

		uint64_t pino, was;

		pthread_mutex_lock(&list_lock);
		pino = pool.base ? (uint64_t)pool.ino : 0;
		pthread_mutex_unlock(&list_lock);
		was = __atomic_exchange_n(&named_pool, pino, __ATOMIC_RELAXED);
		if (was && was != pino) /* the others were named to a gsockd that has gone */
			unname_all();
		if (stat(pl_route_control(), &cs) == 0) {
			__atomic_store_n(&named_dev, (uint64_t)cs.st_dev, __ATOMIC_RELAXED);
			__atomic_store_n(&named_ino, (uint64_t)cs.st_ino, __ATOMIC_RELAXED);
			__atomic_store_n(&named_ctime, ctime_ns(&cs), __ATOMIC_RELAXED);
		}
		bit_set(named, fd, 1);
	}
	/* nothing listened at the control socket: an accept on it asks again */
	bit_set(unnamed, fd, absent);
}

/*
 * An accept on lfd, a listener that found no gsockd to be named to:
 * name it now if none was tried for PL_RENAME_NS (its GPU clients from
 * then on may take the direct path; this connection is the kernel's).
 */
static void rename_listener(int lfd)
{
	if (bit_of(unnamed, lfd) && once_a_second(&rename_ns))
		pl_direct_listen(lfd);
}

/*
 * Whether the gsockd at the control socket is the one whose pool we
 * map, asked in a welcome (lfd names the asker in the log): 1 it is, 0
 * another (its pool is mapped now), -1 none runs, -2 no clear answer.
 */
static int same_gsockd(int lfd)
{
	uint64_t ino;
	int ctl;

	pthread_mutex_lock(&list_lock);
	ino = pool.base ? (uint64_t)pool.ino : 0;
	pthread_mutex_unlock(&list_lock);
	ctl = ctl_open(lfd);
	if (ctl < 0)
		return ctl_absent ? -1 : -2;
	pl_real.close(ctl);
	pthread_mutex_lock(&list_lock);
	ino = ino == (uint64_t)pool.ino;
	pthread_mutex_unlock(&list_lock);
	return (int)ino;
}

/*
 * An accept on a named listener: at most once every PL_RENAME_NS, whether
 * the gsockd our listeners were named to still runs. It marks its pool
 * closed as it stops; one that died left its control socket's file to
 * the next (inode and change time: a new file may reuse the inode), or,
 * under socket activation, the same file, which this cannot tell. Where
 * the file is another or gone, a welcome says whether its gsockd is
 * ours. If not, every named listener is unnamed, to be named to the one
 * that runs at its next accept.
 */
static void gsockd_moved(int lfd)
{
	struct stat cs;
	int closed = 0, same;

	if (!once_a_second(&moved_ns))
		return;
	pthread_mutex_lock(&list_lock);
	if (pool.base)
		closed = __atomic_load_n(&GS_DPOOL_OF(pool.base, pool.dsegs,
						      pool.dring)->closed,
					 __ATOMIC_ACQUIRE) != 0;
	pthread_mutex_unlock(&list_lock);
	if (!closed) {
		int found = stat(pl_route_control(), &cs) == 0;

		if (found &&
		    (uint64_t)cs.st_dev == __atomic_load_n(&named_dev, __ATOMIC_RELAXED) &&
		    (uint64_t)cs.st_ino == __atomic_load_n(&named_ino, __ATOMIC_RELAXED) &&
		    ctime_ns(&cs) == __atomic_load_n(&named_ctime, __ATOMIC_RELAXED))
			return;
		same = found ? same_gsockd(lfd) : -1;
		if (same == -2)
			return; /* no clear answer: the next look asks again */
		if (same == 1) { /* the file changed (a chmod), not gsockd */
			__atomic_store_n(&named_dev, (uint64_t)cs.st_dev, __ATOMIC_RELAXED);
			__atomic_store_n(&named_ino, (uint64_t)cs.st_ino, __ATOMIC_RELAXED);
			__atomic_store_n(&named_ctime, ctime_ns(&cs), __ATOMIC_RELAXED);
			return;
		}
	}
	unname_all();
}

int pl_direct_accepted(int fd, int lfd, struct pl_sock **sp_out)
{
	struct gs_ctl_dconnect req = { .magic = GS_CTL_DACCEPT_MAGIC,
				       .version = GS_CTL_VERSION };
	struct sockaddr_storage dst, src;
	socklen_t dlen = sizeof(dst), slen = sizeof(src);
	struct gs_ctl_dreply rep;
	struct pl_dconn *c;
	struct pl_sock *s;
	int sp[2], ctl, pend = 0, r;

	if (is_named(lfd))
		gsockd_moved(lfd);
	if (!is_named(lfd)) {
		rename_listener(lfd);
		return 0;
	}
	if (pl_real.getsockname(fd, (struct sockaddr *)&dst, &dlen) < 0 ||
	    (dst.ss_family != AF_INET && dst.ss_family != AF_INET6))
		return 0;
	/* sin_port and sin6_port lie at the same place */
	pthread_mutex_lock(&list_lock);
	if (pool.base)
		pend = __atomic_load_n(
			&GS_DPOOL_OF(pool.base, pool.dsegs, pool.dring)->pend_port
				 [ntohs(((struct sockaddr_in *)&dst)->sin_port) %
				  GS_PEND_PORTS],
			__ATOMIC_ACQUIRE);
	pthread_mutex_unlock(&list_lock);
	if (!pend ||
	    pl_real.getpeername(fd, (struct sockaddr *)&src, &slen) < 0 ||
	    (src.ss_family != AF_INET && src.ss_family != AF_INET6) ||
	    dlen > sizeof(req.dst) || slen > sizeof(req.src) ||
	    !addr_local((struct sockaddr *)&src))
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return 0;
	req.dst_len = dlen;
	req.src_len = slen;
	memcpy(req.dst, &dst, dlen);
	memcpy(req.src, &src, slen);
	ctl = ctl_open(fd);
	r = ctl < 0 ? -1 : ctl_ask(fd, ctl, &req, sp[1], &rep);
	if (ctl >= 0)
		pl_real.close(ctl);
	if (r == 0 && rep.status) {
		pl_log(PL_LOG_DEBUG, "fd %d: accepted on the kernel's path: %s",
		       fd, rep.msg);
		r = -1; /* gsockd took nothing: the kernel carries it */
	} else if (r == 0 && (rep.side != 1 || rep.seg >= pool.dsegs)) {
		pl_log(PL_LOG_WARN, "fd %d: gsockd's answer to an accept is malformed (segment %u, side %u)",
		       fd, rep.seg, rep.side);
		r = -2;
	}
	if (r < 0) {
		pl_real.close(sp[0]);
		pl_real.close(sp[1]);
		/*
		 * Sent, and not clearly refused: gsockd may have given the
		 * GPU end the segment, and then the kernel connection
		 * carries nothing. The connection ends (the GPU end sees it
		 * end either way); the accept says so.
		 */
		if (r == -2) {
			struct linger rst = { 1, 0 };

			pl_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst,
					   sizeof(rst));
			errno = ECONNABORTED;
			return -1;
		}
		return 0;
	}
	/* From here the connection is the direct path's: gsockd gave it us. */
	c = calloc(1, sizeof(*c));
	s = c ? pl_sock_new(src.ss_family) : NULL;
	if (!s) {
		free(c);
		pl_real.close(sp[0]);
		pl_real.close(sp[1]); /* gsockd lets the segment go */
		errno = ECONNABORTED; /* what became of it; accept goes on */
		return -1;
	}
	c->side = 1; /* the accepting end's */
	c->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
	if (attach(fd, s, c, (int)rep.seg, sp) < 0) {
		pl_sock_put(s);
		errno = ECONNABORTED;
		return -1;
	}
	*sp_out = s;
	return 1;
}

void pl_direct_release(struct pl_sock *s)
{
	struct pl_dconn *c = s->dc;

	if (!c)
		return;
	pthread_mutex_lock(&list_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	__atomic_sub_fetch(&nconns, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&list_lock);
	/*
	 * Bytes never read reset the connection, as the kernel would; but
	 * only once every copy in every process is closed (a forked child
	 * may read them yet), which gsockd tells from the socketpair, not
	 * this process: no SO_LINGER on the shared kernel socket here.
	 */
	pl_log(PL_LOG_DEBUG, "direct connection closed: %llu bytes came by its lane",
	       (unsigned long long)__atomic_load_n(&c->lane_bytes,
						   __ATOMIC_RELAXED));
	pl_real.close(c->tcp);
	pl_real.close(c->pair);
	free(c);
	s->dc = NULL;
}

/* ---- waits ---- */

/*
 * c has bytes: make A readable unless a wake-up byte is there already or
 * gsockd is bringing one (it took READER).
 */
static int raise_one(struct pl_dconn *c)
{
	if (!rx_avail(c))
		return 0;
	answered(c);
	if (!__atomic_load_n(&c->d->tokens[peer_of(c)], __ATOMIC_ACQUIRE) &&
	    (took(&c->d->want[peer_of(c)], GS_DW_READER) ||
	     !(__atomic_load_n(&c->d->want[peer_of(c)], __ATOMIC_ACQUIRE) &
	       GS_DW_READER)))
		self_token(c);
	else /* a byte is there, or gsockd's (it took READER) is coming */
		trusted = 1;
	return 1;
}

static void arm_one(struct pl_dconn *c)
{
	if (!(__atomic_load_n(&c->d->want[peer_of(c)], __ATOMIC_ACQUIRE) &
	      GS_DW_READER))
		arm_rx(c);
}

static void wake_dead(struct pl_dconn *c)
{
	if (!__atomic_load_n(&c->dead_seen, __ATOMIC_ACQUIRE) && tcp_end(c)) {
		__atomic_store_n(&c->dead_seen, 1, __ATOMIC_RELEASE);
		self_token(c);
	}
}

/*
 * Run f over the connections sc covers (every one under list_lock when
 * sc->all); with any, the sum of what f returned.
 */
static int each(struct pl_dscope *sc, int (*f)(struct pl_dconn *))
{
	struct pl_dconn *c;
	int r = 0;

	if (!sc->all) {
		for (int i = 0; i < sc->n; i++)
			r += f(__atomic_load_n(&sc->s[i]->dc, __ATOMIC_ACQUIRE));
		return r;
	}
	pthread_mutex_lock(&list_lock);
	for (c = conns; c; c = c->next)
		r += f(c);
	pthread_mutex_unlock(&list_lock);
	return r;
}

/*
 * each() over the connections sc looks at: an exact scope's first nlook;
 * the rest (one-shot members) it only arms.
 */
static int each_looked(struct pl_dscope *sc, int (*f)(struct pl_dconn *))
{
	int r = 0;

	if (!sc->exact)
		return each(sc, f);
	for (int i = 0; i < sc->nlook; i++)
		r += f(__atomic_load_n(&sc->s[i]->dc, __ATOMIC_ACQUIRE));
	return r;
}

/*
 * Each connection sc looks at that has bytes: a level-triggered member
 * of an exact set that nobody else watches is noted for the wait to
 * report (pl_direct_epoll_merge) and its READER bit goes (gsockd need
 * not be rung for it); any other is raised (raise_one). How many.
 *
 * A wake-up byte costs the process two system calls (its write, and the
 * read that takes it out), only so that the kernel's wait reports A.
 */
static int look(struct pl_dscope *sc)
{
	int r = 0;

	sc->nrdy = 0;
	if (!sc->exact || !sc->nlt)
		return each_looked(sc, raise_one);
	for (int i = 0; i < sc->nlook; i++) {
		struct pl_dconn *c = __atomic_load_n(&sc->s[i]->dc,
						     __ATOMIC_ACQUIRE);

		if (i < sc->nlt && rx_avail(c) && unwatched(c)) {
			answered(c);
			took(&c->d->want[peer_of(c)], GS_DW_READER);
			/* a sleeper came meanwhile: its bit back (see disarm) */
			if (!unwatched(c))
				arm_rx(c);
			sc->rdy[sc->nrdy++] = c->serial;
			r++;
		} else {
			r += raise_one(c);
		}
	}
	return r;
}

/*
 * Before a wait over an exact set sleeps while it owes answers: every
 * connection of the process that has bytes is raised, so the threads
 * that own them wake (or find them at their next look) with no wake-up
 * through gsockd, whose doorbell watch and workers carry the rest; then
 * sc's own are looked at again. Returns whether one of them has bytes.
 *
 * Measured on an H100 host, 8 loadgen threads on 256 connections in a
 * closed loop: waits that covered only their own sets carried
 * 0.64-0.75M requests a second against 1.11-1.16M when every sleeper
 * looked at every connection (as before exact sets); with this help,
 * 1.00-1.24M against 1.08-1.21M in five alternating rounds (raising
 * only connections that threads sleep on: 0.94-1.31M). Helping from
 * every wait that sleeps cost the paced 100,000 requests a second over
 * 4 threads its gain (p50 34-44 us against 23-26): there the threads
 * sleep owing nothing while the owners of the answers are awake.
 */
static __thread long long owes_now;

static int owes_f(struct pl_dconn *c)
{
	long long t = __atomic_load_n(&c->out_ns, __ATOMIC_RELAXED);

	return t && owes_now - t <= nap_win_ns;
}

/* Whether a connection sc covers owes an answer within the window. */
static int owes(struct pl_dscope *sc)
{
	owes_now = pl_now_ns();
	return each(sc, owes_f) > 0;
}

/*
 * Raise every connection of the process that has bytes. With try, not
 * while another thread holds the list (most likely helping already):
 * help() saves wake-ups through gsockd and no wait depends on it, and
 * eight threads of a closed loop that queued for the list there spent
 * nine tenths of their futex calls on it (the development VM, 64
 * connections); pl_direct_slice_over's raise is a wait's safety net and
 * takes the list whatever it costs, once a slice.
 */
static void raise_all(int try)
{
	struct pl_dconn *c;
	int t = trusted;

	if (try ? pthread_mutex_trylock(&list_lock) != 0 :
		  pthread_mutex_lock(&list_lock) != 0)
		return;
	for (c = conns; c; c = c->next)
		raise_one(c);
	pthread_mutex_unlock(&list_lock);
	trusted = t; /* others' bytes taken on trust are not this wait's */
}

static int help(struct pl_dscope *sc)
{
	raise_all(1);
	return look(sc);
}

static int arm_f(struct pl_dconn *c)
{
	arm_one(c);
	return 0;
}

static int dead_f(struct pl_dconn *c)
{
	wake_dead(c);
	return 0;
}

static void scope_drop(struct pl_dscope *sc);

/* A thread's look at its wait's owed answers (due_f, for each). */
static __thread long long due_now, due_first, due_last;
static __thread int due_disarm;

/*
 * A napping waiter looks at c itself: a READER bit left from an earlier
 * sleep would have the GPU side ring gsockd for the answer and gsockd
 * write a wake-up byte (the cost the nap saves), so it goes, unless a
 * thread sleeps on the connections now (a sleeper that comes later arms
 * its own; one that came meanwhile gets its bit back).
 */
static void disarm(struct pl_dconn *c)
{
	if (!(__atomic_load_n(&c->d->want[peer_of(c)], __ATOMIC_ACQUIRE) &
	      GS_DW_READER) ||
	    __atomic_load_n(&c->sleepers, __ATOMIC_SEQ_CST))
		return;
	/*
	 * A sleeper counts itself before it arms, so one that came after
	 * the look above is seen below, or arms after the bit went.
	 */
	__atomic_fetch_and(&c->d->want[peer_of(c)], ~GS_DW_READER,
			   __ATOMIC_SEQ_CST);
	/*
	 * A sleeper came meanwhile: its bit back, and a look at the ring,
	 * for bytes the GPU side published while the bit was away (it rang
	 * nobody, and gsockd may have failed to take the bit).
	 */
	if (__atomic_load_n(&c->sleepers, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&sleepers_all, __ATOMIC_SEQ_CST))
		arm_rx(c);
}

/* c owes an answer within the window: when it is due, and the window's end. */
static int due_f(struct pl_dconn *c)
{
	long long t = __atomic_load_n(&c->out_ns, __ATOMIC_RELAXED), due;

	if (!t || due_now - t > nap_win_ns)
		return 0;
	if (due_disarm)
		disarm(c);
	due = t + __atomic_load_n(&answer_ns, __ATOMIC_RELAXED) * 3 / 4;
	if (!due_first || due < due_first)
		due_first = due;
	if (t + nap_win_ns > due_last)
		due_last = t + nap_win_ns;
	return 1;
}

/* What the naps learnt, said as the program ends (GSOCK_LOG=debug). */
__attribute__((destructor)) static void naps_said(void)
{
	if (!__atomic_load_n(&serials, __ATOMIC_RELAXED) || !nap_win_ns)
		return;
	pl_log(PL_LOG_DEBUG,
	       "direct: answers came in %lld us on average; naps woke %lld us late; %u of 256 answers came after the nap window; slow answers in %lld us; %lu sleeps looked for one, %lu found it; %lu naps taken; %lu epoll events reported without a wake-up byte",
	       __atomic_load_n(&answer_ns, __ATOMIC_RELAXED) / 1000,
	       __atomic_load_n(&nap_late_ns, __ATOMIC_RELAXED) / 1000,
	       __atomic_load_n(&miss_rate, __ATOMIC_RELAXED),
	       __atomic_load_n(&slow_ns, __ATOMIC_RELAXED) / 1000,
	       __atomic_load_n(&looks_taken, __ATOMIC_RELAXED),
	       __atomic_load_n(&looks_found, __ATOMIC_RELAXED),
	       __atomic_load_n(&naps_taken, __ATOMIC_RELAXED),
	       __atomic_load_n(&quiet_reports, __ATOMIC_RELAXED));
}

/*
 * The nap that should have ended at sc->nap_end is over: how late it
 * woke teaches the next naps (at most NAP_LATE_MAX a sample).
 */
#define NAP_LATE_MAX 200000LL

static void nap_over(struct pl_dscope *sc, long long now)
{
	long long d = now - sc->nap_end;
	long long l = __atomic_load_n(&nap_late_ns, __ATOMIC_RELAXED);

	sc->nap_end = 0;
	d = d < 0 ? 0 : d > NAP_LATE_MAX ? NAP_LATE_MAX : d;
	__atomic_store_n(&nap_late_ns, l + (d - l) / 8, __ATOMIC_RELAXED);
}

/*
 * What a wait over sc does while one of its connections owes an answer
 * within the window: nap (> 0, ns) once, until three quarters of an
 * answer's usual time have passed, less how late naps wake (a nap too
 * short for that is skipped, and the lateness it would have learnt
 * anew fades a little, so a later wait tries again); then spin on the
 * rings for
 * GSOCK_DIRECT_SPIN_US at most, a kernel look at the program's other
 * descriptors every SPIN_TURN_NS (-1: look now, then call this again).
 * 0: nothing owed, the spin is over, or most answers of this process
 * come later than the window (naps and spins would only cost); the wait
 * then arms and sleeps, and gsockd wakes it.
 */
#define SPIN_TURN_NS 2000LL

static long long wait_of(struct pl_dscope *sc)
{
	long long now, until;

	if (__atomic_load_n(&miss_rate, __ATOMIC_RELAXED) >= 192)
		return 0;
	due_now = now = pl_now_ns();
	due_first = due_last = 0;
	due_disarm = none_unseen();
	/*
	 * Answers owed on members the wait does not look at (one-shot ones)
	 * are not napped for: no look would find them, and their wake-up
	 * would wait for the nap and the spin (a one-shot ping-pong's p50
	 * round trip on the development VM: 210 us napping, 136-163 not).
	 */
	if (!each_looked(sc, due_f))
		return 0;
	if (!sc->napped) {
		long long late = __atomic_load_n(&nap_late_ns, __ATOMIC_RELAXED);

		sc->napped = 1;
		/*
		 * The spin lasts as if the nap had not been shortened: a nap
		 * that ends early adds spin before the answer, not less
		 * after it (waits that slept owing answers quadrupled).
		 */
		sc->spin_from = due_first + late;
		if (due_first - late - now >= NAP_MIN_NS) {
			sc->nap_end = due_first - late;
			__atomic_fetch_add(&naps_taken, 1, __ATOMIC_RELAXED);
			return sc->nap_end - now;
		}
		if (late)
			__atomic_store_n(&nap_late_ns, late - late / 32 - 1,
					 __ATOMIC_RELAXED);
	}
	if (!sc->spin_until) {
		long long from = now > sc->spin_from ? now : sc->spin_from;

		sc->spin_until = from + spin_ns < due_last ? from + spin_ns :
							     due_last;
	}
	if (now >= sc->spin_until)
		return 0;
	until = now + SPIN_TURN_NS < sc->spin_until ? now + SPIN_TURN_NS :
						      sc->spin_until;
	while (!look(sc) && pl_now_ns() < until)
		pl_relax();
	return -1;
}

static __thread long long look_now, look_min;

static int look_f(struct pl_dconn *c)
{
	long long w = look_in(c, look_now);

	if (w > 0 && (!look_min || w < look_min))
		look_min = w;
	return 0;
}

/*
 * An armed wait that sleeps owing a slow answer (look_in) wakes to look
 * at its rings itself: with can_nap for that long (sc->nap_ns; returns
 * 0), else for as many whole milliseconds; otherwise for slice.
 */
static int look_slice(struct pl_dscope *sc, int timeout_ms, int can_nap,
		      int slice)
{
	long long w, ms;

	look_now = pl_now_ns();
	look_min = 0;
	each_looked(sc, look_f);
	w = look_min;
	if (!w || (timeout_ms >= 0 && w >= timeout_ms * 1000000LL))
		return slice;
	ms = (w + 999999) / 1000000;
	if (!can_nap && ms >= slice)
		return slice;
	__atomic_fetch_add(&looks_taken, 1, __ATOMIC_RELAXED);
	sc->looked = 1;
	if (!can_nap)
		return (int)ms;
	sc->nap_ns = w;
	return 0;
}

static int arm_idle_f(struct pl_dconn *c)
{
	if (!rx_avail(c))
		arm_one(c);
	return 0;
}

/*
 * An exact set's one-shot members, which no look covers: armed by every
 * wait, also one that cannot sleep or that other members' bytes end (a
 * member re-armed with EPOLL_CTL_MOD between such waits, or beside a
 * member that is always ready, was never reported again).
 */
static void arm_unlooked(struct pl_dscope *sc)
{
	for (int i = sc->exact ? sc->nlook : sc->n; i < sc->n; i++)
		arm_one(__atomic_load_n(&sc->s[i]->dc, __ATOMIC_ACQUIRE));
}

/*
 * A wait that raised connections with bytes expects the kernel to answer
 * at once, but it may not (a poll entry that asks for no input, a set
 * that does not hold the connection raised, a byte another thread read
 * first): for up to ms it sleeps, so it counts as asleep and arms its
 * connections that have no bytes, as any sleep does (reads that say
 * EAGAIN do not arm them).
 */
static int ready_sleep(struct pl_dscope *sc, int ms)
{
	if (ms <= 0) {
		arm_unlooked(sc);
		return ms;
	}
	pl_direct_sleep(sc, 1);
	if (!sc->exact) {
		each(sc, arm_idle_f);
		return ms;
	}
	/* an exact set's one-shot members are never looked at: armed */
	for (int i = 0; i < sc->n; i++) {
		struct pl_dconn *c = __atomic_load_n(&sc->s[i]->dc,
						     __ATOMIC_ACQUIRE);

		if (i >= sc->nlook)
			arm_one(c);
		else
			arm_idle_f(c);
	}
	return ms;
}

int pl_direct_prewait(struct pl_dscope *sc, int timeout_ms, int can_nap)
{
	int slice = timeout_ms < 0 || timeout_ms > SLICE_MS ? SLICE_MS :
							     timeout_ms;
	long long until;
	int ready;

	if (sc->nap_end) /* back from a nap: its timer ended it (see PL_WAIT) */
		nap_over(sc, pl_now_ns());
	sc->nap_ns = 0;
	sc->nrdy = 0;
	/* No direct descriptor in this wait (an exact set may gain some). */
	if (!sc->all && !sc->n && !sc->exact)
		return timeout_ms;
	/*
	 * Bytes that came while nobody looked make their descriptors
	 * readable. A wait that may sleep while an answer is owed naps and
	 * looks again (the caller's kernel wait, for sc->nap_ns, so the
	 * program's other descriptors and timers still end it); where the
	 * wait cannot nap (an RDMA device makes rsocket possible, or no
	 * epoll_pwait2) it spins on the rings a little, blind to the rest;
	 * gsockd is not rung while nobody sleeps. Only then is each
	 * connection armed, so the GPU side rings for the next bytes.
	 */
	trusted = 0;
	ready = look(sc);
	if (sc->looked) { /* back from a sleep that was to look: did it find them */
		sc->looked = 0;
		if (ready)
			__atomic_fetch_add(&looks_found, 1, __ATOMIC_RELAXED);
	}
	if (!ready && timeout_ms && can_nap) {
		long long w = nap_win_ns ? wait_of(sc) : 0;

		if (w > 0 && timeout_ms > 0 && w > timeout_ms * 1000000LL) {
			w = timeout_ms * 1000000LL;
			sc->nap_end = 0; /* it ends the wait: nothing learnt */
		}
		if (w) {
			sc->nap_ns = w; /* -1: a look (PL_WAIT waits 0) */
			arm_unlooked(sc); /* the kernel's part may end the wait */
			return 0;
		}
	}
	until = pl_now_ns() + spin_ns;
	while (!ready && timeout_ms && spin_ns && !can_nap && pl_now_ns() < until) {
		ready = look(sc);
		pl_relax();
	}
	if (sc->nrdy) { /* the wait reports them: the kernel's part at once */
		arm_unlooked(sc);
		return 0;
	}
	if (ready && sc->hint)
		/*
		 * A member named here is ready and made readable: the kernel
		 * answers at once. Should it not (the program changed what
		 * it watches behind us), the wait covers every connection
		 * after a millisecond (pl_direct_slice_over).
		 */
		return ready_sleep(sc, slice > 1 ? 1 : slice);
	if (ready) /* a byte taken on trust: see trusted */
		return ready_sleep(sc, trusted && slice > 1 ? 1 : slice);
	if (sc->hint) {
		/*
		 * None of the members epoll_ctl named here is ready. The set
		 * may hold others (a set duplicated, nested or inherited):
		 * before the wait may sleep, every connection is looked at
		 * and armed, as for a set this process knows nothing of.
		 */
		scope_drop(sc);
		sc->all = 1;
		if (look(sc))
			return ready_sleep(sc, trusted && slice > 1 ? 1 : slice);
	}
	/*
	 * A wait that cannot sleep (timeout 0: an open-loop client's poll
	 * between sends) looked already. Counting it asleep and arming its
	 * connections had the GPU side ring gsockd for every answer that
	 * came while the program was awake, and its help walked every
	 * connection of the process under list_lock: 16 threads of a
	 * preloaded client spent most of their time queued on that lock.
	 */
	if (!timeout_ms) {
		arm_unlooked(sc);
		return 0;
	}
	if (sc->exact && owes(sc) && help(sc)) {
		if (!sc->nrdy)
			return ready_sleep(sc,
					   trusted && slice > 1 ? 1 : slice);
		arm_unlooked(sc);
		return 0;
	}
	/* counted before armed: see disarm */
	pl_direct_sleep(sc, 1);
	each(sc, arm_f);
	return look_slice(sc, timeout_ms, can_nap, slice);
}

void pl_direct_sleep(struct pl_dscope *sc, int d)
{
	if (d > 0 && sc->asleep)
		return;
	if (d < 0 && !sc->asleep)
		return;
	sc->asleep = d > 0;
	if (sc->all) {
		__atomic_fetch_add(&sleepers_all, d, __ATOMIC_SEQ_CST);
		return;
	}
	for (int i = 0; i < sc->n; i++) {
		struct pl_dconn *c = __atomic_load_n(&sc->s[i]->dc,
						     __ATOMIC_ACQUIRE);

		if (c)
			sleep_count(c, d);
	}
}

void pl_direct_slice_over(struct pl_dscope *sc)
{
	if (sc->hint) { /* its short slice passed with nothing: see prewait */
		scope_drop(sc);
		sc->all = 1;
	} else if (sc->exact) {
		/*
		 * The set's members again: ones another thread added while
		 * this one slept, or every connection if the set stopped
		 * being exact meanwhile. And a look at every connection:
		 * members added where the preload does not see it (a raw
		 * epoll_ctl system call, io_uring) wait a slice at most.
		 */
		int epfd = sc->epfd;

		raise_all(0);
		scope_drop(sc);
		pl_direct_scope_epoll(sc, epfd);
	}
	each(sc, dead_f);
}

/* ---- which connections a wait covers ---- */

static int is_direct(const struct pl_sock *s)
{
	return __atomic_load_n(&s->dc, __ATOMIC_ACQUIRE) != NULL;
}

static void scope_empty(struct pl_dscope *sc)
{
	*sc = (struct pl_dscope){
		.s = sc->here,
		.cap = (int)(sizeof(sc->here) / sizeof(sc->here[0])),
		.epfd = -1,
		.rdy = sc->rdy_here,
	};
}

/* Drop the connections sc holds: empty again. */
static void made_unwait(int epfd, unsigned long long id);

static void scope_drop(struct pl_dscope *sc)
{
	if (sc->exact)
		made_unwait(sc->epfd, sc->set_id);
	for (int i = 0; i < sc->n; i++)
		pl_sock_put(sc->s[i]);
	if (sc->s != sc->here)
		free(sc->s);
	if (sc->rdy != sc->rdy_here)
		free(sc->rdy);
	scope_empty(sc);
}

/*
 * sc covers the direct descriptors among fds[0..n): looked up under one
 * hold of the fd table; a second look with room for all when more than
 * sc->here holds are direct.
 */
static void scope_fds(struct pl_dscope *sc, const int *fds, int n)
{
	scope_empty(sc);
	sc->n = pl_fd_get_each(fds, n, is_direct, sc->s, sc->cap);
	if (sc->n >= 0)
		return;
	sc->n = 0;
	sc->s = malloc((size_t)n * sizeof(*sc->s));
	if (sc->s)
		sc->n = pl_fd_get_each(fds, n, is_direct, sc->s, n);
	if (!sc->s || sc->n < 0) { /* cover them all, as the list does */
		free(sc->s);
		scope_empty(sc);
		sc->all = 1;
	}
}

/*
 * Whether each descriptor number names an epoll set, as last seen (0:
 * not asked, 1: no, 2: yes); epoll_create's numbers are marked, and a
 * number closed or duplicated over is asked again.
 */
#define EPFD_MAP 65536
static uint8_t epfd_map[EPFD_MAP];

static int is_epoll(int fd);
static int epoll_kind(int fd);

static int fd_is_epoll(int fd)
{
	uint8_t v;

	if (fd < 0)
		return 0;
	if (fd >= EPFD_MAP)
		return is_epoll(fd);
	v = __atomic_load_n(&epfd_map[fd], __ATOMIC_RELAXED);
	if (!v) {
		uint8_t zero = 0;
		int e = epoll_kind(fd);

		if (e < 0)
			return 1; /* not known: as if it were, and asked again */
		v = e ? 2 : 1;
		/* a close and an epoll_create meanwhile marked it: theirs stands */
		if (!__atomic_compare_exchange_n(&epfd_map[fd], &zero, v, 0,
						 __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			v = zero;
	}
	return v == 2;
}

/*
 * A poll or select that names an epoll set covers every direct
 * connection (the set's members are not known here, and a read that
 * says EAGAIN arms nothing): so it looks at them all, arms them before
 * it sleeps and sleeps in slices.
 */
static int names_epoll(const int *fd, int n)
{
	for (int i = 0; i < n; i++)
		if (fd_is_epoll(fd[i]))
			return 1;
	return 0;
}

void pl_direct_scope_poll(struct pl_dscope *sc, const struct pollfd *fds,
			  nfds_t n)
{
	int here[64] = { 0 }, *fd = here, k = 0;

	scope_empty(sc);
	if (!pl_direct_active())
		return;
	if (n > sizeof(here) / sizeof(here[0]) &&
	    (n > INT_MAX || !(fd = malloc(n * sizeof(*fd))))) {
		sc->all = 1;
		return;
	}
	for (nfds_t i = 0; i < n; i++)
		if (fds[i].fd >= 0)
			fd[k++] = fds[i].fd;
	if (names_epoll(fd, k))
		sc->all = 1;
	else
		scope_fds(sc, fd, k);
	if (fd != here)
		free(fd);
}

void pl_direct_scope_select(struct pl_dscope *sc, int n, fd_set *const sets[3])
{
	int fd[FD_SETSIZE], k = 0;

	scope_empty(sc);
	if (!pl_direct_active())
		return;
	for (int i = 0; i < n && i < FD_SETSIZE; i++)
		if ((sets[0] && FD_ISSET(i, sets[0])) ||
		    (sets[1] && FD_ISSET(i, sets[1])) ||
		    (sets[2] && FD_ISSET(i, sets[2])))
			fd[k++] = i;
	if (names_epoll(fd, k))
		sc->all = 1;
	else
		scope_fds(sc, fd, k);
}

/*
 * The direct connections epoll_ctl in this process added to each epoll
 * set, by the set's number: a hint, looked at first. Without it an epoll
 * wait looked at every direct connection of the process under list_lock:
 * 8 threads of 32 connections each scanned all 256 in every wait, one at
 * a time. A member counts only while its number still names the
 * connection it named when added (serial), and only with EPOLLIN and
 * neither EPOLLONESHOT nor EPOLLET (ones the kernel may not report). A wait drops
 * the members it finds gone; a set's entry goes when its number is closed
 * or made to name something else (pl_direct_epoll_forget).
 */
struct ep_member {
	int fd;
	uint32_t events; /* as registered (EPOLL_CTL_MOD updates them) */
	uint64_t serial; /* the connection fd named then */
	uint64_t data; /* the event's data, as registered */
};

struct ep_hint {
	int epfd, n, cap; /* n < 0: a member was missed (no memory): no hint */
	struct ep_member *m;
	/* pl_direct_epoll_room's turn, and where the next report starts */
	unsigned turn, from;
};

static struct ep_hint *hints; /* hint_lock */
static int nhints, hints_cap; /* nhints also read as a hint without it */

/*
 * The epoll sets this process made (epoll_create) that are exact: no
 * member can have come in behind the preload, for the set's descriptor
 * was never duplicated (dup, fcntl), passed (SCM_RIGHTS) or inherited by
 * a fork since, and no epoll set was put inside it. A wait on one
 * covers the set's own direct members, its hint (complete, then) and
 * those registered edge-triggered or one-shot, which it arms but does
 * not look at; so a thread asleep on its own set arms its own
 * connections and counts as asleep on them alone, and other threads'
 * naps may take the READER bits of theirs (disarm). Without this, any
 * epoll sleeper armed every direct connection of the process and kept
 * every nap from disarming (sleepers_all): a paced client of 4 threads
 * had each GPU answer ring gsockd. Entries go with any of the above,
 * with the descriptor (pl_direct_epoll_forget), and all at a fork.
 * waiters counts the waits on the set that cover its members: a direct
 * connection added to it (or changed to EPOLLIN) meanwhile is armed
 * by the epoll_ctl, so a sleeper that does not cover it yet is woken
 * all the same. Under hint_lock.
 */
struct ep_made {
	int epfd;
	int waiters;
	unsigned long long id; /* this entry, not another for the number later */
};

static struct ep_made *mades;
static int nmades, mades_cap; /* nmades also read without the lock */
static unsigned long long made_ids;

/* Every so many epoll waits of a thread cover every connection anyway. */
#define HINT_FULL_EVERY 16

static struct ep_hint *hint_of(int epfd)
{
	for (int i = 0; i < nhints; i++)
		if (hints[i].epfd == epfd)
			return &hints[i];
	return NULL;
}

static struct ep_made *made_of(int epfd)
{
	for (int i = 0; i < nmades; i++)
		if (mades[i].epfd == epfd)
			return &mades[i];
	return NULL;
}

static void made_drop(struct ep_made *m)
{
	*m = mades[nmades - 1];
	__atomic_store_n(&nmades, nmades - 1, __ATOMIC_RELEASE);
}

/* A fork (under hint_lock): every set is both processes' now. */
static void made_fork(void)
{
	__atomic_store_n(&nmades, 0, __ATOMIC_RELEASE);
}

int pl_direct_epoll_tracked(void)
{
	if (in_fork)
		return 0;
	return __atomic_load_n(&nhints, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&nmades, __ATOMIC_ACQUIRE);
}

void pl_direct_epoll_made(int epfd)
{
	struct ep_made *m;

	if (epfd >= 0 && epfd < EPFD_MAP)
		__atomic_store_n(&epfd_map[epfd], 2, __ATOMIC_RELAXED);
	if (epfd < 0 || in_fork)
		return;
	pthread_once(&fork_once, fork_setup);
	pthread_rwlock_wrlock(&hint_lock);
	m = made_of(epfd); /* an entry the close of its number missed */
	if (!m && nmades == mades_cap) {
		int cap = mades_cap ? 2 * mades_cap : 8;
		struct ep_made *n = realloc(mades, cap * sizeof(*n));

		if (n) {
			mades = n;
			mades_cap = cap;
		}
	}
	if (!m && nmades < mades_cap) { /* else not exact: no memory */
		m = &mades[nmades];
		__atomic_store_n(&nmades, nmades + 1, __ATOMIC_RELEASE);
	}
	if (m)
		*m = (struct ep_made){ epfd, 0, ++made_ids };
	pthread_rwlock_unlock(&hint_lock);
}

void pl_direct_epoll_taint(int fd)
{
	struct ep_made *m;

	if (!__atomic_load_n(&nmades, __ATOMIC_ACQUIRE) || in_fork)
		return;
	pthread_rwlock_wrlock(&hint_lock);
	m = made_of(fd);
	if (m)
		made_drop(m);
	pthread_rwlock_unlock(&hint_lock);
}

/* A wait that covered exact set id (numbered epfd) is over. */
static void made_unwait(int epfd, unsigned long long id)
{
	struct ep_made *m;

	pthread_rwlock_rdlock(&hint_lock);
	m = made_of(epfd);
	if (m && m->id == id)
		__atomic_fetch_sub(&m->waiters, 1, __ATOMIC_SEQ_CST);
	pthread_rwlock_unlock(&hint_lock);
}

/* 1: fd is an epoll set, 0: it is not, -1: the kernel cannot say. */
static int epoll_kind(int fd)
{
	char path[40], to[32];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, to, sizeof(to) - 1);
	if (n < 0)
		return -1;
	to[n] = '\0';
	return strcmp(to, "anon_inode:[eventpoll]") == 0;
}

/* Whether fd is an epoll set (where the kernel cannot say, as if it were). */
static int is_epoll(int fd)
{
	return epoll_kind(fd) != 0;
}

static int serial_alive(const uint64_t *sn, int n);

void pl_direct_epoll_ctl(int epfd, int op, int fd, const struct pl_sock *s,
			 const struct epoll_event *ev)
{
	struct pl_dconn *c = s ? __atomic_load_n(&s->dc, __ATOMIC_ACQUIRE) :
				 NULL;
	struct ep_hint *h;
	struct ep_made *m;
	uint64_t old_sn = 0;
	int i, arm = 0;

	if (in_fork)
		return;
	/* A set put inside an exact set hides its members from the preload. */
	if (op == EPOLL_CTL_ADD && !s &&
	    __atomic_load_n(&nmades, __ATOMIC_ACQUIRE)) {
		pthread_rwlock_rdlock(&hint_lock);
		m = made_of(epfd);
		pthread_rwlock_unlock(&hint_lock);
		if (m && is_epoll(fd))
			pl_direct_epoll_taint(epfd);
	}
	/* Nothing to do before a direct ADD (nor hint_lock to take: the
	 * fork handlers that cover it come with the first direct connection). */
	if (op == EPOLL_CTL_ADD ? !c :
			       !__atomic_load_n(&nhints, __ATOMIC_ACQUIRE))
		return;
	pthread_rwlock_wrlock(&hint_lock);
	m = made_of(epfd);
	/*
	 * A direct member added (to any set: a wait may cover the set
	 * through a dup or a nesting, or have begun before the process had
	 * direct connections) is armed at once; one changed to EPOLLIN, when
	 * a wait covers the set or one of the kernel's alone may.
	 */
	arm = c && ev && (ev->events & EPOLLIN) &&
	      (op == EPOLL_CTL_ADD ||
	       (op == EPOLL_CTL_MOD &&
		((m && __atomic_load_n(&m->waiters, __ATOMIC_SEQ_CST) > 0) ||
		 __atomic_load_n(&pl_plain_waits, __ATOMIC_SEQ_CST))));
	h = hint_of(epfd);
	if (!h && op == EPOLL_CTL_ADD) {
		if (nhints == hints_cap) {
			int cap = hints_cap ? 2 * hints_cap : 8;
			struct ep_hint *n = realloc(hints, cap * sizeof(*n));

			if (!n)
				goto miss; /* no hint: its waits cover everything */
			hints = n;
			hints_cap = cap;
		}
		h = &hints[nhints];
		*h = (struct ep_hint){ epfd, 0, 0, NULL, 0, 0 };
		__atomic_store_n(&nhints, nhints + 1, __ATOMIC_RELEASE);
	}
	if (!h || h->n < 0)
		goto out;
	for (i = 0; i < h->n && h->m[i].fd != fd; i++)
		;
	if (op == EPOLL_CTL_DEL) {
		if (i < h->n)
			h->m[i] = h->m[--h->n];
	} else if (op == EPOLL_CTL_MOD) {
		if (i < h->n) {
			h->m[i].events = ev ? ev->events : 0;
			h->m[i].data = ev ? ev->data.u64 : 0;
		}
	} else if (op == EPOLL_CTL_ADD) {
		if (i == h->n && h->n == h->cap) {
			int cap = h->cap ? 2 * h->cap : 16;
			struct ep_member *n = realloc(h->m, cap * sizeof(*n));

			if (!n) { /* a hint that misses one would be wrong */
				h->n = -1;
				goto miss;
			}
			h->m = n;
			h->cap = cap;
		}
		if (i == h->n)
			h->n++;
		else if (h->m[i].serial != c->serial)
			old_sn = h->m[i].serial; /* its number was closed */
		h->m[i] = (struct ep_member){ fd, ev ? ev->events : 0,
					      c->serial, ev ? ev->data.u64 : 0 };
	}
	goto out;
miss: /* the set's members are not all known here: not exact */
	if (m)
		made_drop(m);
out:
	pthread_rwlock_unlock(&hint_lock);
	/*
	 * A wait on the set may be asleep over the members it found (the
	 * epoll_ctl came after): c's bytes must still wake it, so c is
	 * armed, and raised if it has some already.
	 */
	if (arm)
		arm_rx(c);
	/*
	 * The member this number named was closed while a dup keeps its
	 * connection: the kernel's set still holds it, unseen from here.
	 */
	if (old_sn && serial_alive(&old_sn, 1))
		pl_direct_epoll_taint(epfd);
}

void pl_direct_fds_gone(int lo, int hi)
{
	if (lo < 0)
		lo = 0;
	if (hi >= EPFD_MAP)
		hi = EPFD_MAP - 1;
	for (int fd = lo; fd <= hi; fd++)
		if (__atomic_load_n(&epfd_map[fd], __ATOMIC_RELAXED))
			__atomic_store_n(&epfd_map[fd], 0, __ATOMIC_RELAXED);
}

void pl_direct_epoll_forget(int lo, int hi)
{
	if (!pl_direct_epoll_tracked())
		return; /* close is called often */
	pthread_rwlock_wrlock(&hint_lock);
	for (int i = 0; i < nhints;) {
		if (hints[i].epfd < lo || hints[i].epfd > hi) {
			i++;
			continue;
		}
		free(hints[i].m);
		hints[i] = hints[nhints - 1];
		__atomic_store_n(&nhints, nhints - 1, __ATOMIC_RELEASE);
	}
	for (int i = 0; i < nmades;) {
		if (mades[i].epfd < lo || mades[i].epfd > hi)
			i++;
		else
			made_drop(&mades[i]);
	}
	pthread_rwlock_unlock(&hint_lock);
}

/* Whether s is still the connection of serial *arg. */
static int same_conn(const struct pl_sock *s, int i, const void *arg)
{
	const struct pl_dconn *c = __atomic_load_n(&s->dc, __ATOMIC_ACQUIRE);

	return c && c->serial == ((const uint64_t *)arg)[i];
}

/* Members (fd, serial) of epfd's hint that are gone: dropped. */
static void hint_prune(int epfd, const int *fd, const uint64_t *sn, int n)
{
	struct ep_hint *h;

	pthread_rwlock_wrlock(&hint_lock);
	h = hint_of(epfd);
	for (int i = 0; h && h->n > 0 && i < n; i++)
		for (int j = 0; j < h->n; j++)
			if (h->m[j].fd == fd[i] && h->m[j].serial == sn[i]) {
				h->m[j] = h->m[--h->n];
				break;
			}
	pthread_rwlock_unlock(&hint_lock);
}

/*
 * Whether one of the connections sn[0..n) is still open, under another
 * number (a member closed under a dup stays in the kernel's set).
 */
static int serial_alive(const uint64_t *sn, int n)
{
	const struct pl_dconn *c;
	int alive = 0;

	pthread_mutex_lock(&list_lock);
	for (c = conns; c && !alive; c = c->next)
		for (int i = 0; i < n && !alive; i++)
			alive = c->serial == sn[i];
	pthread_mutex_unlock(&list_lock);
	return alive;
}

/*
 * Whether a member registered with events e is looked at (1), only
 * armed (2) or neither (0). A hint names only members the kernel reports
 * while their rings have bytes (a hinted member found ready ends the
 * look). An exact set's wait covers every member watched for input: an
 * edge-triggered one is raised by a byte of its own like any other, and
 * a one-shot one is only armed, for the kernel reports it no more once
 * it fired.
 */
static int member_use(uint32_t e, int exact)
{
	if (!(e & EPOLLIN))
		return 0;
	if (exact)
		return e & EPOLLONESHOT ? 2 : 1;
	return e & (EPOLLONESHOT | EPOLLET) ? 0 : 1;
}

/*
 * The kernel's events fill first; a member reported here that finds no
 * room is found again by the next wait (its bytes stay), but always
 * after the kernel's and always the same ones first would starve it:
 * so the kernel gets the room these leave (half of it when they would
 * fill it; every other wait on the set when there is room for one), and
 * the members are taken from the one after the last reported.
 */
int pl_direct_epoll_room(struct pl_dscope *sc, int n)
{
	struct ep_hint *h;
	unsigned t = 1;

	if (!sc->nrdy || n <= 0)
		return n;
	if (sc->nrdy < n)
		return n - sc->nrdy;
	if (n > 1)
		return n / 2;
	pthread_rwlock_rdlock(&hint_lock);
	h = hint_of(sc->epfd);
	if (h)
		t = __atomic_fetch_add(&h->turn, 1, __ATOMIC_RELAXED);
	pthread_rwlock_unlock(&hint_lock);
	return t % 2;
}

int pl_direct_epoll_merge(struct pl_dscope *sc, struct epoll_event *e, int n,
			  int r)
{
	struct ep_hint *h;
	int last = -1;

	if (r < 0 || !sc->nrdy)
		return r;
	pthread_rwlock_rdlock(&hint_lock);
	h = hint_of(sc->epfd);
	unsigned from = h ? __atomic_load_n(&h->from, __ATOMIC_RELAXED) : 0;

	for (int t = 0; h && t < h->n; t++) {
		int at = (int)((from + (unsigned)t) % (unsigned)h->n);
		const struct ep_member *m = &h->m[at];
		int j = 0, k = 0;

		if (member_use(m->events, 1) != 1 || (m->events & EPOLLET))
			continue;
		while (j < sc->nrdy && sc->rdy[j] != m->serial)
			j++;
		if (j == sc->nrdy)
			continue;
		/* one the kernel reported too (a wake-up byte, or EPOLLOUT) */
		while (k < r && e[k].data.u64 != m->data)
			k++;
		if (k < r) {
			e[k].events |= m->events & (EPOLLIN | EPOLLRDNORM);
		} else if (r < n) {
			e[r].events = m->events & (EPOLLIN | EPOLLRDNORM);
			e[r].data.u64 = m->data;
			r++;
			last = at;
			__atomic_fetch_add(&quiet_reports, 1, __ATOMIC_RELAXED);
		}
	}
	if (h && last >= 0) /* racing waits: one of their turns wins */
		__atomic_store_n(&h->from, (unsigned)last + 1, __ATOMIC_RELAXED);
	pthread_rwlock_unlock(&hint_lock);
	sc->nrdy = 0;
	return r;
}

void pl_direct_scope_epoll(struct pl_dscope *sc, int epfd)
{
	static __thread unsigned waits;
	int here_fd[64], *fd = here_fd, n = 0, nlook = 0, nlt = 0, full, exact,
	    nomem;
	uint64_t here_sn[64], *sn = here_sn;
	const struct ep_hint *h;
	struct ep_made *m;

	scope_empty(sc);
	if (!pl_direct_active())
		return;
	sc->all = 1;
	full = ++waits % HINT_FULL_EVERY == 0;
	pthread_rwlock_rdlock(&hint_lock);
	h = hint_of(epfd);
	m = made_of(epfd);
	exact = m && (!h || h->n >= 0);
	if (full && !exact) {
		pthread_rwlock_unlock(&hint_lock);
		return;
	}
	if (exact) { /* counted before its members are read: see waiters */
		__atomic_fetch_add(&m->waiters, 1, __ATOMIC_SEQ_CST);
		sc->exact = 1;
		sc->epfd = epfd;
		sc->set_id = m->id;
	}
	if (h && h->n > (int)(sizeof(here_fd) / sizeof(here_fd[0]))) {
		fd = malloc(h->n * sizeof(*fd));
		sn = malloc(h->n * sizeof(*sn));
	}
	/*
	 * The members looked at first (level-triggered ones first of all),
	 * then those only armed.
	 */
	for (int pass = 1; pass <= 3; pass++)
		for (int i = 0; h && fd && sn && i < h->n; i++) {
			uint32_t ev = h->m[i].events;
			int use = member_use(ev, exact);

			if (use != (pass < 3 ? 1 : 2) ||
			    (pass < 3 && !(ev & EPOLLET) != (pass == 1)))
				continue;
			fd[n] = h->m[i].fd;
			sn[n++] = h->m[i].serial;
			nlook += pass < 3;
			nlt += pass == 1;
		}
	nomem = h && h->n > 0 && (!fd || !sn); /* h is not ours after this */
	pthread_rwlock_unlock(&hint_lock);
	if (nomem)
		goto cover_all;
	if (n > sc->cap) {
		sc->s = malloc(n * sizeof(*sc->s));
		if (!sc->s)
			goto cover_all;
		sc->cap = n;
	}
	if (exact && n > (int)(sizeof(sc->rdy_here) / sizeof(sc->rdy_here[0])) &&
	    !(sc->rdy = malloc(n * sizeof(*sc->rdy)))) {
		sc->rdy = sc->rdy_here;
		nlt = 0; /* no room to note them: the wake-up bytes' way */
	}
	if (n > 0) {
		int k = 0, gone = 0, look = 0, lt = 0;

		pl_fd_get_at(fd, n, same_conn, sn, sc->s);
		for (int i = 0; i < n; i++)
			if (sc->s[i]) {
				look += i < nlook;
				lt += i < nlt;
				sc->s[k++] = sc->s[i];
			} else { /* closed, or the number names another now */
				fd[gone] = fd[i], sn[gone++] = sn[i];
			}
		if (gone)
			hint_prune(epfd, fd, sn, gone);
		sc->n = k;
		sc->nlook = look;
		sc->nlt = exact ? lt : 0;
		if (gone && exact && serial_alive(sn, gone)) {
			/* its number closed, its connection kept by a dup */
			pl_direct_epoll_taint(epfd);
			goto cover_all;
		}
		if (k > 0 && !exact) {
			sc->all = 0;
			sc->hint = 1;
		}
	}
	if (exact)
		sc->all = 0;
	goto out;
cover_all: /* no memory for the list: every connection, as without a hint */
	scope_drop(sc);
	sc->all = 1;
out:
	if (fd != here_fd)
		free(fd);
	if (sn != here_sn)
		free(sn);
}

void pl_direct_scope_end(struct pl_dscope *sc)
{
	scope_drop(sc);
}

/* ---- descriptors that cannot leave ---- */

static int crosses_exec(int fd, const struct pl_sock *s)
{
	int fl;

	if (s->route != GS_ROUTE_DIRECT)
		return 0;
	fl = pl_real.fcntl(fd, F_GETFD);
	return fl >= 0 && !(fl & FD_CLOEXEC);
}

int pl_direct_exec_check(void)
{
	int fd;

	if (!pl_direct_active())
		return 0;
	fd = pl_fd_find(crosses_exec);
	if (fd < 0)
		return 0;
	pl_log(PL_LOG_ERROR,
	       "exec refused: descriptor %d is a direct connection to a GPU application, whose bytes the new program could not reach; close it or set FD_CLOEXEC before exec, or run with GSOCK_DIRECT=off",
	       fd);
	errno = EOPNOTSUPP;
	return -1;
}

int pl_direct_rights_check(const struct msghdr *msg, const char *call)
{
	struct cmsghdr *cm;

	if ((!pl_direct_active() &&
	     !__atomic_load_n(&nmades, __ATOMIC_ACQUIRE)) ||
	    !msg->msg_control)
		return 0;
	for (cm = CMSG_FIRSTHDR((struct msghdr *)msg); cm;
	     cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		size_t n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		/* a header the kernel refuses (EINVAL) passes nothing: it says so */
		if (cm->cmsg_len < CMSG_LEN(0) ||
		    (const char *)cm + cm->cmsg_len >
			    (const char *)msg->msg_control + msg->msg_controllen)
			return 0;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			struct pl_sock *s;
			int fd, direct;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			pl_direct_epoll_taint(fd); /* the receiver may change it */
			s = pl_fd_get(fd);
			direct = s && s->route == GS_ROUTE_DIRECT;
			pl_sock_put(s);
			if (direct) {
				pl_log(PL_LOG_ERROR,
				       "%s refused: descriptor %d is a direct connection to a GPU application and cannot be passed to another process (SCM_RIGHTS); run with GSOCK_DIRECT=off",
				       call, fd);
				errno = EOPNOTSUPP;
				return -1;
			}
		}
	}
	return 0;
}
