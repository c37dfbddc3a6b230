/* SPDX-License-Identifier: Apache-2.0 */
/*
 * infer-client: load for the inference servers (infer.h), every answer
 * checked. -c connections, a thread each, send POST /v1/upscale with one
 * of a few pictures (-S sizes, PGM bodies, or raw with -R) and check
 * each answer's status, head and every pixel against espcn_run_cpu()
 * (computed once per picture at the start), exactly with -x, else within
 * infer.h's tolerance.
 *
 * Closed loop by default: each connection sends its next request when
 * the answer to the last one came. -r RATE runs an open loop: request k
 * of all is due at start + k / RATE (connection k mod c sends it), and
 * its latency counts from then, so that a server's stall is in the
 * latencies even while the client waits on it; a request sent more than
 * a millisecond late is counted as such (more connections keep up).
 * Every connection is made before the clock starts, so that a request's
 * latency is its own, not a connect's and an accept's too (at 20
 * requests a second over 64 connections most requests were the first
 * of theirs); one the server closes is made again when next needed, and
 * that time counts.
 * Prints one line: requests, right, wrong, errors, the run's seconds
 * (from the threads' start to the last answer), rate, p50, p99, p99.9
 * and max latency; exits 1 if any answer was wrong or missing.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "espcn.h"
#include "infer.h"

#define MAX_PICS 16

struct pic {
	uint32_t w, h;
	uint8_t *body; /* the request: head, then the body */
	size_t len;
	uint8_t *ref; /* the reference's 3w x 3h output */
};

struct conn_run {
	pthread_t tid;
	unsigned id;
	uint64_t *lat; /* ns, one per request answered */
	uint64_t done, right, wrong, errors, late, off_pixels;
	char why[160]; /* the first problem */
};

