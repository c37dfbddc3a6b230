/* SPDX-License-Identifier: Apache-2.0 */
/* gcall-probe's kernel: one block, results recorded by name. */
#include "gsock_server.cuh"
#include "probe.h"

GSOCK_DEVICE void put(struct probe_args *a, const char *name, int64_t v)
{
	if (gs_tid() == 0 && a->n < PROBE_MAX) {
		uint32_t i = a->n;

		for (int k = 0; k < 23 && name[k]; k++)
			a->name[i][k] = name[k];
		a->value[i] = v;
		gs_st32(&a->n, i + 1);
	}
	gs_sync();
}

/* Connect, then report every grecv until EOF or an error. */
GSOCK_DEVICE void probe_recv(struct gsock_dev gs, struct probe_args *a)
{
	int fd = gsocket(gs, ((struct sockaddr *)&a->addr)->sa_family,
			 SOCK_STREAM, 0);
	long r = gconnect(gs, fd, (struct sockaddr *)&a->addr, a->addrlen);
	uint64_t total = 0, wrong = 0;

	put(a, "connect", r);
	if (r < 0)
		return;
	do {
		r = grecv(gs, fd, a->buf, 4096, 0);
		for (long k = gs_tid(); k < r; k += gs_bdim())
			wrong += a->buf[k] != (uint8_t)((total + k) * 7 % 251);
		if (r > 0)
			total += (uint64_t)r;
	} while (r > 0);
	put(a, "bytes", (int64_t)total);
	/* Against a probe that sends (send mode): its pattern, checked. */
	put(a, "pattern-errors", (int64_t)gs_sum64(wrong));
	put(a, "end", r);
	/* Give a reset time to arrive before the send that should see it. */
	r = gsend(gs, fd, a->buf, 1, 0);
	put(a, "send", r);
	put(a, "close", gclose(gs, fd));
	put(a, "after-close", grecv(gs, fd, a->buf, 1, 0));
}

/*
 * Serve one connection: send count bytes of a pattern the receiver can
 * check (byte k is k * 7 % 251), then close; report how it went.
 */
GSOCK_DEVICE void probe_send(struct gsock_dev gs, struct probe_args *a)
{
	int lfd = gsocket(gs, ((struct sockaddr *)&a->addr)->sa_family,
			  SOCK_STREAM, 0), fd;
	uint64_t sent = 0;
	long r;

	r = gbind(gs, lfd, (struct sockaddr *)&a->addr, a->addrlen);
	if (r == 0)
		r = glisten(gs, lfd, 4);
	put(a, "listen", r);
	if (r < 0)
		return;
	fd = gaccept(gs, lfd, 0, 0);
	put(a, "accept", fd < 0 ? fd : 0);
	if (fd < 0)
		return;
	while (sent < a->count) {
		uint64_t n = a->count - sent < 4096 ? a->count - sent : 4096;

		for (unsigned k = gs_tid(); k < n; k += gs_bdim())
			a->buf[k] = (uint8_t)((sent + k) * 7 % 251);
		gs_sync();
		r = gsend(gs, fd, a->buf, n, 0);
		if (r <= 0)
			break;
		sent += (uint64_t)r;
	}
	put(a, "sent", (int64_t)sent);
	put(a, "send-end", sent == a->count ? 0 : r);
	put(a, "close", gclose(gs, fd));
	gclose(gs, lfd);
}

/*
 * gpoll on the accepted end s of a connection to itself (direct where
 * gsockd allows): idle it times out; a byte sent on c makes it POLLIN;
 * after c shuts down for writing it says so (POLLIN and POLLHUP).
 */
