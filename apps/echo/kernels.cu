/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The echo client's kernel, written once with g-calls: nvcc builds it for
 * the GPU, the C compiler (kernels_host.c) for the host backend. Each
 * block (or group of blocks, -k) connects, sends patterned data, checks
 * that it comes back byte for byte, and records each round trip's time;
 * or streams one way (-m up to a sink, -m down from a source: stream.h)
 * and times the stream. (The server is server.c, on the server layer.)
 */
#include "echo.h"
#include "stream_check.cuh"

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
 * larger than the rings cannot deadlock against an echo server. Every
 * block of the group g calls; rank 0 alone polls, and tells the others.
 */
GSOCK_DEVICE long round_trip(struct gsock_dev gs, int fd, const uint8_t *sbuf,
			     uint8_t *rbuf, uint64_t size, struct ggroup g)
{
	uint64_t sent = 0, got = 0;
	GS_SHARED struct gpollfd pfd;

	while (got < size) {
		long n = 0, m = 0;

		if (sent < size) {
			n = gsend_group(gs, fd, sbuf + sent, size - sent,
					MSG_DONTWAIT, g);
			if (n < 0 && n != -EAGAIN)
				return n;
			if (n > 0)
				sent += (uint64_t)n;
		}
		if (got < sent) {
			m = grecv_group(gs, fd, rbuf + got, size - got,
					sent < size ? MSG_DONTWAIT : 0, g);
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
			n = g.rank ? 0 : gpoll(gs, &pfd, 1, 1000);
			n = ggroup_bcast(gs, g, n);
			if (n < 0)
				return n;
		}
	}
	return 0;
}

/*
 * Rank 0 of a group: fill round trip i's bytes, or check them (1: check);
 * ECHO_MISMATCH with the first wrong byte in res, else 0.
 */
GSOCK_DEVICE long fill_or_check(const struct echo_client_args *a, uint32_t c,
				uint32_t i, int check,
				struct echo_client_result *res)
{
	uint8_t *sbuf = a->sbuf + (size_t)c * a->stride;
	uint8_t *rbuf = a->rbuf + (size_t)c * a->stride;
	GS_SHARED uint64_t bad;

	if (gs_tid() == 0)
		bad = ~0ull;
	gs_sync();
	for (uint64_t k = gs_tid(); k < a->size; k += gs_bdim()) {
		if (!check)
			sbuf[k] = pattern(a->seed, c, i, k);
		else if (rbuf[k] != sbuf[k] && k < bad)
			bad = k; /* a race between threads only picks among wrong bytes */
	}
	gs_sync();
	if (bad == ~0ull)
		return 0;
	if (gs_tid() == 0)
		res->mismatch_at = bad;
	return ECHO_MISMATCH;
}

/*
 * -m up: iters sends of size stream bytes, then the end of the stream,
 * then the sink's answer (its count and wrong bytes in rank 0's res):
 * ECHO_MISMATCH (wrong bytes), -EPROTO (a count that is not what was
 * sent), else 0. Every rank of g calls.
 */
GSOCK_DEVICE long stream_up(struct gsock_dev gs,
			    const struct echo_client_args *a, int fd,
			    uint8_t *sbuf, uint8_t *rbuf, struct ggroup g,
			    struct echo_client_result *res)
{
	uint64_t total = (uint64_t)a->iters * a->size, off = 0, got = 0;
	uint64_t count, wrong;
	long n = 0;

	if (g.rank == 0) /* the pattern from any offset: size + a period */
		for (uint64_t k = gs_tid(); k < a->size + STREAM_PERIOD;
		     k += gs_bdim())
			sbuf[k] = stream_byte(k);
	gs_sync();
	while (off < total) {
		uint64_t len = total - off < a->size ? total - off : a->size;

		n = gsend_group(gs, fd, sbuf + off % STREAM_PERIOD, len, 0, g);
		if (n <= 0)
			return n ? n : -EIO;
		off += (uint64_t)n;
	}
	n = ggroup_bcast(gs, g, g.rank ? 0 : gshutdown(gs, fd, SHUT_WR));
	while (n == 0 && got < STREAM_ANSWER) {
		n = grecv_group(gs, fd, rbuf + got, STREAM_ANSWER - got, 0, g);
		if (n > 0)
			got += (uint64_t)n;
		n = n > 0 ? 0 : n ? n : -ECONNRESET; /* EOF before the answer */
	}
	if (n)
		return n;
	if (g.rank == 0) {
		stream_answer_get(rbuf, &count, &wrong);
		if (gs_tid() == 0) {
			res->wrong = wrong;
			res->mismatch_at = count;
		}
		n = count != total ? -EPROTO : wrong ? ECHO_MISMATCH : 0;
	}
	return ggroup_bcast(gs, g, n);
}

