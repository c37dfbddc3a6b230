/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: gsockd serving an arena after registration, driven by
 * a hostile or buggy GPU application. t/fuzz_ctl.c fuzzes registration,
 * so there almost every input stops at the header; here every input
 * registers a valid arena exactly as an application does (libgsock's own
 * gsock_init() on a control socket; gsockd's br_app_accept() and
 * br_app_event() answer it), and the input is a program run on that
 * arena between worker turns:
 *
 *   byte 0   set-up: bits 0-1 gsockd's workers (0: one on epoll, 1: one
 *            on io_uring, 2: epoll and io_uring, 3: io_uring and epoll),
 *            bits 2-3 command slots - 1, bits 4-6 sockets - 1, bit 7 an
 *            8 KiB ring (else 4 KiB)
 *   then     operations: an opcode byte (modulo OP_COUNT) and its
 *            argument bytes (enum fz_op); bytes past the end read as 0
 *
 * The well-formed operations are the g-calls' own protocol (gsock.cuh on
 * the host backend, this thread standing in for block N of slot N), each
 * posted without waiting: its reply is taken after later turns, as the
 * waiting block would. The hostile ones write what the device never
 * would: raw requests and sequence words, doorbell cells of any ticket
 * and value, ring counters moved backwards, wrapped or past capacity,
 * any bytes in the socket table or anywhere in the arena, or in the
 * direct pool. OP_DIRECT puts the connections made after it between the
 * application's own sockets on the same-host direct path (a pool of two
 * segments of 4 KiB rings, so it is soon used up and the next go through
 * gsockd): their bytes then move in the pool's segments, where the
 * g-calls read and write them, and gsockd only sets them up, tears them
 * down and counts them. A CPU program at the other end (plain sockets of
 * this process) and gsock-stat's request are at hand too. gsockd's sockets are real, inside the sandbox
 * of t/fuzz_common.h.
 *
 * Anything gsockd does wrong is a crash here: a sanitizer report, a leak
 * (the application exits and is reaped at the end of every input; then
 * no worker may hold anything of it, no segment of the direct pool may
 * be held, no descriptor may be left open and no unix socket file in
 * this process's folder), a hang, or corrupt
 * bytes: while no hostile operation has run, every byte received on a
 * connection between two of this input's own ends must be the one sent
 * (every stream is pattern_byte() from offset 0).
 * t/fuzz.t runs it briefly on t/fuzz/arena/ (t/fuzz_seeds.py --arena
 * writes those seeds: keep its opcodes in step with enum fz_op).
 * GSOCK_FUZZ_TRACE=1 in the environment prints what an input does.
 */
#define _GNU_SOURCE
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../bridge/bridge.h"
#include "../devlib/gsock.cuh"
#include "../devlib/gsock.h"
#include "../devlib/gsock_ctl.h"
#include "fuzz_common.h"

/*
 * The operations; arguments in brackets, one byte each unless sized.
 * Kinds of address: for bind 127.0.0.1:0, [::1]:0, abstract, a path in
 * the folder ([k]: path_addr()), raw ([n][n bytes]); for connect one of
 * the application's listeners, a closed port, raw; for a pair inet,
 * inet6, abstract, a path.
 */
enum fz_op {
	OP_SOCKET, /* [kind]: inet, inet6, unix; 4 set: non-blocking */
	OP_BIND, /* [fd][kind] */
	OP_LISTEN, /* [fd][backlog] */
	OP_ACCEPT, /* [fd][non-blocking] */
	OP_CONNECT, /* [fd][kind] */
	OP_SHUTDOWN, /* [fd][how] */
	OP_CLOSE, /* [fd] */
	OP_SETSOCKOPT, /* [fd][option][value] */
	OP_NAME, /* [fd][peer] */
	OP_SEND, /* [fd][len u16]: gsend, MSG_DONTWAIT */
	OP_RECV, /* [fd][len u16]: grecv, MSG_DONTWAIT */
	OP_PAIR, /* [kind]: listen, connect to it, accept */
	OP_TURNS, /* [n]: 1 + n % 8 turns of every worker */
	OP_SLOT, /* [slot][op][fd][arg x3][addrlen][seq]: a raw request */
	OP_BELL, /* [queue][mode][what u32]: a doorbell cell */
	OP_COUNTER, /* [sock][field][mode][value u64]: a gs_sock word */
	OP_SOCKPOKE, /* [sock][offset][n][n bytes]: in the socket table */
	OP_POKE, /* [offset u32][n][n bytes]: anywhere in the arena */
	OP_PEER, /* [action][peer][n u16]: a CPU program's socket */
	OP_STAT, /* gsock-stat's request, its answer read at the end */
	OP_DIRECT, /* [on]: connections made from now on take the direct path */
	OP_DPOKE, /* [seg][offset u16][n][n bytes]: in the direct pool */
	OP_COUNT
};

#define FZ_MAX_OPS 1024 /* operations one input runs at most */
#define FZ_CALL_TURNS 8 /* turns a blocking call (OP_PAIR) waits */
#define FZ_PEERS 4
#define FZ_PERIOD 251 /* of the byte pattern every stream carries */
#define FZ_IO_MAX 16384 /* bytes one send or receive moves at most */

/* What a posted request still waits for, slot by slot. */
struct fz_pending {
	uint32_t op; /* GS_OP_*, 0: the slot is idle */
	int fd;
	uint64_t seq;
	uint32_t flags; /* GS_LS_* for a new descriptor; how for shutdown */
	bool ours; /* a connect to one of this input's listeners */
};

/* A CPU program's connection to one of the application's listeners. */
struct fz_peer {
	int fd;
	uint64_t sent, rcvd;
};

/* The input being read. */
struct fz_in {
	const uint8_t *p;
	size_t n;
};

/* One input's world: the application, and what it has under way. */
static struct fz {
	struct gsock_opts opts;
	struct gsock_ctx *ctx; /* libgsock's, set by the registering thread */
	char err[256];
	struct gsock_dev gs; /* as a kernel gets it */
	uint32_t nslots; /* the geometry: the arena's copy may be poked */
	uint64_t size;
	struct br_app *app; /* gsockd's side of it */
	bool app_direct; /* its hello said it reaches the direct pool */
	struct fz_pending pend[4]; /* per slot */
	bool verify[8]; /* per socket: its stream is checked */
	bool clean; /* no hostile operation has run */
	bool scribbled; /* this input wrote the socket table itself */
	struct fz_peer peer[FZ_PEERS];
	int stat_fd; /* the gsock-stat answer's end, or -1 */
	unsigned names; /* abstract unix names made */
} f;

/* gsockd's workers: [epoll, io_uring, epoll]; an input uses two in a row. */
static struct br_worker *pool;
static char dir[64]; /* this process's folder: unix paths, control socket */
static bool trace; /* $GSOCK_FUZZ_TRACE */
static uint8_t pattern[FZ_IO_MAX + FZ_PERIOD];
static uint8_t buf[FZ_IO_MAX];

static void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fz_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "fuzz-arena: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

static void fz_trace(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void fz_trace(const char *fmt, ...)
{
	va_list ap;

	if (!trace)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* The byte at offset off of every stream. */
static uint8_t pattern_byte(uint64_t off)
{
	return (uint8_t)(off % FZ_PERIOD);
}

/* The bytes of every stream from offset off on, FZ_IO_MAX of them. */
static const uint8_t *pattern_at(uint64_t off)
{
	return pattern + off % FZ_PERIOD;
}

static void check_stream(const char *who, int id, uint64_t off,
			 const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern_byte(off + i))
			fz_fail("%s %d received byte %u at stream offset %llu, where %u was sent",
				who, id, p[i], (unsigned long long)(off + i),
				pattern_byte(off + i));
}

static uint8_t in_u8(struct fz_in *in)
{
	uint8_t v = 0;

	if (in->n) {
		v = *in->p++;
		in->n--;
	}
	return v;
}

static uint64_t in_bytes(struct fz_in *in, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)in_u8(in) << (8 * i);
	return v;
}

/* n bytes into p, zeros past the input's end. */
static void in_copy(struct fz_in *in, void *p, size_t n)
{
	size_t k = n < in->n ? n : in->n;

	memcpy(p, in->p, k);
	memset((uint8_t *)p + k, 0, n - k);
	in->p += k;
	in->n -= k;
}

/* A descriptor argument: mostly one of the arena's, at times not. */
static int in_fd(struct fz_in *in)
{
	static const int odd[] = { -1, INT32_MIN, INT32_MAX, 8, 4096, -2 };
	uint8_t b = in_u8(in);

	if (b < 0xf0)
		return b % f.gs.nsocks;
	return b - 0xf0 < 6 ? odd[b - 0xf0] : (int)f.gs.nsocks + (b & 3);
}

/* A 64-bit argument: small, negative, a limit, or raw. */
static int64_t in_arg(struct fz_in *in)
{
	uint8_t b = in_u8(in);

	switch (b & 7) {
	case 0:
		return b >> 3;
	case 1:
		return -(int64_t)(b >> 3);
	case 2:
		return INT64_MIN;
	case 3:
		return INT64_MAX;
	case 4:
		return (int64_t)INT32_MAX + 1 + (b >> 3);
	case 5:
		return UINT32_MAX;
	case 6:
		return (int64_t)in_bytes(in, 8);
	default:
		return in_u8(in);
	}
}

/* ---- gsockd's side ---- */

static void collect(void);

/* n turns of every worker of this input, each followed by the replies. */
static void turns(unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		for (uint32_t i = 0; i < br.nworkers; i++)
			br_worker_turn(&br.workers[i]);
		collect();
	}
}

