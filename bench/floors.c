/* SPDX-License-Identifier: Apache-2.0 */
/*
 * floors: the physical floors the benchmarks are measured against, on
 * this machine, in one line of key=value: loopback TCP round trip (64 B,
 * p50) and one-way stream (GB/s), and from the GPU half (floors_gpu.cu)
 * the mapped-memory GPU<->CPU round trip and pinned copy bandwidth.
 * usage: floors [stream-MiB]
 */
#include <config.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "floors.h"

#define TRIPS 20000
#define CHUNK (1 << 20)

static size_t stream_bytes = (size_t)2048 << 20;

static double secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A connected loopback TCP pair: fds[0] the client, fds[1] the server. */
static int tcp_pair(int fds[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(l, 1) < 0 || getsockname(l, (struct sockaddr *)&a, &len) < 0)
		return -1;
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	fds[1] = accept(l, NULL, NULL);
	close(l);
	setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fds[1] < 0 ? -1 : 0;
}

static int full(int fd, char *b, size_t n, int rd)
{
	for (size_t d = 0; d < n;) {
		ssize_t k = rd ? read(fd, b + d, n - d) :
				 write(fd, b + d, n - d);

		if (k <= 0)
			return -1;
		d += (size_t)k;
	}
	return 0;
}

static void *echo(void *arg)
{
	int fd = *(int *)arg;
	char b[64];

	for (int i = 0; i < TRIPS; i++)
		if (full(fd, b, 64, 1) || full(fd, b, 64, 0))
			break;
	return NULL;
}

static void *sink(void *arg)
{
	int fd = *(int *)arg;
	char *b = malloc(CHUNK);

	while (b && read(fd, b, CHUNK) > 0)
		;
	free(b);
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static double rtt[TRIPS];
	double mapped = 0, h2d = 0, d2h = 0, peer = 0, t, gbs;
	const char *why = NULL;
	char b[64] = { 0 }, *chunk;
	int fds[2];
	pthread_t th;

	if (argc > 1)
		stream_bytes = (size_t)strtoul(argv[1], NULL, 0) << 20;
	if (tcp_pair(fds)) {
		perror("floors: loopback TCP");
		return 1;
	}
	pthread_create(&th, NULL, echo, &fds[1]);
	for (int i = 0; i < TRIPS; i++) {
		t = secs();
		if (full(fds[0], b, 64, 0) || full(fds[0], b, 64, 1))
			return 1;
		rtt[i] = (secs() - t) * 1e6;
	}
	pthread_join(th, NULL);
	qsort(rtt, TRIPS, sizeof(rtt[0]), cmp_d);
	close(fds[0]);
	close(fds[1]);

	chunk = calloc(1, CHUNK);
	if (!chunk || tcp_pair(fds))
		return 1;
	pthread_create(&th, NULL, sink, &fds[1]);
	t = secs();
	for (size_t d = 0; d < stream_bytes; d += CHUNK)
		if (full(fds[0], chunk, CHUNK, 0))
			return 1;
	close(fds[0]);
	pthread_join(th, NULL);
	gbs = (double)stream_bytes / (secs() - t) / 1e9;
	close(fds[1]);

	printf("tcp_rtt_p50_us=%.2f tcp_stream_GBps=%.2f", rtt[TRIPS / 2], gbs);
	if (floors_gpu(&mapped, &h2d, &d2h, &why) == 0) {
		printf(" mapped_rtt_us=%.2f h2d_GBps=%.2f d2h_GBps=%.2f",
		       mapped, h2d, d2h);
		if (floors_peer(&peer, &why) == 0)
			printf(" peer_GBps=%.2f", peer);
		printf("\n");
	} else {
		printf(" gpu=none (%s)\n", why);
	}
	return 0;
}
