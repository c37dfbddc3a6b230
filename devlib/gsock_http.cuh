/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server layer's HTTP/1.x request heads. A g-call server takes a
 * head with gsrv_recv_until(..., "\r\n\r\n", 4, ...), and
 * gsrv_http_request() checks it as RFC 9112 asks of a server and says
 * what serving it needs: the method, the target, the body's length,
 * whether the connection stays open, whether the client waits for
 * "100 Continue"; gsrv_http_field() finds any other field. The body then
 * comes with gsrv_recv_bytes(). Heads are parsed by one thread: a head
 * is short, and its fields depend on the ones before. gsock-server(3) is
 * the manual.
 */
#ifndef GSOCK_HTTP_CUH
#define GSOCK_HTTP_CUH

#include "gsock.cuh" /* gs_bcast */

/* A request head as gsrv_http_request() found it (offsets into the head). */
struct gsrv_http {
	uint32_t method_len; /* the method: the head's first bytes */
	uint32_t target, target_len; /* the request target */
	uint32_t minor; /* HTTP/1.minor */
	int64_t content_length; /* the body's length; -1: none given */
	uint32_t keep_alive; /* the connection may stay open after the answer */
	uint32_t expect_continue; /* "Expect: 100-continue": answer 100 first */
	uint32_t chunked; /* Transfer-Encoding given: its body is not framed here */
	uint32_t close; /* "Connection: close" came: keep_alive stays 0 */
};

/* The longest Content-Length taken as a number; longer ones read as this. */
#define GSRV_HTTP_LENGTH_MAX (1ll << 50)

GSOCK_HD int gs_http_lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* A token character (RFC 9110 5.6.2): field names, methods. */
GSOCK_HD int gs_http_tchar(int c)
{
	const char *more = "!#$%&'*+-.^_`|~";

	if ((c >= '0' && c <= '9') || (gs_http_lower(c) >= 'a' &&
				       gs_http_lower(c) <= 'z'))
		return 1;
	while (*more && *more != c)
		more++;
	return c && *more == c;
}

/* Whether a[0, n) is the lowercase word w, ignoring case. */
GSOCK_HD int gs_http_is(const char *a, uint32_t n, const char *w)
{
	uint32_t i = 0;

	while (i < n && w[i] && gs_http_lower((uint8_t)a[i]) == w[i])
		i++;
	return i == n && !w[i];
}

/* Whether the comma-separated list a[0, n) holds the token w. */
GSOCK_HD int gs_http_has(const char *a, uint32_t n, const char *w)
{
	uint32_t i = 0;

	while (i < n) {
		uint32_t s, e;

		while (i < n && (a[i] == ' ' || a[i] == '\t' || a[i] == ','))
			i++;
		s = i;
		while (i < n && a[i] != ',')
			i++;
		e = i;
		while (e > s && (a[e - 1] == ' ' || a[e - 1] == '\t'))
			e--;
		if (e > s && gs_http_is(a + s, e - s, w))
			return 1;
	}
	return 0;
}

/* Apply one field to q: 0, or 400 when its value is unusable. */
GSOCK_HD int gs_http_use(const char *h, uint32_t at, uint32_t nlen,
			 uint32_t vs, uint32_t vlen, struct gsrv_http *q)
{
	const char *v = h + vs;
	int64_t len = 0;

	if (gs_http_is(h + at, nlen, "content-length")) {
		for (uint32_t k = 0; k < vlen; k++) {
			if (v[k] < '0' || v[k] > '9')
				return 400;
			if (len < GSRV_HTTP_LENGTH_MAX)
				len = len * 10 + (v[k] - '0');
		}
		if (!vlen || (q->content_length >= 0 && q->content_length != len))
			return 400;
		q->content_length = len > GSRV_HTTP_LENGTH_MAX ?
					    GSRV_HTTP_LENGTH_MAX :
					    len;
	} else if (gs_http_is(h + at, nlen, "connection")) {
		if (gs_http_has(v, vlen, "close"))
			q->close = 1;
		else if (gs_http_has(v, vlen, "keep-alive"))
			q->keep_alive = 1;
		q->keep_alive &= !q->close; /* close wins, before or after */
	} else if (gs_http_is(h + at, nlen, "expect")) {
		q->expect_continue = gs_http_is(v, vlen, "100-continue");
	} else if (gs_http_is(h + at, nlen, "transfer-encoding")) {
		q->chunked = 1;
	}
	return 0;
}