/* Workers for this input, from the pool: which as byte 0 says. */
static void use_workers(unsigned which)
{
	static const uint32_t start[] = { 0, 1, 0, 1 }, n[] = { 1, 1, 2, 2 };

	br.workers = pool + start[which];
	br.nworkers = n[which];
	for (uint32_t i = 0; i < br.nworkers; i++)
		br.workers[i].idx = i;
}

static void dir_remove(void)
{
	rmdir(dir);
}

/* Entries in the folder, which gsockd must leave as it found it. */
static int dir_entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		abort();
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* Whether anything of an application is left with a worker. */
static bool workers_hold(void)
{
	for (int i = 0; i < 3; i++)
		if (pool[i].napps || pool[i].nclosing ||
		    __atomic_load_n(&pool[i].inbox, __ATOMIC_ACQUIRE))
			return true;
	return false;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");

	(void)argc;
	(void)argv;
	fz_bridge_init(3);
	pool = br.workers;
	/* A small direct pool: a few segments of small rings, soon used up. */
	br.conf.direct = 1;
	br.conf.direct_conns = 2;
	br.conf.direct_ring_size = 4096;
	if (br_direct_init())
		fz_fail("cannot make the direct pool");
	snprintf(dir, sizeof(dir), "%s/gsock-fuzz.XXXXXX",
		 tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
	if (!mkdtemp(dir))
		fz_fail("cannot make a folder %s: %s", dir, strerror(errno));
	atexit(dir_remove);
	fz_sandbox_allow(dir);
#ifdef HAVE_LIBURING
	/* Where the kernel refuses io_uring, that worker uses epoll. */
	br.io_uring = br_uring_open(&pool[1]) == 0;
#endif
	trace = getenv("GSOCK_FUZZ_TRACE") && *getenv("GSOCK_FUZZ_TRACE");
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = pattern_byte(i);
	f.stat_fd = -1;
	for (int i = 0; i < FZ_PEERS; i++)
		f.peer[i].fd = -1;
	return 0;
}

/* ---- the application's side ---- */

/* The application's host thread: libgsock's own start. */
static void *app_init(void *arg)
{
	(void)arg;
	f.ctx = gsock_init(&f.opts, f.err, sizeof(f.err));
	return NULL;
}

/* A kernel that only keeps what every kernel is given. */
GSOCK_KERNEL(fz_capture, gs, arg)
{
	*(struct gsock_dev *)arg = gs;
}

/*
 * Wait for fd to be readable, as gsockd's control thread would. libFuzzer's
 * -timeout is a SIGALRM every few seconds, and poll() is never restarted:
 * an interrupted wait goes on until the 10 s are up.
 */
static void ready(int fd, const char *what)
{
	struct pollfd p = { fd, POLLIN, 0 };
	uint64_t end = br_now_ns() + 10000000000u, now;
	int r;

	do {
		now = br_now_ns();
		r = now < end ? poll(&p, 1, (int)((end - now) / 1000000) + 1) :
				0;
	} while (r < 0 && errno == EINTR);
	if (r != 1)
		fz_fail("no %s within 10 s (%s)", what,
			r < 0 ? strerror(errno) : f.err);
}

/*
 * Register an application of the given geometry the way every one is:
 * gsock_init() on a thread of its own, gsockd's control thread here,
 * over a control socket that lives as long as the registration.
 */
static void app_register(uint32_t nslots, uint32_t nsocks, uint32_t ring)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	pthread_t t;
	int lfd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/control", dir);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	unlink(sa.sun_path);
	if (lfd < 0 || __real_bind(lfd, (void *)&sa, sizeof(sa)) < 0 ||
	    listen(lfd, 1) < 0)
		fz_fail("cannot listen on %s: %s", sa.sun_path,
			strerror(errno));
	f.opts = (struct gsock_opts){ .control = sa.sun_path,
				      .nslots = nslots,
				      .nsocks = nsocks,
				      .ring_size = ring };
	if (pthread_create(&t, NULL, app_init, NULL))
		fz_fail("cannot start the application's thread");
	ready(lfd, "application connecting");
	if (!br_app_accept(lfd) || !br.apps)
		fz_fail("gsockd took no application");
	f.app = br.apps;
	ready(f.app->ctl_fd, "hello");
	br_app_event(f.app, EPOLLIN);
	pthread_join(t, NULL);
	unlink(sa.sun_path);
	close(lfd);
	if (!f.ctx)
		fz_fail("a valid arena was refused: %s", f.err);
	if (gsock_launch(f.ctx, (const void *)fz_capture, 1, 1, &f.gs) ||
	    gsock_wait(f.ctx))
		fz_fail("cannot launch a host kernel");
	f.nslots = nslots;
	f.size = f.gs.arena->arena_size;
	/* Bridged until OP_DIRECT: the seeds of before keep their meaning. */
	f.app_direct = f.app->direct;
	f.app->direct = false;
}

