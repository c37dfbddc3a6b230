/* SPDX-License-Identifier: Apache-2.0 */
/*
 * facever-client: the load generator of face verification, and a
 * one-shot query. It sends views of the generated population (the same
 * one facever-enrol stored), some claiming to be someone else and some
 * claiming unknown ids, checks every answer against the verdict it must
 * have, and reports throughput and latency percentiles.
 *
 * Closed loop (default): each connection has one request in flight.
 * Open loop (--rate): requests leave on a fixed schedule whatever the
 * answers do, pipelined, and latency counts from the scheduled time.
 * With --reconnect a broken connection is made again and the requests it
 * had in flight count as failed (for servers killed under load).
 *
 * Every wait is bounded, so that a dead or full server cannot hang the
 * run: connections are made without blocking (a full listen queue drops
 * SYNs, and a blocking connect waits out two minutes of retries), and
 * those not made when the run ends are given up; a request with no
 * answer after --wait seconds fails and its connection is closed; after
 * the duration (or the last request) answers are awaited GRACE_NS more,
 * then what is still in flight fails. What failed, and why, is said on
 * standard error.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "app.h"
#include "fv_cpu.h"

#define FLIGHT 256 /* requests one connection may have in flight */
#define UNKNOWN_BASE 1000000000u /* ids from here on are never enrolled */
#define GRACE_NS 2000000000ull /* answers awaited after the last request */
#define RETRY_NS 20000000ull /* --reconnect: between tries to connect */

struct opts {
	const char *server;
	unsigned conns, threads, people, views, side, seed;
	double duration, rate, impostors, unknown;
	uint64_t requests; /* 0: run for duration */
	int reconnect;
	double wait; /* seconds a request may wait for its answer */
};

static struct opts o = {
	"127.0.0.1:7100", 16, 2, 100, 4, 128, 1, 5.0, 0, 0.3, 0, 0, 0, 10.0
};
static uint8_t *pictures; /* people x views, side x side each */

struct flight {
	uint32_t seq;
	int32_t expect;
	uint64_t t0;
};

struct conn {
	int fd;
	int connecting; /* the connect is in progress (EPOLLOUT) */
	uint64_t retry_at; /* --reconnect: the next try, after a failed one */
	uint32_t seq;
	unsigned head, tail; /* flights [head, tail) await answers */
	struct flight fl[FLIGHT];
	/* the request being sent: header then picture */
	struct fv_req req;
	const uint8_t *pic;
	size_t sent, total;
	unsigned queued; /* scheduled requests not yet started (open loop) */
	uint64_t next; /* open loop: when the next request is due */
	uint8_t in[16];
	size_t in_len;
	uint64_t rng;
};

struct counts {
	uint64_t sent, ok, wrong, unknown, store, other, failed;
	/* why requests failed (they add up to failed) */
	uint64_t lost_broken; /* in flight when their connection broke */
	uint64_t lost_overdue; /* no answer within --wait */
	uint64_t lost_end; /* no answer GRACE_NS after the last request */
	/* connections */
	uint64_t conn_errors; /* connects that failed */
	uint64_t conn_late; /* connects still in progress at the end */
	uint64_t conn_broken; /* connections the server closed or reset */
	int conn_errno; /* why the last connect failed */
};

struct thread {
	unsigned first, n; /* its connections */
	struct conn *c;
	int ep;
	struct counts k;
	uint32_t *lat; /* microseconds */
	size_t nlat, caplat;
	uint64_t quota; /* requests it may start (0: no limit) */
	int stop_sending;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Begin a connection (done when its EPOLLOUT comes); -1 if it failed. */
static int conn_open(struct thread *t, struct conn *c, uint64_t now)
{
	struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };

	c->head = c->tail = 0;
	c->total = c->sent = c->in_len = 0;
	c->fd = app_connect_nb(o.server);
	if (c->fd < 0) {
		t->k.conn_errors++;
		t->k.conn_errno = errno;
		c->retry_at = now + RETRY_NS;
		return -1;
	}
	c->connecting = 1;
	epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev);
	return 0;
}

