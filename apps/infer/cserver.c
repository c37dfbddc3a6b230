/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU servers of ESPCN inference over HTTP/1.1 (infer.h), one loop
 * for both: built with stage_cublas.cu (G's cuBLAS path) or, without
 * cuBLAS, stage_cuda.cu (espcn_gpu.h's kernels) it is infer-cserver, the
 * CPU-managed GPU server C (on the host backend, stage_cpu.c runs
 * espcn_gpu.h's code on the thread); with stage_cpu.c for the CPU it is
 * infer-pserver, the CPU-only server P.
 *
 * Each thread has its own SO_REUSEPORT listener, epoll set and stage
 * (apps/common/cpu_loop.c, face verification's loop too). Requests are
 * parsed by Node.js's http_parser (libhttp-parser); a wake-up's complete
 * requests form one batch that the stage runs at once, and the answers
 * go out in request order. A request must arrive within --timeout of
 * its first bytes (408), a connection that sends nothing for --idle is
 * closed, one that leaves more than CONN_PAUSE bytes of answers unread
 * is not read until they go, one whose answers do not move for
 * --timeout is closed (Connection: close or not), and one that leaves
 * more than CONN_OUT bytes unread is cut off.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sysexits.h>

#include "cpu_loop.h"
#include "espcn.h"
#include "infer.h"
#include "stage.h"

#define CONN_OUT (64u << 20) /* answer bytes a connection may leave unread */
#define CONN_PAUSE (256u << 10) /* answer bytes past which it is not read */
#define FIELD_MAX 64 /* bytes kept of a field name, of a value we read */

struct conn {
	struct cl_conn cl;
	http_parser hp;
	uint64_t since; /* when its unfinished request began (ns), 0: none */
	/* the request being parsed */
	int err; /* why it is refused (infer_err), once known */
	uint64_t fed; /* bytes of the stream given to the parser */
	uint64_t head_at; /* where its head began in the stream */
	int in_head, mark; /* in its head; paused at its begin or head's end */
	char url[FIELD_MAX + 1];
	char field[FIELD_MAX + 1], value[FIELD_MAX + 1];
	int in_value; /* the parser is in a value: the next name is new */
	uint32_t raw_w, raw_h, have_w, have_h, expect;
	uint8_t *body;
	size_t body_len, body_cap;
};

struct job {
	struct conn *c;
	int keep; /* the connection stays open after the answer */
	uint32_t w, h; /* the picture's */
};

struct worker {
	struct cl_worker cl;
	struct infer_stage *st;
	unsigned njobs;
	struct job jobs[INFER_STAGE_JOBS];
	uint64_t requests, refused;
	char broken[128]; /* why its stage failed for good (main says it) */
};

static const char *prog;
static const char *listen_at = "7400";
static uint64_t timeout_ns = INFER_TIMEOUT_MS * 1000000ull;
static uint64_t idle_ns = 60000 * 1000000ull;

/* Upscale the batch and queue its answers; the connections stay alive. */
static void run_batch(struct cl_worker *cw)
{
	struct worker *wk = (struct worker *)cw;
	unsigned n = wk->njobs;
	int r = infer_stage_run(wk->st, n, wk->broken, sizeof(wk->broken));
	int failed = r < 0;

	for (unsigned i = 0; i < n; i++) {
		struct job *j = &wk->jobs[i];
		char head[INFER_ERROR_MAX];
		uint32_t len;

		j->c->cl.pending--;
		if (failed) {
			len = infer_error(head, INFER_E_UNAVAILABLE);
			j->c->cl.closing = 1;
		} else {
			len = infer_reply_head(head, 200, 9ull * j->w * j->h,
					       j->keep, 3 * j->w, 3 * j->h);
		}
		if (cl_put(&j->c->cl, head, len) == 0 && !failed)
			cl_put(&j->c->cl, infer_stage_out(wk->st, i),
			       9ull * j->w * j->h);
		j->c->cl.closing |= !j->keep;
		wk->requests++;
	}
	for (unsigned i = 0; i < n; i++)
		cl_flush(&wk->jobs[i].c->cl);
	wk->njobs = 0;
	if (r == -2)
		cl_stop(); /* its 503s go out; no stage to run more */
}

/* Refuse c's request for e: answered after its earlier ones, then closed. */
static void conn_refuse(struct conn *c, int e)
{
	char b[INFER_ERROR_MAX];

	if (c->cl.pending)
		run_batch(c->cl.wk);
	((struct worker *)c->cl.wk)->refused++;
	if (cl_put(&c->cl, b, infer_error(b, e)) == 0) {
		c->cl.closing = 1;
		cl_flush(&c->cl);
	}
}

/* ---- http_parser's callbacks: the request being parsed, into c ---- */

static int on_message_begin(http_parser *hp)
{
	struct conn *c = hp->data;

	c->err = INFER_OK;
	c->in_head = 1;
	c->mark = 1; /* conn_feed notes where it began */
	http_parser_pause(hp, 1);
	c->url[0] = c->field[0] = c->value[0] = 0;
	c->in_value = 0;
	c->raw_w = c->raw_h = c->have_w = c->have_h = c->expect = 0;
	c->body_len = 0;
	if (!c->since)
		c->since = cl_now_ns();
	return 0;
}

/* Append at to s (FIELD_MAX at most: longer is not a value we take). */
static void keep(char *s, const char *at, size_t n)
{
	size_t have = strlen(s);

	n = have + n > FIELD_MAX ? FIELD_MAX - have : n;
	memcpy(s + have, at, n);
	s[have + n] = 0;
}

static int on_url(http_parser *hp, const char *at, size_t n)
{
	keep(((struct conn *)hp->data)->url, at, n);
	return 0;
}

/* A whole field: the ones this server reads. */
static void field_done(struct conn *c)
{
	uint32_t *dim = !strcasecmp(c->field, "x-width")  ? &c->raw_w :
			!strcasecmp(c->field, "x-height") ? &c->raw_h :
							    NULL;

	if (dim) {
		*dim = infer_dim(c->value, (uint32_t)strlen(c->value));
		*(dim == &c->raw_w ? &c->have_w : &c->have_h) = 1;
	} else if (!strcasecmp(c->field, "expect")) {
		c->expect = !strcasecmp(c->value, "100-continue");
	}
	c->field[0] = c->value[0] = 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t n)
{
	struct conn *c = hp->data;

	if (c->in_value)
		field_done(c);
	c->in_value = 0;
	keep(c->field, at, n);
	return 0;
}

static int on_header_value(http_parser *hp, const char *at, size_t n)
{
	struct conn *c = hp->data;

	c->in_value = 1;
	keep(c->value, at, n);
	return 0;
}

static int on_headers_complete(http_parser *hp)
{
	struct conn *c = hp->data;
	const char *m = http_method_str((enum http_method)hp->method);
	int64_t len = hp->flags & F_CONTENTLENGTH ?
			      (int64_t)(hp->content_length > INFER_BODY_MAX ?
						INFER_BODY_MAX + 1 :
						hp->content_length) :
			      -1;

	if (c->in_value)
		field_done(c);
	c->in_head = 0;
	c->mark = 2; /* conn_feed counts the whole head, as G does */
	http_parser_pause(hp, 1);
	if (c->err)
		return 0;
	c->err = infer_check(m, (uint32_t)strlen(m), c->url,
			     (uint32_t)strlen(c->url), len,
			     (hp->flags & F_CHUNKED) || hp->uses_transfer_encoding);
	if (!c->err && (c->have_w != c->have_h ||
			(c->have_w && (!c->raw_w || !c->raw_h))))
		c->err = INFER_E_DIMS;
	if (!c->err && len > (int64_t)c->body_cap) {
		uint8_t *b = realloc(c->body, (size_t)len);

		if (!b)
			c->err = INFER_E_UNAVAILABLE;
		else
			c->body = b, c->body_cap = (size_t)len;
	}
	if (c->err) {
		http_parser_pause(hp, 1);
		return 0;
	}
	if (!c->expect || hp->http_minor < 1) /* none to HTTP/1.0: RFC 9110 */
		return 0;
	if (c->cl.pending) /* after the answers to the requests before it */
		run_batch(c->cl.wk);
	cl_put(&c->cl, INFER_CONTINUE, sizeof(INFER_CONTINUE) - 1);
	return 0;
}

static int on_body(http_parser *hp, const char *at, size_t n)
{
	struct conn *c = hp->data;

	memcpy(c->body + c->body_len, at, n); /* within Content-Length */
	c->body_len += n;
	return 0;
}

/* A whole request: its picture joins the batch (run first if full). */
static int on_message_complete(http_parser *hp)
{
	struct conn *c = hp->data;
	struct worker *wk = (struct worker *)c->cl.wk;
	uint32_t w, h, at;
	uint8_t *in;

	c->since = 0;
	c->err = infer_picture(c->body, c->body_len, c->raw_w, c->raw_h, &w,
			       &h, &at);
	if (c->err) {
		http_parser_pause(hp, 1);
		return 0;
	}
	in = infer_stage_add(wk->st, wk->njobs, w, h);
	if (!in) {
		run_batch(&wk->cl);
		in = infer_stage_add(wk->st, 0, w, h);
	}
	memcpy(in, c->body + at, (size_t)w * h);
	wk->jobs[wk->njobs++] = (struct job){ c, http_should_keep_alive(hp), w, h };
	c->cl.pending++;
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* The status a parser error answers. */
static int parse_error(enum http_errno e)
{
	return e == HPE_HEADER_OVERFLOW	 ? INFER_E_HEAD_SIZE :
	       e == HPE_INVALID_VERSION ? INFER_E_VERSION :
					  INFER_E_HEAD;
}
/*
 * Parse n bytes (0: the end) past the pauses on_message_begin and
 * on_headers_complete make to say where a head begins and ends: the bytes
 * used. The whole head counts, request line to blank line, against
 * INFER_HEAD_MAX (431), also one that has not ended yet.
 */
static size_t conn_feed(struct conn *c, const char *buf, size_t n)
{
	size_t done = 0;

	for (;;) {
		size_t used = http_parser_execute(&c->hp, &parser_settings,
						  buf + done, n - done);

		done += used;
		c->fed += used;
		if (c->mark == 1) /* paused past the head's first byte */
			c->head_at = c->fed - 1;
		else if (c->mark == 2 && !c->err && /* before its last LF */
			 c->fed + 1 - c->head_at > INFER_HEAD_MAX)
			c->err = INFER_E_HEAD_SIZE;
		if (c->in_head && !c->err && c->fed - c->head_at > INFER_HEAD_MAX)
			c->err = INFER_E_HEAD_SIZE;
		c->mark = 0;
		if (c->err || HTTP_PARSER_ERRNO(&c->hp) != HPE_PAUSED)
			return done;
		http_parser_pause(&c->hp, 0);
		if (done == n)
			return done;
	}
}

/* Read what c has; its complete requests join the batch. */
static void conn_read(struct cl_conn *cc)
{
	struct conn *c = (struct conn *)cc;
	char buf[65536];

	while (!cc->dead && !cc->closing && !cl_backlogged(cc)) {
		ssize_t n = recv(cc->fd, buf, sizeof(buf), 0);
		size_t used;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		cc->last = cl_now_ns();
		/* the end: http_parser_execute with 0 bytes says whether a
		 * request was cut off; either way nothing is left to answer */
		used = conn_feed(c, buf, n > 0 ? (size_t)n : 0);
		if (n <= 0) {
			cc->closing = 1;
			break;
		}
		if (c->err) {
			conn_refuse(c, c->err);
			return;
		}
		if (HTTP_PARSER_ERRNO(&c->hp) != HPE_OK || used != (size_t)n) {
			conn_refuse(c, parse_error(HTTP_PARSER_ERRNO(&c->hp)));
			return;
		}
	}
	/* the end seen with nothing owed, or "100 Continue" to send */
	if (!cc->dead && ((cc->closing && !cc->pending) || cc->out_len))
		cl_flush(cc);
}

static int conn_accepted(struct cl_conn *cc)
{
	struct conn *c = (struct conn *)cc;

	http_parser_init(&c->hp, HTTP_REQUEST);
	c->hp.data = c;
	return 0;
}

static void conn_freed(struct cl_conn *cc)
{
	free(((struct conn *)cc)->body);
}

/* Requests that are late (408) and connections quiet too long (closed). */
static void sweep(struct cl_worker *wk)
{
	uint64_t now = cl_now_ns();
	struct cl_conn *cc, *next;

	for (cc = wk->conns; cc; cc = next) {
		struct conn *c = (struct conn *)cc;

		next = cc->next;
		if (cc->pending || cc->closing)
			continue;
		if (c->since && now - c->since > timeout_ns)
			conn_refuse(c, INFER_E_TIMEOUT);
		else if (!c->since && idle_ns && now - cc->last > idle_ns)
			cl_kill(cc);
	}
}

static struct cl_ops ops = {
	.conn_size = sizeof(struct conn),
	.out_max = CONN_OUT,
	.out_pause = CONN_PAUSE,
	.accepted = conn_accepted,
	.read = conn_read,
	.wakeup = run_batch,
	.tick = sweep,
	.freed = conn_freed,
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s -w WEIGHTS [options]\n"
		"  -w, --weights FILE    the model's weights (infer-ref weights writes them)\n"
		"  -l, --listen ADDR     HOST:PORT, [V6]:PORT or PORT (default 7400); the port is\n"
		"                        always shared (SO_REUSEPORT), also with an infer-gserver -P\n"
		"  -t, --threads N       server threads, each with its own stage (default 1)\n"
		"  -T, --timeout MS      bound on a request's arrival and on an answer's\n"
		"                        standstill (default %d)\n"
		"  -I, --idle MS         close a connection quiet this long (default 60000; 0 never)\n",
		prog, INFER_TIMEOUT_MS);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "weights", required_argument, NULL, 'w' },
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "idle", required_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *weights = NULL;
	long threads = 1, timeout_ms = INFER_TIMEOUT_MS, idle_ms = 60000;
	uint64_t reqs = 0, conns = 0, refused = 0;
	struct worker *wk;
	char err[256];
	float *p;
	int opt, r;

	prog = strcmp(infer_stage_name(), "openblas") && strcmp(infer_stage_name(), "cpu") ?
		       "infer-cserver" :
		       "infer-pserver";
	while ((opt = getopt_long(argc, argv, "w:l:t:T:I:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w':
			weights = optarg;
			break;
		case 'l':
			listen_at = optarg;
			break;
		case 't':
			threads = atol(optarg);
			break;
		case 'T':
			timeout_ms = atol(optarg);
			break;
		case 'I':
			idle_ms = atol(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (!weights || optind < argc || threads < 1 || threads > 1024 ||
	    timeout_ms < 1 || idle_ms < 0) {
		fprintf(stderr, "%s: -w WEIGHTS is required; threads 1..1024, timeout > 0, idle >= 0\n",
			prog);
		usage(stderr);
		return EX_USAGE;
	}
	timeout_ns = (uint64_t)timeout_ms * 1000000ull;
	ops.stall_ns = timeout_ns;
	idle_ns = (uint64_t)idle_ms * 1000000ull;
	p = espcn_weights_open(weights, err, sizeof(err), &r);
	if (!p) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return r;
	}
	wk = calloc((size_t)threads, sizeof(*wk));
	if (!wk)
		return EX_OSERR;
	for (long i = 0; i < threads; i++) {
		r = cl_listen(&wk[i].cl, &ops, prog, listen_at);
		if (r)
			return r;
		wk[i].st = infer_stage_open(p, err, sizeof(err));
		if (!wk[i].st) {
			fprintf(stderr, "%s: %s\n", prog, err);
			return EX_UNAVAILABLE;
		}
	}
	free(p);
	printf("%s: listening on %s (%ld threads, %s stage, ESPCN x3 over HTTP/1.1)\n",
	       prog, listen_at, threads, infer_stage_name());
	fflush(stdout);
	cl_serve(&wk[0].cl, sizeof(*wk), (unsigned)threads);
	for (long i = 0; i < threads; i++) {
		reqs += wk[i].requests;
		conns += wk[i].cl.conns_seen;
		refused += wk[i].refused;
	}
	printf("%s: served %llu pictures on %llu connections (%llu requests refused)\n",
	       prog, (unsigned long long)reqs, (unsigned long long)conns,
	       (unsigned long long)refused);
	for (long i = 0; i < threads; i++) {
		if (!wk[i].broken[0])
			continue;
		fprintf(stderr, "%s: the %s stage failed for good: %s (the device is unusable from this process; restart it, and see dmesg for why)\n",
			prog, infer_stage_name(), wk[i].broken);
		return EX_SOFTWARE;
	}
	return 0;
}