GSOCK_DEVICE void probe_self_poll(struct gsock_dev gs, struct probe_args *a,
				  int c, int s, uint8_t *in)
{
	GS_SHARED struct gpollfd pfd;
	uint64_t t0;
	long r;

	if (gs_tid() == 0) {
		pfd.fd = s;
		pfd.events = POLLIN;
		pfd.revents = 0;
	}
	gs_sync();
	t0 = gs_now_ns();
	r = gpoll(gs, &pfd, 1, 20000);
	put(a, "self-poll-idle", r);
	put(a, "self-poll-idle-ms", (int64_t)((gs_now_ns() - t0) / 1000000));
	r = gsend(gs, c, in, 1, 0);
	r = r == 1 ? gpoll(gs, &pfd, 1, 1000000) : r;
	put(a, "self-poll-data", r == 1 ? pfd.revents : r);
	r = r == 1 ? grecv(gs, s, in, 1, 0) : r;
	r = r == 1 ? gshutdown(gs, c, SHUT_WR) : r;
	/* the byte gone, the end of the stream alone makes s readable */
	r = r == 0 ? gpoll(gs, &pfd, 1, 1000000) : r;
	put(a, "self-poll-eof", r == 1 ? pfd.revents & (POLLIN | POLLHUP) : r);
}

/*
 * One application connected to its own listener: 300 rounds of 2000
 * bytes one way and 100 back, each checked (the two ways' rings must be
 * two: the application is both their sender and their receiver).
 */
GSOCK_DEVICE void probe_self(struct gsock_dev gs, struct probe_args *a)
{
	struct sockaddr_storage at;
	socklen_t len = sizeof(at);
	uint8_t *out = a->buf, *in = a->buf + 2048;
	int lfd = gsocket(gs, ((struct sockaddr *)&a->addr)->sa_family,
			  SOCK_STREAM, 0), c, s;
	GS_SHARED unsigned long long bad;
	int64_t rounds = 0;
	long r;

	if (gs_tid() == 0)
		bad = 0;
	r = gbind(gs, lfd, (struct sockaddr *)&a->addr, a->addrlen);
	if (r == 0)
		r = glisten(gs, lfd, 4);
	if (r == 0)
		r = ggetsockname(gs, lfd, (struct sockaddr *)&at, &len);
	put(a, "listen", r);
	if (r < 0)
		return;
	c = gsocket(gs, at.ss_family, SOCK_STREAM, 0);
	r = gconnect(gs, c, (struct sockaddr *)&at, len);
	put(a, "connect", r);
	s = r < 0 ? -1 : gaccept(gs, lfd, 0, 0);
	put(a, "accept", s < 0 ? s : 0);
	for (int i = 0; s >= 0 && i < 300; i++) {
		for (unsigned k = gs_tid(); k < 2000; k += gs_bdim())
			out[k] = (uint8_t)(k * 7 + i);
		gs_sync();
		r = gsend(gs, c, out, 2000, 0);
		if (r != 2000 || (r = gsrv_recv_all(gs, s, in, 2000, -1)) != 2000)
			break;
		for (unsigned k = gs_tid(); k < 2000; k += gs_bdim())
			if (in[k] != (uint8_t)(k * 7 + i))
				gs_fetch_add64(&bad, 1);
		gs_sync();
		for (unsigned k = gs_tid(); k < 100; k += gs_bdim())
			out[k] = (uint8_t)(k * 13 + i + 1);
		gs_sync();
		r = gsend(gs, s, out, 100, 0);
		if (r != 100 || (r = gsrv_recv_all(gs, c, in, 100, -1)) != 100)
			break;
		for (unsigned k = gs_tid(); k < 100; k += gs_bdim())
			if (in[k] != (uint8_t)(k * 13 + i + 1))
				gs_fetch_add64(&bad, 1);
		gs_sync();
		rounds++;
		r = 0;
	}
	put(a, "self-rounds", rounds);
	put(a, "self-end", r);
	gs_sync();
	put(a, "self-wrong", (int64_t)bad);
	if (s >= 0)
		probe_self_poll(gs, a, c, s, in);
	gclose(gs, c);
	gclose(gs, s);
	gclose(gs, lfd);
}

/* Set a word of the relay's state: thread 0 writes, the block sees it. */
GSOCK_DEVICE void relay_set(uint32_t *p, uint32_t v)
{
	if (gs_tid() == 0)
		*p = v;
	gs_sync();
}