/*
 * -m down: iters * size stream bytes from a source, each chunk checked by
 * every rank of g side by side (its part of the words); this block's
 * wrong bytes in res. 0, ECHO_SHORT (EOF first) or a negative errno.
 * Every rank of g calls.
 */
GSOCK_DEVICE long stream_down(struct gsock_dev gs,
			      const struct echo_client_args *a, int fd,
			      uint8_t *rbuf, struct ggroup g,
			      struct echo_client_result *res)
{
	uint64_t bad = 0, off = 0;
	long r = 0;

	for (uint32_t i = 0; !r && i < a->iters; i++) {
		for (uint64_t m = 0; !r && m < a->size;) {
			long n = grecv_group(gs, fd, rbuf + m, a->size - m, 0,
					     g);

			if (n <= 0) { /* EOF: the bytes that came in res */
				if (!n && gs_tid() == 0)
					res->mismatch_at = off + m;
				r = n ? n : ECHO_SHORT;
				break;
			}
			bad += stream_wrong(rbuf + m, (uint64_t)n, off + m,
					    g.rank, g.size);
			m += (uint64_t)n;
		}
		off += a->size;
		/*
		 * Every rank is done with rbuf before anyone fills it again:
		 * rank 0 posts the second broadcast only once every rank has
		 * taken the first, which each does after its check (one post
		 * waits only for the acks of the one before; rank 0 alone may
		 * copy a small chunk with no post at all).
		 */
		if (!r)
			r = ggroup_bcast(gs, g, 0);
		if (!r)
			r = ggroup_bcast(gs, g, 0);
	}
	bad = gs_sum64(bad);
	if (gs_tid() == 0)
		res->wrong = bad;
	return r;
}

/*
 * Each group of a->group consecutive blocks is one connection (c): its
 * rank 0 connects, fills and checks; all of them copy in the group calls.
 */
GSOCK_KERNEL(echo_client_kernel, gs, arg)
{
	struct echo_client_args *a = (struct echo_client_args *)arg;
	struct echo_client_result *res = &a->result[gs_bid()];
	uint32_t c = gs_bid() / a->group;
	struct ggroup g = { gs_bid() % a->group, a->group,
			    a->group > 1 ? &a->sync[c] : 0 };
	uint8_t *sbuf = a->sbuf + (size_t)c * a->stride;
	uint8_t *rbuf = a->rbuf + (size_t)c * a->stride;
	uint64_t t0;
	long r = 0;
	int fd = -1;

	if (g.rank == 0) {
		fd = gsocket(gs, ((struct sockaddr *)&a->addr)->sa_family,
			     SOCK_STREAM, 0);
		r = fd < 0 ? fd :
			     gconnect(gs, fd, (struct sockaddr *)&a->addr,
				      a->addrlen);
	}
	r = ggroup_bcast(gs, g, r);
	fd = (int)ggroup_bcast(gs, g, fd);
	t0 = gs_now_ns();
	if (r == 0 && a->mode == ECHO_UP)
		r = stream_up(gs, a, fd, sbuf, rbuf, g, res);
	else if (r == 0 && a->mode == ECHO_DOWN)
		r = stream_down(gs, a, fd, rbuf, g, res);
	if (a->mode != ECHO_ROUND_TRIPS && g.rank == 0 && gs_tid() == 0) {
		a->span_ns[2 * c] = t0;
		a->span_ns[2 * c + 1] = gs_now_ns();
	}
	for (uint32_t i = 0;
	     a->mode == ECHO_ROUND_TRIPS && r == 0 && i < a->iters; i++) {
		if (g.rank == 0)
			fill_or_check(a, c, i, 0, res);
		t0 = gs_now_ns();
		r = round_trip(gs, fd, sbuf, rbuf, a->size, g);
		if (g.rank == 0 && gs_tid() == 0)
			a->rtt_ns[(size_t)c * a->iters + i] = gs_now_ns() - t0;
		if (g.rank == 0 && r == 0)
			r = fill_or_check(a, c, i, 1, res);
		r = ggroup_bcast(gs, g, r);
	}
	if (g.rank == 0 && fd >= 0)
		gclose(gs, fd);
	if (gs_tid() == 0)
		res->error = r;
}
