/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu-echo-server: a plain CPU echo server, the baseline gsock is
 * measured against. One epoll loop per thread, each with its own
 * SO_REUSEPORT listener, non-blocking sockets, TCP_NODELAY; a connection
 * whose peer reads slowly stops being read until its echo is written.
 *
 * Built with a GPU stage (stage.h) it is cgpu-echo-server, the
 * CPU-managed GPU server: every received chunk goes through the GPU
 * before it is sent back, one chunk at a time, or with -B all chunks of
 * one epoll wake-up in one batch (one copy in, one kernel, one copy out).
 *
 * -M sink and -M source are one-way streams (bench/loadgen -m up, -m
 * down), as gsock-echo-server's: a sink reads a connection to its end,
 * checks every byte against the stream pattern and answers with the
 * count and the wrong bytes (stream.h); a source
 * sends the pattern until the peer goes. With a stage, every byte goes
 * through the GPU on the way.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <unistd.h>

#include "stage.h"
#include "stream.h"

#define BUFSZ 65536

struct conn {
	int fd;
	size_t off, len; /* pending echo bytes in buf */
	uint64_t pos, wrong; /* sink and source: stream offset, bad bytes */
	char buf[BUFSZ];
};

enum mode { ECHO, SINK, SOURCE };

/* The stream pattern from 0, enough to read BUFSZ from any offset % period. */
static uint8_t pattern[STREAM_PERIOD + BUFSZ];

static const char *host = "0.0.0.0", *port = "7001";
static int batch; /* -B */
static enum mode mode = ECHO; /* -M */
#define STAGE_CAP (256 * BUFSZ) /* bytes one batch may carry */

static int listener(void)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res;
	int fd, one = 1;

	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
		if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
		    listen(fd, 1024) < 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	return fd;
}

static void conn_close(int ep, struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

/* Receive into buf; through the stage (if any) into c's echo bytes. */
static ssize_t conn_recv(struct conn *c, struct stage *st)
{
	ssize_t n = recv(c->fd, st ? (void *)stage_in(st) : (void *)c->buf,
			 BUFSZ, 0);

	if (n > 0 && st) {
		if (stage_run(st, (size_t)n) < 0) {
			errno = EIO;
			return -1;
		}
		memcpy(c->buf, stage_out(st), (size_t)n);
	}
	return n;
}

/*
 * Echo what can be echoed; returns -1 when the connection is over. With
 * recv_more 0 it only sends what c holds (a batch received it).
 */
static int conn_serve(int ep, struct conn *c, struct stage *st, int recv_more)
{
	struct epoll_event ev = { .data.ptr = c };

	for (;;) {
		ssize_t n;

		while (c->off < c->len) {
			n = send(c->fd, c->buf + c->off, c->len - c->off,
				 MSG_NOSIGNAL);
			if (n < 0) {
				if (errno != EAGAIN)
					return -1;
				ev.events = EPOLLOUT;
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				return 0;
			}
			c->off += (size_t)n;
		}
		if (!recv_more) {
			ev.events = EPOLLIN;
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
			return 0;
		}
		n = conn_recv(c, st);
		if (n <= 0) {
			if (n < 0 && errno == EAGAIN) {
				ev.events = EPOLLIN;
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				return 0;
			}
			return -1;
		}
		c->off = 0;
		c->len = (size_t)n;
	}
}

/* -M sink: read to the end, then answer; -1 when the connection is over. */
static int conn_sink(int ep, struct conn *c, struct stage *st)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	uint8_t reply[STREAM_ANSWER];
	ssize_t n;

	while ((n = conn_recv(c, st)) > 0) {
		const uint8_t *want = pattern + c->pos % STREAM_PERIOD;

		if (memcmp(c->buf, want, (size_t)n))
			for (ssize_t k = 0; k < n; k++)
				c->wrong += (uint8_t)c->buf[k] != want[k];
		c->pos += (uint64_t)n;
	}
	if (n < 0 && errno == EAGAIN) {
		epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		return 0;
	}
	if (n == 0) {
		stream_answer_put(reply, c->pos, c->wrong);
		/* an empty send buffer takes the answer at once */
		send(c->fd, reply, sizeof(reply), MSG_NOSIGNAL);
	}
	return -1;
}

/* -M source: send the pattern while the socket takes it. */
static int conn_source(int ep, struct conn *c, struct stage *st)
{
	struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };

	for (;;) {
		ssize_t n;

		if (c->off == c->len) {
			const uint8_t *from = pattern + c->pos % STREAM_PERIOD;

			if (st) {
				memcpy(stage_in(st), from, BUFSZ);
				if (stage_run(st, BUFSZ) < 0)
					return -1;
				from = stage_out(st);
			}
			memcpy(c->buf, from, BUFSZ);
			c->off = 0;
			c->len = BUFSZ;
			c->pos += BUFSZ;
		}
		n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN)
				return -1;
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
			return 0;
		}
		c->off += (size_t)n;
	}
}

