/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU servers' event loop (cpu_loop.h says what it is for). */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "app.h"
#include "cpu_loop.h"

static volatile sig_atomic_t cl_stopping;

static void cl_on_signal(int sig)
{
	(void)sig;
	cl_stopping = 1;
}

void cl_stop(void)
{
	cl_stopping = 1;
}

uint64_t cl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cl_listen(struct cl_worker *wk, const struct cl_ops *ops,
	      const char *prog, const char *spec)
{
	struct sigaction sa = { .sa_handler = cl_on_signal };

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	wk->ops = ops;
	wk->lfd = app_listen(spec, 1);
	if (wk->lfd < 0) {
		fprintf(stderr, "%s: cannot listen on %s: %s\n", prog, spec,
			strerror(errno));
		return EX_UNAVAILABLE;
	}
	wk->ep = epoll_create1(EPOLL_CLOEXEC);
	if (wk->ep < 0) {
		fprintf(stderr, "%s: epoll_create1: %s\n", prog, strerror(errno));
		return EX_OSERR;
	}
	return 0;
}

void cl_kill(struct cl_conn *c)
{
	struct cl_worker *wk = c->wk;

	if (c->dead)
		return;
	epoll_ctl(wk->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->dead = 1;
	if (c->prev)
		c->prev->next = c->next;
	else
		wk->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next_dead = wk->dead;
	wk->dead = c;
}

static void cl_reap(struct cl_worker *wk)
{
	while (wk->dead) {
		struct cl_conn *c = wk->dead;

		wk->dead = c->next_dead;
		if (wk->ops->freed)
			wk->ops->freed(c);
		free(c->out);
		free(c);
	}
}

int cl_put(struct cl_conn *c, const void *p, size_t n)
{
	if (c->dead)
		return -1;
	if (c->out_off == c->out_len) /* its wait for the peer starts now */
		c->moved = cl_now_ns();
	if (c->out_off) { /* a send left part unsent: move it to the front */
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + n > c->wk->ops->out_max) {
		cl_kill(c); /* it reads none of its answers */
		return -1;
	}
	if (c->out_len + n > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap : 4096;
		uint8_t *out;

		while (cap < c->out_len + n)
			cap *= 2;
		out = realloc(c->out, cap);
		if (!out) {
			cl_kill(c);
			return -1;
		}
		c->out = out;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
	return 0;
}

int cl_backlogged(const struct cl_conn *c)
{
	size_t pause = c->wk->ops->out_pause;

	return pause && c->out_len - c->out_off > pause;
}

void cl_flush(struct cl_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	while (!c->dead && c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off,
				 c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			/* closing or backlogged: read nothing, wait for room */
			ev.events = c->closing || cl_backlogged(c) ?
					    EPOLLOUT :
					    EPOLLIN | EPOLLOUT;
			epoll_ctl(c->wk->ep, EPOLL_CTL_MOD, c->fd, &ev);
			return;
		}
		if (n <= 0) {
			cl_kill(c);
			return;
		}
		c->out_off += (size_t)n;
		c->moved = cl_now_ns();
	}
	if (c->dead)
		return;
	c->out_off = c->out_len = 0;
	if (c->closing)
		cl_kill(c);
	else
		epoll_ctl(c->wk->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void cl_accept_all(struct cl_worker *wk)
{
	for (;;) {
		int fd = accept4(wk->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC),
		    one = 1;
		struct epoll_event ev = { .events = EPOLLIN };
		struct cl_conn *c;

		if (fd < 0)
			return;
		c = calloc(1, wk->ops->conn_size);
		if (c) {
			c->fd = fd;
			c->wk = wk;
			c->last = cl_now_ns();
		}
		if (!c || (wk->ops->accepted && wk->ops->accepted(c))) {
			if (c && wk->ops->freed)
				wk->ops->freed(c);
			free(c);
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ev.data.ptr = c;
		epoll_ctl(wk->ep, EPOLL_CTL_ADD, fd, &ev);
		c->next = wk->conns;
		if (wk->conns)
			wk->conns->prev = c;
		wk->conns = c;
		wk->conns_seen++;
	}
}

/* Close the connections whose answers have waited stall_ns unmoved. */
static void cl_sweep_stalled(struct cl_worker *wk)
{
	uint64_t now = cl_now_ns();
	struct cl_conn *c, *next;

	for (c = wk->conns; c && wk->ops->stall_ns; c = next) {
		next = c->next;
		if (c->out_off < c->out_len &&
		    now - c->moved > wk->ops->stall_ns)
			cl_kill(c);
	}
}

static void *cl_loop(void *arg)
{
	struct cl_worker *wk = arg;
	struct epoll_event evs[256], ev = { .events = EPOLLIN };
	uint64_t ticked = cl_now_ns();

	epoll_ctl(wk->ep, EPOLL_CTL_ADD, wk->lfd, &ev);
	while (!cl_stopping) {
		int n = epoll_wait(wk->ep, evs, 256, 100);

		for (int i = 0; i < n; i++) {
			struct cl_conn *c = evs[i].data.ptr;

			if (!c)
				cl_accept_all(wk);
			else if (c->dead)
				continue;
			else if (evs[i].events & EPOLLOUT)
				cl_flush(c);
			else
				wk->ops->read(c);
		}
		if (wk->ops->wakeup)
			wk->ops->wakeup(wk);
		if (cl_now_ns() - ticked > 100000000ull) {
			cl_sweep_stalled(wk);
			if (wk->ops->tick)
				wk->ops->tick(wk);
			ticked = cl_now_ns();
		}
		cl_reap(wk);
	}
	return NULL;
}

void cl_serve(struct cl_worker *first, size_t stride, unsigned n)
{
	pthread_t *tid = calloc(n, sizeof(*tid));

	if (!tid) {
		fprintf(stderr, "out of memory for %u threads\n", n);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		pthread_create(&tid[i], NULL, cl_loop,
			       (uint8_t *)first + (size_t)i * stride);
	for (unsigned i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	free(tid);
}
