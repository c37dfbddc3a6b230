/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU servers of the matrix product, one program for both: with
 * stage_blas.c it is mm-pserver, the CPU-only server P (OpenBLAS); with
 * stage_cuda.cu it is mm-cserver, the CPU-managed GPU server C. Requests
 * are large and few, so each connection gets a thread and a stage of its
 * own (at most --threads at once; more wait to be accepted), with blocking
 * I/O bounded by a timeout.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sysexits.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "app.h"
#include "mm.h"
#include "stage.h"

static const char *prog;
static uint32_t max_n = 1024;
static sem_t room; /* connections that may be served now */
static volatile sig_atomic_t stopping;
static uint64_t products, conns; /* atomic */

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void serve(int fd, struct mm_stage *st)
{
	for (;;) {
		struct mm_hdr h;
		uint32_t n;
		int32_t status = MM_OK;

		if (app_io_all(fd, &h, sizeof(h), 0))
			return;
		n = h.n_or_status;
		if (h.magic != MM_REQ_MAGIC)
			status = MM_E_PROTO;
		else if (n == 0 || n > max_n)
			status = MM_E_SIZE;
		if (status == MM_OK && (app_io_all(fd, mm_stage_in(st),
						   2 * (size_t)n * n * 4, 0) ||
					mm_stage_run(st, n)))
			return;
		h = (struct mm_hdr){ MM_RESP_MAGIC, h.seq, (uint32_t)status,
				     n };
		if (app_io_all(fd, &h, sizeof(h), 1) || status != MM_OK ||
		    app_io_all(fd, mm_stage_out(st), (size_t)n * n * 4, 1))
			return;
		__atomic_add_fetch(&products, 1, __ATOMIC_RELAXED);
	}
}

static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct timeval tv = { 5, 0 };
	int one = 1;
	char err[256];
	struct mm_stage *st = mm_stage_open(max_n, err, sizeof(err));

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (st)
		serve(fd, st);
	else
		fprintf(stderr, "%s: %s\n", prog, err);
	mm_stage_close(st);
	close(fd);
	sem_post(&room);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [options]\n"
		"  -l, --listen ADDR   HOST:PORT, [V6]:PORT or PORT (default 7200); the port is\n"
		"                      always shared (SO_REUSEPORT), also with mm-gserver -P\n"
		"  -t, --threads N     connections served at once (default 16)\n"
		"  -N, --max-n N       largest side taken (default 1024)\n",
		prog);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "max-n", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct sigaction sa = { .sa_handler = on_signal };
	const char *listen_at = "7200";
	int threads = 16, opt, lfd;

	prog = strcmp(mm_stage_name(), "cuda") ? "mm-pserver" : "mm-cserver";
	while ((opt = getopt_long(argc, argv, "l:t:N:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_at = optarg;
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 'N':
			max_n = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (threads < 1 || max_n < 1 || max_n > 8192) {
		fprintf(stderr, "%s: threads must be positive, max-n 1..8192\n",
			prog);
		return EX_USAGE;
	}
	lfd = app_listen(listen_at, 1);
	if (lfd < 0) {
		fprintf(stderr, "%s: cannot listen on %s: %s\n", prog,
			listen_at, strerror(errno));
		return EX_UNAVAILABLE;
	}
	sem_init(&room, 0, (unsigned)threads);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	printf("%s: listening on %s (%d connections at once, %s, n up to %u)\n",
	       prog, listen_at, threads, mm_stage_name(), max_n);
	fflush(stdout);
	while (!stopping) {
		struct pollfd p = { lfd, POLLIN, 0 };
		pthread_t t;
		int fd;

		if (sem_wait(&room))
			continue; /* a signal */
		while (!stopping && poll(&p, 1, 100) <= 0)
			;
		fd = stopping ? -1 : accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0 ||
		    pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd)) {
			if (fd >= 0)
				close(fd);
			sem_post(&room);
			continue;
		}
		pthread_detach(t);
		__atomic_add_fetch(&conns, 1, __ATOMIC_RELAXED);
	}
	printf("%s: served %llu products on %llu connections\n", prog,
	       (unsigned long long)products, (unsigned long long)conns);
	return 0;
}