/* Serve c in the server's mode; -1 when the connection is over. */
static int conn_step(int ep, struct conn *c, struct stage *st)
{
	return mode == SINK   ? conn_sink(ep, c, st) :
	       mode == SOURCE ? conn_source(ep, c, st) :
				conn_serve(ep, c, st, 1);
}

struct pending {
	struct conn *c;
	size_t at, n; /* its bytes in the batch */
};

/*
 * -B: the readable connections of one wake-up, received side by side
 * into the stage, run through the GPU once, and echoed.
 */
static void serve_batch(int ep, struct stage *st, struct conn **ready, int k)
{
	static __thread struct pending p[256];
	size_t total = 0;
	int np = 0;

	for (int i = 0; i < k; i++) {
		struct conn *c = ready[i];
		ssize_t n;

		if (c->off < c->len || total + BUFSZ > STAGE_CAP) {
			if (conn_serve(ep, c, st, 1) < 0)
				conn_close(ep, c);
			continue;
		}
		n = recv(c->fd, stage_in(st) + total, BUFSZ, 0);
		if (n <= 0) {
			if (n == 0 || errno != EAGAIN)
				conn_close(ep, c);
			continue;
		}
		p[np++] = (struct pending){ c, total, (size_t)n };
		total += (size_t)n;
	}
	if (np && stage_run(st, total) < 0)
		total = 0;
	for (int i = 0; i < np; i++) {
		struct conn *c = p[i].c;

		if (!total) {
			conn_close(ep, c);
			continue;
		}
		memcpy(c->buf, stage_out(st) + p[i].at, p[i].n);
		c->off = 0;
		c->len = p[i].n;
		if (conn_serve(ep, c, st, 0) < 0)
			conn_close(ep, c);
	}
}

/* What one server thread serves: its listener and its GPU stage (or none). */
struct worker {
	int lfd;
	struct stage *st;
};

static void *loop(void *arg)
{
	struct epoll_event evs[256], ev = { .events = EPOLLIN };
	struct worker *wk = arg;
	int lfd = wk->lfd, ep = epoll_create1(0), one = 1;
	struct conn *ready[256];
	struct stage *st = wk->st;

	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1), k = 0;

		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (c && batch && st && mode == ECHO) {
				ready[k++] = c;
				continue;
			}
			if (c) {
				if (conn_step(ep, c, st) < 0)
					conn_close(ep, c);
				continue;
			}
			int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);

			if (fd < 0)
				continue;
			c = calloc(1, sizeof(*c));
			if (!c) {
				close(fd);
				continue;
			}
			c->fd = fd;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof(one));
			ev.events = mode == SOURCE ? EPOLLOUT : EPOLLIN;
			ev.data.ptr = c;
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		}
		if (k)
			serve_batch(ep, st, ready, k);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 1, opt;

	while ((opt = getopt(argc, argv, "H:p:t:BM:h")) != -1) {
		switch (opt) {
		case 'H':
			host = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 'B':
			batch = 1;
			break;
		case 'M':
			if (!strcmp(optarg, "sink"))
				mode = SINK;
			else if (!strcmp(optarg, "source"))
				mode = SOURCE;
			else if (strcmp(optarg, "echo")) {
				fprintf(stderr,
					"-M is echo, sink or source, not '%s'\n",
					optarg);
				return EX_USAGE;
			}
			break;
		default:
			fprintf(stderr,
				"usage: %s [-H host] [-p port] [-t threads] [-M echo|sink|source]%s\n",
				stage_name() ? "cgpu-echo-server" :
					       "cpu-echo-server",
				stage_name() ? " [-B]" : "");
			return opt == 'h' ? 0 : EX_USAGE;
		}
	}
	if (threads < 1)
		threads = 1;
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = stream_byte(i);
	struct worker *wk = calloc(threads, sizeof(*wk));
	pthread_t *tid = calloc(threads, sizeof(pthread_t));
	char err[256];

	if (!wk || !tid)
		return EX_OSERR;
	for (int i = 0; i < threads; i++) {
		wk[i].lfd = listener();
		if (wk[i].lfd < 0) {
			fprintf(stderr,
				"echo server: cannot listen on %s:%s: %s\n",
				host, port, strerror(errno));
			return EX_UNAVAILABLE;
		}
		if (stage_name() &&
		    !(wk[i].st = stage_open(STAGE_CAP, err, sizeof(err)))) {
			fprintf(stderr, "cgpu-echo-server: %s\n", err);
			return EX_UNAVAILABLE;
		}
	}
	printf("%s: listening on %s:%s (%d threads%s%s%s%s)\n",
	       stage_name() ? "cgpu-echo-server" : "cpu-echo-server", host,
	       port, threads, stage_name() ? ", GPU stage " : "",
	       stage_name() ? stage_name() : "", batch ? ", batched" : "",
	       mode == SINK   ? ", sink" :
	       mode == SOURCE ? ", source" :
				"");
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, loop, &wk[i]);
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	return 0;
}
