/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's state: registered applications, their arenas, the real sockets
 * behind each arena socket, and the threads that serve them.
 *
 * Threading contract:
 * - The control thread (main.c) alone owns the control socket, the list of
 *   applications (br.apps, and struct br_app's fields marked "control"),
 *   registration, and the doorbell watch (watch.c): while a worker sleeps
 *   it looks at that worker's doorbell queues and wakes it
 *   (br_worker.wake_fd); a napping worker (sleeping 2) looks itself. Its
 *   period is an atomic that a worker going to sleep owed an answer may
 *   shorten (br_watch_hurry).
 * - A worker owns the real sockets whose br_sock.owner names it, for the
 *   socket's whole life: it alone touches their fields, descriptors,
 *   rings' bridge-side counters and its own epoll set, so the data path
 *   takes no lock. Its io_uring ring (where io = io_uring) is its own
 *   too: only it submits, and a socket's requests in flight name the
 *   socket, which is not freed before they complete. It alone consumes
 *   the doorbell queues it serves
 *   (queue q of an application with n workers is served by worker q % n)
 *   and their br_app.dbq_head entries.
 * - What crosses threads: br_sock.owner (atomic; stored with release,
 *   last, by whoever sets a socket up, so an owner that sees its own
 *   number sees the socket made), br_app.dead and .refs (atomic), slot
 *   claims (br_slot, atomic compare-and-swap: one worker serves each
 *   request), the socket id free list (br_app.ids_lock), and messages in
 *   a worker's inbox (br_worker.lock): "attach this application", "adopt
 *   this socket" (an accepted connection handed to another worker), "serve
 *   this command" (a request for a socket another worker owns), "add your
 *   sockets to this gsock-stat answer" (stat.c: the last to add sends it).
 * - An application lives while anything holds a reference: the control
 *   thread until it sees it die, each attached worker until it has closed
 *   its sockets of it, each message in an inbox. The last br_app_put()
 *   frees it; br_app_kill() marks it dead from any thread.
 */
#ifndef BR_BRIDGE_H
#define BR_BRIDGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../devlib/gsock_arena.h"
#include "conf.h"

/* What an epoll event's data.ptr points at. */
enum br_ev_kind {
	BR_EV_CONTROL, /* the control socket: applications connect here */
	BR_EV_APP, /* an application's control connection */
	BR_EV_SOCK, /* a real socket of an arena socket (a worker's epoll) */
	BR_EV_SIGNAL, /* signalfd: SIGINT, SIGTERM */
	BR_EV_WAKE, /* an eventfd: messages waiting, or wake up and look */
	BR_EV_TIMER, /* a timerfd: a wait shorter than a millisecond ended */
	BR_EV_DIRECT, /* a preloaded CPU end's socketpair (direct.c) */
};

struct br_ev {
	enum br_ev_kind kind;
};

/* A real socket's life in the bridge. */
enum br_sock_state {
	BS_FREE, /* id available */
	BS_OPEN, /* created, not yet listening or connected */
	BS_LISTEN, /* listening; accepts ahead into acceptq */
	BS_CONNECTING, /* non-blocking connect in flight */
	BS_CONNECTED, /* moving bytes */
	BS_CLOSING, /* closed by the app; draining its tx ring */
	BS_CANCELLING, /* being freed: waiting for its io_uring requests */
};

/*
 * A socket's io_uring requests in flight (br_sock.io), also the low bits
 * of their user_data (the rest is the br_sock's address). BR_UD_EPOLL:
 * the ring's poll of the worker's epoll set.
 */
#define BR_OP_RX 1u
#define BR_OP_TX 2u
#define BR_OP_CANCEL 4u
#define BR_OP_MASK 7u
#define BR_UD_EPOLL 1u

struct br_app;

/* Fields other than owner and gen are the owning worker's alone. */
struct br_sock {
	struct br_ev ev; /* BR_EV_SOCK */
	struct br_app *app;
	int owner; /* atomic: worker index, -1 while free */
	uint32_t gen; /* atomic: bumped each time the id is taken */
	uint32_t id; /* index in the arena's socket table */
	int fd;
	int domain;
	enum br_sock_state state;
	bool adopted; /* the owner has it in its epoll set */
	bool readable; /* edge seen, not yet drained */
	bool rdhup; /* the peer's FIN (or an error) seen by epoll */
	bool writable; /* edge seen, no EAGAIN since */
	bool in_epoll;
	bool shut_wr_pending; /* shutdown(SHUT_WR) once tx drains */
	uint8_t io; /* BR_OP_* in flight (io_uring) */
	uint32_t owed_in; /* 1 + the owner's period it is owed in; 0: not */
	uint32_t status; /* the bridge's copy of gs_sock.status */
	uint64_t rx_tail; /* the bridge's copy of gs_sock.rx_tail */
	uint64_t tx_head; /* the bridge's copy of gs_sock.tx_head */
	int wait_slot; /* slot waiting on connect, or -1 */
	int dseg; /* the direct pool's segment its bytes move in, or -1 */
	uint8_t dside; /* its side of dseg: 0 connected, 1 accepted */
	bool dlisten; /* a listener the direct path knows */
	/*
	 * Its connect waits for a preloaded program's accept to take its
	 * segment (br_direct_hold); once the kernel's connect completed,
	 * until hold_until_ns, when it returns on the bridge.
	 */
	bool dhold;
	uint64_t hold_until_ns; /* 0: connect(2) not complete yet */
	int *acceptq; /* accepted fds not yet taken by gaccept */
	int *acceptq_seg; /* each one's direct segment, or -1 */
	uint32_t acceptq_len, acceptq_cap;
	uint32_t next_worker; /* listener: where the next connection goes */
	uint64_t close_deadline_ns; /* BS_CLOSING: give up draining then */
	uint64_t last_ns; /* when bytes last moved (for gsock-stat) */
	char unix_path[108]; /* AF_UNIX path we bound, unlinked on close */
	struct br_sock *next_free; /* under br_app.ids_lock */
	/* io_uring: what the receive and the send in flight move */
	struct iovec rx_iov[2], tx_iov[2];
	struct msghdr rx_msg, tx_msg;
};

/* A command slot's bridge-side state; every field atomic. */
struct br_slot {
	uint64_t seq; /* request being served, or last served */
	uint32_t parked_on; /* 1 + the socket it waits on (accept, connect) */
};

struct br_app {
	struct br_ev ev; /* BR_EV_APP */
	struct br_app *next; /* control */
	int ctl_fd;
	pid_t pid;
	uid_t uid;
	bool direct; /* its device reaches the direct pool (hello) */
	int rx_fd; /* its receive pool's descriptor (hello), or -1 */
	uint64_t rx_size; /* its bytes */
	int peer; /* under br_direct's lock: its receive pool's index, or -1 */
	uint64_t reach; /* under br_direct's lock: indexes of pools it mapped */
	bool pending; /* control: its hello (and arena) not yet received */
	uint64_t hello_by_ns; /* control: when a pending one is dropped */
	int dead; /* atomic: rejected or gone; no new work */
	uint32_t refs; /* atomic: see the contract above */
	uint8_t *base; /* the arena, mapped */
	uint64_t size;
	/* geometry, validated once at registration, never re-read */
	uint32_t nslots, nsocks, ring_size, db_size, nqueues;
	uint32_t nworkers; /* workers serving it: min(queues, gsockd's) */
	char device[32]; /* its GPU as the arena names it, printable */
	uint32_t serial; /* gsock-stat's name for the arena: 1, 2, ... */
	struct gs_arena_hdr *hdr;
	struct gs_cmd *slots;
	struct gs_sock *socks;
	struct gs_dbq *dbq;
	uint64_t *db;
	uint8_t *rings;
	uint64_t *dbq_head; /* nqueues; entry q: the worker serving q */
	struct br_sock *sk; /* nsocks */
	struct br_slot *slot; /* nslots */
	pthread_mutex_t ids_lock; /* free_list */
	struct br_sock *free_list;
};

/* A message in a worker's inbox. Each holds a reference on app. */
enum br_msg_kind {
	BR_MSG_ATTACH, /* serve app's queues; the reference becomes the worker's */
	BR_MSG_ADOPT, /* take socket id (generation gen) into the epoll set */
	BR_MSG_CMD, /* serve req from slot: its socket is this worker's */
	BR_MSG_STAT, /* add its sockets to stat (app is NULL) */
	BR_MSG_CLAIMED, /* a preloaded accept took held socket id's segment */
};

struct br_stat;

struct br_msg {
	struct br_msg *next;
	enum br_msg_kind kind;
	struct br_app *app;
	uint32_t id, gen, slot;
	struct gs_cmd req;
	struct br_stat *stat;
};

struct io_uring;

/*
 * Each worker on lines of its own (128 bytes: two lines, which x86
 * fetches in pairs): fields written every loop turn (sleeping, now_ns,
 * the spin's) would otherwise share a line with a neighbour's.
 */
struct br_worker {
	_Alignas(128) uint32_t idx;
	int epfd;
	struct io_uring *ring; /* io_uring: the data path's; NULL: epoll */
	bool ep_ready; /* io_uring: the epoll set has events to take */
	int wake_fd; /* eventfd: an inbox message, or the watch saw a doorbell */
	struct br_ev wake_ev; /* BR_EV_WAKE */
	int timer_fd; /* timerfd: naps (br_epoll_wait_ns) */
	struct br_ev timer_ev; /* BR_EV_TIMER */
	pthread_t thread;
	bool started;
	int sleeping; /* atomic: 1 while in a wait only wake_fd ends, 2 napping */
	/*
	 * The worker's own: answers its sockets' kernels owe it. Bytes put
	 * in a socket's rx ring (or space freed in a full tx ring) make the
	 * socket owed (br_sock.owed_in); its next doorbell pays. While any
	 * is owed the worker spins until spin_until, busy_poll_us after the
	 * first debt or the last payment. Past that it naps, looking at its
	 * queues after each nap (watch_min_us, a quarter longer each time),
	 * for idle_sleep_us in all; what is still owed then is the watch's
	 * to find. Spins that end unpaid raise miss_rate; above one half the
	 * worker spins only every BR_PROBE_EVERY-th time (an application
	 * slower than busy_poll_us).
	 */
	uint32_t owed; /* sockets owed in this wake period */
	uint32_t period; /* bumped at each sleep: older debts lapse */
	uint32_t owes; /* debts started: the probe's count */
	uint32_t miss_rate; /* of 256: unpaid spins, moving mean 1/8 */
	bool spin_armed; /* spin_until was set for a debt */
	uint64_t spin_at; /* the spin starts here; before it, a nap */
	uint64_t spin_until;
	uint32_t spin_looks; /* looks since spin_at */
	bool spin_learnt; /* its first answer taught answer_nap_ns */
	/*
	 * answer_nap: the nap before a spin, learnt. An answer already there
	 * at the first look after it shortens it by an eighth; one the spin
	 * waited for longer than BR_SPIN_MARGIN_NS lengthens it by a quarter
	 * of the excess. So the spin covers the answers' spread, not their
	 * whole time, and the time before it costs one timer wake-up.
	 */
	uint64_t answer_nap_ns;
	uint64_t nap_ns, napped_ns; /* owed, not spinning: its own naps */
	/* counts, the worker's own, logged as gsockd stops */
	uint64_t n_sleeps, n_naps, n_paid_spinning, n_lapsed;
	uint64_t n_prenaps, n_first_answers, n_paid_first_look, spun_ns;
	pthread_mutex_t lock; /* inbox */
	struct br_msg *inbox, **inbox_tail;
	/* the worker's own */
	struct br_app **apps;
	uint32_t napps, apps_cap;
	uint32_t nclosing; /* its sockets in BS_CLOSING */
	uint32_t nheld; /* its connects held for a preloaded accept (dhold) */
	uint64_t now_ns; /* the time this loop turn (after any wait) */
	char name[16];
};

struct br {
	struct br_conf conf;
	int epfd; /* the control thread's */
	int wake_fd; /* the control thread's eventfd: an application died */
	int timer_fd; /* the control thread's timerfd: the watch's period */
	struct br_app *apps; /* control */
	uint32_t napps; /* control: registered applications */
	uint32_t serials; /* control: arenas registered so far */
	uint32_t npending; /* control: connections waiting for their hello */
	uint32_t nworkers;
	bool io_uring; /* workers move bytes with io_uring */
	struct br_worker *workers;
	int stopping; /* atomic */
	uid_t uid;
	int unpriv_port; /* lowest port an unprivileged user may bind */
};

extern struct br br;

/*
 * ThreadSanitizer sees gsockd's threads but not the application, through
 * which the arena protocol orders one worker's reply in a slot before the
 * next request, which another worker may serve. These say so to it.
 */
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#define br_tsan_release(p) __tsan_release(p)
#define br_tsan_acquire(p) __tsan_acquire(p)
#else
#define br_tsan_release(p) ((void)(p))
#define br_tsan_acquire(p) ((void)(p))
#endif

uint64_t br_now_ns(void);
struct epoll_event;
/*
 * epoll_wait for at most ns nanoseconds (-1: no limit, 0: a look); a
 * wait shorter than whole milliseconds ends by timer_fd, a timerfd in the
 * set, which the caller reads when it fires.
 */
int br_epoll_wait_ns(int epfd, int timer_fd, struct epoll_event *evs, int n,
		     int64_t ns);
/* A timerfd for that, in epfd's set with ev as its data; -1 (logged). */
int br_timer_open(int epfd, struct br_ev *ev);
void br_wake(int eventfd);

/* app.c */
int br_app_accept(int ctl_listen_fd);
struct ucred;
struct br_app *br_app_new(int fd, const struct ucred *peer);
void br_app_event(struct br_app *a, uint32_t events);
void br_app_sweep(uint64_t now);
int br_app_poll(struct br_worker *w, struct br_app *a);
int br_app_pending(struct br_app *a, uint32_t q);
/*
 * Send len bytes of buf on the control socket sock as one message, with
 * fd in SCM_RIGHTS unless fd < 0; never blocks. 0, or -1 with errno.
 */
int br_send_fd(int sock, const void *buf, size_t len, int fd);
void br_app_reject(struct br_app *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void br_app_kill(struct br_app *a);
bool br_app_dead(struct br_app *a);
void br_app_get(struct br_app *a);
void br_app_put(struct br_app *a);
void br_app_complete(struct br_app *a, uint32_t slot, int64_t result,
		     const void *addr, uint32_t addrlen);
void br_app_event_count(struct br_app *a);
void br_reap(void);

/* worker.c */
int br_workers_start(void);
/* Worker i's epoll set and wake-up, no thread: 0 or -1 (logged). */
int br_worker_init(struct br_worker *w, uint32_t i);
/*
 * One turn of worker w on the calling thread, waiting for nothing: what
 * the fuzzer (t/fuzz_ctl.c) drives in place of worker threads.
 */
int br_worker_turn(struct br_worker *w);
void br_workers_stop(void);
void br_worker_post(struct br_worker *w, struct br_msg *m);
struct br_worker *br_self(void);

/* Whether the calling worker owns s (any thread may ask). */
static inline bool br_sock_mine(struct br_sock *s)
{
	struct br_worker *w = br_self();

	return w && __atomic_load_n(&s->owner, __ATOMIC_ACQUIRE) == (int)w->idx;
}

/* s's entry in its application's arena. */
static inline struct gs_sock *br_sock_arena(struct br_sock *s)
{
	return &s->app->socks[s->id];
}

/* The calling worker handed s's kernel something it will answer... */
void br_worker_owe(struct br_sock *s);
/* ... and a doorbell of s came. */
void br_worker_paid(struct br_sock *s);

/* watch.c; all but br_watch_hurry are the control thread's */
void br_watch_start(void);
uint64_t br_watch_period_ns(void);
int br_watch(void);
void br_watch_next(int found, uint64_t quiet_ns);
void br_watch_report(void); /* its counts, to the log */
/* Its looks and finds so far (the control thread's, as the watch's). */
void br_watch_counts(uint64_t *looks, uint64_t *finds);
/* A worker going to sleep is owed an answer: the watch looks soon. */
void br_watch_hurry(void);

/* uring.c; br_uring_* exist where HAVE_LIBURING */
int br_io_decide(void);
int br_uring_open(struct br_worker *w);
void br_uring_close(struct br_worker *w);
struct io_uring_sqe *br_uring_sqe(struct br_worker *w);
int br_uring_turn(struct br_worker *w, int64_t timeout_ns);
bool br_uring_poll_first(void);

/*
 * direct.c: the same-host direct path. Init and the pool are the control
 * thread's; the rest is called by the worker that owns the socket.
 */
int br_direct_init(void);
void br_direct_fini(void);
/* Wake-up bytes written to preloaded programs' descriptors so far. */
uint64_t br_direct_wakeups(void);
/* The pool's memfd (-1: direct off) and geometry, for the welcome. */
int br_direct_pool(uint32_t *nsegs, uint32_t *dring, uint64_t *size);
/*
 * Receive pools (gsock_ctl.h), control thread: a registered application
 * whose hello brought one gets an index and learns the others' pools,
 * and they learn its; an answer says it mapped one; a dead application's
 * pool is named no more.
 */
struct gs_ctl_peer_ack;
void br_direct_app_joined(struct br_app *a);
void br_direct_peer_ack(struct br_app *a, const struct gs_ctl_peer_ack *k);
void br_direct_app_gone(struct br_app *a);
/* Segments held (by an end or a pending connection) now. */
uint32_t br_direct_held(void);
/* A listener is listening; one is freed. */
void br_direct_listen(struct br_sock *s);
void br_direct_unlisten(struct br_sock *s);
/* Before connect(2): take a segment if a listener of ours gets dst. */
void br_direct_connect(struct br_sock *s, const struct sockaddr *dst,
		       socklen_t dlen);
/* The connect failed: let the segment go. */
void br_direct_abandon(struct br_sock *s);
/* Listener ls accepted fd: its segment (-1: none), held for the end. */
int br_direct_accepted(struct br_sock *ls, int fd);
/* Control thread, each turn: pending entries of connections gone since. */
void br_direct_sweep(uint64_t now);
/* An accepted connection's segment that no end took. */
void br_direct_drop(int seg);
/*
 * connect(2) of s succeeded: a unix one keeps its segment only if it
 * reached the listener it was given for.
 */
void br_direct_connected(struct br_sock *s);
/* Tell the application s's path (gs_sock.direct), before it learns s. */
void br_direct_publish(struct br_sock *s);
/* s is freed: its side closed, its segment let go. */
void br_direct_close(struct br_sock *s);
/* gshutdown of direct s (how as shutdown(2)): a CPU peer sees EOF. */
void br_direct_shutdown(struct br_sock *s, int how);
/* A doorbell on direct s: wake its CPU peer if that peer waits. */
void br_direct_kick(struct br_sock *s);
/* s (a direct end) read its FIN: a dead CPU peer's reset comes first. */
void br_direct_peer_fin(struct br_sock *s);
/*
 * Control thread: a preloaded program's request (gs_ctl_dconnect) with
 * its socketpair end pair_fd (ours from here). Fills the reply.
 */
struct gs_ctl_dconnect;
struct gs_ctl_dreply;
void br_direct_cpu_connect(const struct gs_ctl_dconnect *req, int pair_fd,
			   uid_t uid, struct gs_ctl_dreply *rep);
/*
 * Control thread: a preloaded program listens (gs_ctl_dconnect of magic
 * GS_CTL_DLISTEN_MAGIC); it accepted a connection from this host
 * (GS_CTL_DACCEPT_MAGIC, with its socketpair end pair_fd, ours from
 * here): a held gconnect's segment becomes its side 1, and the
 * gconnect's worker learns it (BR_MSG_CLAIMED). Each fills the reply.
 */
void br_direct_cpu_listen(const struct gs_ctl_dconnect *req, uid_t uid,
			  struct gs_ctl_dreply *rep);
void br_direct_cpu_accept(const struct gs_ctl_dconnect *req, int pair_fd,
			  uid_t uid, struct gs_ctl_dreply *rep);
/*
 * Worker, s->dhold: whether s's connect still waits for a preloaded
 * accept. give_up: no longer (the segment goes, the bridge carries it).
 * False once claimed (s keeps its segment) or given up.
 */
bool br_direct_hold(struct br_sock *s, bool give_up);
/* Control thread: an event on a CPU end's socketpair. */
void br_direct_event(struct br_ev *e, uint32_t events);
/*
 * gsock-stat: s's byte counts from its segment. 0: not direct; 1:
 * direct; 2: direct, a ring of it in a receiver's GPU memory.
 */
int br_direct_counts(const struct br_sock *s, uint64_t *rx, uint64_t *tx,
		     uint64_t *rxq, uint64_t *txq);

/* sock.c */
void br_sock_io_done(struct br_sock *s, unsigned op, int res);
void br_sock_command(struct br_app *a, uint32_t slot, const struct gs_cmd *c);
void br_sock_event(struct br_sock *s, uint32_t events);
void br_sock_doorbell(struct br_app *a, uint32_t id);
void br_sock_adopt(struct br_app *a, uint32_t id, uint32_t gen);
void br_sock_pump(struct br_sock *s);
void br_sock_close_owned(struct br_app *a);
void br_sock_close_all(struct br_app *a);
void br_sock_tick(struct br_app *a);
void br_sock_claimed(struct br_app *a, uint32_t id, uint32_t gen);

/* stat.c */
/* Worker: gsock-stat's records for the sockets of a that it owns. */
void br_sock_stat(struct br_app *a, struct br_stat *st);
struct gs_stat_rec;
void br_stat_start(int fd);
void br_stat_add(struct br_stat *st, const struct gs_stat_rec *r);
void br_stat_done(struct br_stat *st);

#endif
