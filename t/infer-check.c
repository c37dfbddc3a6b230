/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The inference servers' shared code on the host, against its
 * references: the model as the servers run it (apps/infer/espcn_gpu.h,
 * built here with the smallest scratch it allows, so that wide pictures
 * split into several bands) gives espcn_run_cpu()'s pixels bit for bit,
 * for a batch of pictures of different sizes; request bodies are taken or refused with
 * the right status; the server layer's HTTP head parser
 * (devlib/gsock_http.cuh) takes good heads and refuses bad ones; an
 * answer's head is what infer.h draws. Prints TAP.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the least espcn_gpu.h allows: a row a band at 1024 wide, 3 at 640 */
#define ESPCN_SCRATCH (416u * 1024)
#include "../apps/infer/espcn_gpu.h"
#include "../apps/infer/infer.h"
#include "gsock_http.cuh"
#include "tap.h"

static const uint32_t sizes[][2] = { { 1024, 3 }, { 4, 4 }, { 640, 9 },
				     { 13, 30 }, { 5, 7 }, { 500, 7 },
				     { 300, 20 } };
#define NPICS (sizeof(sizes) / sizeof(sizes[0]))

static int parse(const char *head, struct gsrv_http *q)
{
	return gsrv_http_parse(head, (uint32_t)strlen(head), q);
}

static int body(const char *b, uint32_t rw, uint32_t rh, uint32_t *w,
		uint32_t *h)
{
	uint32_t at;

	return infer_picture((const uint8_t *)b, strlen(b), rw, rh, w, h, &at);
}

