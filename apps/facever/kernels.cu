/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The g-call face verification server G, written once with g-calls: nvcc
 * builds it for the GPU, the C compiler (kernels_host.c) for the host
 * backend. Each block accepts a connection and serves its requests one
 * after another: read the request's header, ask memcached for the claimed
 * person's reference features over the block's own connection, receive
 * the picture and compute its features while the answer travels, read the
 * answer, compare, reply. No CPU code is on this path.
 *
 * Every wait that depends on a peer other than the client's next request
 * is bounded (a->timeout_ms): a stalled client or memcached costs that
 * connection or that answer, never the block.
 */
#include "fv_gpu.h"

/* Thread 0: where the first "\n" of line[0, n) ends, or 0. */
GSOCK_DEVICE uint32_t fv_line_end_t0(const uint8_t *line, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (line[i] == '\n')
			return i + 1;
	return 0;
}

/*
 * Thread 0: what a memcached reply line says: the value's length for
 * "VA <len>\r\n", FV_E_UNKNOWN for "EN\r\n", FV_E_STORE for anything else.
 */
GSOCK_DEVICE long fv_mc_parse_t0(const uint8_t *line, uint32_t len)
{
	long v = 0;
	uint32_t i = 3;

	if (len == 4 && line[0] == 'E' && line[1] == 'N')
		return FV_E_UNKNOWN;
	if (len < 6 || line[0] != 'V' || line[1] != 'A' || line[2] != ' ')
		return FV_E_STORE;
	for (; i < len - 2 && line[i] >= '0' && line[i] <= '9'; i++)
		v = v * 10 + (line[i] - '0');
	if (i == 3 || v > (1 << 20) || line[len - 2] != '\r')
		return FV_E_STORE;
	return v;
}

/* Open the block's memcached connection; the descriptor or FV_E_STORE. */
GSOCK_DEVICE int fv_mc_open(struct gsock_dev gs, struct fv_server_args *a)
{
	int family = ((struct sockaddr *)&a->mc)->sa_family, one = 1;
	int fd = gsocket(gs, family, SOCK_STREAM, 0);

	if (fd < 0)
		return FV_E_STORE;
	if (family != AF_UNIX)
		gsetsockopt(gs, fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof(one));
	if (gconnect(gs, fd, (struct sockaddr *)&a->mc, a->mclen) < 0) {
		gclose(gs, fd);
		return FV_E_STORE;
	}
	return fd;
}

/* Send "mg fv:<id> v" on the open connection fd: 0 or FV_E_STORE. */
GSOCK_DEVICE int fv_mc_ask(struct gsock_dev gs, int fd, uint32_t id,
			   uint8_t *line)
{
	long n = 0;

	if (gs_tid() == 0) {
		line[0] = 'm';
		line[1] = 'g';
		line[2] = ' ';
		n = 3 + fv_key((char *)line + 3, id);
		line[n++] = ' ';
		line[n++] = 'v';
		line[n++] = '\r';
		line[n++] = '\n';
	}
	n = gs_bcast(n);
	return gsend(gs, fd, line, (size_t)n, 0) == n ? 0 : FV_E_STORE;
}

/*
 * The reply to the "mg" asked on fd, its value into dst: 0, FV_E_UNKNOWN,
 * or FV_E_STORE (then the connection is no longer usable).
 */
GSOCK_DEVICE int fv_mc_reply(struct gsock_dev gs, struct fv_server_args *a,
			     int fd, float *dst, uint8_t *line)
{
	uint8_t *value = (uint8_t *)dst;
	long r;
	uint32_t got = 0, end = 0, have;

	while (!end) {
		r = app_recv_timed(gs, fd, line + got, FV_MCBUF - got, 0,
				   a->timeout_ms);
		if (r <= 0)
			return FV_E_STORE;
		got += (uint32_t)r;
		if (gs_tid() == 0)
			end = fv_line_end_t0(line, got);
		end = (uint32_t)gs_bcast(end);
		if (!end && got == FV_MCBUF)
			return FV_E_STORE;
	}
	r = gs_tid() == 0 ? fv_mc_parse_t0(line, end) : 0;
	r = gs_bcast(r);
	if (r == FV_E_UNKNOWN && got != end)
		r = FV_E_STORE; /* bytes after "EN": not the reply we asked for */
	if (r < 0)
		return (int)r;
	if (r != FV_FEAT_BYTES || got - end > FV_FEAT_BYTES + 2)
		return FV_E_STORE;
	have = got - end; /* value bytes (and perhaps "\r\n") already read */
	for (uint32_t k = gs_tid(); k < have && k < FV_FEAT_BYTES;
	     k += gs_bdim())
		value[k] = line[end + k];
	gs_sync();
	if (have < FV_FEAT_BYTES &&
	    app_recv_timed(gs, fd, value + have, FV_FEAT_BYTES - have, 1,
			   a->timeout_ms) != FV_FEAT_BYTES - have)
		return FV_E_STORE;
	have = have > FV_FEAT_BYTES ? have - FV_FEAT_BYTES : 0;
	if (have < 2 && app_recv_timed(gs, fd, line, 2 - have, 1,
				       a->timeout_ms) != 2 - have)
		return FV_E_STORE;
	return 0;
}

/* Close the memcached connection (a reply owed on it, or it failed). */
GSOCK_DEVICE void fv_mc_drop(struct gsock_dev gs, int *mcfd)
{
	if (*mcfd >= 0)
		gclose(gs, *mcfd);
	*mcfd = -1;
}

/*
 * Ask for the reference features of id on *mcfd, connecting when there is
 * no connection (*fresh says so): 0, or FV_E_STORE with no connection
 * left. The request asks before it reads its picture, so that memcached's
 * answer travels while the picture comes in and its features are computed.
 */
