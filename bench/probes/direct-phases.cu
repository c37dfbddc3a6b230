/* SPDX-License-Identifier: Apache-2.0 */
/*
 * direct-phases: where a 64 B round trip between two g-call blocks goes,
 * with nothing but gsend and grecv on either side (no server layer, no
 * gpoll unless -p). Block 1 of this program (or the client process) sends
 * SIZE bytes and waits for them back; block 0 (or the server process)
 * receives and sends them back. Every step is stamped with the GPU's
 * global timer, which both blocks of one GPU share (two processes on one
 * GPU too, under MPS), so one-way times come out:
 *
 *   c.send    the client's gsend, call to return
 *   c->s      the client's gsend call to the server's grecv return
 *   s.turn    the server's grecv return to its gsend return
 *   s->c      the server's gsend return to the client's grecv return
 *   rtt       the client's whole round trip
 *
 * Between two processes on two GPUs only c.send and rtt mean anything.
 * The first line also gives the client block's SM clock over its round
 * trips (clock64 against the global timer): some runs on an H100 ran
 * every phase ~2.7x slower, and this says whether the clock was why.
 *
 *   nvcc -O2 -I devlib -o direct-phases bench/probes/direct-phases.cu \
 *        devlib/libgsock-cuda.a -lcuda
 *   ./direct-phases [-m self|server|client] [-P PORT] [-n SIZE] [-i ITERS]
 *                   [-t THREADS] [-d GPU] [-p] [-o FILE]
 *   (-p: the server gpolls its connection before each grecv, as a server
 *   of many connections would; -m server and -m client on two GPUs, -d,
 *   or on one under MPS, for rings in GPU memory)
 *
 * Built with -DPHASES it also prints the mean time between the library's
 * GS_TRACE points inside gsend and grecv (the wait, the broadcasts, the
 * copy, the publish or consume), and in self mode "notice": from one
 * block's publish to the other's grecv wait ending. Built with -DSTAMPS,
 * -o FILE writes every trace point's stamps in order beside the round
 * trips' (one block a process: -m server / -m client), and
 * bench/probes/direct-stamps.py lines a server's and a client's file up
 * by round trip: from the client's gsend to its lane copy, the server
 * finding it, its grecv returning, its gsend's lane copy, and so on.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gsock.h"
#include "gsock_port.h"

#define MAXIT_ST 100000
#ifdef PHASES
/*
 * -DPHASES: the library's GS_TRACE points inside gsend (0-5, 7) and
 * grecv (6, 8-14), thread 0's time from one point to the next summed per
 * block;
 * [b][15] sums how long after the other block published its tail this
 * block's grecv wait ended (self mode: both blocks on one timer).
 */
__device__ uint64_t tr_sum[2][16], tr_n[2][16], tr_last[2], tr_pub[2];

GSOCK_DEVICE void gs_trace(int k)
{
	unsigned b = gs_bid() & 1;
	uint64_t t;

	if (gs_tid() != 0)
		return;
	t = gs_now_ns();
	if (k != 0 && k != 8) {
		tr_sum[b][k] += t - tr_last[b];
		tr_n[b][k]++;
	}
	tr_last[b] = t;
	if (k == 4)
		tr_pub[b] = t;
	if (k == 9 && tr_pub[b ^ 1]) {
		tr_sum[b][15] += t - tr_pub[b ^ 1];
		tr_n[b][15]++;
	}
}
#define GS_TRACE(k) gs_trace(k)
#elif defined(STAMPS)
/*
 * -DSTAMPS: each GS_TRACE point's stamps in order (thread 0 of the
 * block), written with the round trips' own to the file -o names, so
 * that two processes on one GPU (one timer) can be lined up by round
 * trip: bench/probes/direct-stamps.py reads them.
 */
__device__ uint64_t st_at[16][MAXIT_ST];
__device__ uint32_t st_n[16];
/*
 * The block's counts while it runs, in shared memory: a count in global
 * memory cost thread 0 a load from L2 at every point (~0.2 us each, on
 * the path it measures). st_n gets them at the end.
 */
__shared__ uint32_t st_k[16];