static const char *server;
static struct pic pics[MAX_PICS];
static unsigned npics, conns = 4;
static uint64_t per_conn = 10, duration_ns;
static double rate;
static int exact, raw;
static uint64_t start_ns, max_req; /* max_req: latencies a connection keeps */
/* Twice: every thread connected; then start_ns is set, and they go. */
static pthread_barrier_t ready;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { (time_t)(t / 1000000000ull), (long)(t % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* A deterministic picture: gradients, a pattern and noise. */
static void make_pic(struct pic *p, unsigned k, const float *params)
{
	size_t n = (size_t)p->w * p->h, at;
	uint8_t *px = malloc(n);
	char head[256];

	for (size_t i = 0; i < n; i++)
		px[i] = (uint8_t)((i % p->w) * 3 + (i / p->w) * 5 + (k * 61) +
				  ((i * 2654435761u) >> 27));
	p->ref = malloc(9 * n);
	if (!p->ref || espcn_run_cpu(params, px, p->w, p->h, p->ref)) {
		fprintf(stderr, "infer-client: out of memory\n");
		exit(EX_OSERR);
	}
	at = (size_t)snprintf(head, sizeof(head), raw ? "" : "P5\n%u %u\n255\n",
			      p->w, p->h);
	p->body = malloc(512 + at + n);
	p->len = (size_t)sprintf((char *)p->body,
				 "POST " INFER_PATH " HTTP/1.1\r\nHost: %s\r\n"
				 "Content-Type: %s\r\nContent-Length: %zu\r\n",
				 server, raw ? "application/octet-stream" :
					       "image/x-portable-graymap",
				 at + n);
	if (raw)
		p->len += (size_t)sprintf((char *)p->body + p->len,
					  "X-Width: %u\r\nX-Height: %u\r\n",
					  p->w, p->h);
	p->len += (size_t)sprintf((char *)p->body + p->len, "\r\n%s", head);
	memcpy(p->body + p->len, px, n);
	p->len += n;
	free(px);
}

/*
 * Read one answer on fd into *buf (grown): its status, the body at
 * *body (*blen bytes), *closes when the server ends the connection; -1
 * when the connection failed before a whole answer.
 */
static int read_answer(int fd, uint8_t **buf, size_t *cap, uint8_t **body,
		       size_t *blen, int *closes)
{
	size_t have = 0, head = 0, clen;
	int status;
	char *p;

	while (!head) {
		ssize_t n;

		if (have == *cap)
			return -1; /* a head this large is not ours */
		n = recv(fd, *buf + have, *cap - have, 0);
		if (n <= 0)
			return -1;
		have += (size_t)n;
		(*buf)[have] = 0;
		p = strstr((char *)*buf, "\r\n\r\n");
		if (p)
			head = (size_t)(p - (char *)*buf) + 4;
	}
	if (sscanf((char *)*buf, "HTTP/1.1 %d ", &status) != 1 ||
	    !(p = strcasestr((char *)*buf, "\r\nContent-Length:")) ||
	    (size_t)(p - (char *)*buf) > head)
		return -1;
	clen = strtoul(p + 17, NULL, 10);
	p = strcasestr((char *)*buf, "\r\nConnection: close\r\n");
	*closes = p && (size_t)(p - (char *)*buf) < head;
	if (head + clen + 1 > *cap) {
		uint8_t *b = realloc(*buf, head + clen + 1);

		if (!b)
			return -1;
		*buf = b;
		*cap = head + clen;
	}
	if (have < head + clen &&
	    app_io_all(fd, *buf + have, head + clen - have, 0))
		return -1;
	*body = *buf + head;
	*blen = clen;
	return status;
}

/* Whether the answer is pic's upscaled, within the tolerance; why not. */
static int check(struct conn_run *r, const struct pic *pic, int status,
		 const uint8_t *body, size_t blen)
{
	char want[64];
	size_t hl = (size_t)snprintf(want, sizeof(want), "P5\n%u %u\n255\n",
				     3 * pic->w, 3 * pic->h);
	uint64_t n = 9ull * pic->w * pic->h, off = 0;
	int good = status == 200 && blen == hl + n && !memcmp(body, want, hl) &&
		   infer_agrees(body + hl, pic->ref, n, exact, &off);

	r->off_pixels += off;
	if (!good && !r->why[0])
		snprintf(r->why, sizeof(r->why),
			 "a %ux%u picture: status %d, %zu bytes, %llu pixels off",
			 pic->w, pic->h, status, blen, (unsigned long long)off);
	return good;
}

static void *run(void *arg)
{
	struct conn_run *r = arg;
	size_t cap = 1 << 16, blen;
	uint8_t *buf = malloc(cap + 1), *body;
	int fd = app_connect(server), closes = 0;

	/* a connection that failed here is tried again, and said, below */
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&ready);
	sleep_until(start_ns);
	for (uint64_t k = 0; r->done < max_req; k++) {
		uint64_t due = now_ns(), i = k * conns + r->id;
		const struct pic *pic = &pics[i % npics];
		int status;

		if (duration_ns ? due - start_ns >= duration_ns : k >= per_conn)
			break;
		if (rate > 0) {
			due = start_ns + (uint64_t)(i * 1e9 / rate);
			if (duration_ns && due - start_ns >= duration_ns)
				break;
			sleep_until(due);
			r->late += now_ns() > due + 1000000;
		}
		if (fd < 0 && (fd = app_connect(server)) < 0) {
			r->errors++;
			snprintf(r->why, sizeof(r->why), "cannot connect to %s: %s",
				 server, strerror(errno));
			break;
		}
		status = app_io_all(fd, pic->body, pic->len, 1) ? -1 :
			 read_answer(fd, &buf, &cap, &body, &blen, &closes);
		if (status < 0) {
			r->errors++;
			if (!r->why[0])
				snprintf(r->why, sizeof(r->why),
					 "the connection failed before an answer");
			close(fd);
			fd = -1;
			continue;
		}
		r->lat[r->done++] = now_ns() - due;
		if (check(r, pic, status, body, blen))
			r->right++;
		else
			r->wrong++;
		if (closes) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: infer-client -s HOST:PORT -w WEIGHTS [options]\n"
		"  -s, --server ADDR     the inference server (HOST:PORT, [V6]:PORT, unix path)\n"
		"  -w, --weights FILE    the weights the server runs (for the reference)\n"
		"  -c, --conns N         connections, each its own thread (default 4)\n"
		"  -n, --requests N      requests per connection (default 10)\n"
		"  -d, --duration S      run S seconds instead\n"
		"  -r, --rate R          open loop: R requests a second in all\n"
		"  -S, --sizes LIST      picture sizes, e.g. 32x32,64x48 (default 24x24,40x32,64x64)\n"
		"  -R, --raw             raw bodies with X-Width and X-Height, not PGM\n"
		"  -x, --exact           every pixel as the reference's (else infer.h's tolerance)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "weights", required_argument, NULL, 'w' },
		{ "conns", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'd' },
		{ "rate", required_argument, NULL, 'r' },
		{ "sizes", required_argument, NULL, 'S' },
		{ "raw", no_argument, NULL, 'R' },
		{ "exact", no_argument, NULL, 'x' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *weights = NULL, *sizes = "24x24,40x32,64x64";
	struct conn_run *runs;
	uint64_t done = 0, right = 0, wrong = 0, errors = 0, late = 0, off = 0,
		 *all;
	double secs;
	char err[256];
	float *p;
	int opt;

	while ((opt = getopt_long(argc, argv, "s:w:c:n:d:r:S:Rxh", opts, NULL)) != -1) {
		switch (opt) {
		case 's': server = optarg; break;
		case 'w': weights = optarg; break;
		case 'c': conns = (unsigned)atoi(optarg); break;
		case 'n': per_conn = strtoull(optarg, NULL, 10); break;
		case 'd': duration_ns = (uint64_t)(atof(optarg) * 1e9); break;
		case 'r': rate = atof(optarg); break;
		case 'S': sizes = optarg; break;
		case 'R': raw = 1; break;
		case 'x': exact = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (!server || !weights || optind < argc || conns < 1 || conns > 4096 ||
	    (!duration_ns && !per_conn) || rate < 0) {
		usage(stderr);
		return EX_USAGE;
	}
	p = espcn_weights_load(weights, err, sizeof(err));
	if (!p) {
		fprintf(stderr, "infer-client: %s: %s\n", weights, err);
		return EX_DATAERR;
	}
	for (const char *s = sizes; *s && npics < MAX_PICS; npics++) {
		struct pic *pic = &pics[npics];
		int used = 0;

		if (sscanf(s, "%ux%u%n", &pic->w, &pic->h, &used) != 2 ||
		    pic->w < ESPCN_MIN_SIDE || pic->h < ESPCN_MIN_SIDE ||
		    pic->w > ESPCN_MAX_SIDE || pic->h > ESPCN_MAX_SIDE) {
			fprintf(stderr, "infer-client: -S takes sizes WxH of %d to %d, comma-separated, not '%s'\n",
				ESPCN_MIN_SIDE, ESPCN_MAX_SIDE, s);
			return EX_USAGE;
		}
		make_pic(pic, npics, p);
		s += used + (s[used] == ',');
	}
	/* room for every latency: a duration's worst case is a guess */
	max_req = duration_ns ? (uint64_t)(rate > 0 ? rate * duration_ns / 1e9 / conns + 2 :
					   duration_ns / 100000) :
				per_conn;
	runs = calloc(conns, sizeof(*runs));
	all = malloc(sizeof(*all) * (max_req * conns + 1));
	if (!runs || !all)
		return EX_OSERR;
	if (pthread_barrier_init(&ready, NULL, conns + 1))
		return EX_OSERR;
	for (unsigned i = 0; i < conns; i++) {
		runs[i].id = i;
		runs[i].lat = all + (size_t)i * max_req;
		if (pthread_create(&runs[i].tid, NULL, run, &runs[i])) {
			fprintf(stderr, "infer-client: cannot start %u threads\n", conns);
			return EX_OSERR;
		}
	}
	pthread_barrier_wait(&ready); /* every connection made (or failed) */
	start_ns = now_ns() + 10000000; /* the threads start together */
	pthread_barrier_wait(&ready);
	for (unsigned i = 0; i < conns; i++) {
		pthread_join(runs[i].tid, NULL);
		if (runs[i].why[0] && !wrong && !errors)
			fprintf(stderr, "infer-client: connection %u: %s\n", i, runs[i].why);
		memmove(all + done, runs[i].lat, sizeof(*all) * runs[i].done);
		done += runs[i].done;
		right += runs[i].right;
		wrong += runs[i].wrong;
		errors += runs[i].errors;
		late += runs[i].late;
		off += runs[i].off_pixels;
	}
	secs = (now_ns() - start_ns) / 1e9;
	qsort(all, done, sizeof(*all), cmp_u64);
#define PCT(q) (done ? all[(size_t)((done - 1) * (q))] / 1e6 : 0.0)
	printf("infer-client: requests=%llu right=%llu wrong=%llu errors=%llu off_pixels=%llu late=%llu seconds=%.3f rps=%.1f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f\n",
	       (unsigned long long)done, (unsigned long long)right,
	       (unsigned long long)wrong, (unsigned long long)errors,
	       (unsigned long long)off, (unsigned long long)late, secs,
	       done / secs, PCT(0.50), PCT(0.99), PCT(0.999), PCT(1.0));
	return wrong || errors || !done ? 1 : 0;
}
