/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loadgen: the one client of every gsock benchmark. Opens -c connections
 * to an echo server and keeps one request of -s bytes in flight on each
 * (closed loop): send it, read the echo back, check it byte for byte,
 * record the round trip, send the next. Threads (-t) each run an epoll
 * loop over their share of the connections. After -w seconds of warm-up
 * it measures for -d seconds and prints one line of key=value results:
 * requests/s, MB/s each way, and round-trip percentiles.
 *
 * -m duplex streams instead: each connection gets a sending thread, which
 * writes the pattern without pause in -s byte calls, and a receiving
 * thread, which checks every byte of the echo against the pattern at its
 * offset; MB/s is what came back in the measured seconds (each way),
 * reqs the -s byte chunks in it. So the client is never the limit of one
 * stream the way a single thread doing both directions is.
 * -m up and -m down are one-way streams to a server in sink or source
 * mode (gsock-echo-server -M, cpu-echo-server -M): up sends the pattern
 * and at the end checks the sink's answer (bytes it got, bytes wrong);
 * down receives and checks the source's pattern. MB/s is what was sent
 * (up) or received (down) in the measured seconds.
 *
 * -r RATE runs an open loop instead: requests go out on a schedule of
 * RATE a second in all (spread over the connections in turn), whether or
 * not earlier ones were answered, several in flight on a connection when
 * the server is slow; each round trip counts from the time the request
 * was due, not from when it went out, so a server that stalls shows its
 * stall in the latencies and the schedule does not slow down with it
 * (no coordinated omission). The requests due in the measured seconds
 * are waited for up to 10 s past its end; any still unanswered then fail
 * the run (missing=). send_lag_max_us says how late the client itself
 * was: a client that cannot keep the schedule says so there.
 *
 * -i N also opens N idle connections first (from 127.0.0.2 up, so a
 * loopback client is not short of ports) and holds them for the run; their
 * setup time is reported. Every connection ends with a reset (SO_LINGER
 * 0), so runs one after another do not run out of ports to TIME_WAIT.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "stream.h"

enum { WARMUP, MEASURE, DONE };

struct conn {
	int fd;
	size_t sent, got; /* of the request in flight */
	uint64_t t0;
	int want_out; /* EPOLLOUT registered */
	uint8_t *rbuf;
	/* -r: requests due and not yet answered, oldest first */
	uint64_t *due; /* when each was due (ns) */
	size_t ndue, due_first, due_cap;
	uint64_t owe; /* bytes of them not yet sent */
	uint64_t sent_all, got_all; /* bytes over the whole run */
};

struct worker {
	pthread_t thread;
	int ep;
	struct conn *c;
	int n;
	uint64_t reqs, bytes, errors;
	uint32_t *lat; /* ns, measured phase only */
	size_t nlat, cap;
	int fail; /* a connection broke or an echo was wrong */
	/* -r */
	double rate; /* this thread's requests a second */
	uint64_t offset_ns; /* its schedule's shift from the others' */
	uint64_t sched, missing, lag_max;
};

static struct addrinfo *peer;
static size_t size = 64;
static uint8_t *pattern; /* what every request carries */
static volatile int phase = WARMUP;
static double rate; /* -r: requests a second in all; 0: closed loop */
static uint64_t start_ns, window_t0, window_t1; /* -r: the schedule's */

/* Every request and stream carries stream.h's pattern. */

enum { RR, DUPLEX, UP, DOWN }; /* -m */

