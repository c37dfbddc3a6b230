/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The echo kernels, written once with g-calls: nvcc builds them for the
 * GPU, the C compiler (kernels_host.c) for the host backend.
 *
 * Server: block 0 opens the listening socket and publishes it; then every
 * block accepts a connection, echoes it until EOF, and accepts the next
 * (or, multiplexing, holds many and serves whichever gpoll finds ready).
 * Client: each block connects, sends patterned data, checks that it comes
 * back byte for byte, and records each round trip's time.
 */
#include "echo.h"

/* How many of the 8 bytes in v (little-endian) differ from the pattern at o. */
GSOCK_DEVICE uint32_t word_wrong(uint64_t v, uint64_t o)
{
	uint32_t bad = 0;

	for (int j = 0; j < 8; j++)
		bad += (uint8_t)(v >> (8 * j)) != stream_byte(o + j);
	return bad;
}

/*
 * This thread's share of the wrong bytes in buf[0, n) (stream offset off):
 * 8-byte loads, four in flight, where buf is 8-aligned (it is: the start of
 * a block's buffer), so that the check keeps up with the stream.
 */
GSOCK_DEVICE uint32_t stream_wrong(const uint8_t *buf, long n, uint64_t off)
{
	const long step = gs_bdim();
	long nw = ((uintptr_t)buf & 7) ? 0 : n / 8;
	const uint64_t *w = (const uint64_t *)buf;
	uint32_t bad = 0;

	for (long i = gs_tid(); i < nw; i += 4 * step) {
		uint64_t v[4];
		int m = 0;

		for (; m < 4 && i + m * step < nw; m++)
			v[m] = w[i + m * step];
		for (int u = 0; u < m; u++)
			bad += word_wrong(v[u],
					  off + 8 * (uint64_t)(i + u * step));
	}
	for (long k = nw * 8 + gs_tid(); k < n; k += step)
		bad += buf[k] != stream_byte(off + (uint64_t)k);
	return bad;
}

/*
 * -M sink: read to the end, checking every byte against the stream
 * pattern, then answer (stream.h): how many bytes came and how many of
 * them were wrong. Returns the count or an error.
 */
GSOCK_DEVICE long sink(struct gsock_dev gs, int fd, uint8_t *buf,
		       uint32_t bufsize)
{
	GS_SHARED uint32_t wrong;
	uint64_t off = 0;
	uint32_t bad = 0;
	long n;

	if (gs_tid() == 0)
		wrong = 0;
	gs_sync();
	while ((n = grecv(gs, fd, buf, bufsize, 0)) > 0) {
		bad += stream_wrong(buf, n, off);
		off += (uint64_t)n;
		gs_sync(); /* all threads are done with buf */
	}
	if (n < 0)
		return n;
	if (bad)
		gs_fetch_add32(&wrong, bad);
	gs_sync();
	if (gs_tid() == 0)
		stream_answer_put(buf, off, wrong);
	gs_sync();
	n = gsend(gs, fd, buf, STREAM_ANSWER, 0);
	return n < 0 ? n : (long)off;
}

/*
 * -M source: send the stream pattern, bufsize bytes a call, until the
 * peer goes (its reset or close ends it: not an error). buf holds
 * bufsize + STREAM_PERIOD bytes. Returns the bytes sent.
 */
GSOCK_DEVICE long source(struct gsock_dev gs, int fd, uint8_t *buf,
			 uint32_t bufsize)
{
	uint64_t off = 0;

	for (uint64_t k = gs_tid(); k < (uint64_t)bufsize + STREAM_PERIOD;
	     k += gs_bdim())
		buf[k] = stream_byte(k);
	gs_sync();
	for (;;) {
		long n = gsend(gs, fd, buf + off % STREAM_PERIOD, bufsize, 0);

		if (n == -ECANCELED || n == -ECONNABORTED)
			return n;
		if (n <= 0)
			return (long)off;
		off += (uint64_t)n;
	}
}

