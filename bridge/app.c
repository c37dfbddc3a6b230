/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Applications: registration over the control socket (SO_PEERCRED, the
 * arena memfd, geometry checks), the doorbell queues, command slots, and
 * clean-up when an application goes away or is rejected. Registration
 * and death are the control thread's; doorbells and commands are served
 * by workers (bridge.h has the contract). Every value read from an arena
 * is checked here or in sock.c before use.
 */
#include <config.h>

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../devlib/gsock_ctl.h"
#include "../devlib/gsock_ring.h"
#include "bridge.h"
#include "log.h"

/* Doorbell cells handled per queue per loop turn (fairness). */
#define DB_BUDGET 4096

static void reply(int fd, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void reply(int fd, int status, const char *fmt, ...)
{
	struct gs_ctl_reply r = { .magic = GS_CTL_MAGIC, .status = status };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r.msg, sizeof(r.msg), fmt, ap);
	va_end(ap);
	if (send(fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		br_dbg("cannot reply on control connection: %s",
		       strerror(errno));
}

/* A control connection's first message: an application's, or a preload's. */
union hello {
	struct gs_ctl_hello h;
	struct gs_ctl_dconnect d;
};

/*
 * Receive the hello and its memfd (and the receive pool's descriptor,
 * in *pair, when the hello says one comes). Returns the fd, -2 when the
 * peer closed without a word, -3 for a gsock-stat request (no
 * descriptor), -4 for a preloaded program's direct request (its
 * socketpair end in *pair, -1 for a listener's, which brings none), or
 * -1 with why set.
 */
static int recv_hello(int fd, union hello *u, int *pair, char *why,
		      size_t len)
{
	struct gs_ctl_hello *h = &u->h;
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { u, sizeof(*u) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int memfd = -1, nfds = 0, want;
	ssize_t n;

	n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	for (cm = CMSG_FIRSTHDR(&msg); n >= 0 && cm;
	     cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < nfds; i++) {
			int got;

			memcpy(&got, CMSG_DATA(cm) + i * sizeof(int),
			       sizeof(int));
			if (i == 0)
				memfd = got;
			else if (i == 1)
				*pair = got;
			else
				close(got);
		}
	}
	if (n == 0 && nfds == 0)
		return -2;
	if (n == (ssize_t)sizeof(*h) && nfds == 0 &&
	    h->magic == GS_CTL_STATS_MAGIC && h->version == GS_STATS_VERSION)
		return -3;
	if (n == (ssize_t)sizeof(u->d) &&
	    !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
	    u->d.version == GS_CTL_VERSION &&
	    ((nfds == 1 && (u->d.magic == GS_CTL_DCONN_MAGIC ||
			    u->d.magic == GS_CTL_DACCEPT_MAGIC)) ||
	     (nfds == 0 && u->d.magic == GS_CTL_DLISTEN_MAGIC))) {
		*pair = memfd;
		return -4;
	}
	want = 1 + (n == (ssize_t)sizeof(*h) && h->rx_size ? 1 : 0);
	if (n != (ssize_t)sizeof(*h) ||
	    (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		snprintf(why, len, "malformed hello (%zd bytes, expected %zu)",
			 n, sizeof(*h));
	else if (h->magic != GS_CTL_MAGIC || h->version != GS_CTL_VERSION)
		snprintf(
			why, len,
			"hello has magic %#x version %u, expected %#x version %u (mismatched libgsock?)",
			h->magic, h->version, GS_CTL_MAGIC, GS_CTL_VERSION);
	else if (nfds != want)
		snprintf(why, len,
			 "hello carries %d descriptors, expected %d (the arena's memfd%s)",
			 nfds, want, want > 1 ? " and the receive pool's" : "");
	else
		return memfd;
	if (memfd >= 0)
		close(memfd);
	if (*pair >= 0)
		close(*pair);
	*pair = -1;
	return -1;
}

/*
 * Check the memfd and the header it holds; map it into a. Returns 0, or
 * -E2BIG past a limit of gsock.conf, -EINVAL for anything else, with why.
 */
static int map_arena(struct br_app *a, int memfd, uint64_t size, char *why,
		     size_t len)
{
	const int seals = F_SEAL_SHRINK | F_SEAL_SEAL;
	int got;
	struct gs_arena_hdr h;
	struct gs_layout l;
	struct stat st;

	if (fstat(memfd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != size) {
		snprintf(why, len, "the descriptor is not a %llu-byte memfd",
			 (unsigned long long)size);
		return -EINVAL;
	}
	/* -1 (a file that is no memfd: EINVAL) has every bit set */
	got = fcntl(memfd, F_GET_SEALS);
	if (got < 0 || (got & seals) != seals) {
		snprintf(
			why, len,
			"the arena memfd is not sealed against shrinking (F_SEAL_SHRINK | F_SEAL_SEAL)");
		return -EINVAL;
	}
	if (size < sizeof(h) || size > (uint64_t)br.conf.max_arena_mb << 20) {
		snprintf(
			why, len,
			"arena of %llu bytes is outside 1 page..%ld MiB (max_arena_mb in gsock.conf)",
			(unsigned long long)size, br.conf.max_arena_mb);
		return -E2BIG;
	}
	a->base =
		mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (a->base == MAP_FAILED) {
		a->base = NULL;
		snprintf(why, len, "cannot map the arena: %s", strerror(errno));
		return -EINVAL;
	}
	a->size = size;
	memcpy(&h, a->base, sizeof(h));
	if (h.magic != GS_ARENA_MAGIC || h.version != GS_ARENA_VERSION ||
	    h.hdr_size != sizeof(h) || h.arena_size != size) {
		snprintf(why, len,
			 "arena header has a bad magic, version or size");
		return -EINVAL;
	}
	if (h.nsocks > (uint64_t)br.conf.max_sockets ||
	    h.nslots > (uint64_t)br.conf.max_slots) {
		snprintf(why, len,
			 "the arena asks for %u sockets and %u command slots; at most %ld and %ld (max_sockets, max_slots in gsock.conf)",
			 h.nsocks, h.nslots, br.conf.max_sockets,
			 br.conf.max_slots);
		return -E2BIG;
	}
	if (gs_arena_layout(h.nslots, h.nsocks, h.ring_size, h.db_size,
			    h.nqueues, &l) ||
	    l.size != size || l.slots_off != h.slots_off ||
	    l.socks_off != h.socks_off || l.dbq_off != h.dbq_off ||
	    l.db_off != h.db_off || l.rings_off != h.rings_off) {
		snprintf(
			why, len,
			"arena geometry is inconsistent (slots %u, sockets %u, ring %u, doorbell %u x %u)",
			h.nslots, h.nsocks, h.ring_size, h.nqueues, h.db_size);
		return -EINVAL;
	}
	a->nslots = h.nslots;
	a->nsocks = h.nsocks;
	a->ring_size = h.ring_size;
	a->db_size = h.db_size;
	a->nqueues = h.nqueues;
	a->nworkers = h.nqueues < br.nworkers ? h.nqueues : br.nworkers;
	/* untrusted text: printable ASCII up to the first NUL, '?' else */
	for (size_t i = 0; i + 1 < sizeof(a->device) && h.device[i]; i++)
		a->device[i] = h.device[i] > ' ' && h.device[i] < 0x7f ?
				       h.device[i] :
			       h.device[i] == ' ' ? ' ' :
						    '?';
	a->hdr = (struct gs_arena_hdr *)a->base;
	a->slots = (struct gs_cmd *)(a->base + l.slots_off);
	a->socks = (struct gs_sock *)(a->base + l.socks_off);
	a->dbq = (struct gs_dbq *)(a->base + l.dbq_off);
	a->db = (uint64_t *)(a->base + l.db_off);
	a->rings = a->base + l.rings_off;
	return 0;
}

static int app_tables(struct br_app *a)
{
	a->sk = calloc(a->nsocks, sizeof(*a->sk));
	a->slot = calloc(a->nslots, sizeof(*a->slot));
	a->dbq_head = calloc(a->nqueues, sizeof(*a->dbq_head));
	if (!a->sk || !a->slot || !a->dbq_head)
		return -1;
	for (uint32_t i = a->nsocks; i-- > 0;) {
		struct br_sock *s = &a->sk[i];

		s->ev.kind = BR_EV_SOCK;
		s->app = a;
		s->owner = -1;
		s->id = i;
		s->fd = -1;
		s->wait_slot = -1;
		s->next_free = a->free_list;
		a->free_list = s;
	}
	/* Slots the app used before: serve only requests newer than these. */
	for (uint32_t i = 0; i < a->nslots; i++)
		a->slot[i].seq = __atomic_load_n(&a->slots[i].done_seq,
						 __ATOMIC_ACQUIRE);
	for (uint32_t q = 0; q < a->nqueues; q++)
		a->dbq_head[q] =
			__atomic_load_n(&a->dbq[q].head, __ATOMIC_ACQUIRE);
	return 0;
}

/* The last reference is gone: no worker and no message knows a now. */
static void app_free(struct br_app *a)
{
	if (a->sk)
		br_sock_close_all(a);
	if (a->ctl_fd >= 0)
		close(a->ctl_fd);
	if (a->rx_fd >= 0)
		close(a->rx_fd);
	if (a->base)
		munmap(a->base, a->size);
	free(a->sk);
	free(a->slot);
	free(a->dbq_head);
	pthread_mutex_destroy(&a->ids_lock);
	free(a);
}

void br_app_get(struct br_app *a)
{
	__atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
}

void br_app_put(struct br_app *a)
{
	if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) == 0)
		app_free(a);
}

bool br_app_dead(struct br_app *a)
{
	return __atomic_load_n(&a->dead, __ATOMIC_ACQUIRE) != 0;
}

/*
 * Mark a dead, from any thread: its workers close their sockets of it at
 * their next turn, and the control thread drops it from the list.
 */
void br_app_kill(struct br_app *a)
{
	if (__atomic_exchange_n(&a->dead, 1, __ATOMIC_ACQ_REL))
		return;
	br_direct_app_gone(a);
	br_wake(br.wake_fd);
	for (uint32_t i = 0; i < a->nworkers; i++)
		br_wake(br.workers[i].wake_fd);
}

/*
 * gsockd speaks first: how many doorbell queues to make, and the direct
 * pool to map. The pool goes to gsockd's own user only: every
 * application that maps it reaches every direct connection's bytes, so
 * a root application of a user's gsockd goes without.
 */
static void welcome(int fd, bool pool_too)
{
	struct gs_ctl_welcome w = { .magic = GS_CTL_WELCOME_MAGIC,
				    .version = GS_CTL_VERSION,
				    .workers = br.nworkers };
	int pool = br_direct_pool(&w.dsegs, &w.dring_size, &w.pool_size);

	if (!pool_too) {
		pool = -1;
		w.dsegs = 0;
		w.pool_size = 0;
	}
	w.rx_pools = pool >= 0 && br.conf.direct_device;
	if (br_send_fd(fd, &w, sizeof(w), pool) < 0)
		br_dbg("cannot welcome on control connection: %s",
		       strerror(errno));
}

int br_send_fd(int sock, const void *buf, size_t len, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *cm;

		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -1 : 0;
}

/* Drop a connection that has not said hello, telling it why. */
static void drop_pending(struct br_app *a, int status, const char *why)
{
	br_warn("dropping the control connection of pid %d: %s", (int)a->pid,
		why);
	reply(a->ctl_fd, status, "%s", why);
	br_app_kill(a);
}

/*
 * Control thread, each loop turn: drop the connections whose hello is
 * late (a hung or hostile client must not hold a place for long).
 */
void br_app_sweep(uint64_t now)
{
	char why[128];

	if (!br.npending)
		return;
	for (struct br_app *a = br.apps; a; a = a->next)
		if (a->pending && !br_app_dead(a) && now >= a->hello_by_ns) {
			snprintf(why, sizeof(why),
				 "no hello within %ld ms (hello_timeout_ms)",
				 br.conf.hello_timeout_ms);
			drop_pending(a, -ETIMEDOUT, why);
		}
}

/*
 * As many connections as max_apps may wait for their hello; one more
 * drops the one that has waited longest, so that connections that never
 * speak cannot lock applications out (a real one says hello at once).
 */
static void make_room(void)
{
	struct br_app *oldest = NULL;
	uint32_t waiting = 0;
	char why[128];

	for (struct br_app *a = br.apps; a; a = a->next)
		if (a->pending && !br_app_dead(a)) {
			waiting++;
			if (!oldest || a->hello_by_ns <= oldest->hello_by_ns)
				oldest = a;
		}
	if (oldest && waiting >= (uint32_t)br.conf.max_apps) {
		snprintf(why, sizeof(why),
			 "no hello yet, and %u newer connections wait (max_apps %ld)",
			 waiting, br.conf.max_apps);
		drop_pending(oldest, -EAGAIN, why);
	}
}

/*
 * A new control connection: check who it is and wait (in epoll, never
 * blocking the loop) for its hello, until hello_timeout_ms. Returns
 * whether there was one.
 */
int br_app_accept(int ctl_listen_fd)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd;

	fd = accept4(ctl_listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN)
			br_warn("accept on the control socket failed: %s",
				strerror(errno));
		return 0;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
	    (cred.uid != br.uid && cred.uid != 0)) {
		br_warn("refusing control connection from uid %d (pid %d): gsockd serves uid %d only",
			(int)cred.uid, (int)cred.pid, (int)br.uid);
		reply(fd, -EACCES, "gsockd serves another user");
		close(fd);
		return 1;
	}
	br_app_new(fd, &cred);
	return 1;
}

/*
 * Control connection fd of a peer already checked: a pending application
 * (or a refusal and fd closed). The fuzzer (t/fuzz_ctl.c) comes in here.
 */
struct br_app *br_app_new(int fd, const struct ucred *peer)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
	struct ucred cred = *peer;
	struct br_app *a;

	if (br.napps >= (uint32_t)br.conf.max_apps) {
		br_warn("refusing application pid %d: %ld applications registered already (max_apps)",
			(int)cred.pid, br.conf.max_apps);
		reply(fd, -EUSERS,
		      "too many applications: %ld are registered (max_apps in gsock.conf)",
		      br.conf.max_apps);
		goto err_close;
	}
	make_room();
	a = calloc(1, sizeof(*a));
	if (!a) {
		br_warn("refusing application pid %d: out of memory",
			(int)cred.pid);
		goto err_close;
	}
	a->ev.kind = BR_EV_APP;
	a->ctl_fd = fd;
	a->rx_fd = -1;
	a->peer = -1;
	a->pid = cred.pid;
	a->uid = cred.uid;
	a->pending = true;
	a->hello_by_ns =
		br_now_ns() + (uint64_t)br.conf.hello_timeout_ms * 1000000u;
	a->refs = 1; /* the control thread's */
	pthread_mutex_init(&a->ids_lock, NULL);
	ev.data.ptr = &a->ev;
	if (epoll_ctl(br.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		br_warn("refusing application pid %d: epoll: %s",
			(int)cred.pid, strerror(errno));
		pthread_mutex_destroy(&a->ids_lock);
		free(a);
		goto err_close;
	}
	a->next = br.apps;
	br.apps = a;
	br.npending++;
	welcome(fd, cred.uid == br.uid);
	return a;
err_close:
	close(fd);
	return NULL;
}

/* Hand the application to the workers that serve its queues. */
static int attach_workers(struct br_app *a)
{
	for (uint32_t i = 0; i < a->nworkers; i++) {
		struct br_msg *m = calloc(1, sizeof(*m));

		if (!m)
			return -1;
		m->kind = BR_MSG_ATTACH;
		m->app = a;
		br_app_get(a);
		br_worker_post(&br.workers[i], m);
	}
	return 0;
}

/* The first message of a pending application: its arena. */
/* The bytes a receive pool must have (gsock_arena.h). */
static uint64_t rx_least(void)
{
	uint32_t nsegs, dring;
	uint64_t size;

	br_direct_pool(&nsegs, &dring, &size);
	return GS_RXPOOL_SIZE(nsegs, dring);
}

static void app_hello(struct br_app *a)
{
	union hello u;
	struct gs_ctl_hello hello;
	char why[200];
	int memfd, pair = -1, status = -EINVAL;

	memfd = recv_hello(a->ctl_fd, &u, &pair, why, sizeof(why));
	hello = u.h;
	if (memfd == -2) {
		br_dbg("control connection of pid %d closed before its hello",
		       (int)a->pid);
		br_app_kill(a);
		return;
	}
	if (memfd == -3) { /* gsock-stat: the connection is the answer's */
		int fd = dup(a->ctl_fd);

		br_dbg("gsock-stat request from pid %d", (int)a->pid);
		if (fd >= 0)
			br_stat_start(fd);
		br_app_kill(a);
		return;
	}
	if (memfd == -4) { /* the preload: answered, and the connection ends */
		struct gs_ctl_dreply rep;

		if (u.d.magic == GS_CTL_DLISTEN_MAGIC)
			br_direct_cpu_listen(&u.d, a->uid, &rep);
		else if (u.d.magic == GS_CTL_DACCEPT_MAGIC)
			br_direct_cpu_accept(&u.d, pair, a->uid, &rep);
		else
			br_direct_cpu_connect(&u.d, pair, a->uid, &rep);
		br_dbg("direct request from pid %d: %s", (int)a->pid, rep.msg);
		if (send(a->ctl_fd, &rep, sizeof(rep),
			 MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			br_dbg("cannot answer pid %d's direct request: %s",
			       (int)a->pid, strerror(errno));
		br_app_kill(a);
		return;
	}
	if (memfd < 0)
		goto err_reject;
	status = map_arena(a, memfd, hello.arena_size, why, sizeof(why));
	if (status)
		goto err_reject;
	if (br.napps >= (uint32_t)br.conf.max_apps) {
		snprintf(why, sizeof(why),
			 "too many applications: %ld are registered (max_apps in gsock.conf)",
			 br.conf.max_apps);
		status = -EUSERS;
		goto err_reject;
	}
	if (app_tables(a)) {
		snprintf(why, sizeof(why), "out of memory");
		status = -ENOMEM;
		goto err_reject;
	}
	/* the pool went to gsockd's own user only (welcome) */
	a->direct = hello.direct == 1 && a->uid == br.uid;
	if (a->direct && pair >= 0 && hello.rx_size >= rx_least()) {
		a->rx_fd = pair;
		a->rx_size = hello.rx_size;
		pair = -1;
	}
	a->pending = false; /* counted as registered from here on */
	br.npending--;
	br.napps++;
	a->serial = ++br.serials;
	if (attach_workers(a)) {
		snprintf(why, sizeof(why), "out of memory");
		status = -ENOMEM;
		goto err_reject;
	}
	close(memfd);
	if (pair >= 0)
		close(pair);
	reply(a->ctl_fd, 0, "ok");
	br_direct_app_joined(a);
	br_info("application pid %d registered (%s): %u slots, %u sockets, %u-byte rings, arena %llu KiB, %u workers, direct path %s%s",
		(int)a->pid, *a->device ? a->device : "no device named",
		a->nslots, a->nsocks, a->ring_size,
		(unsigned long long)hello.arena_size >> 10, a->nworkers,
		a->direct ? "mapped" : "not used",
		a->peer >= 0 ? ", receive pool in device memory" : "");
	return;
err_reject:
	br_warn("rejecting application pid %d: %s", (int)a->pid, why);
	reply(a->ctl_fd, status, "%s", why);
	if (memfd >= 0)
		close(memfd);
	if (pair >= 0)
		close(pair);
	br_app_kill(a);
}

void br_app_reject(struct br_app *a, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	if (br_app_dead(a))
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	br_warn("rejecting application pid %d: %s; its sockets are closed",
		(int)a->pid, why);
	br_app_kill(a);
}

void br_app_event(struct br_app *a, uint32_t events)
{
	union {
		struct gs_ctl_peer_ack ack;
		char buf[64];
	} m;
	ssize_t n;

	if (br_app_dead(a))
		return;
	if (a->pending) {
		app_hello(a);
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		br_info("application pid %d is gone (%s); freeing its sockets",
			(int)a->pid, *a->device ? a->device : "no device named");
		br_app_kill(a);
		return;
	}
	n = recv(a->ctl_fd, m.buf, sizeof(m.buf), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		br_info("application pid %d is gone (%s); freeing its sockets",
			(int)a->pid, *a->device ? a->device : "no device named");
		br_app_kill(a);
	} else if (n == (ssize_t)sizeof(m.ack) &&
		   m.ack.magic == GS_CTL_PEER_MAGIC) {
		br_direct_peer_ack(a, &m.ack);
	} else if (n > 0) {
		br_app_reject(
			a,
			"unexpected %zd-byte message on its control connection",
			n);
	}
}

void br_app_complete(struct br_app *a, uint32_t slot, int64_t result,
		     const void *addr, uint32_t addrlen)
{
	struct gs_cmd *c = &a->slots[slot];

	if (addrlen > GS_ADDR_MAX)
		addrlen = GS_ADDR_MAX;
	if (addr)
		memcpy(c->out_addr, addr, addrlen);
	c->out_addrlen = addr ? addrlen : 0;
	c->result = result;
	__atomic_store_n(&a->slot[slot].parked_on, 0, __ATOMIC_RELAXED);
	br_tsan_release(&a->slot[slot]);
	__atomic_store_n(&c->done_seq,
			 __atomic_load_n(&a->slot[slot].seq, __ATOMIC_RELAXED),
			 __ATOMIC_RELEASE);
	br_app_event_count(a); /* for gpoll */
}

/*
 * Worker: bump its own queue's event count (gs_dbq.events); it is the
 * only writer, so no atomic read-modify-write and no line shared with
 * another worker.
 */
void br_app_event_count(struct br_app *a)
{
	uint64_t *ev = &a->dbq[br_self()->idx].events;

	__atomic_store_n(ev, __atomic_load_n(ev, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELEASE);
}

/*
 * A doorbell for a command slot: claim the request (one worker serves it
 * even if the application rings twice, on two queues), copy it out, then
 * act on it.
 */
static void slot_doorbell(struct br_app *a, uint32_t slot)
{
	struct gs_cmd *c = &a->slots[slot];
	struct br_slot *bs = &a->slot[slot];
	struct gs_cmd req;
	uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
	uint64_t cur = __atomic_load_n(&bs->seq, __ATOMIC_ACQUIRE);

	if (seq == cur || __atomic_load_n(&bs->parked_on, __ATOMIC_ACQUIRE))
		return; /* already served, or still being served */
	if (!__atomic_compare_exchange_n(&bs->seq, &cur, seq, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return; /* another worker took it */
	br_tsan_acquire(bs);
	memcpy(&req, c, offsetof(struct gs_cmd, done_seq));
	if (req.op == GS_OP_NONE || req.op >= GS_OP_COUNT) {
		br_app_reject(a, "slot %u holds unknown opcode %u", slot,
			      req.op);
		return;
	}
	if (req.addrlen > GS_ADDR_MAX) {
		br_app_reject(a, "slot %u holds a %u-byte address (at most %u)",
			      slot, req.addrlen, GS_ADDR_MAX);
		return;
	}
	br_dbg("pid %d slot %u: op %u fd %d", (int)a->pid, slot, req.op,
	       req.fd);
	br_sock_command(a, slot, &req);
}

/* Whether queue q holds a cell not consumed yet (any thread: a hint). */
int br_app_pending(struct br_app *a, uint32_t q)
{
	uint64_t head = __atomic_load_n(&a->dbq[q].head, __ATOMIC_ACQUIRE);
	uint64_t cell = __atomic_load_n(
		&gs_db_cells(a->db, q, a->db_size)[head & (a->db_size - 1)],
		__ATOMIC_ACQUIRE);

	return gs_db_cell_for(cell, head);
}

/*
 * Drain one doorbell queue: each cell names a command slot or a socket
 * whose rings changed. Returns the cells handled.
 */
static int queue_poll(struct br_app *a, uint32_t q)
{
	uint32_t mask = a->db_size - 1;
	uint64_t *cells = gs_db_cells(a->db, q, a->db_size);
	uint64_t *head = &a->dbq_head[q];
	int n = 0;

	while (n < DB_BUDGET && !br_app_dead(a)) {
		uint64_t cell =
			__atomic_load_n(&cells[*head & mask], __ATOMIC_ACQUIRE);
		uint32_t what = (uint32_t)cell;

		if (!gs_db_cell_for(cell, *head))
			break;
		(*head)++;
		n++;
		if (what & GS_DB_CMD) {
			what &= ~GS_DB_CMD;
			if (what >= a->nslots) {
				br_app_reject(a, "doorbell names slot %u of %u",
					      what, a->nslots);
				break;
			}
			slot_doorbell(a, what);
		} else if (what >= a->nsocks) {
			br_app_reject(a, "doorbell names socket %u of %u", what,
				      a->nsocks);
			break;
		} else {
			br_sock_doorbell(a, what);
		}
	}
	if (n)
		__atomic_store_n(&a->dbq[q].head, *head, __ATOMIC_RELEASE);
	return n;
}

/* Worker w: drain the queues of a it serves. Returns the cells handled. */
int br_app_poll(struct br_worker *w, struct br_app *a)
{
	int n = 0;

	for (uint32_t q = w->idx; q < a->nqueues; q += a->nworkers)
		n += queue_poll(a, q);
	return n;
}

/*
 * Control thread: let go of every application that died or was rejected;
 * the last of its workers to let go frees it.
 */
void br_reap(void)
{
	struct br_app **pp = &br.apps;

	while (*pp) {
		struct br_app *a = *pp;

		if (!br_app_dead(a)) {
			pp = &a->next;
			continue;
		}
		*pp = a->next;
		if (a->pending)
			br.npending--;
		else
			br.napps--;
		epoll_ctl(br.epfd, EPOLL_CTL_DEL, a->ctl_fd, NULL);
		br_app_put(a);
	}
}
