/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ESPCN x3 inference over HTTP/1.1: the protocol every server variant
 * (G, C, P) speaks and infer-client checks, and the parts of it written
 * once for G's blocks and the CPU programs alike (nvcc and the C
 * compiler): the picture in a request's body, the answer's head.
 *
 *   POST /v1/upscale HTTP/1.1
 *   Content-Length: N                  required (no chunked bodies)
 *   X-Width: W, X-Height: H            optional: the body is W x H raw bytes
 *
 *   The body: a binary PGM (P5, maxval 255, '#' comments in the header)
 *   of ESPCN_MIN_SIDE..ESPCN_MAX_SIDE pixels a side, or raw grey bytes.
 *
 *   200  the 3W x 3H picture as a binary PGM ("P5\n3W 3H\n255\n", pixels),
 *        Content-Type: image/x-portable-graymap
 *   400  a malformed request line, field or body; a picture too small
 *   404  another path              405  another method
 *   408  the request took longer than the server's bound to arrive
 *   411  no Content-Length (or a Transfer-Encoding)
 *   413  a body over INFER_BODY_MAX, a picture over ESPCN_MAX_SIDE a side
 *   431  a head over INFER_HEAD_MAX  505  not HTTP/1.x
 *   503  the model could not run (the server stops, its GPU failed)
 *
 * An error's body is one line of text/plain saying why, and it closes
 * the connection. Otherwise HTTP/1.1 connections stay open unless the
 * request says "Connection: close" (HTTP/1.0: unless "keep-alive").
 * "Expect: 100-continue" is answered "100 Continue" before the body is
 * read (HTTP/1.1 only: RFC 9110 sends none to 1.0), after the answers to
 * the requests before it. A request that is not all there -T
 * (INFER_TIMEOUT_MS) after its first bytes came is answered 408 then,
 * also when the client has sent nothing since.
 *
 * Outputs agree with espcn_run_cpu(): bit for bit where the arithmetic
 * is the same (the host backend, C's host stage, P without OpenBLAS:
 * Makefile.am builds them and the reference with -ffp-contract=off, so
 * no compiler fuses a multiply and an add in one and not the other);
 * on the GPU (FMA contraction, CUDA's tanhf) and with OpenBLAS (another
 * summation order) a pixel may be one grey level off, in at most
 * INFER_OFF_PER_MILLE pixels in a thousand, plus one (infer_agrees).
 * Measured on 96x96 pictures of three weight seeds, the reference built
 * with FMA contraction was off at 2 pixels of 82944, OpenBLAS's GEMM at
 * 4 (one level each): the bound leaves 20 times that. On a GPU the
 * bound is expected to hold, not yet measured there.
 */
#ifndef INFER_H
#define INFER_H

#include <stdint.h>

#include "espcn.h"
#include "gsock_port.h"

#define INFER_PATH "/v1/upscale"
#define INFER_HEAD_MAX 8192 /* bytes of a request head, the blank line included */
#define INFER_PGM_HEAD_MAX 64 /* bytes of a PGM header */
#define INFER_BODY_MAX \
	(INFER_PGM_HEAD_MAX + ESPCN_MAX_SIDE * ESPCN_MAX_SIDE) /* bytes */
#define INFER_REPLY_HEAD_MAX 256 /* an answer's head and PGM header */
#define INFER_ERROR_MAX 512 /* an error's answer */
#define INFER_TIMEOUT_MS 5000 /* default bound on a request's arrival */
#define INFER_OFF_PER_MILLE 1 /* see above */

/* Why a request is refused: each has its status and its sentence. */
enum infer_err {
	INFER_OK, /* served */
	INFER_E_HEAD, /* 400: a malformed request line or field */
	INFER_E_DIMS, /* 400: X-Width and X-Height: both, whole numbers */
	INFER_E_BODY, /* 400: not a picture this server takes */
	INFER_E_PATH, /* 404 */
	INFER_E_METHOD, /* 405 */
	INFER_E_TIMEOUT, /* 408 */
	INFER_E_LENGTH, /* 411 */
	INFER_E_BODY_SIZE, /* 413: the body */
	INFER_E_PICTURE_SIZE, /* 413: the picture's sides */
	INFER_E_HEAD_SIZE, /* 431 */
	INFER_E_VERSION, /* 505 */
	INFER_E_UNAVAILABLE, /* 503 */
};