/* Act as block slot in what follows (gs_bid(), gs_my_slot()). */
static void as_block(uint32_t slot)
{
	gsock_host_block_id = slot;
}

/*
 * A block whose doorbell queue is full waits there for gsockd, and this
 * thread is gsockd too: while queue q is full, the world word tells the
 * g-call's wait to give up (-ECANCELED) instead.
 */
static void may_wait_on(uint32_t q)
{
	struct gsock_dev *gs = &f.gs;
	uint64_t head;

	q = q < gs->nqueues ? q : q % gs->nqueues;
	head = gs_ld64(&gs->dbq[q].head);
	__atomic_store_n(&gs->local->world,
			 gs->local->db_ticket[q] - head >= gs->db_size ?
				 GS_WORLD_STOP :
				 0,
			 __ATOMIC_RELEASE);
}

static void ring(uint32_t q, uint32_t what)
{
	may_wait_on(q);
	gs_ring_doorbell(f.gs, q, what);
}

/* A slot with no request under way, or -1. */
static int idle_slot(void)
{
	for (uint32_t i = 0; i < f.nslots; i++)
		if (!f.pend[i].op)
			return (int)i;
	return -1;
}

/*
 * Post a request as a g-call does (gs_command_post_t0()), without
 * waiting: the reply is taken by collect(). Returns the slot, or -1 when
 * none is idle or the doorbell queue is full (a block would wait).
 */