struct stream {
	pthread_t tx, rx;
	int fd;
	uint64_t sent, got; /* whole run */
	uint64_t bytes; /* moved in the measured phase (received; UP: sent) */
	int up; /* -m up: bytes counts what is sent */
	int fail;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int dial(const struct sockaddr *local, socklen_t llen, int nonblock)
{
	int fd = socket(peer->ai_family,
			SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
	struct linger reset = {
		1, 0
	}; /* close with a reset: no TIME_WAIT left behind */
	int one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
	if (local && bind(fd, local, llen) < 0)
		goto err;
	if (connect(fd, peer->ai_addr, peer->ai_addrlen) < 0 &&
	    !(nonblock && errno == EINPROGRESS))
		goto err;
	return fd;
err:
	close(fd);
	return -1;
}

static void watch(struct worker *w, struct conn *c, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
				  .data.ptr = c };

	if (out != c->want_out) {
		epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
		c->want_out = out;
	}
}

static void record(struct worker *w, uint64_t ns)
{
	if (w->nlat == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 1 << 16;
		uint32_t *l = realloc(w->lat, cap * sizeof(*l));

		if (!l)
			return;
		w->lat = l;
		w->cap = cap;
	}
	w->lat[w->nlat++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

/* Move c's request along; -1 when the connection failed. */
static int step(struct worker *w, struct conn *c)
{
	ssize_t n;

	while (c->sent < size) {
		n = send(c->fd, pattern + c->sent, size - c->sent,
			 MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN)
				break;
			return -1;
		}
		c->sent += (size_t)n;
	}
	for (;;) {
		n = recv(c->fd, c->rbuf,
			 size - c->got < 65536 ? size - c->got : 65536, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return -1;
		if (n < 0)
			break;
		if (memcmp(c->rbuf, pattern + c->got, (size_t)n)) {
			fprintf(stderr, "loadgen: echo differs near byte %zu\n",
				c->got);
			return -1;
		}
		c->got += (size_t)n;
		if (c->got == size) {
			uint64_t t = now_ns();

			if (phase == MEASURE) {
				w->reqs++;
				w->bytes += size;
				record(w, t - c->t0);
			}
			c->sent = c->got = 0;
			c->t0 = t;
			return step(w, c);
		}
	}
	watch(w, c, c->sent < size);
	return 0;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[256];

	for (int i = 0; i < w->n; i++) {
		w->c[i].t0 = now_ns();
		if (step(w, &w->c[i]) < 0)
			w->fail = 1;
	}
	while (phase != DONE && !w->fail) {
		int k = epoll_wait(w->ep, evs, 256, 100);

		for (int i = 0; i < k; i++)
			if (step(w, evs[i].data.ptr) < 0) {
				w->errors++;
				w->fail = 1;
			}
	}
	return NULL;
}

/* -r: whether a request due at t falls in the measured seconds. */
static int in_window(uint64_t t)
{
	return t >= window_t0 && t < window_t1;
}

/* -r: c's request due at t joins its queue. */
static int due_push(struct conn *c, uint64_t t)
{
	if (c->ndue == c->due_cap) {
		size_t cap = c->due_cap ? 2 * c->due_cap : 16;
		uint64_t *d = malloc(cap * sizeof(*d));

		if (!d)
			return -1;
		for (size_t i = 0; i < c->ndue; i++)
			d[i] = c->due[(c->due_first + i) % c->due_cap];
		free(c->due);
		c->due = d;
		c->due_cap = cap;
		c->due_first = 0;
	}
	c->due[(c->due_first + c->ndue++) % c->due_cap] = t;
	c->owe += size;
	return 0;
}

/* -r: send what c owes, as far as the socket takes it; -1: broken. */
static int paced_send(struct worker *w, struct conn *c)
{
	while (c->owe) {
		size_t off = c->sent_all % size, len = size - off;
		ssize_t n;

		if (len > c->owe)
			len = c->owe;
		n = send(c->fd, pattern + off, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN)
			break;
		if (n < 0)
			return -1;
		c->sent_all += (uint64_t)n;
		c->owe -= (uint64_t)n;
	}
	watch(w, c, c->owe != 0);
	return 0;
}

/* -r: read c's echoes, check them, and time each whole one; -1: broken. */
static int paced_recv(struct worker *w, struct conn *c)
{
	for (;;) {
		ssize_t n = recv(c->fd, c->rbuf, 65536, 0);
		size_t i = 0;

		if (n == 0 || (n < 0 && errno != EAGAIN))
			return -1;
		if (n < 0)
			return 0;
		while (i < (size_t)n) {
			size_t off = c->got_all % size, len = size - off;

			if (len > (size_t)n - i)
				len = (size_t)n - i;
			if (!c->ndue ||
			    memcmp(c->rbuf + i, pattern + off, len)) {
				fprintf(stderr,
					"loadgen: echo differs near byte %llu\n",
					(unsigned long long)c->got_all);
				return -1;
			}
			c->got_all += len;
			i += len;
			if (c->got_all % size == 0) {
				uint64_t t = c->due[c->due_first];

				c->due_first = (c->due_first + 1) % c->due_cap;
				c->ndue--;
				if (in_window(t)) {
					w->reqs++;
					w->bytes += size;
					record(w, now_ns() - t);
				}
			}
		}
	}
}

/*
 * -r: wait for events until deadline (CLOCK_MONOTONIC ns) at most: the
 * thread's timerfd (tfd, in the set with a NULL pointer) ends the wait.
 * Not epoll_pwait2, which the gsock preload does not wrap.
 */
static int wait_until(int ep, int tfd, struct epoll_event *evs, int n,
		      uint64_t deadline)
{
	struct itimerspec t = { .it_value = {
					(time_t)(deadline / 1000000000u),
					(long)(deadline % 1000000000u) } };

	if (deadline <= now_ns())
		return epoll_wait(ep, evs, n, 0);
	if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &t, NULL) < 0)
		return epoll_wait(ep, evs, n, 1);
	return epoll_wait(ep, evs, n, -1);
}

/* -r: handle what a wait brought; the timer's event is skipped. */
static void paced_events(struct worker *w, int tfd, struct epoll_event *evs,
			 int m)
{
	uint64_t v;

	for (int i = 0; i < m && !w->fail; i++) {
		struct conn *c = evs[i].data.ptr;

		if (!c) {
			if (read(tfd, &v, sizeof(v)) < 0) {
				/* EAGAIN: it fired and was read already */
			}
			continue;
		}
		if (paced_recv(w, c) < 0 ||
		    ((evs[i].events & EPOLLOUT) && paced_send(w, c) < 0))
			w->fail = 1;
	}
}

/*
 * -r: one thread's open loop. Its k-th request is due at start_ns +
 * offset + k / rate, on its connections in turn; it goes out when due
 * (or as soon as the socket takes it), whatever is still unanswered.
 */
static void *run_paced(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[256];
	const double gap = 1e9 / w->rate;
	uint64_t k = 0, next = start_ns + w->offset_ns, drain_by;
	int pending, tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	struct epoll_event tev = { .events = EPOLLIN, .data.ptr = NULL };

	prctl(PR_SET_TIMERSLACK, 1000ul); /* keep microsecond gaps */
	if (tfd < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, tfd, &tev) < 0) {
		fprintf(stderr, "loadgen: timerfd: %s\n", strerror(errno));
		w->fail = 1;
	}
	while (!w->fail && next < window_t1) {
		uint64_t now = now_ns();

		while (next <= now && next < window_t1) {
			struct conn *c = &w->c[k % (uint64_t)w->n];

			if (due_push(c, next) < 0) {
				w->fail = 1;
				break;
			}
			if (in_window(next))
				w->sched++;
			if (in_window(next) && now - next > w->lag_max)
				w->lag_max = now - next;
			if (paced_send(w, c) < 0)
				w->fail = 1;
			k++;
			next = start_ns + w->offset_ns +
			       (uint64_t)((double)k * gap);
		}
		paced_events(w, tfd, evs,
			     wait_until(w->ep, tfd, evs, 256, next));
	}
	/* The schedule is over: wait for the answers still owed. */
	drain_by = now_ns() + 10000000000ull;
	for (;;) {
		pending = 0;
		for (int i = 0; i < w->n; i++)
			pending += w->c[i].ndue != 0;
		if (!pending || w->fail || now_ns() >= drain_by)
			break;
		paced_events(w, tfd, evs,
			     wait_until(w->ep, tfd, evs, 256, drain_by));
	}
	if (tfd >= 0)
		close(tfd);
	for (int i = 0; i < w->n; i++)
		for (size_t j = 0; j < w->c[i].ndue; j++)
			w->missing +=
				in_window(w->c[i].due[(w->c[i].due_first + j) %
						      w->c[i].due_cap]);
	if (w->missing)
		w->fail = 1;
	return NULL;
}

