/* SPDX-License-Identifier: Apache-2.0 */
/*
 * srv-probe: a g-call server on the server layer whose connections each
 * pick a protocol with their first byte, so that t/server-layer.t drives
 * every message helper through one server:
 *
 *   'L'  lines (gsrv_recv_line): each line comes back as "LEN:LINE", LEN
 *        its bytes with the newline; a last line without one gets one;
 *        lines are at most 256 bytes (more: the connection is closed)
 *   'F'  frames (gsrv_recv_frame): each frame's payload comes back in a
 *        frame, every byte plus one; payloads of at most 64 bytes
 *   'M'  header and body (gsrv_recv_msg): "H", a type byte, the body's
 *        length (16 bits, little-endian), the body; the answer is the
 *        header with type + 1 and a body of one byte, the body's sum;
 *        a header not starting with "H" closes the connection (EPROTO)
 *   'K'  keys (gsrv_mc_get through the pipes, -M ADDR): each line is a
 *        key; the answer is "LEN:VALUE\n" for a hit, "E<errno>\n" for an
 *        error; values of at most 1024 bytes
 *
 * Each wait for the rest of a frame or message is bounded by -T MS (300).
 * The kernel and the host program are this one file: cc builds it for the
 * host backend, nvcc -x cu for the GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sysexits.h>

#include "gsock.h"
#include "gsock_server.cuh"

#define LINE_MAX_BYTES 256
#define FRAME_CAP (64 + 4)
#define MSG_CAP 1024
#define KEY_VALUE_CAP 1024

struct conn {
	uint32_t proto; /* 0 until the first byte came */
	struct gsrv_lines lb;
	uint8_t data[LINE_MAX_BYTES];
};

struct probe_args {
	long timeout_us;
};

/* 'M': the body's length from the header, or -EPROTO. */
GSOCK_DEVICE long msg_body_len(const void *hdr, void *ctx)
{
	const uint8_t *h = (const uint8_t *)hdr;

	(void)ctx;
	return h[0] == 'H' ? (long)(h[2] | h[3] << 8) : -EPROTO;
}

/* n in decimal and a colon at out: the bytes written. */
GSOCK_DEVICE int put_count(uint8_t *out, long n)
{
	int len = 1;

	for (long v = n; v >= 10; v /= 10)
		len++;
	for (int i = len - 1; i >= 0; i--, n /= 10)
		out[i] = (uint8_t)('0' + n % 10);
	out[len] = ':';
	return len + 1;
}

/* 'L': answer every whole line there; -EAGAIN when none is left. */
GSOCK_DEVICE long lines(struct gsock_dev gs, int fd, struct conn *c,
			uint8_t *out)
{
	long n, r = -EAGAIN;
	uint32_t at = 0;

	while ((n = gsrv_recv_line(gs, fd, &c->lb, c->data, LINE_MAX_BYTES, &at,
				   MSG_DONTWAIT, 0)) > 0) {
		int head = 0, nl = c->data[at + n - 1] != '\n';

		if (gs_tid() == 0) {
			head = put_count(out, n);
			for (long i = 0; i < n; i++)
				out[head + i] = c->data[at + i];
			if (nl)
				out[head + n] = '\n';
		}
		head = (int)gs_bcast(head);
		r = gsrv_send_all(gs, fd, out, (uint64_t)(head + n + nl), -1);
		if (r < 0)
			return r;
	}
	return n == -EAGAIN ? r : n;
}

/* 'F': one frame back, every payload byte plus one. */
GSOCK_DEVICE long frames(struct gsock_dev gs, int fd, uint8_t *buf, long t)
{
	long n = gsrv_recv_frame(gs, fd, buf, FRAME_CAP, MSG_DONTWAIT, t);

	if (n <= 0)
		return n;
	for (long i = 4 + gs_tid(); i < n; i += gs_bdim())
		buf[i]++;
	gs_sync();
	return gsrv_send_frame(gs, fd, buf, (uint32_t)n - 4, t);
}

/* 'M': the header with type + 1 and the body's byte sum. */
GSOCK_DEVICE long message(struct gsock_dev gs, int fd, uint8_t *buf, long t)
{
	long n = gsrv_recv_msg(gs, fd, buf, MSG_CAP, 4, msg_body_len, NULL,
			       MSG_DONTWAIT, t);
	uint64_t sum = 0;

	if (n <= 0)
		return n;
	for (long i = 4 + gs_tid(); i < n; i += gs_bdim())
		sum += buf[i];
	sum = gs_sum64(sum);
	if (gs_tid() == 0) {
		buf[1]++;
		buf[2] = 1;
		buf[3] = 0;
		buf[4] = (uint8_t)sum;
	}
	gs_sync();
	return gsrv_send_all(gs, fd, buf, 5, t);
}

