/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the G servers of infer.h's protocol do the same way, in device
 * code on the server layer: check a request head (gsrv_http_parse and
 * infer_check). infer-gserver (gserver.c, both backends) and
 * infer-gserver-graph (gserver_graph.cu) include it.
 */
#ifndef INFER_GHTTP_CUH
#define INFER_GHTTP_CUH

#include "espcn.h"
#include "gsock_server.cuh"
#include "infer.h"

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

#endif