/*
 * Walk the field lines of head h[0, n) from i: with name, stop at the
 * first field so named (lowercase): its value's offset, optional
 * whitespace trimmed, and its length at *len; with q, apply each field
 * to q. -1 at the blank line that ends the fields; -2 at a line that
 * is not a field (a folded line, a space before ':', a control byte), a
 * value q cannot take, or a head that ends without its blank line.
 */
GSOCK_HD long gs_http_fields(const char *h, uint32_t n, uint32_t i,
			     const char *name, uint32_t *len,
			     struct gsrv_http *q)
{
	while (i + 1 < n && !(h[i] == '\r' && h[i + 1] == '\n')) {
		uint32_t at = i, ne, vs, ve;

		while (i < n && gs_http_tchar((uint8_t)h[i]))
			i++;
		if (i == at || i >= n || h[i] != ':')
			return -2;
		ne = i++;
		while (i < n && (h[i] == ' ' || h[i] == '\t'))
			i++;
		vs = i;
		while (i < n && h[i] != '\r' && (uint8_t)h[i] != 127 &&
		       ((uint8_t)h[i] >= ' ' || h[i] == '\t'))
			i++;
		if (i + 1 >= n || h[i] != '\r' || h[i + 1] != '\n')
			return -2;
		for (ve = i; ve > vs && (h[ve - 1] == ' ' || h[ve - 1] == '\t');)
			ve--;
		if (name && gs_http_is(h + at, ne - at, name)) {
			*len = ve - vs;
			return vs;
		}
		if (q && gs_http_use(h, at, ne - at, vs, ve - vs, q))
			return -2;
		i += 2;
	}
	return i + 1 < n ? -1 : -2; /* the blank line, or a head cut short */
}

/* Where the field lines of a head start: after the request line's CRLF. */
GSOCK_HD uint32_t gs_http_fields_at(const char *h, uint32_t n)
{
	uint32_t i = 0;

	while (i + 1 < n && !(h[i] == '\r' && h[i + 1] == '\n'))
		i++;
	return i + 2;
}

/*
 * Any thread: the value of the first field named name (lowercase) in the
 * head h[0, n): its offset in h, and its length at *len; -1 when absent.
 */
GSOCK_HD long gsrv_http_field(const char *h, uint32_t n, const char *name,
			      uint32_t *len)
{
	long r = gs_http_fields(h, n, gs_http_fields_at(h, n), name, len,
				NULL);

	return r < 0 ? -1 : r;
}

/*
 * One thread: parse the request head h[0, n) (request line, fields, the
 * blank line) into q: 0, or the status that refuses it: 400 (a malformed
 * request line or field, a bad or contradictory Content-Length), 505 (not
 * HTTP/1.x).
 */
GSOCK_HD int gsrv_http_parse(const char *h, uint32_t n, struct gsrv_http *q)
{
	uint32_t i = 0, len;

	*q = (struct gsrv_http){ 0 };
	q->content_length = -1;
	while (i < n && gs_http_tchar((uint8_t)h[i]))
		i++;
	if (i == 0 || i >= n || h[i] != ' ')
		return 400;
	q->method_len = i++;
	q->target = i;
	while (i < n && (uint8_t)h[i] > ' ' && (uint8_t)h[i] != 127)
		i++;
	if (i == q->target || i + 10 > n || h[i] != ' ')
		return 400;
	q->target_len = i++ - q->target;
	if (h[i] != 'H' || h[i + 1] != 'T' || h[i + 2] != 'T' ||
	    h[i + 3] != 'P' || h[i + 4] != '/' || h[i + 6] != '.' ||
	    h[i + 5] < '0' || h[i + 5] > '9' || h[i + 7] < '0' ||
	    h[i + 7] > '9' || h[i + 8] != '\r' || h[i + 9] != '\n')
		return 400;
	if (h[i + 5] != '1')
		return 505;
	q->minor = (uint32_t)(h[i + 7] - '0');
	q->keep_alive = q->minor >= 1;
	i += 10;
	if (gs_http_fields(h, n, i, NULL, &len, q) != -1 ||
	    (q->chunked && q->content_length >= 0))
		return 400; /* both framings: which one the sender meant is unknown */
	return 0;
}

/*
 * The block: gsrv_http_parse by thread 0 into q (memory the block
 * reaches), its result for every thread, q visible to all.
 */
GSOCK_DEVICE int gsrv_http_request(struct gsock_dev gs, const char *h,
				   uint32_t n, struct gsrv_http *q)
{
	long r = 0;

	(void)gs;
	gs_sync();
	if (gs_tid() == 0)
		r = gsrv_http_parse(h, n, q);
	r = gs_bcast(r);
	return (int)r;
}

#endif