static int post(uint32_t op, int fd, int64_t a0, int64_t a1, int64_t a2,
		const void *addr, uint32_t addrlen)
{
	int slot = idle_slot();
	uint64_t seq;

	if (slot < 0)
		return -1;
	as_block((uint32_t)slot);
	may_wait_on(gs_cmd_queue(f.gs, fd));
	if (gs_command_post_t0(f.gs, op, fd, a0, a1, a2, addr, addrlen, &seq))
		return -1;
	f.pend[slot] = (struct fz_pending){ .op = op, .fd = fd, .seq = seq };
	return slot;
}

/* Whether addr is the local address of a socket of this input's. */
static bool ours(const void *addr, uint32_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl;

	for (int i = 0; i < FZ_PEERS + (int)f.app->nsocks; i++) {
		int fd = i < FZ_PEERS ? f.peer[i].fd :
					f.app->sk[i - FZ_PEERS].fd;

		sl = sizeof(ss);
		if (fd >= 0 && !getsockname(fd, (void *)&ss, &sl) &&
		    sl == len && len > sizeof(sa_family_t) &&
		    !memcmp(&ss, addr, len))
			return true;
	}
	return false;
}

/* A reply arrived: what the g-call does with it on the device. */
static void replied(uint32_t slot, struct fz_pending *p, int64_t r)
{
	struct gs_cmd *c = &f.gs.slots[slot];
	uint32_t alen = c->out_addrlen;
	bool known = r >= 0 && r < f.gs.nsocks;

	as_block(slot);
	switch (p->op) {
	case GS_OP_SOCKET:
		gs_new_fd(f.gs, r, p->flags);
		if (known)
			f.verify[r] = false;
		break;
	case GS_OP_ACCEPT:
		gs_new_fd(f.gs, r, GS_LS_CONNECTED);
		if (known && gs_direct_t0(f.gs, (int)r))
			f.gs.lsock[r].error = -EIO; /* as gs_accept */
		if (known)
			f.verify[r] = ours(c->out_addr, alen < GS_ADDR_MAX ?
								alen :
								GS_ADDR_MAX);
		break;
	case GS_OP_CONNECT:
		if (r == 0 && p->fd >= 0 && (uint32_t)p->fd < f.gs.nsocks) {
			f.gs.lsock[p->fd].flags |= GS_LS_CONNECTED;
			if (gs_direct_t0(f.gs, p->fd)) /* as gconnect */
				f.gs.lsock[p->fd].error = -EIO;
			f.verify[p->fd] = p->ours;
		}
		break;
	case GS_OP_SHUTDOWN:
		if (r == 0 && p->flags != SHUT_RD && p->fd >= 0 &&
		    (uint32_t)p->fd < f.gs.nsocks)
			f.gs.lsock[p->fd].flags |= GS_LS_TX_SHUT;
		break;
	}
}

static void collect(void)
{
	for (uint32_t i = 0; i < f.nslots; i++) {
		struct fz_pending *p = &f.pend[i];
		struct gs_cmd *c = &f.gs.slots[i];

		if (!p->op || gs_ld64(&c->done_seq) != p->seq)
			continue;
		fz_trace("  slot %u: op %u fd %d -> %lld\n", i, p->op, p->fd,
			 (long long)c->result);
		replied(i, p, c->result);
		if ((p->op == GS_OP_ACCEPT || p->op == GS_OP_CONNECT) &&
		    c->result >= 0) {
			int fd = p->op == GS_OP_ACCEPT ? (int)c->result : p->fd;

			if (fd >= 0 && (uint32_t)fd < f.gs.nsocks &&
			    (f.gs.lsock[fd].flags & GS_LS_DIRECT))
				fz_trace("  socket %d: direct\n", fd);
		}
		p->op = 0;
	}
}

/* Post a request and turn until its reply: what a blocking g-call sees. */
static int64_t call(uint32_t op, int fd, int64_t a0, int64_t a1,
		    const void *addr, uint32_t addrlen, bool ours_to)
{
	int slot = post(op, fd, a0, a1, 0, addr, addrlen);
	int64_t r;

	if (slot < 0)
		return -EBUSY;
	f.pend[slot].ours = ours_to;
	for (int k = 0; k < FZ_CALL_TURNS && f.pend[slot].op; k++)
		turns(1);
	r = f.pend[slot].op ? -ETIMEDOUT : f.gs.slots[slot].result;
	return r;
}

/* ---- addresses ---- */

/* A loopback (or abstract) address of domain d, port 0; its length. */
static uint32_t make_addr(int d, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	ss->ss_family = (sa_family_t)d;
	if (d == AF_INET) {
		((struct sockaddr_in *)ss)->sin_addr.s_addr =
			htonl(INADDR_LOOPBACK);
		return sizeof(struct sockaddr_in);
	}
	if (d == AF_INET6) {
		((struct sockaddr_in6 *)ss)->sin6_addr = in6addr_loopback;
		return sizeof(struct sockaddr_in6);
	}
	/* abstract: nothing on disk, unique to this process */
	return offsetof(struct sockaddr_un, sun_path) + 1 +
	       (uint32_t)snprintf(((struct sockaddr_un *)ss)->sun_path + 1, 100,
				  "gsock-fuzz-%d-%u", (int)getpid(), f.names++);
}

