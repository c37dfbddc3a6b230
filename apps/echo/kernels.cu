/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The echo client's kernel, written once with g-calls: nvcc builds it for
 * the GPU, the C compiler (kernels_host.c) for the host backend. Each
 * block connects, sends patterned data, checks that it comes back byte
 * for byte, and records each round trip's time. (The server is
 * server.c, on the server layer.)
 */
#include "echo.h"

/* The byte at offset k of round trip i of block b. */
GSOCK_HD uint8_t pattern(uint32_t seed, uint32_t b, uint32_t i, uint64_t k)
{
	uint64_t x = k * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull +
		     b * 0x94d049bb133111ebull + seed;

	x ^= x >> 29;
	return (uint8_t)(x >> 17);
}

/*
 * Send size bytes and receive them back, interleaved so that messages
 * larger than the rings cannot deadlock against an echo server.
 */
GSOCK_DEVICE long round_trip(struct gsock_dev gs, int fd, const uint8_t *sbuf,
			     uint8_t *rbuf, uint64_t size)
{
	uint64_t sent = 0, got = 0;
	GS_SHARED struct gpollfd pfd;

	while (got < size) {
		long n = 0, m = 0;

		if (sent < size) {
			n = gsend(gs, fd, sbuf + sent, size - sent,
				  MSG_DONTWAIT);
			if (n < 0 && n != -EAGAIN)
				return n;
			if (n > 0)
				sent += (uint64_t)n;
		}
		if (got < sent) {
			m = grecv(gs, fd, rbuf + got, size - got,
				  sent < size ? MSG_DONTWAIT : 0);
			if (m == 0)
				return -ECONNRESET; /* EOF before the echo */
			if (m < 0 && m != -EAGAIN)
				return m;
			if (m > 0)
				got += (uint64_t)m;
		}
		if (n <= 0 && m <= 0) {
			if (gs_tid() == 0) {
				pfd.fd = fd;
				pfd.events = POLLIN |
					     (sent < size ? POLLOUT : 0);
			}
			gs_sync();
			n = gpoll(gs, &pfd, 1, 1000);
			if (n < 0)
				return n;
		}
	}
	return 0;
}

GSOCK_KERNEL(echo_client_kernel, gs, arg)
{
	struct echo_client_args *a = (struct echo_client_args *)arg;
	struct echo_client_result *res = &a->result[gs_bid()];
	uint32_t b = gs_bid();
	uint8_t *sbuf = a->sbuf + (size_t)b * a->size;
	uint8_t *rbuf = a->rbuf + (size_t)b * a->size;
	GS_SHARED uint64_t bad;
	long r;
	int fd;

	fd = gsocket(gs, ((struct sockaddr *)&a->addr)->sa_family, SOCK_STREAM,
		     0);
	if (fd < 0) {
		r = fd;
		goto out;
	}
	r = gconnect(gs, fd, (struct sockaddr *)&a->addr, a->addrlen);
	for (uint32_t i = 0; r == 0 && i < a->iters; i++) {
		uint64_t t0;

		for (uint64_t k = gs_tid(); k < a->size; k += gs_bdim())
			sbuf[k] = pattern(a->seed, b, i, k);
		if (gs_tid() == 0)
			bad = ~0ull;
		gs_sync();
		t0 = gs_now_ns();
		r = round_trip(gs, fd, sbuf, rbuf, a->size);
		if (gs_tid() == 0)
			a->rtt_ns[(size_t)b * a->iters + i] = gs_now_ns() - t0;
		for (uint64_t k = gs_tid(); r == 0 && k < a->size;
		     k += gs_bdim())
			if (rbuf[k] != sbuf[k] && k < bad)
				bad = k; /* a race between threads only picks among wrong bytes */
		gs_sync();
		if (r == 0 && bad != ~0ull) {
			if (gs_tid() == 0)
				res->mismatch_at = bad;
			r = ECHO_MISMATCH;
		}
		gs_sync();
	}
	gclose(gs, fd);
out:
	if (gs_tid() == 0)
		res->error = r;
}