/* Move what conn i has sent on to its peer; read more from it. */
GSOCK_DEVICE int relay_pump(struct gsock_dev gs, struct relay_conn *c,
			    uint8_t *bufs, int i)
{
	struct relay_conn *me = &c[i], *to = &c[me->peer];
	uint8_t *buf = bufs + (size_t)i * RELAY_BUF;
	int moved = 0;
	long r;

	if (me->off < me->len) {
		r = gsend(gs, to->fd, buf + me->off, me->len - me->off,
			  MSG_DONTWAIT);
		if (r > 0) {
			relay_set(&me->off, me->off + (uint32_t)r);
			moved = 1;
		} else if (r != -EAGAIN) { /* the peer is gone: drop the rest */
			relay_set(&me->len, 0);
			relay_set(&me->off, 0);
			relay_set(&me->eof, 1);
			moved = 1;
		}
	}
	if (me->off == me->len && !me->eof) {
		r = grecv(gs, me->fd, buf, RELAY_BUF, MSG_DONTWAIT);
		if (r > 0) {
			relay_set(&me->off, 0);
			relay_set(&me->len, (uint32_t)r);
			moved = 1;
		} else if (r != -EAGAIN) { /* end of stream, or reset */
			relay_set(&me->eof, 1);
			gshutdown(gs, to->fd, SHUT_WR);
			moved = 1;
		}
	}
	return moved;
}