/*
 * The address of one of the application's listening sockets (the n-th,
 * counting round): what a kernel connecting to its own server names.
 * Returns its length, 0 when none listens.
 */
static uint32_t listener_addr(unsigned n, struct sockaddr_storage *ss)
{
	struct br_app *a = f.app;
	socklen_t len = sizeof(*ss);
	unsigned count = 0;

	for (uint32_t i = 0; i < a->nsocks; i++)
		count += a->sk[i].state == BS_LISTEN;
	if (count)
		n %= count;
	for (uint32_t i = 0; count && i < a->nsocks; i++) {
		if (a->sk[i].state != BS_LISTEN || n--)
			continue;
		if (getsockname(a->sk[i].fd, (void *)ss, &len) < 0)
			return 0;
		return len;
	}
	return 0;
}

/*
 * A path in this process's folder, its name 1 + k bytes long, or as long
 * as sun_path holds where k is 255 (no NUL then); its length as an
 * application would give it.
 */
static uint32_t path_addr(unsigned k, struct sockaddr_storage *ss)
{
	struct sockaddr_un *un = (struct sockaddr_un *)ss;
	size_t d = strlen(dir) + 1, room = sizeof(un->sun_path) - d;
	unsigned n = k == 255 ? (unsigned)room : 1 + k % (unsigned)room;

	memset(ss, 0, sizeof(*ss));
	un->sun_family = AF_UNIX;
	snprintf(un->sun_path, sizeof(un->sun_path), "%s/", dir);
	memset(un->sun_path + d, 'p', n);
	return (uint32_t)(offsetof(struct sockaddr_un, sun_path) + d + n +
			  (d + n < sizeof(un->sun_path)));
}

static int domain_of(unsigned kind)
{
	static const int d[] = { AF_INET, AF_INET6, AF_UNIX, AF_UNIX };

	return d[kind % 4];
}

/* ---- the operations ---- */

static void op_socket(struct fz_in *in)
{
	unsigned kind = in_u8(in);
	int nb = kind & 4 ? SOCK_NONBLOCK : 0;
	int slot = post(GS_OP_SOCKET, -1, domain_of(kind), SOCK_STREAM | nb, 0,
			NULL, 0);

	if (slot >= 0)
		f.pend[slot].flags = nb ? GS_LS_NONBLOCK : 0;
}

static void op_bind(struct fz_in *in)
{
	int fd = in_fd(in);
	unsigned kind = in_u8(in);
	struct sockaddr_storage ss;
	uint32_t len;

	if (kind % 5 == 4) {
		len = in_u8(in) % (GS_ADDR_MAX + 1);
		in_copy(in, &ss, len);
	} else if (kind % 5 == 3) {
		len = path_addr(in_u8(in), &ss);
	} else {
		len = make_addr(domain_of(kind % 5), &ss);
	}
	post(GS_OP_BIND, fd, 0, 0, 0, &ss, len);
}

static void op_connect(struct fz_in *in)
{
	int fd = in_fd(in);
	unsigned kind = in_u8(in);
	struct sockaddr_storage ss;
	uint32_t len = 0;
	int slot;

	if (kind % 3 == 0) {
		len = listener_addr(kind / 3, &ss);
	} else if (kind % 3 == 1) {
		len = make_addr(AF_INET, &ss); /* port 1: nothing listens */
		((struct sockaddr_in *)&ss)->sin_port = htons(1);
	} else {
		len = in_u8(in) % (GS_ADDR_MAX + 1);
		in_copy(in, &ss, len);
	}
	slot = post(GS_OP_CONNECT, fd, 0, 0, 0, &ss, len);
	if (slot >= 0)
		f.pend[slot].ours = kind % 3 == 0 && len;
}

/* The options gsockd allows, one it refuses, and the device's own. */
static void op_setsockopt(struct fz_in *in)
{
	static const int opt[][2] = {
		{ SOL_SOCKET, SO_RCVBUF },
		{ SOL_SOCKET, SO_SNDBUF },
		{ SOL_SOCKET, SO_KEEPALIVE },
		{ IPPROTO_TCP, TCP_NODELAY },
		{ IPPROTO_TCP, TCP_USER_TIMEOUT },
		{ IPPROTO_IPV6, IPV6_V6ONLY },
		{ SOL_SOCKET, SO_LINGER },
		{ GSOCK_SOL, GSOCK_NONBLOCK },
	};
	int fd = in_fd(in);
	unsigned k = in_u8(in) % 8;
	int v = (int)in_arg(in);

	if (opt[k][0] == GSOCK_SOL) {
		gsetsockopt(f.gs, fd, opt[k][0], opt[k][1], &v, sizeof(v));
		return;
	}
	if (gs_lsock_of(f.gs, fd))
		post(GS_OP_SETSOCKOPT, fd, opt[k][0], opt[k][1], v, NULL, 0);
}

/*
 * Whether the device may act on socket fd: gsock.cuh trusts gsockd's
 * words (a positive error would be taken for a byte count, and a ring
 * copied past its end). Where this input wrote the socket table itself,
 * a word that breaks that trust is its own doing: the g-call is left
 * out. Where it did not, gsockd wrote it.
 */
