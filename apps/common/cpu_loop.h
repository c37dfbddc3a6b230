/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU servers' event loop (facever's and infer's C and P): threads
 * that each own a SO_REUSEPORT listener, an epoll set and their
 * connections for life (no lock anywhere), each connection with a
 * buffer of answers not yet sent that waits for EPOLLOUT when the socket
 * is full. The application reads and parses (its read hook), batches
 * what a wake-up brought (its wakeup hook, after each epoll_wait's
 * events), and queues answers with cl_put. A connection whose answers
 * pile up is not read (out_pause) and one that takes none of them for
 * stall_ns is closed, so that a client that sends and never reads holds
 * neither memory nor its place.
 *
 * A connection closed by cl_kill stays allocated (dead) until the end of
 * the wake-up, so that a batch that names it may still look at it.
 */
#ifndef CPU_LOOP_H
#define CPU_LOOP_H

#include <stddef.h>
#include <stdint.h>

struct cl_worker;

/* A connection: the first member of the application's own. */
struct cl_conn {
	int fd;
	int closing; /* close once its answers are sent */
	int dead; /* closed; freed at the end of the wake-up */
	unsigned pending; /* the application's: its requests in the batch */
	uint64_t last; /* when its last bytes came (cl_now_ns) */
	uint64_t moved; /* when its answers last moved: queued or sent */
	struct cl_worker *wk;
	uint8_t *out; /* answers not yet sent: out[out_off, out_len) */
	size_t out_off, out_len, out_cap;
	struct cl_conn *prev, *next; /* the worker's connections */
	struct cl_conn *next_dead;
};

/* What the application does; only read is required. */
struct cl_ops {
	size_t conn_size; /* its connection's bytes (zeroed), cl_conn first */
	size_t out_max; /* answer bytes a connection may leave unread */
	/* Stop reading a connection while this many answer bytes wait (0). */
	size_t out_pause;
	/* Close one whose waiting answers have not moved this long (0). */
	uint64_t stall_ns;
	/* A new connection: 0, or -1 to close it (out of memory). */
	int (*accepted)(struct cl_conn *c);
	/* The connection is readable (or its end or an error came). */
	void (*read)(struct cl_conn *c);
	/* After each wake-up's events: run what they brought. */
	void (*wakeup)(struct cl_worker *wk);
	/* About every 100 ms: time limits. */
	void (*tick)(struct cl_worker *wk);
	/* Before a dead connection's memory goes: free what it holds. */
	void (*freed)(struct cl_conn *c);
};

/* A server thread: the first member of the application's own. */
struct cl_worker {
	int lfd, ep;
	const struct cl_ops *ops;
	struct cl_conn *conns, *dead;
	uint64_t conns_seen; /* connections accepted */
};

uint64_t cl_now_ns(void);
/*
 * Listen on spec (HOST:PORT, [V6]:PORT or PORT, SO_REUSEPORT) with its own
 * epoll set: 0, or a <sysexits.h> status after saying why on stderr.
 * From then on SIGINT and SIGTERM stop cl_serve, and SIGPIPE is ignored.
 */
int cl_listen(struct cl_worker *wk, const struct cl_ops *ops,
	      const char *prog, const char *spec);
/*
 * Run n workers (each stride bytes apart from the first: the application's
 * worker structs) on threads until SIGINT or SIGTERM.
 */
void cl_serve(struct cl_worker *first, size_t stride, unsigned n);
/* Queue n bytes of answer: 0, or -1 when c is cut off (out_max, memory). */
int cl_put(struct cl_conn *c, const void *p, size_t n);
/* Send what c holds; wait for EPOLLOUT when the socket is full. */
void cl_flush(struct cl_conn *c);
/* Whether c's unsent answers are over out_pause: read no more of it. */
int cl_backlogged(const struct cl_conn *c);
/* Stop cl_serve, as SIGTERM does (any thread may call it). */
void cl_stop(void);
/* Close c (it is freed at the end of the wake-up). */
void cl_kill(struct cl_conn *c);

#endif
