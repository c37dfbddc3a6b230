/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the G servers of infer.h's protocol do the same way, in device
 * code on the server layer: check a request head (gsrv_http_parse and
 * infer_check) and send within a bound that a slow reader cannot
 * stretch; and on the host, the weights' load. infer-gserver (gserver.c,
 * both backends) and infer-gserver-graph (gserver_graph.cu) include it.
 */
#ifndef INFER_GHTTP_CUH
#define INFER_GHTTP_CUH

#include <stdio.h>
#include <sysexits.h>

#include "espcn.h"
#include "gsock_server.cuh"
#include "infer.h"

/* The slowest a reader may take an answer: past it the block moves on. */
#define IG_SEND_RATE_MIN (1u << 20) /* bytes a second */

/*
 * Send n bytes of answer within timeout_us plus n at IG_SEND_RATE_MIN,
 * so that a reader that takes a byte now and then cannot hold the
 * block's other connections for long: n or a negative errno
 * (-ETIMEDOUT: too slow).
 */
GSOCK_DEVICE long ig_send(struct gsock_dev gs, int fd, long timeout_us,
			  const void *p, uint64_t n)
{
	uint64_t by = (uint64_t)gs_bcast((long)gs_now_ns()) +
		      timeout_us * 1000ull +
		      n * (1000000000ull / IG_SEND_RATE_MIN);

	return gsrv_send_by(gs, fd, p, n, timeout_us, by);
}

/*
 * Thread 0: the head h[0, n) into q, and X-Width and X-Height into *w
 * and *h (0: a PGM body): INFER_OK to take its body, or why not.
 */
GSOCK_DEVICE int ig_check(const char *h, uint32_t n, struct gsrv_http *q,
			  uint32_t *w, uint32_t *ht)
{
	int st = gsrv_http_parse(h, n, q);
	uint32_t wl = 0, hl = 0;
	long wv = gsrv_http_field(h, n, "x-width", &wl);
	long hv = gsrv_http_field(h, n, "x-height", &hl);

	if (st)
		return st == 505 ? INFER_E_VERSION : INFER_E_HEAD;
	*w = wv < 0 ? 0 : infer_dim(h + wv, wl);
	*ht = hv < 0 ? 0 : infer_dim(h + hv, hl);
	if ((wv < 0) != (hv < 0) || (wv >= 0 && (!*w || !*ht)))
		return INFER_E_DIMS;
	return infer_check(h, q->method_len, h + q->target, q->target_len,
			   q->content_length, q->chunked);
}

/*
 * A request's bytes wait (pending: a head begun or a body awaited):
 * since when, in *since (0: none wait). 1 once they have waited past
 * timeout_us (the caller answers 408); else 0, with a wake-up asked for
 * when they will have, since a client gone quiet brings no bytes.
 */
GSOCK_DEVICE int ig_late(struct gsock_dev gs, struct gsrv *s, uint64_t *since,
			 int pending, long timeout_us)
{
	long late = 0, due = 0;

	if (gs_tid() == 0) {
		uint64_t now = gs_now_ns();

		if (!pending)
			*since = 0;
		else if (!*since)
			*since = now;
		late = *since && now - *since > timeout_us * 1000ull;
		due = *since ? (long)(*since + timeout_us * 1000ull + 1) : 0;
	}
	if (gs_bcast(late))
		return 1;
	gsrv_wake_at(gs, s, (uint64_t)gs_bcast(due));
	return 0;
}

/*
 * Host: the weights of -w PATH (NULL: not given) for a server's setup,
 * or NULL with the reason said and *status its exit status.
 */
static inline float *ig_weights(const char *name, const char *path,
				int *status)
{
	char err[256];
	float *p = path ? espcn_weights_load(path, err, sizeof(err)) : NULL;

	if (!p) {
		fprintf(stderr, "%s: %s%s%s\n", name,
			path ? path : "-w WEIGHTS is required",
			path ? ": " : " (infer-ref weights writes one)",
			path ? err : "");
		*status = path ? EX_DATAERR : EX_USAGE;
	}
	return p;
}

#endif
