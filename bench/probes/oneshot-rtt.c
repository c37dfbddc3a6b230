/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneshot-rtt: 64 B round trips over one TCP connection to an echo
 * server, each answer waited for with epoll_wait on a set of its own,
 * the socket watched with EPOLLIN | EPOLLONESHOT (re-armed with
 * EPOLL_CTL_MOD after each event) or level-triggered; 200 us between
 * round trips. Prints p50 and p90. Run under the preload against a GPU
 * echo server to see how a wait treats one-shot members of an exact set.
 *
 *   gcc -O2 -o oneshot-rtt bench/probes/oneshot-rtt.c
 *   LD_PRELOAD=preload/libgsock-preload.so ./oneshot-rtt PORT [N] [ONESHOT]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[2]) : 5000;
	int oneshot = argc > 3 ? atoi(argv[3]) : 1, one = 1, fd, ep;
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct epoll_event ev;
	char buf[64] = { 0 }, rb[64];
	long long *t;

	if (argc < 2 || n < 10) {
		fprintf(stderr, "usage: oneshot-rtt PORT [N >= 10] [ONESHOT 1|0]\n");
		return 64;
	}
	a.sin_port = htons((unsigned short)atoi(argv[1]));
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		perror("oneshot-rtt: connect");
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ep = epoll_create1(0);
	ev.events = EPOLLIN | (oneshot ? EPOLLONESHOT : 0);
	ev.data.fd = fd;
	t = malloc(sizeof(*t) * (size_t)n);
	if (ep < 0 || !t || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
		perror("oneshot-rtt: epoll");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		long long t0 = now_ns();
		size_t got = 0;

		if (send(fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) {
			perror("oneshot-rtt: send");
			return 1;
		}
		while (got < sizeof(rb)) {
			struct epoll_event e;
			int r = epoll_wait(ep, &e, 1, 1000);
			ssize_t k;

			if (r <= 0) {
				fprintf(stderr, "oneshot-rtt: %s at round trip %d\n",
					r ? "epoll_wait failed" : "no answer in 1 s", i);
				return 1;
			}
			k = recv(fd, rb + got, sizeof(rb) - got, MSG_DONTWAIT);
			if (k == 0) {
				fprintf(stderr, "oneshot-rtt: EOF\n");
				return 1;
			}
			if (k > 0)
				got += (size_t)k;
			if (oneshot && epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev)) {
				perror("oneshot-rtt: EPOLL_CTL_MOD");
				return 1;
			}
		}
		t[i] = now_ns() - t0;
		usleep(200);
	}
	qsort(t, (size_t)n, sizeof(*t), cmp);
	printf("oneshot=%d: %d round trips, p50 %.1f us, p90 %.1f us\n", oneshot,
	       n, (double)t[n / 2] / 1e3, (double)t[n * 9 / 10] / 1e3);
	return 0;
}
