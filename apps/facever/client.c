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
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "app.h"
#include "fv_cpu.h"

#define FLIGHT 256 /* requests one connection may have in flight */
#define UNKNOWN_BASE 1000000000u /* ids from here on are never enrolled */

struct opts {
	const char *server;
	unsigned conns, threads, people, views, side, seed;
	double duration, rate, impostors, unknown;
	uint64_t requests; /* 0: run for duration */
	int reconnect;
};

static struct opts o = {
	"127.0.0.1:7100", 16, 2, 100, 4, 128, 1, 5.0, 0, 0.3, 0, 0, 0
};
static uint8_t *pictures; /* people x views, side x side each */

struct flight {
	uint32_t seq;
	int32_t expect;
	uint64_t t0;
};

struct conn {
	int fd;
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

static int conn_open(struct thread *t, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	c->fd = app_connect(o.server);
	if (c->fd < 0)
		return -1;
	fcntl(c->fd, F_SETFL, O_NONBLOCK);
	epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev);
	c->head = c->tail = 0;
	c->total = c->sent = c->in_len = 0;
	return 0;
}

/* The connection broke: what it had in flight failed; maybe reconnect. */
static void conn_broken(struct thread *t, struct conn *c)
{
	t->k.failed += c->tail - c->head;
	if (c->total && c->sent < c->total && c->tail == c->head)
		t->k.failed++; /* half sent, not yet in flight */
	epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->head = c->tail = 0;
	c->total = c->sent = 0;
	if (o.reconnect && !t->stop_sending)
		conn_open(t, c); /* on failure, the sender loop retries */
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
	uint64_t drain_until = 0;

	for (unsigned i = 0; i < t->n; i++) {
		struct conn *c = &t->c[i];

		c->rng = (uint64_t)o.seed << 32 | (t->first + i);
		c->next = start + (interval ? interval * i / t->n : 0);
		if (conn_open(t, c) < 0)
			c->fd = -1;
	}
	for (;;) {
		uint64_t now = now_ns();
		int busy = 0, sending = 0, n;

		if (!t->stop_sending && ((o.requests && t->quota == 0) ||
					 (!o.requests && now >= end))) {
			t->stop_sending = 1;
			drain_until = now + 2000000000ull;
		}
		for (unsigned i = 0; i < t->n; i++) {
			struct conn *c = &t->c[i];

			if (c->fd < 0) {
				if (o.reconnect && !t->stop_sending)
					conn_open(t, c);
				if (c->fd < 0)
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
			if (c->total && conn_push(c) < 0)
				conn_broken(t, c);
			busy |= c->fd >= 0 && c->tail != c->head;
			sending |= c->fd >= 0 &&
				   c->total; /* its socket was full */
		}
		if (t->stop_sending && (!busy || now >= drain_until))
			break;
		n = epoll_wait(t->ep, evs, 64, interval || sending ? 0 : 50);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (c->fd >= 0 && conn_pull(t, c) < 0)
				conn_broken(t, c);
		}
		if ((interval || sending) && n == 0) {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
	for (unsigned i = 0; i < t->n; i++) {
		t->k.failed += t->c[i].tail - t->c[i].head;
		if (t->c[i].fd >= 0)
			close(t->c[i].fd);
	}
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
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
	fd = app_connect(o.server);
	if (fd < 0 || send(fd, &q, sizeof(q), MSG_NOSIGNAL) != sizeof(q) ||
	    send(fd, img, (size_t)w * h, MSG_NOSIGNAL) != (ssize_t)(w * h) ||
	    recv(fd, &r, sizeof(r), MSG_WAITALL) != sizeof(r)) {
		fprintf(stderr, "facever-client: no answer from %s: %s\n",
			o.server, strerror(errno));
		return EX_UNAVAILABLE;
	}
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
		"  -R, --reconnect       remake broken connections (their requests fail)\n");
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

	while ((opt = getopt_long(argc, argv, "s:c:j:d:n:r:S:p:v:e:i:u:Rh",
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
	    !fv_side_ok(o.side) || o.impostors + o.unknown > 1) {
		fprintf(stderr,
			"facever-client: conns, threads, people and views must be positive, the side %d..%d, impostors + unknown at most 1\n",
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
	printf("facever-client: requests=%llu ok=%llu wrong=%llu unknown=%llu store_errors=%llu other_errors=%llu failed=%llu seconds=%.2f rps=%.0f p50_us=%u p99_us=%u p999_us=%u\n",
	       (unsigned long long)k.sent, (unsigned long long)k.ok,
	       (unsigned long long)k.wrong, (unsigned long long)k.unknown,
	       (unsigned long long)k.store, (unsigned long long)k.other,
	       (unsigned long long)k.failed, (t1 - t0) / 1e9,
	       (double)nlat / ((t1 - t0) / 1e9), PCT(0.5), PCT(0.99),
	       PCT(0.999));
	return k.wrong || k.unknown || k.other ? 1 : 0;
}
