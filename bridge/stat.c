/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The live view's request (gsock-stat; the protocol is in gsock_ctl.h).
 * The control thread writes the bridge's and the applications' records
 * and asks every worker for its sockets, since only a socket's owner may
 * read it; the last worker to answer sends the lot and closes the
 * connection, so neither the control thread nor a worker ever waits for
 * another. Nothing here runs unless someone asks. An answer cut short
 * (out of memory) lacks its end record, and gsock-stat says so. The
 * socket records are written here too, by the worker that owns them.
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../devlib/gsock_ctl.h"
#include "bridge.h"
#include "log.h"

/* Records per message: well under SEQPACKET's limit on loopback. */
#define STAT_BATCH 256
/* A reader that stalls this long on one message is cut off. */
#define STAT_SEND_TIMEOUT_MS 200

struct br_stat {
	int fd; /* the requester's connection, ours to close */
	uint32_t left; /* atomic: workers still to answer */
	pthread_mutex_t lock; /* recs */
	struct gs_stat_rec *recs;
	size_t n, cap;
	bool failed; /* out of memory: the answer is cut short */
};

void br_stat_add(struct br_stat *st, const struct gs_stat_rec *r)
{
	pthread_mutex_lock(&st->lock);
	if (st->n == st->cap && !st->failed) {
		size_t cap = st->cap ? 2 * st->cap : 64;
		struct gs_stat_rec *n = realloc(st->recs, cap * sizeof(*n));

		if (n) {
			st->recs = n;
			st->cap = cap;
		} else {
			st->failed = true;
		}
	}
	if (st->n < st->cap)
		st->recs[st->n++] = *r;
	pthread_mutex_unlock(&st->lock);
}

/* Send everything, then the empty message that ends it; free st. */
static void finish(struct br_stat *st)
{
	struct timeval tv = { 0, STAT_SEND_TIMEOUT_MS * 1000 };
	struct gs_stat_rec end = { .kind = GS_STAT_END, .pid = getpid() };
	size_t i;

	end.u.end.records = st->n;
	if (st->failed)
		br_warn("gsock-stat request: out of memory; the answer is cut short");
	/* Blocking, with a bound: a worker sends this, and must not hang. */
	fcntl(st->fd, F_SETFL, fcntl(st->fd, F_GETFL) & ~O_NONBLOCK);
	setsockopt(st->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	for (i = 0; i < st->n; i += STAT_BATCH) {
		size_t k = st->n - i < STAT_BATCH ? st->n - i : STAT_BATCH;

		if (send(st->fd, st->recs + i, k * sizeof(*st->recs),
			 MSG_NOSIGNAL) < 0)
			break;
	}
	if (i < st->n)
		br_dbg("gsock-stat request: the reader went away or stalled: %s",
		       strerror(errno));
	else if (!st->failed)
		send(st->fd, &end, sizeof(end), MSG_NOSIGNAL);
	close(st->fd);
	pthread_mutex_destroy(&st->lock);
	free(st->recs);
	free(st);
}

/* A worker (or the control thread, for none) has added its records. */
void br_stat_done(struct br_stat *st)
{
	if (__atomic_sub_fetch(&st->left, 1, __ATOMIC_ACQ_REL) == 0)
		finish(st);
}

static void app_record(struct br_stat *st, const struct br_app *a)
{
	struct gs_stat_rec r = { .kind = GS_STAT_APP,
				 .pid = a->pid,
				 .arena = a->serial };
	char path[64];
	ssize_t n;
	int fd;

	r.u.app.nslots = a->nslots;
	r.u.app.nsocks = a->nsocks;
	r.u.app.ring_size = a->ring_size;
	r.u.app.nworkers = a->nworkers;
	r.u.app.arena_size = a->size;
	memcpy(r.u.app.device, a->device, sizeof(r.u.app.device));
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)a->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, r.u.app.comm, sizeof(r.u.app.comm) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n > 0 && r.u.app.comm[n - 1] == '\n')
		r.u.app.comm[n - 1] = 0;
	br_stat_add(st, &r);
}

/*
 * Control thread: answer a stats request on fd (which becomes ours). The
 * registered applications now; their sockets from the workers.
 */