static bool device_trusts(int fd)
{
	int32_t err = (int32_t)gs_ld32((uint32_t *)&f.gs.socks[fd].error);

	if (err <= 0 && f.gs.lsock[fd].error <= 0)
		return true;
	if (!f.scribbled)
		fz_fail("gsockd wrote error %d for socket %d", err, fd);
	return false;
}

static void op_send(struct fz_in *in)
{
	int fd = in_fd(in);
	size_t len = in_bytes(in, 2) % (FZ_IO_MAX + 1);
	struct gs_lsock *ls = gs_lsock_of(f.gs, fd);
	long n;

	if (!ls || !device_trusts(fd))
		return;
	as_block(0);
	may_wait_on(ls->db_queue);
	n = gsend(f.gs, fd, pattern_at(ls->tx_tail), len, MSG_DONTWAIT);
	fz_trace("  gsend(%d, %zu) = %ld\n", fd, len, n);
	if (n == -EIO && f.clean)
		fz_fail("socket %d: gsockd's tx_head is past tx_tail", fd);
}

static void op_recv(struct fz_in *in)
{
	int fd = in_fd(in);
	size_t len = in_bytes(in, 2) % (FZ_IO_MAX + 1);
	struct gs_lsock *ls = gs_lsock_of(f.gs, fd);
	uint64_t off;
	long n;

	if (!ls || !device_trusts(fd))
		return;
	as_block(0);
	off = ls->rx_head;
	may_wait_on(ls->db_queue);
	n = grecv(f.gs, fd, buf, len, MSG_DONTWAIT);
	fz_trace("  grecv(%d, %zu) = %ld%s\n", fd, len, n,
		 n > 0 && f.clean && f.verify[fd] ? ", checked" : "");
	if (n == -EIO && f.clean)
		fz_fail("socket %d: gsockd's rx_tail is past what the ring holds",
			fd);
	if (n > 0 && f.clean && f.verify[fd])
		check_stream("socket", fd, off, buf, (size_t)n);
}

/* gsocket, gbind, glisten, gsocket, gconnect, gaccept: blocking calls. */
static void op_pair(struct fz_in *in)
{
	unsigned kind = in_u8(in) % 4;
	int d = domain_of(kind);
	struct sockaddr_storage ss;
	uint32_t len = kind == 3 ? path_addr(8, &ss) : make_addr(d, &ss);
	int64_t l, c;

	l = call(GS_OP_SOCKET, -1, d, SOCK_STREAM, NULL, 0, false);
	if (l < 0 || l >= f.gs.nsocks ||
	    call(GS_OP_BIND, (int)l, 0, 0, &ss, len, false) ||
	    call(GS_OP_LISTEN, (int)l, 8, 0, NULL, 0, false))
		return;
	c = call(GS_OP_SOCKET, -1, d, SOCK_STREAM, NULL, 0, false);
	len = listener_addr(0, &ss);
	if (c < 0 || c >= f.gs.nsocks || !len ||
	    call(GS_OP_CONNECT, (int)c, 0, 0, &ss, len, true))
		return;
	call(GS_OP_ACCEPT, (int)l, 0, 0, NULL, 0, false);
}

/* A raw request: any opcode, descriptor, arguments and sequence word. */
static void op_slot(struct fz_in *in)
{
	uint32_t slot = in_u8(in) % f.nslots;
	struct gs_cmd *c = &f.gs.slots[slot];
	unsigned seq;

	c->op = in_u8(in) % (GS_OP_COUNT + 2);
	c->fd = in_fd(in);
	for (int i = 0; i < 3; i++)
		c->arg[i] = in_arg(in);
	c->addrlen = in_u8(in);
	c->addrlen = c->addrlen > 0xf0 ? UINT32_MAX - (c->addrlen & 15) :
					 c->addrlen % (GS_ADDR_MAX + 2);
	in_copy(in, c->addr, c->addrlen < 16 ? c->addrlen : 16);
	seq = in_u8(in);
	f.pend[slot].op = 0; /* the block gave up on it */
	if (seq % 4 == 1)
		c->seq = c->done_seq; /* served already */
	else if (seq % 4 == 2)
		c->seq = (uint64_t)in_arg(in);
	else
		c->seq++;
	if (seq % 4 != 3)
		ring(gs_cmd_queue(f.gs, c->fd), GS_DB_CMD | slot);
}

/* A doorbell cell: as the device writes it, or not. */
static void op_bell(struct fz_in *in)
{
	struct gsock_dev *gs = &f.gs;
	uint32_t q = in_u8(in) % gs->nqueues;
	unsigned mode = in_u8(in);
	uint32_t what = (uint32_t)in_bytes(in, 4);
	uint64_t *cells = gs_db_cells(gs->db, q, gs->db_size);
	uint64_t t = gs->local->db_ticket[q];

	switch (mode % 4) {
	case 0: /* any value, the next ticket */
		ring(q, what);
		break;
	case 1: /* a slot or a socket in range, the next ticket */
		ring(q, what & GS_DB_CMD ? GS_DB_CMD | (what % f.nslots) :
					   what % gs->nsocks);
		break;
	case 2: /* a ticket ahead or behind, without taking it */
		t += (int8_t)(mode >> 2);
		gs_st_release64(&cells[t & (gs->db_size - 1)],
				gs_db_cell(t, what));
		break;
	default: /* any cell, any value */
		gs_st_release64(&cells[(what >> 8) & (gs->db_size - 1)],
				in_bytes(in, 8));
		break;
	}
}