int main(void)
{
	struct espcn_job jobs[NPICS];
	uint64_t in_used = 0, out_used = 0, in_cap = 1 << 16, out_cap = 1 << 20;
	uint8_t *in = calloc(1, in_cap), *out = calloc(1, out_cap), *ref;
	float *p = malloc(4 * (size_t)ESPCN_NPARAMS);
	float *scratch = malloc(4 * (size_t)ESPCN_SCRATCH);
	int same = 1, added = 1, many = 0;
	struct gsrv_http q;
	char head[512];
	uint32_t w, h, len;
	long v;

	tap_plan(15);
	espcn_weights_make(p, 7);
	for (uint32_t j = 0; j < NPICS; j++) {
		added &= !espcn_job_add(jobs, j, sizes[j][0], sizes[j][1],
					&in_used, in_cap, &out_used, out_cap);
		for (uint32_t k = 0; k < sizes[j][0] * sizes[j][1]; k++)
			in[jobs[j].in_at + k] = (uint8_t)(k * 37 + j * 101 + k / 7);
		many += espcn_bands(sizes[j][0], sizes[j][1]) > 1;
	}
	ok(added && many >= 4, "a batch of %zu pictures, %d of them in several bands (%u bands)",
	   NPICS, many, espcn_batch_bands(jobs, NPICS));
	espcn_batch_part(p, jobs, NPICS, in, out, scratch, 0, 1);
	for (uint32_t j = 0; j < NPICS; j++) {
		size_t n = (size_t)sizes[j][0] * sizes[j][1] * 9;

		ref = malloc(n);
		espcn_run_cpu(p, in + jobs[j].in_at, sizes[j][0], sizes[j][1], ref);
		same &= !memcmp(ref, out + jobs[j].out_at, n);
		free(ref);
	}
	ok(same, "the batch's outputs are espcn_run_cpu's, bit for bit");
	memset(out, 0, out_cap);
	for (uint32_t part = 0; part < 3; part++) /* as a group of 3 would */
		espcn_batch_part(p, jobs, NPICS, in, out, scratch, part, 3);
	ref = malloc(1024 * 3 * 9);
	espcn_run_cpu(p, in, 1024, 3, ref);
	ok(!memcmp(ref, out, 1024 * 3 * 9), "three parts of a batch make the same picture");

	ok(body("P5\n6 5\n255\n012345678901234567890123456789", 0, 0, &w, &h) == 0 &&
		   w == 6 && h == 5 &&
		   body("P5 # made here\n6\t5 255 012345678901234567890123456789", 0, 0, &w, &h) == 0 &&
		   body("0123456789012345", 4, 4, &w, &h) == 0,
	   "PGM bodies (with a comment) and a raw one are taken");
	ok(body("P5\n6 5\n255\n0123", 0, 0, &w, &h) == INFER_E_BODY &&
		   body("P2\n6 5\n255\n", 0, 0, &w, &h) == INFER_E_BODY &&
		   body("P5\n6 5\n65535\n", 0, 0, &w, &h) == INFER_E_BODY &&
		   body("P5\n3 5\n255\n012345678901234", 0, 0, &w, &h) == INFER_E_BODY &&
		   body("P5\n6", 0, 0, &w, &h) == INFER_E_BODY &&
		   body("012345678901234", 4, 4, &w, &h) == INFER_E_BODY,
	   "short, non-P5, 16-bit, too small, cut-off and mis-sized bodies are 400");
	ok(body("P5\n2000 10\n255\n", 0, 0, &w, &h) == INFER_E_PICTURE_SIZE &&
		   body("", 1025, 4, &w, &h) == INFER_E_PICTURE_SIZE,
	   "a picture over %d a side is 413", ESPCN_MAX_SIDE);

	ok(parse("POST /v1/upscale HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\n"
		 "X-Width:  7 \r\n\r\n", &q) == 0 &&
		   q.method_len == 4 && q.target == 5 && q.target_len == 11 &&
		   q.minor == 1 && q.content_length == 42 && q.keep_alive &&
		   !q.expect_continue && !q.chunked,
	   "a request head: method, target, version, Content-Length, keep-alive");
	strcpy(head, "POST /x HTTP/1.1\r\nHost: x\r\nX-Width:  7 \r\n\r\n");
	v = gsrv_http_field(head, (uint32_t)strlen(head), "x-width", &len);
	ok(v > 0 && len == 1 && head[v] == '7' &&
		   gsrv_http_field(head, (uint32_t)strlen(head), "x-height", &len) == -1,
	   "a field's value, whitespace trimmed; an absent field");
	ok(parse("POST / HTTP/1.0\r\n\r\n", &q) == 0 && !q.keep_alive &&
		   parse("POST / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &q) == 0 && q.keep_alive &&
		   parse("POST / HTTP/1.1\r\nconnection: foo, close\r\n\r\n", &q) == 0 && !q.keep_alive &&
		   parse("POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n", &q) == 0 && q.expect_continue,
	   "HTTP/1.0 closes unless keep-alive; Connection: close; Expect: 100-continue");
	ok(parse("GARBAGE\r\n\r\n", &q) == 400 && parse(" POST / HTTP/1.1\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1 x\r\n\r\n", &q) == 400 &&
		   parse("POST  / HTTP/1.1\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\n\r\n", &q) == 400,
	   "malformed request lines are 400");
	ok(parse("POST / HTTP/1.1\r\nBad Name: 1\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\nNoColon\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", &q) == 400 &&
		   parse("POST / HTTP/2.0\r\n\r\n", &q) == 505,
	   "bad fields, bad or repeated lengths, both framings are 400; HTTP/2.0 is 505");
	ok(parse("POST / HTTP/1.1\r\nA: b\r\n", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\nA: b\r\n\r", &q) == 400 &&
		   parse("POST / HTTP/1.1\r\n", &q) == 400,
	   "a head without its blank line is 400");
	ok(parse("POST / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n", &q) == 0 &&
		   !q.keep_alive &&
		   parse("POST / HTTP/1.0\r\nConnection: close, keep-alive\r\n\r\n", &q) == 0 &&
		   !q.keep_alive,
	   "Connection: close wins over a keep-alive before or after it");
	ok(parse("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", &q) == 0 &&
		   q.content_length == GSRV_HTTP_LENGTH_MAX,
	   "a huge Content-Length reads as the largest, for a 413");
	len = infer_reply_head(head, 200, 4, 1, 2, 2);
	head[len] = 0;
	ok(!strcmp(head, "HTTP/1.1 200 OK\r\nServer: gsock-infer\r\n"
			 "Content-Type: image/x-portable-graymap\r\nContent-Length: 15\r\n"
			 "Connection: keep-alive\r\n\r\nP5\n2 2\n255\n") &&
		   (len = infer_error(head, INFER_E_PICTURE_SIZE)) > 0 &&
		   (head[len] = 0, strstr(head, "413 Content Too Large\r\n") &&
				   strstr(head, "Content-Length: 39\r\nConnection: close\r\n\r\nthe picture is over 1024 pixels a side\n")),
	   "an answer's head, with its PGM header; an error's, with its line");
	free(ref);
	free(in);
	free(out);
	free(p);
	free(scratch);
	tap_exit();
}