GSOCK_DEVICE void gs_trace(int k)
{
	if (gs_tid() == 0 && st_k[k] < MAXIT_ST)
		st_at[k][st_k[k]++] = gs_now_ns();
}
#define GS_TRACE(k) gs_trace(k)

/* each turn of a wait for a lane copy, in the slot of point 15 */
#define GS_TRACE_TURN() gs_trace(15)
#endif

#include "gsock.cuh"

#define MAXIT 100000

/* Stamps, in GPU memory so that storing them costs the fences nothing. */
struct stamps {
	uint64_t a[MAXIT]; /* client: before gsend */
	uint64_t b[MAXIT]; /* client: after gsend */
	uint64_t c[MAXIT]; /* client: after grecv */
	uint64_t d[MAXIT]; /* server: after grecv */
	uint64_t e[MAXIT]; /* server: after gsend */
};

struct probe {
	uint16_t port;
	uint32_t addr; /* 127.0.0.1, network order */
	int role; /* 0 both (self), 1 server, 2 client */
	int poll;
	uint32_t size, iters;
	long err[2];
	double mhz; /* the client block's SM clock over its round trips */
	struct stamps *t;
};

/* The probe's address: 127.0.0.1, port -P. */
GSOCK_DEVICE void probe_addr(const struct probe *p, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = p->port;
	sa->sin_addr.s_addr = p->addr;
}

GSOCK_DEVICE long serve(struct gsock_dev gs, struct probe *p, uint8_t *buf)
{
	struct sockaddr_in sa;
	GS_SHARED struct gpollfd pfd;
	/* p lies in host memory: its fields read once, not a PCIe read a turn */
	struct stamps *t = p->t;
	uint32_t size = p->size, iters = p->iters;
	int poll = p->poll, one = 1, lfd, c;
	long r;

	probe_addr(p, &sa);
	r = lfd = gsocket(gs, AF_INET, SOCK_STREAM, 0);
	if (r >= 0)
		r = gsetsockopt(gs, lfd, SOL_SOCKET, SO_REUSEADDR, &one,
				sizeof(one));
	if (r >= 0)
		r = gbind(gs, lfd, (struct sockaddr *)&sa, sizeof(sa));
	if (r >= 0)
		r = glisten(gs, lfd, 8);
	if (r < 0)
		return r;
	r = c = gaccept(gs, lfd, NULL, NULL);
	for (uint32_t i = 0; r >= 0 && i < iters; i++) {
		if (poll) {
			if (gs_tid() == 0) {
				pfd.fd = c;
				pfd.events = POLLIN;
			}
			gs_sync();
			r = gpoll(gs, &pfd, 1, -1);
			if (r < 0)
				break;
		}
		r = grecv(gs, c, buf, size, MSG_WAITALL);
		if (gs_tid() == 0)
			t->d[i] = gs_now_ns();
		if (r != (long)size) {
			r = r < 0 ? r : -EPROTO;
			break;
		}
		r = gsend(gs, c, buf, size, 0);
		if (gs_tid() == 0)
			t->e[i] = gs_now_ns();
	}
	gclose(gs, lfd);
	if (c >= 0)
		gclose(gs, c);
	return r < 0 ? r : 0;
}

GSOCK_DEVICE long ask(struct gsock_dev gs, struct probe *p, uint8_t *buf)
{
	struct sockaddr_in sa;
	struct stamps *t = p->t; /* p's fields read once, as in serve */
	uint32_t size = p->size, iters = p->iters;
	long r;
	int fd;

	probe_addr(p, &sa);
	r = fd = gsocket(gs, AF_INET, SOCK_STREAM, 0);
	for (int k = 0; r >= 0 && k < 2000; k++) { /* until the server listens */
		r = gconnect(gs, fd, (struct sockaddr *)&sa, sizeof(sa));
		if (r != -ECONNREFUSED)
			break;
		gclose(gs, fd);
		for (int w = 0; w < 100; w++)
			gs_pause(10000);
		r = fd = gsocket(gs, AF_INET, SOCK_STREAM, 0);
	}
#ifdef __CUDACC__
	uint64_t c0 = clock64(), n0 = gs_now_ns();
#endif
	for (uint32_t i = 0; r >= 0 && i < iters; i++) {
		if (gs_tid() == 0)
			t->a[i] = gs_now_ns();
		r = gsend(gs, fd, buf, size, 0);
		if (gs_tid() == 0)
			t->b[i] = gs_now_ns();
		if (r >= 0)
			r = grecv(gs, fd, buf + size, size, MSG_WAITALL);
		if (gs_tid() == 0)
			t->c[i] = gs_now_ns();
		if (r >= 0 && r != (long)size)
			r = -EPROTO;
	}
#ifdef __CUDACC__
	if (gs_tid() == 0)
		p->mhz = (double)(clock64() - c0) * 1e3 /
			 (double)(gs_now_ns() - n0);
#endif
	if (fd >= 0)
		gclose(gs, fd);
	return r < 0 ? r : 0;
}

