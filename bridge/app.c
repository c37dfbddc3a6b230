/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Applications: registration over the control socket (SO_PEERCRED, the
 * arena memfd, geometry checks), the doorbell queue, command slots, and
 * clean-up when an application goes away or is rejected. Every value read
 * from an arena is checked here or in sock.c before use.
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
#include "bridge.h"
#include "log.h"

/* Doorbell cells handled per application per loop turn (fairness). */
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

/* Receive the hello and its memfd. Returns the fd, or -1 with why set. */
static int recv_hello(int fd, struct gs_ctl_hello *h, char *why, size_t len)
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { h, sizeof(*h) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int memfd = -1, nfds = 0;
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
			else
				close(got);
		}
	}
	if (n != (ssize_t)sizeof(*h) ||
	    (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		snprintf(why, len, "malformed hello (%zd bytes, expected %zu)",
			 n, sizeof(*h));
	else if (h->magic != GS_CTL_MAGIC || h->version != GS_CTL_VERSION)
		snprintf(
			why, len,
			"hello has magic %#x version %u, expected %#x version %u (mismatched libgsock?)",
			h->magic, h->version, GS_CTL_MAGIC, GS_CTL_VERSION);
	else if (nfds != 1)
		snprintf(why, len,
			 "hello carries %d descriptors, expected one memfd",
			 nfds);
	else
		return memfd;
	if (memfd >= 0)
		close(memfd);
	return -1;
}

/* Check the memfd and the header it holds; map it into a. */
static int map_arena(struct br_app *a, int memfd, uint64_t size, char *why,
		     size_t len)
{
	const int seals = F_SEAL_SHRINK | F_SEAL_SEAL;
	struct gs_arena_hdr h;
	struct gs_layout l;
	struct stat st;

	if (fstat(memfd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != size) {
		snprintf(why, len, "the descriptor is not a %llu-byte memfd",
			 (unsigned long long)size);
		return -1;
	}
	if ((fcntl(memfd, F_GET_SEALS) & seals) != seals) {
		snprintf(
			why, len,
			"the arena memfd is not sealed against shrinking (F_SEAL_SHRINK | F_SEAL_SEAL)");
		return -1;
	}
	if (size < sizeof(h) || size > (uint64_t)br.conf.max_arena_mb << 20) {
		snprintf(
			why, len,
			"arena of %llu bytes is outside 1 page..max_arena_mb (%ld MiB)",
			(unsigned long long)size, br.conf.max_arena_mb);
		return -1;
	}
	a->base =
		mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (a->base == MAP_FAILED) {
		a->base = NULL;
		snprintf(why, len, "cannot map the arena: %s", strerror(errno));
		return -1;
	}
	a->size = size;
	memcpy(&h, a->base, sizeof(h));
	if (h.magic != GS_ARENA_MAGIC || h.version != GS_ARENA_VERSION ||
	    h.hdr_size != sizeof(h) || h.arena_size != size) {
		snprintf(why, len,
			 "arena header has a bad magic, version or size");
		return -1;
	}
	if (gs_arena_layout(h.nslots, h.nsocks, h.ring_size, h.db_size, &l) ||
	    l.size != size || l.slots_off != h.slots_off ||
	    l.socks_off != h.socks_off || l.db_off != h.db_off ||
	    l.rings_off != h.rings_off) {
		snprintf(
			why, len,
			"arena geometry is inconsistent (slots %u, sockets %u, ring %u, doorbell %u)",
			h.nslots, h.nsocks, h.ring_size, h.db_size);
		return -1;
	}
	a->nslots = h.nslots;
	a->nsocks = h.nsocks;
	a->ring_size = h.ring_size;
	a->db_size = h.db_size;
	a->hdr = (struct gs_arena_hdr *)a->base;
	a->slots = (struct gs_cmd *)(a->base + l.slots_off);
	a->socks = (struct gs_sock *)(a->base + l.socks_off);
	a->db = (uint64_t *)(a->base + l.db_off);
	a->rings = a->base + l.rings_off;
	return 0;
}

static int app_tables(struct br_app *a)
{
	a->sk = calloc(a->nsocks, sizeof(*a->sk));
	a->slot = calloc(a->nslots, sizeof(*a->slot));
	if (!a->sk || !a->slot)
		return -1;
	for (uint32_t i = a->nsocks; i-- > 0;) {
		struct br_sock *s = &a->sk[i];

		s->ev.kind = BR_EV_SOCK;
		s->app = a;
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
	a->db_head = __atomic_load_n(&a->hdr->db_head, __ATOMIC_ACQUIRE);
	return 0;
}

static void app_free(struct br_app *a)
{
	if (a->sk)
		br_sock_close_all(a);
	if (a->ctl_fd >= 0)
		close(a->ctl_fd);
	if (a->base)
		munmap(a->base, a->size);
	free(a->sk);
	free(a->slot);
	free(a);
}

/*
 * A new control connection: check who it is and wait (in epoll, never
 * blocking the loop) for its hello.
 */
void br_app_accept(int ctl_listen_fd)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct br_app *a;
	int fd;

	fd = accept4(ctl_listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN)
			br_warn("accept on the control socket failed: %s",
				strerror(errno));
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
	    (cred.uid != br.uid && cred.uid != 0)) {
		br_warn("refusing control connection from uid %d (pid %d): gsockd serves uid %d only",
			(int)cred.uid, (int)cred.pid, (int)br.uid);
		reply(fd, -EACCES, "gsockd serves another user");
		goto err_close;
	}
	if (br.napps >= (uint32_t)br.conf.max_apps) {
		br_warn("refusing application pid %d: %ld applications registered already (max_apps)",
			(int)cred.pid, br.conf.max_apps);
		reply(fd, -EUSERS, "too many applications (max_apps is %ld)",
		      br.conf.max_apps);
		goto err_close;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		br_warn("refusing application pid %d: out of memory",
			(int)cred.pid);
		goto err_close;
	}
	a->ev.kind = BR_EV_APP;
	a->ctl_fd = fd;
	a->pid = cred.pid;
	a->uid = cred.uid;
	a->pending = true;
	ev.data.ptr = &a->ev;
	if (epoll_ctl(br.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		br_warn("refusing application pid %d: epoll: %s",
			(int)cred.pid, strerror(errno));
		free(a);
		goto err_close;
	}
	a->next = br.apps;
	br.apps = a;
	br.napps++;
	return;
err_close:
	close(fd);
}

/* The first message of a pending application: its arena. */
static void app_hello(struct br_app *a)
{
	struct gs_ctl_hello hello;
	char why[200];
	int memfd;

	memfd = recv_hello(a->ctl_fd, &hello, why, sizeof(why));
	if (memfd < 0)
		goto err_reject;
	if (map_arena(a, memfd, hello.arena_size, why, sizeof(why)))
		goto err_reject;
	if (app_tables(a)) {
		snprintf(why, sizeof(why), "out of memory");
		goto err_reject;
	}
	close(memfd);
	reply(a->ctl_fd, 0, "ok");
	a->pending = false;
	br_info("application pid %d registered: %u slots, %u sockets, %u-byte rings, arena %llu KiB",
		(int)a->pid, a->nslots, a->nsocks, a->ring_size,
		(unsigned long long)hello.arena_size >> 10);
	return;
err_reject:
	br_warn("rejecting application pid %d: %s", (int)a->pid, why);
	reply(a->ctl_fd, -EINVAL, "%s", why);
	if (memfd >= 0)
		close(memfd);
	a->dead = true;
}

void br_app_reject(struct br_app *a, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	if (a->dead)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	br_warn("rejecting application pid %d: %s; its sockets are closed",
		(int)a->pid, why);
	a->dead = true;
}

void br_app_event(struct br_app *a, uint32_t events)
{
	char buf[64];
	ssize_t n;

	if (a->dead)
		return;
	if (a->pending) {
		app_hello(a);
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		br_info("application pid %d is gone; freeing its sockets",
			(int)a->pid);
		a->dead = true;
		return;
	}
	n = recv(a->ctl_fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		br_info("application pid %d is gone; freeing its sockets",
			(int)a->pid);
		a->dead = true;
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
	a->slot[slot].parked = false;
	__atomic_store_n(&c->done_seq, a->slot[slot].seq, __ATOMIC_RELEASE);
	__atomic_add_fetch(&a->hdr->events, 1, __ATOMIC_RELEASE); /* for gpoll */
}

/* A doorbell for a command slot: copy the request out, then act on it. */
static void slot_doorbell(struct br_app *a, uint32_t slot)
{
	struct gs_cmd *c = &a->slots[slot];
	struct br_slot *bs = &a->slot[slot];
	struct gs_cmd req;
	uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);

	if (seq == bs->seq || bs->parked)
		return; /* already served, or still being served */
	memcpy(&req, c, offsetof(struct gs_cmd, done_seq));
	bs->seq = seq;
	bs->op = req.op;
	bs->fd = req.fd;
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

/*
 * Drain the doorbell queue: each cell names a command slot or a socket
 * whose rings changed. Returns the cells handled.
 */
int br_app_poll(struct br_app *a)
{
	uint32_t mask = a->db_size - 1;
	int n = 0;

	if (a->pending)
		return 0;
	while (n < DB_BUDGET && !a->dead) {
		uint64_t cell = __atomic_load_n(&a->db[a->db_head & mask],
						__ATOMIC_ACQUIRE);
		uint32_t what = (uint32_t)cell;

		if ((uint32_t)(cell >> 32) != (uint32_t)(a->db_head + 1))
			break;
		a->db_head++;
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
		} else if (a->sk[what].state != BS_FREE) {
			br_sock_pump(&a->sk[what]);
		}
	}
	if (n)
		__atomic_store_n(&a->hdr->db_head, a->db_head,
				 __ATOMIC_RELEASE);
	if (a->nclosing)
		br_sock_tick(a);
	return n;
}

/* Free every application that died or was rejected this turn. */
void br_reap(void)
{
	struct br_app **pp = &br.apps;

	while (*pp) {
		struct br_app *a = *pp;

		if (!a->dead) {
			pp = &a->next;
			continue;
		}
		*pp = a->next;
		br.napps--;
		epoll_ctl(br.epfd, EPOLL_CTL_DEL, a->ctl_fd, NULL);
		app_free(a);
	}
}