/* 'K': answer every whole line there, a key each; -EAGAIN when none. */
GSOCK_DEVICE long keys(struct gsock_dev gs, struct gsrv *s, int fd,
		       struct conn *c, uint8_t *out, long t)
{
	long n, r = -EAGAIN, v;
	uint32_t at = 0;
	int head = 0;

	while ((n = gsrv_recv_line(gs, fd, &c->lb, c->data, LINE_MAX_BYTES, &at,
				   MSG_DONTWAIT, 0)) > 0) {
		n -= c->data[at + n - 1] == '\n';
		v = gsrv_mc_get(gs, s, (const char *)c->data + at, (uint32_t)n,
				out + 16, KEY_VALUE_CAP);
		if (v == 0)
			v = gsrv_pipe_wait(gs, s, 3 * t);
		if (gs_tid() == 0) { /* "LEN:" right before the value */
			uint8_t num[24] = { 'E' };

			head = put_count(num + 1, v < 0 ? -v : v);
			if (v < 0) /* "E<errno>\n" */
				num[head++] = '\n';
			else
				out[16 + v] = '\n';
			for (int i = 0; i < head; i++)
				out[16 - head + i] = num[i + (v >= 0)];
		}
		head = (int)gs_bcast(head);
		r = gsrv_send_all(gs, fd, out + 16 - head,
				  (uint64_t)head + (v < 0 ? 0 : v + 1), t);
		if (r < 0)
			return r;
	}
	return n == -EAGAIN ? r : n;
}

GSOCK_KERNEL(probe_kernel, gs, arg)
{
	struct gsrv *s = (struct gsrv *)arg;
	const struct probe_args *a = (const struct probe_args *)s->app;
	uint8_t *buf = (uint8_t *)gsrv_buf(gs, s);
	int fd;

	if (gsrv_pipe_block(gs, s)) {
		gsrv_mc_serve(gs, s);
		return;
	}
	while ((fd = gsrv_next(gs, s)) >= 0) {
		struct conn *c = (struct conn *)gsrv_state(gs, s);
		long r = c->proto ? -EAGAIN :
				    grecv(gs, fd, &c->proto, 1, MSG_DONTWAIT);

		if (r == 1 && c->proto != 'L' && c->proto != 'F' &&
		    c->proto != 'M' && c->proto != 'K')
			r = -EPROTONOSUPPORT;
		else if (c->proto == 'K')
			r = keys(gs, s, fd, c, buf, a->timeout_us);
		else if (c->proto == 'L')
			r = lines(gs, fd, c, buf);
		else if (c->proto == 'F')
			r = frames(gs, fd, buf, a->timeout_us);
		else if (c->proto == 'M')
			r = message(gs, fd, buf, a->timeout_us);
		gsrv_done(gs, s, r);
	}
}

static long timeout_ms = 300;

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10);

	if (opt == 'M') {
		app->backend = arg;
		return 0;
	}
	if (!*arg || *end || v <= 0) {
		fprintf(stderr, "%s: -%c takes a positive number, not '%s'\n",
			app->name, opt, arg);
		return EX_USAGE;
	}
	if (opt == 'T')
		timeout_ms = v;
	else if (opt == 'F')
		app->pipes = (unsigned)v;
	else if (opt == 'R')
		app->pipe_bufsize = (unsigned)v;
	else /* -W */
		app->pipe_timeout_ms = (unsigned)v;
	return 0;
}

static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	(void)app;
	(void)ctx;
	((struct probe_args *)s->app)->timeout_us = timeout_ms * 1000;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "timeout", required_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 }
	};
	struct gsrv_app app = { 0 };

	app.name = "srv-probe";
	app.kernel = (const void *)probe_kernel;
	app.per_block = 4;
	app.bufsize = 4096;
	app.conn_size = sizeof(struct conn);
	app.app_size = sizeof(struct probe_args);
	app.opts = "T:M:F:R:W:";
	app.longopts = opts;
	app.usage = "  -T, --timeout MS      wait for a message's rest (300)\n"
		    "  -M ADDR               memcached, for 'K' (none)\n"
		    "  -F N                  pipe blocks (8, or -b if fewer)\n"
		    "  -R BYTES              a pipe's reply buffer (256 KiB)\n"
		    "  -W MS                 a silent backend has failed (2000)\n";
	app.option = option;
	app.setup = setup;
	return gsrv_main(&app, argc, argv);
}