void br_stat_start(int fd)
{
	struct br_stat *st = calloc(1, sizeof(*st));
	struct gs_stat_rec r = { .kind = GS_STAT_BRIDGE, .pid = getpid() };

	if (!st) {
		br_warn("gsock-stat request: out of memory");
		close(fd);
		return;
	}
	st->fd = fd;
	pthread_mutex_init(&st->lock, NULL);
	r.u.bridge.workers = br.nworkers;
	r.u.bridge.napps = br.napps;
	r.u.bridge.io_uring = br.io_uring;
	r.u.bridge.direct_wakeups = br_direct_wakeups();
	r.u.bridge.direct_held = br_direct_held();
	{
		uint32_t dring;
		uint64_t size;

		br_direct_pool(&r.u.bridge.direct_segs, &dring, &size);
	}
	br_watch_counts(&r.u.bridge.watch_looks, &r.u.bridge.watch_finds);
	br_stat_add(st, &r);
	for (struct br_app *a = br.apps; a; a = a->next)
		if (!a->pending && !br_app_dead(a))
			app_record(st, a);
	/* One count for each worker asked, one for this thread. */
	st->left = 1;
	for (uint32_t i = 0; i < br.nworkers; i++) {
		struct br_msg *m = calloc(1, sizeof(*m));

		if (!m) {
			pthread_mutex_lock(&st->lock);
			st->failed = true;
			pthread_mutex_unlock(&st->lock);
			break;
		}
		m->kind = BR_MSG_STAT;
		m->stat = st;
		__atomic_add_fetch(&st->left, 1, __ATOMIC_RELAXED);
		br_worker_post(&br.workers[i], m);
	}
	br_stat_done(st);
}

/* An address for gsock-stat: "host:port", "[v6]:port", a path, or "-". */
static void addr_text(const struct sockaddr_storage *ss, socklen_t len,
		      char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN];
	const struct sockaddr_un *un = (const struct sockaddr_un *)ss;

	snprintf(buf, size, "-");
	if (len == 0)
		return;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, size, "%s:%u", host, ntohs(in->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, size, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else if (ss->ss_family == AF_UNIX &&
		   len > offsetof(struct sockaddr_un, sun_path)) {
		size_t n = len - offsetof(struct sockaddr_un, sun_path);

		if (un->sun_path[0]) /* a path */
			snprintf(buf, size, "%.*s", (int)strnlen(un->sun_path, n),
				 un->sun_path);
		else /* abstract */
			snprintf(buf, size, "@%.*s", (int)(n - 1), un->sun_path + 1);
	}
}

/* Worker: gsock-stat's records for the sockets of a that it owns. */
void br_sock_stat(struct br_app *a, struct br_stat *st)
{
	static const uint32_t states[] = {
		[BS_OPEN] = GS_SS_OPEN,		  [BS_LISTEN] = GS_SS_LISTEN,
		[BS_CONNECTING] = GS_SS_CONNECTING, [BS_CONNECTED] = GS_SS_CONNECTED,
		[BS_CLOSING] = GS_SS_CLOSING,	  [BS_CANCELLING] = GS_SS_CLOSING,
	};
	uint64_t now = br_now_ns();

	for (uint32_t i = 0; i < a->nsocks; i++) {
		struct br_sock *s = &a->sk[i];
		struct gs_sock *g = br_sock_arena(s);
		struct gs_stat_rec r = { .kind = GS_STAT_SOCK,
					 .pid = a->pid,
					 .arena = a->serial };
		struct sockaddr_storage ss;
		socklen_t len;

		if (!br_sock_mine(s) || s->state == BS_FREE)
			continue;
		r.u.sock.id = s->id;
		r.u.sock.worker = br_self()->idx;
		r.u.sock.state = states[s->state];
		r.u.sock.status = s->status;
		r.u.sock.error = __atomic_load_n(&g->error, __ATOMIC_RELAXED);
		r.u.sock.poll_slot = __atomic_load_n(&g->poll_slot, __ATOMIC_RELAXED);
		r.u.sock.rx_bytes = s->rx_tail;
		r.u.sock.tx_bytes = s->tx_head;
		/* The application's counters: untrusted, shown as they are. */
		r.u.sock.rx_queued =
			s->rx_tail - __atomic_load_n(&g->rx_head, __ATOMIC_RELAXED);
		r.u.sock.tx_queued =
			__atomic_load_n(&g->tx_tail, __ATOMIC_RELAXED) - s->tx_head;
		/* A direct connection's bytes: its segment's, as untrusted. */
		r.u.sock.direct = br_direct_counts(s, &r.u.sock.rx_bytes,
						   &r.u.sock.tx_bytes,
						   &r.u.sock.rx_queued,
						   &r.u.sock.tx_queued);
		r.u.sock.idle_ms = now > s->last_ns ? (now - s->last_ns) / 1000000 : 0;
		len = sizeof(ss);
		if (s->fd < 0 || getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0)
			len = 0;
		addr_text(&ss, len, r.u.sock.local, sizeof(r.u.sock.local));
		len = sizeof(ss);
		if (s->fd < 0 || getpeername(s->fd, (struct sockaddr *)&ss, &len) < 0)
			len = 0;
		addr_text(&ss, len, r.u.sock.peer, sizeof(r.u.sock.peer));
		br_stat_add(st, &r);
	}
}