GSOCK_KERNEL(probe_kernel, gs, arg)
{
	struct probe *p = (struct probe *)arg;
	GS_SHARED uint8_t buf[2 * 4096];
	int who = p->role ? p->role - 1 : (int)gs_bid();
	long r;

#ifdef STAMPS
	for (unsigned k = gs_tid(); k < 16; k += gs_bdim())
		st_k[k] = 0;
	gs_sync();
#endif
	r = who == 0 ? serve(gs, p, buf) : ask(gs, p, buf);
	if (gs_tid() == 0)
		p->err[who] = r;
#ifdef STAMPS
	gs_sync();
	for (unsigned k = gs_tid(); k < 16; k += gs_bdim())
		st_n[k] = st_k[k];
#endif
}

static int cmp(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* The percentiles of to[i] - from[i] over the n stamps after skip. */
static void line(const char *what, const uint64_t *to, const uint64_t *from,
		 uint32_t skip, uint32_t n, double *v)
{
	for (uint32_t i = 0; i < n; i++)
		v[i] = (double)(to[skip + i] - from[skip + i]);
	qsort(v, n, sizeof(*v), cmp);
	printf("  %-7s p10 %7.2f  p50 %7.2f  p90 %7.2f  p99 %7.2f us\n", what,
	       v[n / 10] / 1e3, v[n / 2] / 1e3, v[n * 9 / 10] / 1e3,
	       v[n * 99 / 100] / 1e3);
}

int main(int argc, char **argv)
{
	struct gsock_opts o;
	struct gsock_ctx *ctx;
	struct probe *p;
	struct stamps *t;
	const char *mode = "self", *out = NULL;
	unsigned threads = 256, port = 7790;
	uint32_t size = 64, iters = 20000;
	int opt, gpu = 0, poll = 0, role;
	char err[256];

	while ((opt = getopt(argc, argv, "m:P:n:i:t:d:po:")) != -1)
		switch (opt) {
		case 'm': mode = optarg; break;
		case 'P': port = (unsigned)atoi(optarg); break;
		case 'n': size = (uint32_t)atoi(optarg); break;
		case 'i': iters = (uint32_t)atoi(optarg); break;
		case 't': threads = (unsigned)atoi(optarg); break;
		case 'd': gpu = atoi(optarg); break;
		case 'p': poll = 1; break;
		case 'o': out = optarg; break;
		default: return 64;
		}
	role = !strcmp(mode, "server") ? 1 : !strcmp(mode, "client") ? 2 : 0;
#ifndef STAMPS
	if (out) {
		fprintf(stderr, "direct-phases: -o needs a build with -DSTAMPS\n");
		return 64;
	}
#endif
	if (out && !role) { /* two blocks would share one set of stamps */
		fprintf(stderr, "direct-phases: -o needs -m server or -m client\n");
		return 64;
	}
	if (size < 1 || size > 4096 || iters < 100 || iters > MAXIT) {
		fprintf(stderr, "direct-phases: -n 1..4096, -i 100..%d\n", MAXIT);
		return 64;
	}
	memset(&o, 0, sizeof(o));
	o.nslots = 2;
	o.nsocks = 8;
	o.device = gpu;
	ctx = gsock_init(&o, err, sizeof(err));
	if (!ctx) {
		fprintf(stderr, "direct-phases: %s\n", err);
		return 1;
	}
	p = (struct probe *)gsock_alloc(ctx, sizeof(*p));
	p->port = htons((uint16_t)port);
	p->addr = htonl(0x7f000001);
	p->role = role;
	p->poll = poll;
	p->size = size;
	p->iters = iters;
	p->t = (struct stamps *)gsock_dev_alloc(ctx, sizeof(struct stamps));
	if (!p->t) {
		fprintf(stderr, "direct-phases: no GPU memory for the stamps\n");
		return 1;
	}
	if (gsock_launch(ctx, (const void *)probe_kernel, role ? 1 : 2, threads,
			 p) < 0) {
		fprintf(stderr, "direct-phases: launch failed\n");
		return 1;
	}
	gsock_wait(ctx);
	t = (struct stamps *)malloc(sizeof(*t));
	if (!t || gsock_memcpy(ctx, t, p->t, sizeof(*t))) {
		fprintf(stderr, "direct-phases: cannot read the stamps\n");
		return 1;
	}
	if (p->err[0] || p->err[1]) {
		fprintf(stderr, "direct-phases: server %s, client %s\n",
			strerror((int)-p->err[0]), strerror((int)-p->err[1]));
		return 1;
	}
	{
		uint32_t skip = iters / 10, n = iters - skip;
		double *v = (double *)calloc(n, sizeof(double));

		printf("direct-phases %s: %u B, %u round trips (first %u left out), %u threads%s",
		       mode, size, iters, skip, threads,
		       poll && role != 2 ? ", server gpolls first" : "");
		if (p->mhz > 0)
			printf(", SM clock %.0f MHz", p->mhz);
		printf("\n");
		if (role != 1) {
			line("rtt", t->c, t->a, skip, n, v);
			line("c.send", t->b, t->a, skip, n, v);
		}
		if (role == 1)
			line("s.turn", t->e, t->d, skip, n, v);
		if (role == 0) {
			line("c->s", t->d, t->a, skip, n, v);
			line("s.turn", t->e, t->d, skip, n, v);
			line("s->c", t->c, t->e, skip, n, v);
		}
		free(v);
	}
#ifdef STAMPS
	if (out) { /* counts, the trace points' stamps, then the round trips' */
		static uint64_t at[16][MAXIT_ST];
		uint32_t n[16];
		FILE *f = fopen(out, "wb");

		if (cudaMemcpyFromSymbol(n, st_n, sizeof(n)) != cudaSuccess ||
		    cudaMemcpyFromSymbol(at, st_at, sizeof(at)) != cudaSuccess) {
			fprintf(stderr, "direct-phases: cannot read the trace stamps\n");
			return 1;
		}
		if (!f || fwrite(n, sizeof(n), 1, f) != 1 ||
		    fwrite(at, sizeof(at), 1, f) != 1 ||
		    fwrite(t, sizeof(*t), 1, f) != 1 || fclose(f)) {
			fprintf(stderr, "direct-phases: cannot write %s\n", out);
			return 1;
		}
	}
#endif
#ifdef PHASES
	{
		uint64_t sum[2][16], n[2][16];
		/* s:copy is the ring's copy alone where a lane copy went */
		static const char *name[16] = {
			"", "s:wait", "s:bcast", "s:copy", "s:publish", "s:bcast",
			"r:lane", "s:lane", "", "r:wait", "r:bcast", "r:copy",
			"r:consume", "r:bcast", "r:return", "notice"
		};

		cudaMemcpyFromSymbol(sum, tr_sum, sizeof(sum));
		cudaMemcpyFromSymbol(n, tr_n, sizeof(n));
		for (int b = 0; b < (role ? 1 : 2); b++) {
			printf("  block %d (%s) mean ns:", b,
			       role == 1 || (!role && b == 0) ? "server" : "client");
			for (int k = 0; k < 16; k++)
				if (n[b][k])
					printf(" %s %.0f", name[k],
					       (double)sum[b][k] / n[b][k]);
			printf("\n");
		}
	}
#endif
	gsock_fini(ctx);
	return 0;
}