/* A word of a socket's entry: moved, wrapped, past capacity, or raw. */
static void op_counter(struct fz_in *in)
{
	struct gsock_dev *gs = &f.gs;
	uint32_t id = in_u8(in) % gs->nsocks;
	struct gs_sock *g = &gs->socks[id];
	unsigned field = in_u8(in) % 8, mode = in_u8(in);
	uint64_t v = in_bytes(in, 8);
	uint64_t *w64[] = { &g->rx_head, &g->tx_tail, &g->rx_tail,
			    &g->tx_head };
	uint32_t *w32[] = { &g->poll_slot, &g->status, (uint32_t *)&g->error,
			    &g->rx_blocked };
	uint64_t cur = field < 4 ? *w64[field] : *w32[field - 4];

	f.scribbled = true;
	switch (mode % 5) {
	case 0:
		v = cur + (v & 0xffff);
		break;
	case 1:
		v = cur - (v & 0xffff); /* backwards */
		break;
	case 2:
		v = cur + gs->ring_size + (v & 0xff); /* past capacity */
		break;
	case 3:
		v = UINT64_MAX - (v & 0xffff); /* wrapped */
		break;
	}
	if (field < 4)
		__atomic_store_n(w64[field], v, __ATOMIC_RELEASE);
	else
		__atomic_store_n(w32[field - 4], (uint32_t)v, __ATOMIC_RELEASE);
	if (!(mode & 0x80))
		ring(g->db_queue, id);
}

static void op_sockpoke(struct fz_in *in)
{
	uint32_t id = in_u8(in) % f.gs.nsocks;
	unsigned off = in_u8(in) % sizeof(struct gs_sock);
	unsigned n = in_u8(in) % 17;

	if (n > sizeof(struct gs_sock) - off)
		n = sizeof(struct gs_sock) - off;
	f.scribbled = true;
	in_copy(in, (uint8_t *)&f.gs.socks[id] + off, n);
}

static void op_poke(struct fz_in *in)
{
	uint64_t off = in_bytes(in, 4) % f.size;
	uint64_t socks =
		(uint64_t)((uint8_t *)f.gs.socks - (uint8_t *)f.gs.arena);
	unsigned n = in_u8(in);

	if (n > f.size - off)
		n = (unsigned)(f.size - off);
	if (off + n > socks && off < socks + f.gs.nsocks * sizeof(*f.gs.socks))
		f.scribbled = true;
	in_copy(in, (uint8_t *)f.gs.arena + off, n);
}

/*
 * Any bytes in a segment of the direct pool, header or rings: what a
 * buggy or hostile application can write there (it maps the pool).
 */
static void op_dpoke(struct fz_in *in)
{
	uint32_t seg = in_u8(in) % (f.gs.dsegs ? f.gs.dsegs : 1);
	uint64_t stride = GS_DSEG_STRIDE(f.gs.dring_size);
	uint64_t off = in_bytes(in, 2) % stride;
	unsigned n = in_u8(in) % 17;

	if (!f.gs.pool)
		return;
	if (n > stride - off)
		n = (unsigned)(stride - off);
	in_copy(in, f.gs.pool + seg * stride + off, n);
}