GSOCK_DEVICE void probe_relay(struct gsock_dev gs, struct probe_args *a)
{
	struct relay_conn *c = (struct relay_conn *)a->buf;
	uint8_t *bufs = a->buf + RELAY_CONNS * sizeof(*c);
	GS_SHARED struct gpollfd pfd[RELAY_CONNS + 1];
	int one = 1, waiting = -1, lfd, n;
	long r;

	for (unsigned i = gs_tid(); i < RELAY_CONNS; i += gs_bdim())
		c[i].fd = -1;
	gs_sync();
	lfd = gsocket(gs, ((struct sockaddr *)&a->addr)->sa_family,
		      SOCK_STREAM, 0);
	r = gsetsockopt(gs, lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (r == 0)
		r = gbind(gs, lfd, (struct sockaddr *)&a->addr, a->addrlen);
	if (r == 0)
		r = glisten(gs, lfd, 128);
	if (r == 0)
		r = gsetsockopt(gs, lfd, GSOCK_SOL, GSOCK_NONBLOCK, &one,
				sizeof(one));
	put(a, "listen", r);
	while (r == 0) {
		int moved = 0, fd = gaccept(gs, lfd, 0, 0);

		if (fd == -ECANCELED || fd == -ECONNABORTED)
			break;
		if (fd >= 0) {
			int i = 0;

			while (i < RELAY_CONNS && c[i].fd >= 0)
				i++;
			if (i == RELAY_CONNS) {
				gclose(gs, fd);
				continue;
			}
			relay_set(&c[i].len, 0);
			relay_set(&c[i].off, 0);
			relay_set(&c[i].eof, 0);
			relay_set((uint32_t *)&c[i].peer, (uint32_t)waiting);
			relay_set((uint32_t *)&c[i].fd, (uint32_t)fd);
			if (waiting >= 0) {
				relay_set((uint32_t *)&c[waiting].peer,
					  (uint32_t)i);
				waiting = -1;
			} else {
				waiting = i;
			}
			moved = 1;
		}
		for (int i = 0; i < RELAY_CONNS; i++)
			if (c[i].fd >= 0 && c[i].peer >= 0)
				moved |= relay_pump(gs, c, bufs, i);
		for (int i = 0; i < RELAY_CONNS; i++) {
			int p = c[i].peer;

			if (c[i].fd < 0 || p < i || !c[i].eof || !c[p].eof ||
			    c[i].off < c[i].len || c[p].off < c[p].len)
				continue;
			gclose(gs, c[i].fd);
			gclose(gs, c[p].fd);
			relay_set((uint32_t *)&c[i].fd, (uint32_t)-1);
			relay_set((uint32_t *)&c[p].fd, (uint32_t)-1);
			moved = 1;
		}
		if (moved)
			continue;
		/* Nothing moved: sleep until a descriptor or the listener is ready. */
		n = 0;
		for (int i = 0; i < RELAY_CONNS; i++) {
			struct relay_conn *p = &c[i];
			short ev = 0;

			if (p->fd < 0 || p->peer < 0)
				continue;
			if (p->off == p->len && !p->eof)
				ev |= POLLIN;
			if (c[p->peer].off < c[p->peer].len)
				ev |= POLLOUT;
			if (ev && gs_tid() == 0) {
				pfd[n].fd = p->fd;
				pfd[n].events = ev;
			}
			n += ev != 0;
		}
		if (gs_tid() == 0) {
			pfd[n].fd = lfd;
			pfd[n].events = POLLIN;
		}
		gs_sync();
		r = gpoll(gs, pfd, n + 1, 100000);
		if (r == -ECANCELED || r == -ECONNABORTED)
			break;
		r = 0;
	}
	for (int i = 0; i < RELAY_CONNS; i++)
		if (c[i].fd >= 0)
			gclose(gs, c[i].fd);
	gclose(gs, lfd);
}

GSOCK_DEVICE void probe_errors(struct gsock_dev gs, struct probe_args *a)
{
	struct sockaddr_in priv;
	GS_SHARED struct gpollfd pfd;
	int one = 1, fd, lfd;
	uint64_t t0;
	long r;

	put(a, "send-badfd", gsend(gs, 9999, a->buf, 1, 0));
	put(a, "recv-negfd", grecv(gs, -1, a->buf, 1, 0));
	put(a, "socket-family", gsocket(gs, AF_PACKET, SOCK_STREAM, 0));
	put(a, "socket-dgram", gsocket(gs, AF_INET, SOCK_DGRAM, 0));
	fd = gsocket(gs, AF_INET, SOCK_STREAM, 0);
	put(a, "socket", fd >= 0 ? 0 : fd);
	put(a, "recv-unconnected", grecv(gs, fd, a->buf, 1, 0));
	put(a, "send-unconnected", gsend(gs, fd, a->buf, 1, 0));
	put(a, "sockopt-unknown",
	    gsetsockopt(gs, fd, SOL_SOCKET, SO_DEBUG, &one, sizeof(one)));
	put(a, "sockopt-nodelay",
	    gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	put(a, "shutdown-badhow", gshutdown(gs, fd, 7));
	memset(&priv, 0, sizeof(priv));
	priv.sin_family = AF_INET;
	priv.sin_port = gs_htons(1);
	priv.sin_addr.s_addr = gs_htonl(INADDR_LOOPBACK);
	put(a, "bind-privileged",
	    gbind(gs, fd, (struct sockaddr *)&priv, sizeof(priv)));
	put(a, "bind-short", gbind(gs, fd, (struct sockaddr *)&priv, 4));
	put(a, "connect-refused",
	    gconnect(gs, fd, (struct sockaddr *)&a->addr, a->addrlen));
	gclose(gs, fd);
	lfd = gsocket(gs, AF_INET, SOCK_STREAM, 0);
	priv.sin_port = 0;
	gbind(gs, lfd, (struct sockaddr *)&priv, sizeof(priv));
	put(a, "listen", glisten(gs, lfd, 8));
	put(a, "accept-nb", gaccept_nb(gs, lfd, 0, 0));
	if (gs_tid() == 0) {
		pfd.fd = lfd;
		pfd.events = POLLIN;
	}
	gs_sync();
	t0 = gs_now_ns();
	r = gpoll(gs, &pfd, 1, 20000);
	put(a, "poll-timeout", r);
	put(a, "poll-waited-ms", (int64_t)((gs_now_ns() - t0) / 1000000));
	put(a, "close", gclose(gs, lfd));
	put(a, "close-again", gclose(gs, lfd));
}

/*
 * gs_copy and gs_copy_far between every pair of alignments 0..15 at
 * lengths around the 16-byte word and a round of the copy's loads, and
 * over several rounds: counts wrong bytes inside the destination and
 * bytes written outside it (as far as a round of every thread's loads
 * reaches past its end), over the whole block.
 */
GSOCK_DEVICE void probe_copy(struct probe_args *a)
{
	static const uint32_t lens[] = { 0,    1,    15,   16,	  17,
					 31,   33,   64,   100,	  255,
					 1000, 1999, 4097, 16411, 40000 };
	GS_SHARED unsigned long long bad;
	uint8_t *src = a->buf, *dst = a->buf + COPY_HALF;
	unsigned tid = gs_tid(), nt = gs_bdim();
	int64_t cases = 0;

	if (tid == 0)
		bad = 0;
	for (unsigned k = tid; k < COPY_HALF; k += nt)
		src[k] = (uint8_t)(k * 7 + 3);
	gs_sync();
	for (unsigned c = 0; c < 2 * 16 * 16; c++)
		for (unsigned li = 0; li < sizeof(lens) / sizeof(lens[0]);
		     li++) {
			unsigned far = c >> 8, so = (c >> 4) & 15,
				 dof = c & 15;
			uint32_t len = lens[li];
			uint64_t mine = 0, end = dof + len + 128ull * nt;

			if (end > COPY_HALF)
				end = COPY_HALF;
			for (unsigned k = tid; k < end; k += nt)
				dst[k] = 0xee;
			gs_sync();
			if (far)
				gs_copy_far(dst + dof, src + so, len);
			else
				gs_copy(dst + dof, src + so, len);
			gs_sync();
			for (unsigned k = tid; k < end; k += nt) {
				int in = k >= dof && k < dof + len;

				mine += dst[k] !=
					(in ? src[so + k - dof] : 0xee);
			}
			if (mine)
				gs_fetch_add64(&bad, mine);
			cases++;
			gs_sync();
		}
	put(a, "copy-cases", cases);
	put(a, "copy-errors", (int64_t)bad);
}

/*
 * The direct path's lane (gsock_arena.h) against a connection made up in
 * a->buf whose ring holds zeros, so the pattern that arrives came from
 * the lane, even where the tail already shows the bytes: copies of every
 * length class at odd buffer offsets are taken whole; a copy at another
 * position, a torn one, one past the bound, one of length 0 and a short
 * buffer are handled as gsock_arena.h says; the tag's wrap and every
 * 65536th copy write every unit; a tail that goes back is EIO; EOF still
 * ends a wait; with the tail's copy in our memory, a waiting call's turns
 * take a tail the lane covered, see ring bytes past it, a tail that goes
 * back and EOF. Every failed check adds to lane-errors.
 */
GSOCK_DEVICE void probe_lane(struct gsock_dev gs, struct probe_args *a)
{
	static const uint32_t lens[] = { 1,  2,	 3,   4,   5,	63,
					 64, 65, 127, 200, 247, GS_LANE_MAX };
	uint8_t *m = a->buf;
	struct gs_sock *s = (struct gs_sock *)m;
	struct gs_lsock *ls = (struct gs_lsock *)(m + 256);
	uint64_t *lane = (uint64_t *)(m + 1024);
	uint64_t *ctr = (uint64_t *)(m + 1536); /* the tail, the head, its copy */
	uint8_t *out = m + 1792, *src = m + 2560;
	unsigned t = gs_tid(), nt = gs_bdim();
	struct gsock_dev g = gs;
	int64_t bad = 0, cases = 0;
	uint32_t seq = 0;
	uint64_t pos = 0;
	long r;

	g.socks = s;
	g.lsock = ls;
	g.nsocks = 1;
	for (unsigned k = t; k < 2560; k += nt)
		m[k] = 0;
	for (unsigned k = t; k < 256; k += nt)
		src[k] = (uint8_t)(k * 13 + 5);
	gs_sync();
	if (t == 0) {
		s->status = GS_ST_OPEN | GS_ST_CONNECTED;
		ls->flags = GS_LS_OPEN | GS_LS_CONNECTED | GS_LS_DIRECT;
		ls->ring_size = 1024;
		ls->rx_tail_p = &ctr[0];
		ls->rx_head_p = &ctr[1];
		ls->rx_ring = m + 3072; /* never read: no copy takes the ring */
		ls->rx_lane = lane;
	}
	gs_sync();
	put(a, "lane-rx", gs_bdim() >= GS_LANE_W);
	if (gs_bdim() < GS_LANE_W)
		return;
	/* Every length, at buffer offsets 0, 1 and 3. */
	for (unsigned li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (unsigned off = 0; off < 4; off += off ? 2 : 1) {
			uint32_t n = lens[li];

			seq = gs_lane_tag(seq);
			gs_lane_put(lane, seq, pos, src + off, n);
			/* at offset 3 the tail is there too: still the lane's */
			if (off == 3 && t == 0)
				gs_st64(&ctr[0], pos + n);
			gs_sync();
			r = gs_rx_lane(g, 0, ls, out + off, 256, 1);
			for (unsigned k = t; k < n; k += nt)
				bad += out[off + k] != src[off + k];
			if (t == 0) {
				bad += r != (long)n;
				bad += ls->rx_head != pos + n;
				/* the head may pass the tail for a moment */
				bad += gs_ld64(&ctr[1]) != pos + n;
				gs_st64(&ctr[0], pos + n); /* the sender's tail */
				bad += gs_rx_refresh_t0(ls) != 0;
			}
			pos += n;
			cases++;
			gs_sync();
		}
	/* A copy of bytes further on, or a torn one: not taken. */
	seq = gs_lane_tag(seq);
	gs_lane_put(lane, seq, pos + 4, src, 8);
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && (r != -EAGAIN || ls->rx_head != pos);
	seq = gs_lane_tag(seq);
	gs_lane_put(lane, seq, pos, src, 40);
	gs_sync();
	if (t == 0)
		gs_st_unit(&lane[7], (uint64_t)(seq - 1) << 32);
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && (r != -EAGAIN || ls->rx_head != pos);
	/* Past the bound (half a ring ahead of the tail), or of length 0. */
	if (t == 0)
		ls->ring_size = 64;
	seq = gs_lane_tag(seq);
	gs_lane_put(lane, seq, pos, src, 40);
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && (r != -EAGAIN || ls->rx_head != pos);
	if (t == 0)
		ls->ring_size = 1024;
	seq = gs_lane_tag(seq);
	gs_lane_put(lane, seq, pos, src, 0);
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && r != -EAGAIN;
	/* A short buffer takes its part; the rest comes through the ring. */
	seq = gs_lane_tag(seq);
	gs_lane_put(lane, seq, pos, src, 100);
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 10, 1);
	bad += t == 0 && (r != 10 || ls->rx_head != pos + 10);
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && r != -EAGAIN;
	if (t == 0)
		gs_st64(&ctr[0], pos + 100);
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	if (t == 0) {
		bad += r != GS_RX_NONE;
		bad += gs_rx_wait_t0(g, 0, ls, 1) != 90;
		bad += gs_rx_consume_t0(g, 0, ls, 90, 90) != 0;
		bad += gs_ld64(&ctr[1]) != pos + 100;
	}
	pos += 100;
	cases += 4;
	gs_sync();
	/* The tag's wrap (tag 1 again) and tag 65537: every unit written. */
	seq = gs_lane_tag(0xffffffffu);
	gs_lane_put(lane, seq, pos, src, 12);
	gs_sync();
	for (unsigned u = t; u < GS_LANE_UNITS; u += nt)
		bad += (uint32_t)(gs_ld_unit(&lane[u]) >> 32) != 1;
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && r != 12;
	if (t == 0)
		gs_st64(&ctr[0], pos + 12);
	pos += 12;
	seq = gs_lane_tag(65536);
	gs_lane_put(lane, seq, pos, src, 12);
	gs_sync();
	for (unsigned u = t; u < GS_LANE_UNITS; u += nt)
		bad += (uint32_t)(gs_ld_unit(&lane[u]) >> 32) != 65537;
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && r != 12;
	if (t == 0)
		gs_st64(&ctr[0], pos + 12);
	pos += 12;
	cases += 2;
	gs_sync();
	/*
	 * With the tail's copy in our memory (rx_tail_m, sgen: as between
	 * two GPUs) and calls that wait: a tail that moved over bytes the
	 * lane brought is taken as seen; one past the head is ring bytes;
	 * one that goes back is EIO; a copy of another use of the segment
	 * is no tail, and EOF still ends the wait.
	 */
	{
		uint64_t sg = (uint64_t)5 << GS_DCTR_BITS;

		if (t == 0) {
			ls->sgen = sg;
			gs_st64(&ctr[2], sg | (pos & GS_DCTR_MASK));
			ls->rx_tail_m = &ctr[2];
		}
		seq = gs_lane_tag(seq);
		gs_lane_put(lane, seq, pos, src, 20);
		gs_sync();
		r = gs_rx_lane(g, 0, ls, out, 256, 0);
		for (unsigned k = t; k < 20; k += nt)
			bad += out[k] != src[k];
		bad += t == 0 && r != 20;
		if (t == 0) /* the copy's tail, then the next copy */
			gs_st64(&ctr[2], sg | ((pos + 20) & GS_DCTR_MASK));
		pos += 20;
		seq = gs_lane_tag(seq);
		gs_lane_put(lane, seq, pos, src + 1, 30);
		gs_sync();
		r = gs_rx_lane(g, 0, ls, out, 256, 0);
		for (unsigned k = t; k < 30; k += nt)
			bad += out[k] != src[1 + k];
		bad += t == 0 && (r != 30 || ls->rx_tail_seen != pos ||
				  ls->rx_head != pos + 30);
		if (t == 0)
			gs_st64(&ctr[2], sg | ((pos + 30) & GS_DCTR_MASK));
		pos += 30;
		gs_sync();
		/* 8 bytes in the ring alone: the lane's copy is an old one */
		if (t == 0)
			gs_st64(&ctr[2], sg | ((pos + 8) & GS_DCTR_MASK));
		gs_sync();
		r = gs_rx_lane(g, 0, ls, out, 256, 0);
		if (t == 0) {
			bad += r != GS_RX_NONE || ls->rx_tail_seen != pos + 8;
			bad += gs_rx_wait_t0(g, 0, ls, 1) != 8;
			bad += gs_rx_consume_t0(g, 0, ls, 8, 8) != 0;
		}
		pos += 8;
		gs_sync();
		if (t == 0)
			gs_st64(&ctr[2], sg | ((pos - 1) & GS_DCTR_MASK));
		gs_sync();
		r = gs_rx_lane(g, 0, ls, out, 256, 0);
		bad += t == 0 && r != -EIO;
		if (t == 0) {
			gs_st64(&ctr[2], ((uint64_t)4 << GS_DCTR_BITS) |
						 ((pos + 5) & GS_DCTR_MASK));
			s->status |= GS_ST_RX_EOF;
		}
		gs_sync();
		r = gs_rx_lane(g, 0, ls, out, 256, 0);
		bad += t == 0 && (r != 0 || ls->rx_tail_seen != pos);
		if (t == 0) {
			s->status &= ~GS_ST_RX_EOF;
			ls->rx_tail_m = 0;
			ls->sgen = 0;
			gs_st64(&ctr[0], pos);
		}
		cases += 6;
		gs_sync();
	}
	/* A tail that goes back, then EOF. */
	if (t == 0) {
		bad += gs_rx_refresh_t0(ls) != 0;
		gs_st64(&ctr[0], pos - 1);
	}
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && r != -EIO;
	if (t == 0) {
		gs_st64(&ctr[0], pos);
		s->status |= GS_ST_RX_EOF;
	}
	gs_sync();
	r = gs_rx_lane(g, 0, ls, out, 256, 1);
	bad += t == 0 && r != 0;
	cases += 2;
	put(a, "lane-cases", cases);
	put(a, "lane-errors", (int64_t)gs_sum64((uint64_t)bad));
}

GSOCK_KERNEL(probe_kernel, gs, arg)
{
	struct probe_args *a = (struct probe_args *)arg;

	if (a->mode == PROBE_RECV)
		probe_recv(gs, a);
	else if (a->mode == PROBE_SEND)
		probe_send(gs, a);
	else if (a->mode == PROBE_RELAY)
		probe_relay(gs, a);
	else if (a->mode == PROBE_SELF)
		probe_self(gs, a);
	else if (a->mode == PROBE_COPY)
		probe_copy(a);
	else if (a->mode == PROBE_LANE)
		probe_lane(gs, a);
	else
		probe_errors(gs, a);
	if (gs_tid() == 0)
		gs_st32((uint32_t *)&a->done, 1);
}
