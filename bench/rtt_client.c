/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rtt-client: an ordinary CPU socket program that measures echo round
 * trips: one connection, a fixed message size, blocking send and recv,
 * TCP_NODELAY, a warm-up, then N timed round trips. Prints p50, p99,
 * p99.9 and max in microseconds, one line, for bench scripts to collect.
 */
#include <config.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int xfer(int fd, char *buf, size_t n, int out)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = out ? send(fd, buf + done, n - done, MSG_NOSIGNAL) :
				  recv(fd, buf + done, n - done, 0);

		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	size_t size, iters, warm = 1000;
	uint64_t *rtt;
	char *buf;
	int fd, one = 1;

	if (argc != 5) {
		fprintf(stderr, "usage: rtt-client HOST PORT SIZE ITERS\n");
		return EX_USAGE;
	}
	size = strtoul(argv[3], NULL, 0);
	iters = strtoul(argv[4], NULL, 0);
	if (!size || !iters || getaddrinfo(argv[1], argv[2], &hints, &res)) {
		fprintf(stderr, "rtt-client: bad arguments\n");
		return EX_USAGE;
	}
	fd = socket(res->ai_family, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
		fprintf(stderr, "rtt-client: cannot connect to %s:%s: %s\n",
			argv[1], argv[2], strerror(errno));
		return EX_UNAVAILABLE;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	buf = calloc(1, size);
	rtt = calloc(iters, sizeof(*rtt));
	for (size_t i = 0; i < warm + iters; i++) {
		uint64_t t0 = now_ns();

		if (xfer(fd, buf, size, 1) || xfer(fd, buf, size, 0)) {
			fprintf(stderr,
				"rtt-client: connection ended after %zu round trips\n",
				i);
			return 1;
		}
		if (i >= warm)
			rtt[i - warm] = now_ns() - t0;
	}
	qsort(rtt, iters, sizeof(*rtt), cmp);
	printf("size %zu iters %zu p50_us %.2f p99_us %.2f p999_us %.2f max_us %.2f\n",
	       size, iters, rtt[iters / 2] / 1e3, rtt[iters * 99 / 100] / 1e3,
	       rtt[iters * 999 / 1000] / 1e3, rtt[iters - 1] / 1e3);
	close(fd);
	freeaddrinfo(res);
	return 0;
}