/* Warm up, then measure for secs: the measured window's ends in *t0, *t1. */
static void measure(double warm, double secs, uint64_t *t0, uint64_t *t1)
{
	usleep((useconds_t)(warm * 1e6));
	*t0 = now_ns();
	phase = MEASURE;
	usleep((useconds_t)(secs * 1e6));
	phase = DONE;
	*t1 = now_ns();
}

static void *stream_tx(void *arg)
{
	struct stream *st = arg;
	struct timeval tv = { 0, 100000 };

	/* a peer that stops reading does not keep it past the end */
	setsockopt(st->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (phase != DONE) {
		ssize_t n = send(st->fd, pattern + st->sent % STREAM_PERIOD,
				 size, MSG_NOSIGNAL);

		if (n < 0 && errno != EINTR && errno != EAGAIN) {
			if (phase == DONE)
				break;
			fprintf(stderr, "loadgen: stream send: %s\n",
				strerror(errno));
			st->fail = 1;
			break;
		}
		if (n > 0) {
			st->sent += (uint64_t)n;
			if (phase == MEASURE && st->up)
				st->bytes += (uint64_t)n;
		}
	}
	return NULL;
}

static void *stream_rx(void *arg)
{
	struct stream *st = arg;
	uint8_t *buf = malloc(size);
	struct timeval tv = { 0, 100000 };

	if (!buf) {
		st->fail = 1;
		return NULL;
	}
	setsockopt(st->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (phase != DONE) {
		ssize_t n = recv(st->fd, buf, size, 0);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			fprintf(stderr, "loadgen: stream ended: %s\n",
				n ? strerror(errno) : "end of file");
			st->fail = 1;
			break;
		}
		if (memcmp(buf, pattern + st->got % STREAM_PERIOD, (size_t)n)) {
			fprintf(stderr,
				"loadgen: stream differs near byte %llu\n",
				(unsigned long long)st->got);
			st->fail = 1;
			break;
		}
		st->got += (uint64_t)n;
		if (phase == MEASURE)
			st->bytes += (uint64_t)n;
	}
	free(buf);
	return NULL;
}

/*
 * -m up: the sender is done; end the stream and read the sink's answer:
 * the bytes it got and how many were wrong (stream.h).
 */
static int sink_answer(struct stream *st)
{
	struct timeval tv = { 10, 0 };
	uint8_t a[STREAM_ANSWER];
	uint64_t count, wrong;
	size_t got = 0;

	shutdown(st->fd, SHUT_WR);
	setsockopt(st->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (got < sizeof(a)) {
		ssize_t n = recv(st->fd, a + got, sizeof(a) - got, 0);

		if (n <= 0) {
			fprintf(stderr,
				"loadgen: the sink did not answer (%s)\n",
				n ? strerror(errno) : "end of file");
			return -1;
		}
		got += (size_t)n;
	}
	stream_answer_get(a, &count, &wrong);
	if (count != st->sent || wrong) {
		fprintf(stderr,
			"loadgen: sent %llu bytes, the sink got %llu, %llu of them wrong\n",
			(unsigned long long)st->sent, (unsigned long long)count,
			(unsigned long long)wrong);
		return -1;
	}
	return 0;
}

/* -m duplex, up, down: conns streams, each with its own threads. */
static int run_streams(int kind, int conns, double warm, double secs)
{
	struct stream *st = calloc((size_t)conns, sizeof(*st));
	uint64_t bytes = 0, t0, t1;
	int fail = 0, nthreads = 0;

	if (!st)
		return EX_OSERR;
	for (int i = 0; i < conns; i++) {
		st[i].up = kind == UP;
		st[i].fd = dial(NULL, 0, 0);
		if (st[i].fd < 0) {
			fprintf(stderr, "loadgen: connect: %s\n",
				strerror(errno));
			return EX_UNAVAILABLE;
		}
	}
	for (int i = 0; i < conns; i++) {
		if (kind != UP &&
		    !pthread_create(&st[i].rx, NULL, stream_rx, &st[i]))
			nthreads++;
		if (kind != DOWN &&
		    !pthread_create(&st[i].tx, NULL, stream_tx, &st[i]))
			nthreads++;
	}
	measure(warm, secs, &t0, &t1);
	for (int i = 0; i < conns; i++) {
		/* a sender waits in send 0.1 s at most (SO_SNDTIMEO) */
		if (kind != UP)
			pthread_join(st[i].rx, NULL);
		if (kind != DOWN)
			pthread_join(st[i].tx, NULL);
		if (kind == UP && !st[i].fail && sink_answer(&st[i]) < 0)
			st[i].fail = 1;
		close(st[i].fd);
		bytes += st[i].bytes;
		fail |= st[i].fail;
	}
	printf("conns=%d size=%zu threads=%d idle=0 idle_open_s=0.00 secs=%.3f reqs=%llu "
	       "rps=0 MBps=%.1f p50_us=nan p99_us=nan p999_us=nan errors=%d\n",
	       conns, size, nthreads, (double)(t1 - t0) / 1e9,
	       (unsigned long long)(bytes / size),
	       (double)bytes * 1e3 / (double)(t1 - t0), fail);
	if (!bytes && !fail)
		fprintf(stderr,
			"loadgen: no byte moved in the measured time\n");
	return fail || !bytes ? 1 : 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Wait until *pending non-blocking connects on ep drop to at most keep. */
static int settle_connects(int ep, int *pending, int keep)
{
	struct epoll_event evs[512];

	while (*pending > keep) {
		int k = epoll_wait(ep, evs, 512, 10000);

		if (k <= 0) {
			fprintf(stderr,
				"loadgen: idle connections stalled (%d waiting)\n",
				*pending);
			return -1;
		}
		for (int j = 0; j < k; j++) {
			int err = 0;
			socklen_t len = sizeof(err);

			getsockopt(evs[j].data.fd, SOL_SOCKET, SO_ERROR, &err,
				   &len);
			if (err) {
				fprintf(stderr,
					"loadgen: idle connection: %s\n",
					strerror(err));
				return -1;
			}
			epoll_ctl(ep, EPOLL_CTL_DEL, evs[j].data.fd, NULL);
			(*pending)--;
		}
	}
	return 0;
}

/* Open n idle connections from 127.0.0.2 up; their descriptors in *fds. */
static int open_idle(int n, int **fds)
{
	struct sockaddr_in local = { .sin_family = AF_INET };
	struct epoll_event ev = { .events = EPOLLOUT };
	int ep = epoll_create1(0), pending = 0;

	*fds = calloc((size_t)n, sizeof(int));
	if (!*fds || ep < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		/* 10000 ports per source address */
		local.sin_addr.s_addr =
			htonl(0x7f000002u + (uint32_t)(i / 10000));
		(*fds)[i] = dial(peer->ai_family == AF_INET ?
					 (struct sockaddr *)&local :
					 NULL,
				 sizeof(local), 1);
		if ((*fds)[i] < 0) {
			fprintf(stderr, "loadgen: idle connection %d: %s\n", i,
				strerror(errno));
			return -1;
		}
		ev.data.fd = (*fds)[i];
		epoll_ctl(ep, EPOLL_CTL_ADD, (*fds)[i], &ev);
		pending++;
		/* Keep the listen backlog (gsockd caps it at accept_queue, 128) from overflowing. */
		if (settle_connects(ep, &pending, 100) < 0)
			return -1;
	}
	if (settle_connects(ep, &pending, 0) < 0)
		return -1;
	close(ep);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: loadgen [-c conns] [-s bytes] [-t threads] [-d seconds] [-w seconds]\n"
		"               [-i idle-conns] [-m rr|duplex|up|down] [-r requests/s] HOST PORT\n");
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	int conns = 1, threads = 1, idle = 0, opt, *idle_fds = NULL;
	double secs = 2, warm = 0.5, idle_s = 0;
	struct worker *w;
	uint64_t reqs = 0, bytes = 0, errors = 0, t0, t1;
	uint64_t sched = 0, missing = 0, lag_max = 0; /* -r */
	size_t nlat = 0;
	uint32_t *all;
	int fail = 0, kind = RR;

	while ((opt = getopt(argc, argv, "c:s:t:d:w:i:m:r:h")) != -1) {
		switch (opt) {
		case 'c':
			conns = atoi(optarg);
			break;
		case 's':
			size = strtoull(optarg, NULL, 0);
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 'd':
			secs = atof(optarg);
			break;
		case 'w':
			warm = atof(optarg);
			break;
		case 'i':
			idle = atoi(optarg);
			break;
		case 'r':
			rate = atof(optarg);
			if (!(rate > 0 && rate <= 1e8)) {
				fprintf(stderr,
					"loadgen: -r is requests a second, above 0 and at most 1e8, not %s\n",
					optarg);
				return EX_USAGE;
			}
			break;
		case 'm':
			kind = !strcmp(optarg, "rr")	 ? RR :
			       !strcmp(optarg, "duplex") ? DUPLEX :
			       !strcmp(optarg, "up")	 ? UP :
			       !strcmp(optarg, "down")	 ? DOWN :
							   -1;
			if (kind < 0) {
				fprintf(stderr,
					"loadgen: -m is rr, duplex, up or down, not %s\n",
					optarg);
				return EX_USAGE;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (argc - optind != 2 || conns < 1 || threads < 1 || size < 1 ||
	    secs <= 0 || idle < 0) {
		usage(stderr);
		return EX_USAGE;
	}
	if (threads > conns)
		threads = conns;
	if (getaddrinfo(argv[optind], argv[optind + 1], &hints, &peer)) {
		fprintf(stderr, "loadgen: cannot resolve %s\n", argv[optind]);
		return EX_NOHOST;
	}
	{
		struct rlimit rl;

		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* periodic in STREAM_PERIOD: streams read it at offset % STREAM_PERIOD */
	pattern = malloc(size + STREAM_PERIOD);
	w = calloc((size_t)threads, sizeof(*w));
	if (!pattern || !w)
		return EX_OSERR;
	for (size_t i = 0; i < size + STREAM_PERIOD; i++)
		pattern[i] = stream_byte(i);
	if (kind != RR && rate > 0) {
		fprintf(stderr,
			"loadgen: -r paces request and answer (-m rr) only\n");
		return EX_USAGE;
	}
	if (kind != RR)
		return run_streams(kind, conns, warm, secs);
	if (idle) {
		t0 = now_ns();
		if (open_idle(idle, &idle_fds) < 0)
			return EX_UNAVAILABLE;
		idle_s = (double)(now_ns() - t0) / 1e9;
	}
	for (int t = 0; t < threads; t++) {
		w[t].n = conns / threads + (t < conns % threads);
		w[t].c = calloc((size_t)w[t].n, sizeof(struct conn));
		w[t].ep = epoll_create1(0);
		if (!w[t].c || w[t].ep < 0)
			return EX_OSERR;
		for (int i = 0; i < w[t].n; i++) {
			struct conn *c = &w[t].c[i];
			struct epoll_event ev = { .events = EPOLLIN,
						  .data.ptr = c };

			c->fd = dial(NULL, 0, 0);
			c->rbuf = malloc(65536);
			if (c->fd < 0 || !c->rbuf) {
				fprintf(stderr, "loadgen: connect: %s\n",
					strerror(errno));
				return EX_UNAVAILABLE;
			}
			fcntl(c->fd, F_SETFL, O_NONBLOCK);
			epoll_ctl(w[t].ep, EPOLL_CTL_ADD, c->fd, &ev);
		}
	}
	if (rate > 0) {
		/* A thread's share follows its connections; schedules interleave. */
		start_ns = now_ns() + 1000000;
		window_t0 = start_ns + (uint64_t)(warm * 1e9);
		window_t1 = window_t0 + (uint64_t)(secs * 1e9);
		for (int t = 0; t < threads; t++) {
			w[t].rate = rate * w[t].n / conns;
			w[t].offset_ns = (uint64_t)(1e9 / rate * t);
			pthread_create(&w[t].thread, NULL, run_paced, &w[t]);
		}
		t0 = window_t0;
		t1 = window_t1;
	} else {
		for (int t = 0; t < threads; t++)
			pthread_create(&w[t].thread, NULL, run, &w[t]);
		measure(warm, secs, &t0, &t1);
	}
	for (int t = 0; t < threads; t++) {
		pthread_join(w[t].thread, NULL);
		reqs += w[t].reqs;
		bytes += w[t].bytes;
		errors += w[t].errors;
		nlat += w[t].nlat;
		fail |= w[t].fail;
		sched += w[t].sched;
		missing += w[t].missing;
		if (w[t].lag_max > lag_max)
			lag_max = w[t].lag_max;
	}
	all = malloc((nlat ? nlat : 1) * sizeof(*all));
	if (!all)
		return EX_OSERR;
	nlat = 0;
	for (int t = 0; t < threads; t++) {
		memcpy(all + nlat, w[t].lat, w[t].nlat * sizeof(*all));
		nlat += w[t].nlat;
	}
	qsort(all, nlat, sizeof(*all), cmp_u32);
#define PCT(p) (nlat ? all[(size_t)((double)(nlat - 1) * (p))] / 1000.0 : 0.0)
	printf("conns=%d size=%zu threads=%d idle=%d idle_open_s=%.2f secs=%.3f reqs=%llu "
	       "rps=%.0f MBps=%.1f p50_us=%.2f p99_us=%.2f p999_us=%.2f errors=%llu",
	       conns, size, threads, idle, idle_s, (double)(t1 - t0) / 1e9,
	       (unsigned long long)reqs, (double)reqs * 1e9 / (double)(t1 - t0),
	       (double)bytes * 1e3 / (double)(t1 - t0), PCT(0.50), PCT(0.99),
	       PCT(0.999), (unsigned long long)errors);
	if (rate > 0)
		printf(" rate=%.0f offered_rps=%.0f max_us=%.2f missing=%llu send_lag_max_us=%.1f",
		       rate, (double)sched * 1e9 / (double)(t1 - t0), PCT(1.0),
		       (unsigned long long)missing, (double)lag_max / 1e3);
	printf("\n");
	if (missing)
		fprintf(stderr,
			"loadgen: %llu requests of the measured seconds got no answer within 10 s\n",
			(unsigned long long)missing);
	for (int i = 0; i < idle; i++)
		close(idle_fds[i]);
	return fail || !reqs ? 1 : 0;
}