GSOCK_DEVICE int fv_ask(struct gsock_dev gs, struct fv_server_args *a,
			int *mcfd, uint32_t id, uint8_t *line, int *fresh)
{
	*fresh = *mcfd < 0;
	if (*mcfd < 0)
		*mcfd = fv_mc_open(gs, a);
	if (*mcfd >= 0 && fv_mc_ask(gs, *mcfd, id, line) == 0)
		return 0;
	fv_mc_drop(gs, mcfd);
	return FV_E_STORE;
}

/*
 * The reference features of id into dst: the reply to what fv_ask asked
 * (asked: what it returned), and once more on a fresh connection when a
 * connection made earlier fails (memcached may have restarted since).
 */
GSOCK_DEVICE int fv_fetch(struct gsock_dev gs, struct fv_server_args *a,
			  int *mcfd, uint32_t id, float *dst, uint8_t *line,
			  int asked, int fresh)
{
	for (;;) {
		int r = asked == 0 ? fv_mc_reply(gs, a, *mcfd, dst, line) :
				     FV_E_STORE;

		if (r != FV_E_STORE)
			return r;
		fv_mc_drop(gs, mcfd);
		if (fresh)
			return FV_E_STORE;
		asked = fv_ask(gs, a, mcfd, id, line, &fresh);
	}
}

/* Answer one request; < 0 when the connection is gone. */
GSOCK_DEVICE long fv_reply(struct gsock_dev gs, int c, struct fv_resp *resp,
			   uint32_t seq, int32_t status, float distance)
{
	if (gs_tid() == 0)
		*resp = (struct fv_resp){ FV_RESP_MAGIC, seq, status,
					  distance };
	gs_sync();
	return gsend(gs, c, resp, sizeof(*resp), 0);
}

/* Serve connection c until it ends; the error that ended it, or 0. */
GSOCK_DEVICE long fv_serve(struct gsock_dev gs, struct fv_server_args *a, int c,
			   int *mcfd)
{
	GS_SHARED uint32_t hist[FV_NFEAT], cellsum[FV_GRID * FV_GRID];
	GS_SHARED float scratch[1024];
	uint32_t b = gs_bid();
	struct fv_block_stats *st = &a->stats[b];
	uint8_t *img = a->imgs + (size_t)b * FV_MAX_PIXELS;
	float *query = a->feats + (size_t)b * 2 * FV_NFEAT;
	float *stored = query + FV_NFEAT;
	uint8_t *io = a->io + (size_t)b * FV_IO_BYTES;
	struct fv_req *req = (struct fv_req *)io;
	struct fv_resp *resp = (struct fv_resp *)(io + 16);
	uint8_t *line = io + 64;

	for (;;) {
		uint32_t w, h, seq;
		int32_t status = 0;
		int asked, fresh;
		float d = 0.0f;
		long n = grecv(gs, c, req, sizeof(*req), 0); /* idle: wait */

		if (n > 0 && n < (long)sizeof(*req)) { /* the rest is owed */
			long more = app_recv_timed(gs, c, (uint8_t *)req + n,
						   sizeof(*req) - (uint64_t)n,
						   1, a->timeout_ms);

			n = more < 0 ? more : n + more;
		}
		if (n != (long)sizeof(*req))
			return n < 0 ? n : 0;
		w = req->w;
		h = req->h;
		seq = req->seq;
		if (req->magic != FV_REQ_MAGIC)
			status = FV_E_PROTO;
		else if (!fv_side_ok(w) || !fv_side_ok(h))
			status = FV_E_SIZE;
		if (status) {
			fv_reply(gs, c, resp, seq, status, 0.0f);
			return status == FV_E_PROTO ? -EPROTO : -EMSGSIZE;
		}
		asked = fv_ask(gs, a, mcfd, req->id, line, &fresh);
		n = app_recv_timed(gs, c, img, (uint64_t)w * h, 1,
				   a->timeout_ms);
		if (n != (long)(w * h)) {
			fv_mc_drop(gs, mcfd); /* the reply to the ask is owed */
			return n < 0 ? n : -EPIPE;
		}
		fv_features(img, w, h, query, hist, cellsum);
		status = fv_fetch(gs, a, mcfd, req->id, stored, line, asked,
				  fresh);
		if (status == 0) {
			d = fv_chi2(query, stored, scratch);
			status = d <= a->threshold ? FV_MATCH : FV_NO_MATCH;
		}
		n = fv_reply(gs, c, resp, seq, status, d);
		if (gs_tid() == 0) {
			st->requests++;
			st->matches += status == FV_MATCH;
			st->errors += status < 0;
		}
		if (n < 0)
			return n;
	}
}

GSOCK_KERNEL_FIT(fv_server_kernel, gs, arg, FV_THREADS, FV_PER_SM)
{
	struct fv_server_args *a = (struct fv_server_args *)arg;
	struct fv_block_stats *st = &a->stats[gs_bid()];
	long lfd = app_get_listener(gs, &a->listen);
	int mcfd = -1;

	if (lfd < 0)
		return;
	for (;;) {
		int c = gaccept(gs, (int)lfd, 0, 0);
		long r;

		if (c == -ECANCELED || c == -ECONNABORTED || c == -EBADF)
			break;
		if (c < 0)
			continue;
		r = fv_serve(gs, a, c, &mcfd);
		gclose(gs, c);
		if (gs_tid() == 0) {
			st->conns++;
			if (r < 0)
				st->last_error = r;
		}
		if (r == -ECANCELED || r == -ECONNABORTED)
			break;
	}
	if (mcfd >= 0)
		gclose(gs, mcfd);
}