static void conn_close(struct thread *t, struct conn *c)
{
	epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->connecting = 0;
}

/* Its connect is over: now it carries requests, or it failed. */
static void conn_made(struct thread *t, struct conn *c, uint64_t now)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	socklen_t len = sizeof(int);
	int err = 0;

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		conn_close(t, c);
		t->k.conn_errors++;
		t->k.conn_errno = err;
		c->retry_at = now + RETRY_NS;
		return;
	}
	c->connecting = 0;
	epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/*
 * The connection broke, or an answer is overdue: what it had in flight
 * failed (counted in *lost too); maybe reconnect.
 */
static void conn_broken(struct thread *t, struct conn *c, uint64_t *lost,
			uint64_t now)
{
	uint64_t n = c->tail - c->head;

	if (c->total && c->sent < c->total && c->tail == c->head)
		n++; /* half sent, not yet in flight */
	t->k.failed += n;
	*lost += n;
	conn_close(t, c);
	c->head = c->tail = 0;
	c->total = c->sent = 0;
	if (o.reconnect && !t->stop_sending)
		conn_open(t, c, now); /* on failure, the sender loop retries */
}

/* Start a request on c (there is none being sent). */
static void conn_start(struct thread *t, struct conn *c, uint64_t t0)
{
	uint64_t r = rnd(&c->rng);
	uint32_t p = (uint32_t)(r % o.people);
	uint32_t v = (uint32_t)((r >> 20) % o.views);
	double u = (double)((r >> 40) & 0xffffff) / 16777216.0;
	struct flight *f = &c->fl[c->tail % FLIGHT];

	c->req = (struct fv_req){ FV_REQ_MAGIC, ++c->seq, p, (uint16_t)o.side,
				  (uint16_t)o.side };
	f->expect = FV_MATCH;
	if (u < o.unknown) {
		c->req.id = UNKNOWN_BASE + (uint32_t)(r % 1000);
		f->expect = FV_E_UNKNOWN;
	} else if (u < o.unknown + o.impostors && o.people > 1) {
		c->req.id = (p + 1 + (uint32_t)((r >> 8) % (o.people - 1))) %
			    o.people;
		f->expect = FV_NO_MATCH;
	}
	f->seq = c->seq;
	f->t0 = t0;
	c->tail++;
	c->pic = pictures + ((size_t)p * o.views + v) * o.side * o.side;
	c->sent = 0;
	c->total = sizeof(c->req) + (size_t)o.side * o.side;
	t->k.sent++;
}

/* Push the request being sent; -1 if the connection broke. */
static int conn_push(struct conn *c)
{
	while (c->sent < c->total) {
		struct iovec iov[2];
		int n = 0;
		ssize_t k;

		if (c->sent < sizeof(c->req))
			iov[n++] = (struct iovec){ (uint8_t *)&c->req + c->sent,
						   sizeof(c->req) - c->sent };
		size_t po =
			c->sent > sizeof(c->req) ? c->sent - sizeof(c->req) : 0;
		iov[n++] = (struct iovec){ (void *)(c->pic + po),
					   c->total - sizeof(c->req) - po };
		k = writev(c->fd, iov, n);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (k <= 0)
			return -1;
		c->sent += (size_t)k;
	}
	c->total = c->sent = 0;
	return 0;
}

static void record(struct thread *t, uint64_t ns)
{
	if (t->nlat == t->caplat) {
		size_t cap = t->caplat ? t->caplat * 2 : 65536;
		uint32_t *l = realloc(t->lat, cap * sizeof(*l));

		if (!l)
			return;
		t->lat = l;
		t->caplat = cap;
	}
	t->lat[t->nlat++] = (uint32_t)(ns / 1000);
}