GSOCK_KERNEL(echo_server_kernel, gs, arg)
{
	struct echo_server_args *a = (struct echo_server_args *)arg;
	struct echo_block_stats *st = &a->stats[gs_bid()];
	uint8_t *buf = a->bufs + (size_t)gs_bid() * a->stride;
	long lfd = app_get_listener(gs, &a->listen);

	if (lfd < 0)
		return;
	for (;;) {
		int c = gaccept(gs, (int)lfd, 0, 0);
		long n;

		if (c == -ECANCELED || c == -ECONNABORTED || c == -EBADF)
			break;
		if (c < 0)
			continue;
		if (a->mode != ECHO_ECHO) {
			n = a->mode == ECHO_SINK ?
				    sink(gs, c, buf, a->bufsize) :
				    source(gs, c, buf, a->bufsize);
			if (n > 0 && gs_tid() == 0)
				st->bytes += (uint64_t)n;
		}
		while (a->mode == ECHO_ECHO) {
			n = grecv(gs, c, buf, a->bufsize, 0);
			if (n <= 0)
				break;
			n = gsend(gs, c, buf, (size_t)n, 0);
			if (n < 0)
				break;
			if (gs_tid() == 0)
				st->bytes += (uint64_t)n;
		}
		if (gs_tid() == 0) {
			st->conns++;
			if (n < 0)
				st->last_error = n;
		}
		gclose(gs, c);
		if (n == -ECANCELED || n == -ECONNABORTED)
			break;
	}
}

/*
 * The multiplexing server: each block holds up to a->per_block
 * connections at once, waits on all of them and the listener with gpoll,
 * echoes what is ready and accepts what waits.
 */
GSOCK_KERNEL(echo_mux_kernel, gs, arg)
{
	struct echo_server_args *a = (struct echo_server_args *)arg;
	struct echo_block_stats *st = &a->stats[gs_bid()];
	uint8_t *buf = a->bufs + (size_t)gs_bid() * a->stride;
	struct gpollfd *p = a->pfds + (size_t)gs_bid() * (a->per_block + 1);
	GS_SHARED int n; /* connections held: p[0, n) */
	long lfd = app_get_listener(gs, &a->listen), r = 0;

	if (lfd < 0)
		return;
	if (gs_tid() == 0)
		n = 0;
	gs_sync();
	for (;;) {
		int room = n < (int)a->per_block;
		short lrev;

		if (gs_tid() == 0 && room)
			p[n] = (struct gpollfd){ (int)lfd, POLLIN, 0 };
		gs_sync();
		r = gpoll(gs, p, n + room, -1);
		if (r < 0)
			break;
		lrev = room ? p[n].revents : 0;
		for (int k = 0; k < n; k++) {
			long m;

			if (!p[k].revents)
				continue;
			m = grecv(gs, p[k].fd, buf, a->bufsize, MSG_DONTWAIT);
			if (m == -EAGAIN)
				continue;
			if (m > 0)
				m = gsend(gs, p[k].fd, buf, (size_t)m, 0);
			if (m > 0) {
				if (gs_tid() == 0)
					st->bytes += (uint64_t)m;
				continue;
			}
			r = m;
			if (r == -ECANCELED || r == -ECONNABORTED)
				goto out;
			gclose(gs, p[k].fd);
			if (gs_tid() == 0) {
				st->conns++;
				if (m < 0)
					st->last_error = m;
				p[k] = p[n - 1];
				n--;
			}
			gs_sync();
			k--; /* the one moved into k */
		}
		/*
		 * One connection a turn: every block polls the listener, so a
		 * burst of connections spreads over the blocks instead of
		 * filling the first ones (16 blocks held 256 connections and
		 * served each in turn, the rest idle).
		 */
		if (lrev && n < (int)a->per_block) {
			int c = gaccept_nb(gs, (int)lfd, 0, 0);

			if (c == -ECANCELED || c == -ECONNABORTED ||
			    c == -EBADF)
				goto out;
			if (gs_tid() == 0 && c >= 0)
				p[n++] = (struct gpollfd){ c, POLLIN, 0 };
			gs_sync();
		}
	}
out:
	for (int k = 0; k < n; k++)
		gclose(gs, p[k].fd);
}

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
