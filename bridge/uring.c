/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The io_uring data path. A worker with a ring keeps one receive in
 * flight per connected socket (into its rx ring's free space) and one
 * send while its tx ring holds bytes; a loop turn's new requests go to
 * the kernel in one submission, which also brings back what completed.
 * Listening and connecting sockets stay in the worker's epoll set, whose
 * descriptor the ring polls, so one wait covers everything. sock.c
 * prepares the requests and handles their completions (br_sock_io_done).
 *
 * Choosing: the io key (default epoll, which measured faster on loopback
 * TCP: gsock.conf has the figures). "auto" takes io_uring where gsockd was
 * built with liburing and the kernel lets a ring be made (a container's
 * seccomp can refuse io_uring_setup), and says which in one log line.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "bridge.h"
#include "log.h"

#ifdef HAVE_LIBURING
#include <liburing.h>
#include <poll.h>

/* Room for every request of a turn; the kernel keeps CQ overflow. */
#define BR_URING_SQ 4096
#define BR_URING_CQ 65536

/* Whether receives may ask the kernel to wait for data before trying. */
static bool poll_first;

/*
 * Make a ring with the best set-up the kernel has: completions run only
 * when this thread asks (DEFER_TASKRUN, 6.1), else without interrupting
 * it (COOP_TASKRUN, 5.19), else plainly.
 */
static int ring_init(struct io_uring *r, bool *single)
{
	static const unsigned tries[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		0,
	};
	int err = -EINVAL;

	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		struct io_uring_params p = { .flags = tries[i] |
						      IORING_SETUP_CQSIZE,
					     .cq_entries = BR_URING_CQ };

		err = io_uring_queue_init_params(BR_URING_SQ, r, &p);
		if (err == 0) {
			*single = i == 0;
			return 0;
		}
		if (err != -EINVAL)
			break;
	}
	return err;
}

/* Why this kernel cannot serve the data path, or NULL when it can. */
static const char *probe(void)
{
	static const int ops[] = { IORING_OP_SENDMSG, IORING_OP_RECVMSG,
				   IORING_OP_POLL_ADD, IORING_OP_ASYNC_CANCEL };
	static char why[160];
	struct io_uring_probe *pr;
	struct io_uring r;
	bool single;
	int err = ring_init(&r, &single);

	if (err) {
		snprintf(why, sizeof(why), "the kernel refuses io_uring: %s",
			 strerror(-err));
		return why;
	}
	why[0] = 0;
	if (!(r.features & IORING_FEAT_EXT_ARG) ||
	    !(r.features & IORING_FEAT_FAST_POLL) ||
	    !(r.features & IORING_FEAT_NODROP))
		snprintf(why, sizeof(why),
			 "the kernel's io_uring is too old (needs 5.11's features)");
	pr = io_uring_get_probe_ring(&r);
	for (size_t i = 0; !why[0] && i < sizeof(ops) / sizeof(ops[0]); i++)
		if (!pr || !io_uring_opcode_supported(pr, ops[i]))
			snprintf(why, sizeof(why),
				 "the kernel's io_uring lacks operation %d",
				 ops[i]);
	if (pr)
		io_uring_free_probe(pr);
	io_uring_queue_exit(&r);
	poll_first = single; /* 6.0 and later take IORING_RECVSEND_POLL_FIRST */
	return why[0] ? why : NULL;
}
#endif

int br_io_decide(void)
{
	const char *why;

	if (br.conf.io == BR_IO_EPOLL) {
		br_info("io: epoll (io = epoll)");
		return 0;
	}
#ifdef HAVE_LIBURING
	why = br.conf.rsocket ?
		      "transport rsocket: its sockets live in the preload, which io_uring would bypass" :
		      probe();
#else
	why = "gsockd was built without liburing";
#endif
	if (!why) {
		br.io_uring = true;
		br_info("io: io_uring (%s)", br.conf.io == BR_IO_URING ?
						     "io = io_uring" :
						     "io = auto: the kernel allows it");
		return 0;
	}
	if (br.conf.io == BR_IO_URING) {
		br_err("io = io_uring cannot be had: %s", why);
		return -1;
	}
	br_info("io: epoll (io = auto: %s)", why);
	return 0;
}

#ifdef HAVE_LIBURING

bool br_uring_poll_first(void)
{
	return poll_first;
}

int br_uring_open(struct br_worker *w)
{
	struct io_uring_sqe *sqe;
	bool single;
	int err;

	w->ring = calloc(1, sizeof(*w->ring));
	if (!w->ring)
		return -ENOMEM;
	err = ring_init(w->ring, &single);
	if (err) {
		free(w->ring);
		w->ring = NULL;
		return err;
	}
	/* The epoll set (listeners, connects, wake-ups) through the ring. */
	sqe = io_uring_get_sqe(w->ring);
	io_uring_prep_poll_multishot(sqe, w->epfd, POLLIN);
	io_uring_sqe_set_data64(sqe, BR_UD_EPOLL);
	w->ep_ready = true; /* look once: anything added before now */
	return 0;
}

void br_uring_close(struct br_worker *w)
{
	if (!w->ring)
		return;
	io_uring_queue_exit(w->ring);
	free(w->ring);
	w->ring = NULL;
}

struct io_uring_sqe *br_uring_sqe(struct br_worker *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(w->ring);

	/* Full: hand the kernel what is there to make room. */
	for (int i = 0; !sqe && i < 4; i++) {
		io_uring_submit(w->ring);
		sqe = io_uring_get_sqe(w->ring);
	}
	return sqe;
}

/* One completion: a socket's request, or the epoll set is ready. */
static void dispatch(struct br_worker *w, uint64_t ud, int res,
		     unsigned flags)
{
	if (ud == BR_UD_EPOLL) {
		w->ep_ready = true;
		if (!(flags & IORING_CQE_F_MORE)) { /* the kernel ended it */
			struct io_uring_sqe *sqe = br_uring_sqe(w);

			if (sqe) {
				io_uring_prep_poll_multishot(sqe, w->epfd,
							     POLLIN);
				io_uring_sqe_set_data64(sqe, BR_UD_EPOLL);
			} else {
				br_err("%s: cannot re-arm its epoll poll",
				       w->name);
			}
		}
		return;
	}
	br_sock_io_done((struct br_sock *)(uintptr_t)(ud & ~(uint64_t)BR_OP_MASK),
			(unsigned)(ud & BR_OP_MASK), res);
}

int br_uring_turn(struct br_worker *w, int64_t timeout_ns)
{
	struct io_uring *r = w->ring;
	struct io_uring_cqe *cqe;
	unsigned kflags = IO_URING_READ_ONCE(*r->sq.kflags);
	int n = 0;

	if (timeout_ns) {
		struct __kernel_timespec ts = {
			.tv_sec = timeout_ns / 1000000000,
			.tv_nsec = timeout_ns % 1000000000,
		};

		io_uring_submit_and_wait_timeout(
			r, &cqe, 1, timeout_ns > 0 ? &ts : NULL, NULL);
	} else if (io_uring_sq_ready(r) ||
		   (kflags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) {
		io_uring_submit_and_get_events(r);
	}
	while (io_uring_peek_cqe(r, &cqe) == 0) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		unsigned flags = cqe->flags;

		io_uring_cqe_seen(r, cqe);
		dispatch(w, ud, res, flags);
		n++;
	}
	return n;
}

#endif
