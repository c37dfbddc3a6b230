/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU servers of face verification, one loop for both: built with
 * stage_cpu.c it is facever-pserver, the CPU-only server P; with
 * stage_cuda.cu it is facever-cserver, the CPU-managed GPU server C.
 *
 * Each thread has its own SO_REUSEPORT listener, epoll set, memcached
 * connection and stage. A wake-up's complete requests form one batch:
 * their reference features come from memcached in one pipelined round,
 * the stage computes all their distances at once, and the answers go out
 * in request order. A client may leave up to CONN_OUT / 16 answers
 * unread; past that it is cut off.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "app.h"
#include "fv_cpu.h"
#include "stage.h"

#define CONN_OUT 4096 /* answer bytes a connection may have unsent */

struct conn {
	int fd;
	int closing; /* a bad request or the end seen: close once answered */
	int dead; /* closed; freed after the batch that may name it */
	unsigned pending; /* its requests in the batch */
	size_t in_len, in_cap;
	uint8_t *in;
	size_t out_off, out_len;
	uint8_t out[CONN_OUT];
	struct conn *next_dead;
};

struct job {
	struct conn *c;
	uint32_t seq, id;
};

struct worker {
	int lfd, ep;
	struct fv_stage *st;
	struct mc mc;
	unsigned njobs;
	struct job jobs[FV_STAGE_JOBS];
	uint32_t ids[FV_STAGE_JOBS];
	int32_t status[FV_STAGE_JOBS];
	float dist[FV_STAGE_JOBS];
	struct conn *dead;
	uint64_t requests, conns, matches, errors;
};

static const char *prog;
static const char *listen_at = "7100", *mc_at = "127.0.0.1:11211";
static float threshold = FV_THRESHOLD;
static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void conn_kill(struct worker *wk, struct conn *c)
{
	if (c->dead)
		return;
	epoll_ctl(wk->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->dead = 1;
	c->next_dead = wk->dead;
	wk->dead = c;
}

static void reap(struct worker *wk)
{
	while (wk->dead) {
		struct conn *c = wk->dead;

		wk->dead = c->next_dead;
		free(c->in);
		free(c);
	}
}

/* Send what c holds; wait for EPOLLOUT when the socket is full. */
static void conn_flush(struct worker *wk, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	while (!c->dead && c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off,
				 c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			/* closing: nothing more to read, wait only for room */
			ev.events = c->closing ? EPOLLOUT : EPOLLIN | EPOLLOUT;
			epoll_ctl(wk->ep, EPOLL_CTL_MOD, c->fd, &ev);
			return;
		}
		if (n <= 0) {
			conn_kill(wk, c);
			return;
		}
		c->out_off += (size_t)n;
	}
	if (c->dead)
		return;
	c->out_off = c->out_len = 0;
	if (c->closing)
		conn_kill(wk, c);
	else
		epoll_ctl(wk->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_answer(struct worker *wk, struct conn *c, uint32_t seq,
			int32_t status, float distance)
{
	struct fv_resp r = { FV_RESP_MAGIC, seq, status, distance };

	if (c->dead)
		return;
	if (c->out_off) { /* a send left part unsent: move it to the front */
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + sizeof(r) > CONN_OUT) {
		conn_kill(wk, c); /* it reads none of its answers */
		return;
	}
	memcpy(c->out + c->out_len, &r, sizeof(r));
	c->out_len += sizeof(r);
}

/* Fetch, compute and answer the batch; the connections stay alive. */
static void run_batch(struct worker *wk)
{
	unsigned n = wk->njobs;

	if (!n)
		return;
	for (unsigned i = 0; i < n; i++)
		wk->ids[i] = wk->jobs[i].id;
	mc_get_feats(&wk->mc, wk->ids, n, fv_stage_stored(wk->st), wk->status);
	if (fv_stage_run(wk->st, n, wk->dist) < 0)
		for (unsigned i = 0; i < n; i++)
			wk->status[i] = FV_E_STORE;
	for (unsigned i = 0; i < n; i++) {
		int32_t s = wk->status[i];
		float d = s == 0 ? wk->dist[i] : 0.0f;

		if (s == 0)
			s = d <= threshold ? FV_MATCH : FV_NO_MATCH;
		wk->requests++;
		wk->matches += s == FV_MATCH;
		wk->errors += s < 0;
		wk->jobs[i].c->pending--;
		conn_answer(wk, wk->jobs[i].c, wk->jobs[i].seq, s, d);
	}
	for (unsigned i = 0; i < n; i++)
		if (wk->jobs[i].c->out_len || wk->jobs[i].c->closing)
			conn_flush(wk, wk->jobs[i].c);
	wk->njobs = 0;
}

/* Add c's complete requests to the batch (running it when it fills). */
static void conn_take(struct worker *wk, struct conn *c)
{
	size_t pos = 0;

	while (!c->closing && c->in_len - pos >= sizeof(struct fv_req)) {
		struct fv_req q;
		size_t need;
		uint8_t *pic;

		memcpy(&q, c->in + pos, sizeof(q));
		if (q.magic != FV_REQ_MAGIC || !fv_side_ok(q.w) ||
		    !fv_side_ok(q.h)) {
			if (c->pending) { /* its earlier requests answer first */
				run_batch(wk);
				if (c->dead)
					return;
			}
			conn_answer(wk, c, q.seq,
				    q.magic != FV_REQ_MAGIC ? FV_E_PROTO :
							      FV_E_SIZE,
				    0.0f);
			c->closing = 1;
			break;
		}
		need = sizeof(q) + (size_t)q.w * q.h;
		if (c->in_len - pos < need)
			break;
		pic = fv_stage_picture(wk->st, wk->njobs, q.w, q.h);
		if (!pic) {
			run_batch(wk);
			if (c->dead)
				return;
			pic = fv_stage_picture(wk->st, 0, q.w, q.h);
		}
		memcpy(pic, c->in + pos + sizeof(q), (size_t)q.w * q.h);
		wk->jobs[wk->njobs++] = (struct job){ c, q.seq, q.id };
		c->pending++;
		pos += need;
	}
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
}

/* Read what c has; its requests join the batch. */
static void conn_read(struct worker *wk, struct conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->in_len == c->in_cap) {
			size_t cap = c->in_cap * 2;
			uint8_t *in;

			if (cap > 2 * (sizeof(struct fv_req) + FV_MAX_PIXELS)) {
				conn_take(wk, c);
				if (c->in_len == c->in_cap)
					break; /* the batch must drain first */
				continue;
			}
			in = realloc(c->in, cap);
			if (!in) {
				conn_kill(wk, c);
				return;
			}
			c->in = in;
			c->in_cap = cap;
		}
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			conn_take(wk, c); /* what came before the end */
			c->closing = 1;
			break;
		}
		c->in_len += (size_t)n;
	}
	if (!c->closing)
		conn_take(wk, c);
	if (c->closing && !c->dead && !c->pending)
		conn_flush(wk, c); /* else the batch's answers flush it */
}