GSOCK_HD int infer_status(int e)
{
	return e == INFER_OK		 ? 200 :
	       e <= INFER_E_BODY	 ? 400 :
	       e == INFER_E_PATH	 ? 404 :
	       e == INFER_E_METHOD	 ? 405 :
	       e == INFER_E_TIMEOUT	 ? 408 :
	       e == INFER_E_LENGTH	 ? 411 :
	       e <= INFER_E_PICTURE_SIZE ? 413 :
	       e == INFER_E_HEAD_SIZE	 ? 431 :
	       e == INFER_E_VERSION	 ? 505 :
					   503;
}

GSOCK_HD const char *infer_why(int e)
{
	switch (e) {
	case INFER_E_HEAD: return "malformed request line or header field";
	case INFER_E_DIMS: return "X-Width and X-Height go together, as whole numbers";
	case INFER_E_BODY: return "the body is not a binary PGM (P5, maxval 255) of 4 to 1024 pixels a side, nor X-Width x X-Height raw bytes";
	case INFER_E_PATH: return "no such resource: POST a picture to /v1/upscale";
	case INFER_E_METHOD: return "only POST is served";
	case INFER_E_TIMEOUT: return "the request did not arrive in time";
	case INFER_E_LENGTH: return "a Content-Length is required (no chunked bodies)";
	case INFER_E_BODY_SIZE: return "the body is larger than a 1024x1024 picture";
	case INFER_E_PICTURE_SIZE: return "the picture is over 1024 pixels a side";
	case INFER_E_HEAD_SIZE: return "the request head is over 8192 bytes";
	case INFER_E_VERSION: return "only HTTP/1.x is served";
	default: return "the model could not run; try again";
	}
}

/* Whether a[0, n) is the text s. */
GSOCK_HD int infer_is(const char *a, uint32_t n, const char *s)
{
	uint32_t i = 0;

	while (i < n && s[i] && a[i] == s[i])
		i++;
	return i == n && !s[i];
}

/*
 * What a request head asks, as any parser found it: INFER_OK to take
 * its body, or why not.
 */
GSOCK_HD int infer_check(const char *method, uint32_t mlen,
			 const char *target, uint32_t tlen,
			 int64_t content_length, int chunked)
{
	if (!infer_is(target, tlen, INFER_PATH))
		return INFER_E_PATH;
	if (!infer_is(method, mlen, "POST"))
		return INFER_E_METHOD;
	if (chunked || content_length < 0)
		return INFER_E_LENGTH;
	return content_length > INFER_BODY_MAX ? INFER_E_BODY_SIZE : INFER_OK;
}

/* X-Width's or X-Height's value v[0, n): the number, or 0 (not one). */
GSOCK_HD uint32_t infer_dim(const char *v, uint32_t n)
{
	uint32_t d = 0;

	for (uint32_t i = 0; i < n; i++)
		if (v[i] < '0' || v[i] > '9' || (d = d * 10 + (uint32_t)(v[i] - '0')) > 1000000)
			return 0;
	return d;
}

