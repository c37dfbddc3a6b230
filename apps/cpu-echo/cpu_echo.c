/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu-echo-server: a plain CPU echo server, the baseline gsock is
 * measured against. One epoll loop per thread, each with its own
 * SO_REUSEPORT listener, non-blocking sockets, TCP_NODELAY; a connection
 * whose peer reads slowly stops being read until its echo is written.
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

#define BUFSZ 65536

struct conn {
	int fd;
	size_t off, len; /* pending echo bytes in buf */
	char buf[BUFSZ];
};

static const char *host = "0.0.0.0", *port = "7001";

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

/* Echo what can be echoed; returns -1 when the connection is over. */
static int conn_serve(int ep, struct conn *c)
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
		n = recv(c->fd, c->buf, BUFSZ, 0);
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

static void *loop(void *arg)
{
	struct epoll_event evs[256], ev = { .events = EPOLLIN };
	int lfd = *(int *)arg, ep = epoll_create1(0), one = 1;

	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1);

		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (c) {
				if (conn_serve(ep, c) < 0)
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
			ev.events = EPOLLIN;
			ev.data.ptr = c;
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 1, opt;

	while ((opt = getopt(argc, argv, "H:p:t:h")) != -1) {
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
		default:
			fprintf(stderr,
				"usage: cpu-echo-server [-H host] [-p port] [-t threads]\n");
			return opt == 'h' ? 0 : EX_USAGE;
		}
	}
	if (threads < 1)
		threads = 1;
	int *fds = calloc(threads, sizeof(int));
	pthread_t *tid = calloc(threads, sizeof(pthread_t));

	for (int i = 0; i < threads; i++) {
		fds[i] = listener();
		if (fds[i] < 0) {
			fprintf(stderr,
				"cpu-echo-server: cannot listen on %s:%s: %s\n",
				host, port, strerror(errno));
			return EX_UNAVAILABLE;
		}
	}
	printf("cpu-echo-server: listening on %s:%s (%d threads)\n", host, port,
	       threads);
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, loop, &fds[i]);
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	return 0;
}