/* A CPU program with a connection to one of the application's listeners. */
static void op_peer(struct fz_in *in)
{
	unsigned action = in_u8(in), i = in_u8(in) % FZ_PEERS;
	size_t n = in_bytes(in, 2) % (FZ_IO_MAX + 1);
	struct fz_peer *p = &f.peer[i];
	struct linger rst = { 1, 0 };
	struct sockaddr_storage ss;
	uint32_t len;
	ssize_t r;

	if (p->fd < 0 && action % 5 == 0) {
		len = listener_addr(action / 5, &ss);
		if (!len)
			return;
		*p = (struct fz_peer){
			.fd = socket(ss.ss_family,
				     SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
				     0)
		};
		if (p->fd >= 0)
			connect(p->fd, (void *)&ss, len);
		return;
	}
	if (p->fd < 0)
		return;
	switch (action % 5) {
	case 1:
		r = send(p->fd, pattern_at(p->sent), n,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		p->sent += r > 0 ? (uint64_t)r : 0;
		break;
	case 2:
		shutdown(p->fd, SHUT_WR);
		break;
	case 3: /* a reset, where TCP */
		setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
		close(p->fd);
		p->fd = -1;
		break;
	case 4:
		r = recv(p->fd, buf, n, MSG_DONTWAIT);
		if (r > 0 && f.clean)
			check_stream("peer", (int)i, p->rcvd, buf, (size_t)r);
		p->rcvd += r > 0 ? (uint64_t)r : 0;
		break;
	}
}

/* gsock-stat's request, as the control thread gets it. */
static void op_stat(void)
{
	int sv[2];

	if (f.stat_fd >= 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return;
	br_stat_start(sv[0]);
	f.stat_fd = sv[1];
}

/* The answer must be whole by now: records, the end record, closed. */
static void stat_end(void)
{
	struct gs_stat_rec r[64];
	ssize_t n, last = 0;
	uint32_t kind = 0;

	if (f.stat_fd < 0)
		return;
	while ((n = recv(f.stat_fd, r, sizeof(r), MSG_DONTWAIT)) > 0) {
		last = n;
		kind = r[n / sizeof(r[0]) - 1].kind;
	}
	if (n != 0 || last != sizeof(r[0]) || kind != GS_STAT_END)
		fz_fail("the gsock-stat answer is not whole (%zd, kind %u)", n,
			kind);
	close(f.stat_fd);
	f.stat_fd = -1;
}

/* One operation and its arguments. */
static void run_op(struct fz_in *in)
{
	unsigned op = in_u8(in) % OP_COUNT;

	fz_trace("op %u\n", op);

	if ((op >= OP_SLOT && op <= OP_POKE) || op == OP_DPOKE)
		f.clean = false; /* streams are no longer checked */
	switch (op) {
	case OP_SOCKET:
		op_socket(in);
		break;
	case OP_BIND:
		op_bind(in);
		break;
	case OP_LISTEN: {
		int fd = in_fd(in);

		post(GS_OP_LISTEN, fd, in_arg(in), 0, 0, NULL, 0);
		break;
	}
	case OP_ACCEPT: {
		int fd = in_fd(in), nb = in_u8(in) & 1;

		if (gs_lsock_of(f.gs, fd))
			post(GS_OP_ACCEPT, fd, nb, 0, 0, NULL, 0);
		break;
	}
	case OP_CONNECT:
		op_connect(in);
		break;
	case OP_SHUTDOWN: {
		int fd = in_fd(in), how = in_u8(in) % 4, slot;

		slot = post(GS_OP_SHUTDOWN, fd, how, 0, 0, NULL, 0);
		if (slot >= 0)
			f.pend[slot].flags = (uint32_t)how;
		break;
	}
	case OP_CLOSE: {
		int fd = in_fd(in);

		if (!gs_lsock_of(f.gs, fd))
			break;
		f.gs.lsock[fd].flags = 0; /* as gclose: forgotten first */
		post(GS_OP_CLOSE, fd, 0, 0, 0, NULL, 0);
		break;
	}
	case OP_SETSOCKOPT:
		op_setsockopt(in);
		break;
	case OP_NAME: {
		int fd = in_fd(in);

		post(in_u8(in) & 1 ? GS_OP_GETPEERNAME : GS_OP_GETSOCKNAME, fd,
		     0, 0, 0, NULL, 0);
		break;
	}
	case OP_SEND:
		op_send(in);
		break;
	case OP_RECV:
		op_recv(in);
		break;
	case OP_PAIR:
		op_pair(in);
		break;
	case OP_TURNS:
		turns(1 + in_u8(in) % 8);
		break;
	case OP_SLOT:
		op_slot(in);
		break;
	case OP_BELL:
		op_bell(in);
		break;
	case OP_COUNTER:
		op_counter(in);
		break;
	case OP_SOCKPOKE:
		op_sockpoke(in);
		break;
	case OP_POKE:
		op_poke(in);
		break;
	case OP_PEER:
		op_peer(in);
		break;
	case OP_DIRECT:
		f.app->direct = f.app_direct && (in_u8(in) & 1);
		break;
	case OP_DPOKE:
		op_dpoke(in);
		break;
	case OP_STAT:
		op_stat();
		break;
	}
}

/* Descriptors this process has open. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		abort();
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/*
 * The application exits (libgsock lets go of everything), gsockd sees its
 * control connection end, and lets go of it: after that nothing of it
 * may be left anywhere.
 */
static void app_exit(void)
{
	if (f.clean && br_app_dead(f.app))
		fz_fail("gsockd rejected an application that broke no rule");
	gsock_fini(f.ctx);
	f.ctx = NULL;
	br_app_event(f.app, EPOLLIN | EPOLLHUP);
	if (!br_app_dead(f.app))
		fz_fail("the application is gone, but gsockd serves it still");
	for (int k = 0; k < 8 && workers_hold(); k++)
		for (int i = 0; i < 3; i++)
			br_worker_turn(&pool[i]);
	br_reap();
	if (br.apps || br.napps || br.npending || workers_hold())
		fz_fail("gsockd holds on to an application that is gone");
	if (br_direct_held())
		fz_fail("%u segments of the direct pool are held after the application is gone",
			br_direct_held());
	f.app = NULL;
	for (int i = 0; i < FZ_PEERS; i++) {
		if (f.peer[i].fd >= 0)
			close(f.peer[i].fd);
		f.peer[i].fd = -1;
	}
	stat_end();
	if (dir_entries())
		fz_fail("a unix socket file is left in %s", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_in in = { data, size };
	int fds = count_fds(), ops = 0;
	uint8_t setup;

	if (size < 1 || size > 65536)
		return -1; /* not kept in the corpus */
	setup = in_u8(&in);
	use_workers(setup & 3);
	memset(f.pend, 0, sizeof(f.pend));
	memset(f.verify, 0, sizeof(f.verify));
	f.clean = true;
	f.scribbled = false;
	app_register(1 + (setup >> 2 & 3), 1 + (setup >> 4 & 7),
		     setup & 0x80 ? 8192 : 4096);
	turns(1); /* the worker takes it */
	while (in.n && ops++ < FZ_MAX_OPS)
		run_op(&in);
	turns(2);
	app_exit();
	if (count_fds() != fds)
		fz_fail("%d descriptors before the input, %d after", fds,
			count_fds());
	return 0;
}