GSOCK_HD int infer_space(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

/*
 * A PGM header number at b[*i, n), after whitespace and comments: the
 * number, or -1 (none, or over 7 digits); *i moves past it.
 */
GSOCK_HD long infer_pgm_num(const uint8_t *b, uint64_t n, uint32_t *i)
{
	long v = 0;
	uint32_t d = 0;

	for (;;) {
		while (*i < n && infer_space(b[*i]))
			(*i)++;
		if (*i >= n || b[*i] != '#')
			break;
		while (*i < n && b[*i] != '\n')
			(*i)++;
	}
	while (*i < n && b[*i] >= '0' && b[*i] <= '9' && d < 8) {
		v = v * 10 + (b[(*i)++] - '0');
		d++;
	}
	return d == 0 || d > 7 ? -1 : v;
}

/*
 * The picture in a request body b[0, n): INFER_OK with its size at *w,
 * *h and its pixels at b + *at, or why it is refused (INFER_E_BODY,
 * INFER_E_PICTURE_SIZE). raw_w and raw_h: X-Width and X-Height (0: the
 * body is a PGM).
 */
GSOCK_HD int infer_picture(const uint8_t *b, uint64_t n, uint32_t raw_w,
			   uint32_t raw_h, uint32_t *w, uint32_t *h,
			   uint32_t *at)
{
	uint32_t i = 2;
	long v[3] = { (long)raw_w, (long)raw_h, 255 };

	*at = 0;
	if (!raw_w || !raw_h) {
		if (n < 2 || b[0] != 'P' || b[1] != '5')
			return INFER_E_BODY;
		for (int k = 0; k < 3; k++)
			if ((v[k] = infer_pgm_num(b, n, &i)) < 0 || i >= n ||
			    i >= INFER_PGM_HEAD_MAX || !infer_space(b[i]))
				return INFER_E_BODY;
		*at = i + 1; /* one whitespace byte ends the header */
	}
	if (v[2] != 255 || v[0] < ESPCN_MIN_SIDE || v[1] < ESPCN_MIN_SIDE)
		return INFER_E_BODY;
	if (v[0] > ESPCN_MAX_SIDE || v[1] > ESPCN_MAX_SIDE)
		return INFER_E_PICTURE_SIZE;
	*w = (uint32_t)v[0];
	*h = (uint32_t)v[1];
	return n - *at == (uint64_t)*w * *h ? INFER_OK : INFER_E_BODY;
}

GSOCK_HD uint32_t infer_cat(char *b, uint32_t at, const char *s)
{
	while (*s)
		b[at++] = *s++;
	return at;
}

GSOCK_HD uint32_t infer_cat_num(char *b, uint32_t at, uint64_t v)
{
	char d[20];
	int k = 0;

	do
		d[k++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (k)
		b[at++] = d[--k];
	return at;
}

GSOCK_HD const char *infer_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "Service Unavailable";
	}
}

/*
 * An answer's head at b (INFER_REPLY_HEAD_MAX bytes): the status line,
 * the content's type and length, keep-alive or close; with a w x h
 * output (w > 0), its PGM header too, counted in the length. Its length.
 */
GSOCK_HD uint32_t infer_reply_head(char *b, int status, uint64_t body,
				   int keep, uint32_t w, uint32_t h)
{
	uint32_t at = infer_cat(b, 0, "HTTP/1.1 "), pgm = 0;
	char tmp[32];

	if (w) {
		pgm = infer_cat(tmp, 0, "P5\n");
		pgm = infer_cat_num(tmp, pgm, w);
		pgm = infer_cat(tmp, pgm, " ");
		pgm = infer_cat_num(tmp, pgm, h);
		pgm = infer_cat(tmp, pgm, "\n255\n");
		tmp[pgm] = 0;
	}
	at = infer_cat_num(b, at, (uint64_t)status);
	at = infer_cat(b, at, " ");
	at = infer_cat(b, at, infer_reason(status));
	at = infer_cat(b, at, "\r\nServer: gsock-infer\r\nContent-Type: ");
	at = infer_cat(b, at, w ? "image/x-portable-graymap" : "text/plain");
	at = infer_cat(b, at, "\r\nContent-Length: ");
	at = infer_cat_num(b, at, body + pgm);
	at = infer_cat(b, at, keep ? "\r\nConnection: keep-alive\r\n\r\n" :
				     "\r\nConnection: close\r\n\r\n");
	return w ? infer_cat(b, at, tmp) : at;
}

/*
 * The answer to a request refused for e (INFER_ERROR_MAX bytes at b):
 * its head, its line. Its length.
 */
GSOCK_HD uint32_t infer_error(char *b, int e)
{
	const char *why = infer_why(e);
	uint32_t n = 0, at;

	while (why[n])
		n++;
	at = infer_reply_head(b, infer_status(e), n + 1, 0, 0, 0);
	at = infer_cat(b, at, why);
	return infer_cat(b, at, "\n");
}

/*
 * Whether n output pixels a agree with the reference's b within the
 * tolerance above (exact: bit for bit); the pixels off at *off.
 */
GSOCK_HD int infer_agrees(const uint8_t *a, const uint8_t *b, uint64_t n,
			  int exact, uint64_t *off)
{
	int far = 0;

	*off = 0;
	for (uint64_t i = 0; i < n; i++) {
		int d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];

		*off += d > 0;
		far |= d > 1;
	}
	return exact ? *off == 0 :
		       !far && *off <= n * INFER_OFF_PER_MILLE / 1000 + 1;
}

/* "100 Continue", for a request that waits for it before its body. */
#define INFER_CONTINUE "HTTP/1.1 100 Continue\r\n\r\n"

#endif