static void accept_all(struct worker *wk)
{
	for (;;) {
		int fd = accept4(wk->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC),
		    one = 1;
		struct epoll_event ev = { .events = EPOLLIN };
		struct conn *c;

		if (fd < 0)
			return;
		c = calloc(1, sizeof(*c));
		if (c)
			c->in = malloc(c->in_cap = 65536);
		if (!c || !c->in) {
			free(c);
			close(fd);
			continue;
		}
		c->fd = fd;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ev.data.ptr = c;
		epoll_ctl(wk->ep, EPOLL_CTL_ADD, fd, &ev);
		wk->conns++;
	}
}

static void *loop(void *arg)
{
	struct worker *wk = arg;
	struct epoll_event evs[256], ev = { .events = EPOLLIN };

	epoll_ctl(wk->ep, EPOLL_CTL_ADD, wk->lfd, &ev);
	while (!stopping) {
		int n = epoll_wait(wk->ep, evs, 256, 100);

		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (!c)
				accept_all(wk);
			else if (c->dead)
				continue;
			else if (evs[i].events & EPOLLOUT)
				conn_flush(wk, c);
			else
				conn_read(wk, c);
		}
		run_batch(wk);
		reap(wk);
	}
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [options]\n"
		"  -l, --listen ADDR      HOST:PORT, [V6]:PORT or PORT (default 7100); the port is\n"
		"                         always shared (SO_REUSEPORT), also with a facever-gserver -P\n"
		"  -M, --memcached ADDR   where the reference features are (default 127.0.0.1:11211)\n"
		"  -t, --threads N        server threads (default 1)\n"
		"  -T, --threshold D      largest chi-square distance of a match (default %.2f)\n",
		prog, FV_THRESHOLD);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "memcached", required_argument, NULL, 'M' },
		{ "threads", required_argument, NULL, 't' },
		{ "threshold", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct sigaction sa = { .sa_handler = on_signal };
	int threads = 1, opt;
	struct worker *wk;
	pthread_t *tid;
	uint64_t reqs = 0, conns = 0, matches = 0, errors = 0;
	char err[256];

	prog = strcmp(fv_stage_name(), "cpu") ? "facever-cserver" :
						"facever-pserver";
	while ((opt = getopt_long(argc, argv, "l:M:t:T:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_at = optarg;
			break;
		case 'M':
			mc_at = optarg;
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 'T':
			threshold = strtof(optarg, NULL);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (threads < 1 || threads > 1024 || !(threshold > 0)) {
		fprintf(stderr,
			"%s: threads (1..1024) and threshold must be positive\n",
			prog);
		return EX_USAGE;
	}
	wk = calloc((size_t)threads, sizeof(*wk));
	tid = calloc((size_t)threads, sizeof(*tid));
	if (!wk || !tid)
		return EX_OSERR;
	for (int i = 0; i < threads; i++) {
		wk[i].lfd = app_listen(listen_at, 1);
		if (wk[i].lfd < 0) {
			fprintf(stderr, "%s: cannot listen on %s: %s\n", prog,
				listen_at, strerror(errno));
			return EX_UNAVAILABLE;
		}
		wk[i].ep = epoll_create1(EPOLL_CLOEXEC);
		wk[i].st = fv_stage_open(err, sizeof(err));
		if (!wk[i].st) {
			fprintf(stderr, "%s: %s\n", prog, err);
			return EX_UNAVAILABLE;
		}
		mc_init(&wk[i].mc, mc_at);
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	printf("%s: listening on %s (%d threads, %s stage, memcached %s)\n",
	       prog, listen_at, threads, fv_stage_name(), mc_at);
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, loop, &wk[i]);
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		reqs += wk[i].requests;
		conns += wk[i].conns;
		matches += wk[i].matches;
		errors += wk[i].errors;
	}
	printf("%s: served %llu requests on %llu connections (%llu matches, %llu errors)\n",
	       prog, (unsigned long long)reqs, (unsigned long long)conns,
	       (unsigned long long)matches, (unsigned long long)errors);
	return 0;
}