/* Read answers; -1 if the connection broke or answered nonsense. */
static int conn_pull(struct thread *t, struct conn *c)
{
	for (;;) {
		ssize_t n = recv(c->fd, c->in + c->in_len,
				 sizeof(c->in) - c->in_len, 0);
		struct fv_resp r;
		struct flight *f;

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n <= 0)
			return -1;
		c->in_len += (size_t)n;
		if (c->in_len < sizeof(r))
			continue;
		memcpy(&r, c->in, sizeof(r));
		c->in_len = 0;
		f = &c->fl[c->head % FLIGHT];
		if (c->head == c->tail || r.magic != FV_RESP_MAGIC ||
		    r.seq != f->seq) {
			t->k.other++;
			return -1;
		}
		c->head++;
		record(t, now_ns() - f->t0);
		if (r.status == f->expect)
			t->k.ok++;
		else if (r.status == FV_E_STORE)
			t->k.store++;
		else if (r.status == FV_E_UNKNOWN)
			t->k.unknown++; /* expected a verdict: not enrolled? */
		else if (r.status < 0)
			t->k.other++;
		else
			t->k.wrong++;
	}
}

static void *run(void *arg)
{
	struct thread *t = arg;
	struct epoll_event evs[64];
	uint64_t start = now_ns(), end = start + (uint64_t)(o.duration * 1e9);
	uint64_t interval = o.rate > 0 ? (uint64_t)(1e9 * o.conns / o.rate) : 0;
	uint64_t wait_ns = (uint64_t)(o.wait * 1e9), drain_until = 0;

	for (unsigned i = 0; i < t->n; i++) {
		struct conn *c = &t->c[i];

		c->rng = (uint64_t)o.seed << 32 | (t->first + i);
		c->next = start + (interval ? interval * i / t->n : 0);
		conn_open(t, c, start);
	}
	for (;;) {
		uint64_t now = now_ns();
		int busy = 0, sending = 0, n;

		if (!t->stop_sending && ((o.requests && t->quota == 0) ||
					 (!o.requests && now >= end))) {
			t->stop_sending = 1;
			drain_until = now + GRACE_NS;
		}
		for (unsigned i = 0; i < t->n; i++) {
			struct conn *c = &t->c[i];

			if (c->fd < 0) {
				if (o.reconnect && !t->stop_sending &&
				    now >= c->retry_at)
					conn_open(t, c, now);
				if (c->fd < 0)
					continue;
			}
			if (c->connecting) {
				if (t->stop_sending) { /* no request left for it */
					conn_close(t, c);
					t->k.conn_late++;
				}
				continue;
			}
			if (c->tail != c->head &&
			    now - c->fl[c->head % FLIGHT].t0 > wait_ns) {
				conn_broken(t, c, &t->k.lost_overdue, now);
				continue;
			}
			while (interval && !t->stop_sending && c->next <= now) {
				c->queued++;
				c->next += interval;
			}
			if (!c->total && !t->stop_sending &&
			    c->tail - c->head < FLIGHT &&
			    (interval ? c->queued > 0 : c->tail == c->head)) {
				if (o.requests && !t->quota)
					continue;
				t->quota -= o.requests ? 1 : 0;
				conn_start(t, c,
					   interval ?
						   c->next - interval *
								     c->queued :
						   now);
				if (interval)
					c->queued--;
			}
			if (c->total && conn_push(c) < 0) {
				t->k.conn_broken++;
				conn_broken(t, c, &t->k.lost_broken, now);
			}
			busy |= c->fd >= 0 && c->tail != c->head;
			sending |= c->fd >= 0 &&
				   c->total; /* its socket was full */
		}
		if (t->stop_sending && (!busy || now >= drain_until))
			break;
		n = epoll_wait(t->ep, evs, 64, interval || sending ? 0 : 50);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			uint64_t other = t->k.other;

			if (c->fd >= 0 && c->connecting)
				conn_made(t, c, now);
			else if (c->fd >= 0 && conn_pull(t, c) < 0) {
				/* nonsense is counted in other already */
				t->k.conn_broken += t->k.other == other;
				conn_broken(t, c, &t->k.lost_broken, now);
			}
		}
		if ((interval || sending) && n == 0) {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
	for (unsigned i = 0; i < t->n; i++) {
		struct conn *c = &t->c[i];

		if (c->fd < 0)
			continue;
		t->k.failed += c->tail - c->head;
		t->k.lost_end += c->tail - c->head;
		close(c->fd);
	}
	return NULL;
}

/* Why requests and connections failed, on standard error. */
static void report_losses(const struct counts *k)
{
	if (k->failed)
		fprintf(stderr,
			"facever-client: %llu requests failed: %llu in flight on connections that broke, %llu unanswered after %g s (-W), %llu unanswered %.0f s after the last request\n",
			(unsigned long long)k->failed,
			(unsigned long long)k->lost_broken,
			(unsigned long long)k->lost_overdue, o.wait,
			(unsigned long long)k->lost_end, GRACE_NS / 1e9);
	if (k->conn_errors)
		fprintf(stderr,
			"facever-client: %llu connects to %s failed (the last: %s)\n",
			(unsigned long long)k->conn_errors, o.server,
			strerror(k->conn_errno));
	if (k->conn_late)
		fprintf(stderr,
			"facever-client: %llu connections to %s were not made by the end of the run (its listen queue is full: the server has no place for them)\n",
			(unsigned long long)k->conn_late, o.server);
	if (k->conn_broken)
		fprintf(stderr,
			"facever-client: the server closed or reset %llu connections (a server with no place left refuses clients: see its -b, -m and -Q)\n",
			(unsigned long long)k->conn_broken);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * A blocking connection to the server, made within --wait seconds, its
 * sends and receives bounded by --wait too: the descriptor, or -1 with
 * errno (ETIMEDOUT: not made in time).
 */
static int connect_bounded(void)
{
	struct pollfd p = { .fd = app_connect_nb(o.server), .events = POLLOUT };
	struct timeval tv = { (time_t)o.wait,
			      (suseconds_t)((o.wait - (time_t)o.wait) * 1e6) };
	socklen_t len = sizeof(int);
	int err = 0, n;

	if (p.fd < 0)
		return -1;
	n = poll(&p, 1, (int)(o.wait * 1000));
	if (n == 0)
		err = ETIMEDOUT;
	else if (n < 0 ||
		 getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		close(p.fd);
		errno = err;
		return -1;
	}
	fcntl(p.fd, F_SETFL, fcntl(p.fd, F_GETFL) & ~O_NONBLOCK);
	setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(p.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return p.fd;
}

/* --id N --image FILE: one question, the answer on stdout. */
static int one_shot(uint32_t id, const char *path)
{
	uint32_t w, h;
	uint8_t *img = app_pgm_read(path, &w, &h, FV_MIN_SIDE,
				   FV_MAX_SIDE);
	struct fv_req q = { FV_REQ_MAGIC, 1, id, 0, 0 };
	struct fv_resp r;
	int fd;

	if (!img) {
		fprintf(stderr,
			"facever-client: cannot read %s: %s (a binary PGM of %d to %d pixels a side)\n",
			path, strerror(errno), FV_MIN_SIDE, FV_MAX_SIDE);
		return EX_NOINPUT;
	}
	q.w = (uint16_t)w;
	q.h = (uint16_t)h;
	fd = connect_bounded();
	if (fd < 0) {
		fprintf(stderr, "facever-client: cannot connect to %s: %s\n",
			o.server, strerror(errno));
		return EX_UNAVAILABLE;
	}
	errno = 0;
	if (send(fd, &q, sizeof(q), MSG_NOSIGNAL) != sizeof(q) ||
	    send(fd, img, (size_t)w * h, MSG_NOSIGNAL) != (ssize_t)(w * h) ||
	    recv(fd, &r, sizeof(r), MSG_WAITALL) != sizeof(r)) {
		fprintf(stderr, "facever-client: no answer from %s: %s\n",
			o.server,
			errno == EAGAIN ? "none within the wait (-W)" :
			errno ? strerror(errno) :
				"it closed the connection");
		close(fd);
		return EX_UNAVAILABLE;
	}
	close(fd);
	if (r.status >= 0)
		printf("%s %.4f\n", r.status == FV_MATCH ? "match" : "no-match",
		       r.distance);
	else
		printf("error %d\n", r.status);
	return r.status >= 0 ? 0 : 2;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: facever-client [options]            load, every answer checked\n"
		"       facever-client --id N --image FILE.pgm   one question\n"
		"  -s, --server ADDR     the server (default 127.0.0.1:7100)\n"
		"  -c, --conns N         connections (default 16)\n"
		"  -j, --threads N       client threads (default 2)\n"
		"  -d, --duration S      seconds of load (default 5)\n"
		"  -n, --requests N      this many requests instead\n"
		"  -r, --rate R          open loop: R requests/s in all\n"
		"  -S, --side PIXELS     picture side (default 128)\n"
		"  -p, --people N        the enrolled population (default 100)\n"
		"  -v, --views N         views per person sent (default 4)\n"
		"  -e, --seed N          population seed (default 1)\n"
		"  -i, --impostors F     share claiming someone else (default 0.3)\n"
		"  -u, --unknown F       share claiming an unknown id (default 0)\n"
		"  -R, --reconnect       remake broken connections (their requests fail)\n"
		"  -W, --wait S          a request unanswered after S seconds fails, and its\n"
		"                        connection is closed (default 10)\n"
		"A run ends at most 2 s after its duration or its last request: what is\n"
		"still unanswered then fails; connections not made by then are given up.\n");
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "conns", required_argument, NULL, 'c' },
		{ "threads", required_argument, NULL, 'j' },
		{ "duration", required_argument, NULL, 'd' },
		{ "requests", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "side", required_argument, NULL, 'S' },
		{ "people", required_argument, NULL, 'p' },
		{ "views", required_argument, NULL, 'v' },
		{ "seed", required_argument, NULL, 'e' },
		{ "impostors", required_argument, NULL, 'i' },
		{ "unknown", required_argument, NULL, 'u' },
		{ "reconnect", no_argument, NULL, 'R' },
		{ "wait", required_argument, NULL, 'W' },
		{ "id", required_argument, NULL, 'I' },
		{ "image", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *image = NULL;
	long id = -1;
	struct thread *th;
	pthread_t *tid;
	struct counts k = { 0 };
	uint32_t *lat;
	size_t nlat = 0;
	uint64_t t0, t1;
	int opt;

	while ((opt = getopt_long(argc, argv, "s:c:j:d:n:r:S:p:v:e:i:u:RW:h",
				  lopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			o.server = optarg;
			break;
		case 'c':
			o.conns = (unsigned)atoi(optarg);
			break;
		case 'j':
			o.threads = (unsigned)atoi(optarg);
			break;
		case 'd':
			o.duration = atof(optarg);
			break;
		case 'n':
			o.requests = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			o.rate = atof(optarg);
			break;
		case 'S':
			o.side = (unsigned)atoi(optarg);
			break;
		case 'p':
			o.people = (unsigned)atoi(optarg);
			break;
		case 'v':
			o.views = (unsigned)atoi(optarg);
			break;
		case 'e':
			o.seed = (unsigned)atoi(optarg);
			break;
		case 'i':
			o.impostors = atof(optarg);
			break;
		case 'u':
			o.unknown = atof(optarg);
			break;
		case 'R':
			o.reconnect = 1;
			break;
		case 'W':
			o.wait = atof(optarg);
			break;
		case 'I':
			id = atol(optarg);
			break;
		case 'F':
			image = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (image || id >= 0) {
		if (!image || id < 0) {
			fprintf(stderr,
				"facever-client: a question needs both --id and --image\n");
			return EX_USAGE;
		}
		return one_shot((uint32_t)id, image);
	}
	if (!o.conns || !o.threads || !o.people || !o.views ||
	    !fv_side_ok(o.side) || o.impostors + o.unknown > 1 ||
	    !(o.wait > 0) || !(o.duration >= 0)) {
		fprintf(stderr,
			"facever-client: conns, threads, people, views and the wait must be positive, the side %d..%d, impostors + unknown at most 1\n",
			FV_MIN_SIDE, FV_MAX_SIDE);
		return EX_USAGE;
	}
	if (o.threads > o.conns)
		o.threads = o.conns;
	pictures = malloc((size_t)o.people * o.views * o.side * o.side);
	th = calloc(o.threads, sizeof(*th));
	tid = calloc(o.threads, sizeof(*tid));
	if (!pictures || !th || !tid)
		return EX_OSERR;
	for (unsigned p = 0; p < o.people; p++)
		for (unsigned v = 0; v < o.views; v++)
			fv_face(o.seed, p, v + 1, o.side, o.side,
				pictures + ((size_t)p * o.views + v) * o.side *
						   o.side);
	t0 = now_ns();
	for (unsigned i = 0; i < o.threads; i++) {
		th[i].first = o.conns * i / o.threads;
		th[i].n = o.conns * (i + 1) / o.threads - th[i].first;
		th[i].c = calloc(th[i].n, sizeof(struct conn));
		th[i].ep = epoll_create1(0);
		th[i].quota = o.requests * (i + 1) / o.threads -
			      o.requests * i / o.threads;
		if (!th[i].c)
			return EX_OSERR;
		pthread_create(&tid[i], NULL, run, &th[i]);
	}
	for (unsigned i = 0; i < o.threads; i++) {
		pthread_join(tid[i], NULL);
		k.sent += th[i].k.sent;
		k.ok += th[i].k.ok;
		k.wrong += th[i].k.wrong;
		k.unknown += th[i].k.unknown;
		k.store += th[i].k.store;
		k.other += th[i].k.other;
		k.failed += th[i].k.failed;
		k.lost_broken += th[i].k.lost_broken;
		k.lost_overdue += th[i].k.lost_overdue;
		k.lost_end += th[i].k.lost_end;
		k.conn_errors += th[i].k.conn_errors;
		k.conn_late += th[i].k.conn_late;
		k.conn_broken += th[i].k.conn_broken;
		if (th[i].k.conn_errno)
			k.conn_errno = th[i].k.conn_errno;
		nlat += th[i].nlat;
	}
	t1 = now_ns();
	lat = malloc((nlat + 1) * sizeof(*lat));
	nlat = 0;
	for (unsigned i = 0; i < o.threads; i++) {
		memcpy(lat + nlat, th[i].lat, th[i].nlat * sizeof(*lat));
		nlat += th[i].nlat;
	}
	qsort(lat, nlat, sizeof(*lat), cmp_u32);
#define PCT(q) (nlat ? lat[(size_t)((nlat - 1) * (q))] : 0)
	printf("facever-client: requests=%llu ok=%llu wrong=%llu unknown=%llu store_errors=%llu other_errors=%llu failed=%llu seconds=%.2f rps=%.0f p50_us=%u p99_us=%u p999_us=%u conns_failed=%llu conns_broken=%llu\n",
	       (unsigned long long)k.sent, (unsigned long long)k.ok,
	       (unsigned long long)k.wrong, (unsigned long long)k.unknown,
	       (unsigned long long)k.store, (unsigned long long)k.other,
	       (unsigned long long)k.failed, (t1 - t0) / 1e9,
	       (double)nlat / ((t1 - t0) / 1e9), PCT(0.5), PCT(0.99),
	       PCT(0.999),
	       (unsigned long long)(k.conn_errors + k.conn_late),
	       (unsigned long long)k.conn_broken);
	report_losses(&k);
	if (!k.sent && k.conn_errors + k.conn_late)
		return EX_UNAVAILABLE; /* not one connection was made */
	return k.wrong || k.unknown || k.other ? 1 : 0;
}
