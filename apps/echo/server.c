/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-echo-server: a GPU echo server on the server layer
 * (gsock-server(3)), kernel and host program in one file: cc builds it
 * for the host backend, nvcc -x cu for the GPU. --mode sink and source
 * serve bench/loadgen's one-way streams (stream.h).
 */
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "gsock.h"
#include "gsock_server.cuh"
#include "stream.h"

enum echo_mode {
	ECHO_ECHO, /* send back what arrives */
	ECHO_SINK, /* read to the end, check, answer count and wrong bytes */
	ECHO_SOURCE, /* send the stream pattern until the peer goes */
};

/* This thread's wrong bytes in buf[0, n), stream offset off: 8-byte loads. */
GSOCK_DEVICE uint64_t wrong_bytes(const uint8_t *buf, long n, uint64_t off)
{
	const uint64_t *w = (const uint64_t *)buf; /* gsrv_buf: 16-aligned */
	uint64_t bad = 0;

	for (long i = gs_tid(); i < n / 8; i += gs_bdim()) {
		uint64_t v = w[i];

		for (int j = 0; j < 8; j++)
			bad += (uint8_t)(v >> 8 * j) !=
			       stream_byte(off + 8 * (uint64_t)i + j);
	}
	for (long k = n / 8 * 8 + gs_tid(); k < n; k += gs_bdim())
		bad += buf[k] != stream_byte(off + (uint64_t)k);
	return bad;
}

/* -M sink: check a stream to its end, answer its count and wrong bytes. */
GSOCK_DEVICE long sink(struct gsock_dev gs, const struct gsrv *s, int fd,
		       uint8_t *buf)
{
	uint64_t off = 0, bad = 0;
	long n;

	while ((n = grecv(gs, fd, buf, s->bufsize, 0)) > 0) {
		bad += wrong_bytes(buf, n, off);
		off += (uint64_t)n;
		gs_sync(); /* every thread is done with buf */
	}
	bad = gs_sum64(bad);
	if (gs_tid() == 0)
		stream_answer_put(buf, off, bad);
	gs_sync();
	if (n == 0)
		n = gsend(gs, fd, buf, STREAM_ANSWER, 0);
	gsrv_count(gs, s, off);
	return n < 0 ? n : 0; /* served to its end: close it */
}

/* -M source: the stream pattern, size bytes a call, until the peer goes. */
GSOCK_DEVICE long source(struct gsock_dev gs, const struct gsrv *s, int fd,
			 uint8_t *buf)
{
	uint32_t size = s->bufsize - STREAM_PERIOD;
	uint64_t off = 0;
	long n;

	for (uint64_t k = gs_tid(); k < s->bufsize; k += gs_bdim())
		buf[k] = stream_byte(k);
	gs_sync();
	while ((n = gsend(gs, fd, buf + off % STREAM_PERIOD, size, 0)) > 0)
		off += (uint64_t)n;
	gsrv_count(gs, s, off);
	return gsrv_fatal(n) ? n : 0; /* the peer's going ends it */
}

GSOCK_KERNEL(echo_kernel, gs, arg)
{
	struct gsrv *s = (struct gsrv *)arg;
	uint8_t *buf = (uint8_t *)gsrv_buf(gs, s);
	uint32_t mode = *(uint32_t *)s->app;
	int fd, wait = s->per_block == 1 ? 0 : MSG_DONTWAIT;
	long n;

	while ((fd = gsrv_next(gs, s)) >= 0) {
		if (mode == ECHO_SINK)
			n = sink(gs, s, fd, buf);
		else if (mode == ECHO_SOURCE)
			n = source(gs, s, fd, buf);
		else /* one connection a block: serve it to its end here */
			do {
				n = grecv(gs, fd, buf, s->bufsize, wait);
				if (n > 0)
					n = gsend(gs, fd, buf, (size_t)n, 0);
				if (n > 0)
					gsrv_count(gs, s, (uint64_t)n);
			} while (n > 0 && !wait);
		gsrv_done(gs, s, n);
	}
}

static const char *const modes[] = { "echo", "sink", "source" };
static uint32_t mode_opt = ECHO_ECHO;

static int option(struct gsrv_app *app, int opt, const char *arg)
{
	(void)opt; /* only -M */
	for (mode_opt = 0; mode_opt < 3; mode_opt++)
		if (!strcmp(arg, modes[mode_opt])) {
			app->detail = mode_opt ? modes[mode_opt] : NULL;
			return 0;
		}
	fprintf(stderr, "%s: --mode is echo, sink or source, not '%s'\n",
		app->name, arg);
	return EX_USAGE;
}

static int setup(struct gsrv_app *app, struct gsock_ctx *ctx, struct gsrv *s)
{
	(void)ctx;
	if (mode_opt != ECHO_ECHO && s->per_block > 1) {
		fprintf(stderr,
			"%s: --mode sink and source serve one connection per block: leave out --multiplex\n",
			app->name);
		return EX_USAGE;
	}
	if (mode_opt == ECHO_SOURCE)
		s->bufsize += STREAM_PERIOD; /* the pattern from any offset */
	*(uint32_t *)s->app = mode_opt;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'M' }, { NULL, 0, NULL, 0 }
	};
	struct gsrv_app app = { 0 };

	app.name = "gsock-echo-server";
	app.kernel = (const void *)echo_kernel;
	app.opts = "M:";
	app.longopts = opts;
	app.usage =
		"  -M, --mode MODE       echo (default); sink: read each connection to its end,\n"
		"                        check the stream pattern, answer the count and the\n"
		"                        wrong bytes; source: send the stream pattern until\n"
		"                        the peer goes (bench/loadgen -m up and -m down)\n";
	app.option = option;
	app.setup = setup;
	app.app_size = sizeof(mode_opt);
	return gsrv_main(&app, argc, argv);
}
