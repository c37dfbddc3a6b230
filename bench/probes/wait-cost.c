/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A one-off probe kept with the results it made: what one poll, select
 * or epoll wait costs a preloaded program that holds many direct
 * connections. T threads each connect C/T connections to HOST:PORT (a
 * GPU application's listener, so the preload takes the direct path),
 * put them in an epoll set of their own, and call epoll_wait with a zero
 * timeout N times (no spin, no sleep: the preload's look at the rings
 * alone), then poll over the same descriptors N times. Prints the mean
 * nanoseconds per call.
 *
 *   cc -O2 -pthread -o /tmp/wait-cost bench/probes/wait-cost.c
 *   LD_PRELOAD=.../libgsock-preload.so /tmp/wait-cost HOST PORT C T N
 */
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *port;
static int per, iters;
static pthread_barrier_t bar;
static double ep_ns[64], poll_ns[64];

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *run(void *p)
{
	long k = (long)p;
	struct addrinfo *ai, hints = { .ai_socktype = SOCK_STREAM };
	struct pollfd *pf = calloc(per, sizeof(*pf));
	struct epoll_event ev[64];
	int ep = epoll_create1(0);
	double t;

	if (getaddrinfo(host, port, &hints, &ai) || !pf || ep < 0)
		exit(1);
	for (int i = 0; i < per; i++) {
		int fd = socket(ai->ai_family, SOCK_STREAM, 0);
		struct epoll_event e = { .events = EPOLLIN, .data.fd = fd };

		if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0) {
			perror("wait-cost: connect");
			exit(1);
		}
		pf[i] = (struct pollfd){ .fd = fd, .events = POLLIN };
	}
	pthread_barrier_wait(&bar);
	t = now();
	for (int i = 0; i < iters; i++)
		epoll_wait(ep, ev, 64, 0);
	ep_ns[k] = (now() - t) / iters;
	pthread_barrier_wait(&bar);
	t = now();
	for (int i = 0; i < iters; i++)
		poll(pf, per, 0);
	poll_ns[k] = (now() - t) / iters;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[64];
	int c, nt;
	double e = 0, p = 0;

	if (argc != 6 || (c = atoi(argv[3])) < 1 || (nt = atoi(argv[4])) < 1 ||
	    nt > 64 || (iters = atoi(argv[5])) < 1) {
		fprintf(stderr, "usage: wait-cost HOST PORT CONNS THREADS N\n");
		return 64;
	}
	host = argv[1];
	port = argv[2];
	per = c / nt;
	pthread_barrier_init(&bar, NULL, nt);
	for (long k = 0; k < nt; k++)
		pthread_create(&th[k], NULL, run, (void *)k);
	for (int k = 0; k < nt; k++) {
		pthread_join(th[k], NULL);
		e += ep_ns[k] / nt;
		p += poll_ns[k] / nt;
	}
	printf("wait-cost: conns=%d threads=%d epoll_wait_ns=%.0f poll_ns=%.0f\n",
	       per * nt, nt, e, p);
	return 0;
}
