/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mr-worker: one worker of a MapReduce job held in GPU memory, one per
 * GPU (on one host or several: the peers are addresses). It loads its
 * split of the input into device memory, launches the job's kernel (map,
 * shuffle through g-calls, reduce; see kernels.cu), waits, and writes
 * its part of the result. The host is not on the shuffle's path.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "gsock.h"
#include "mr_gpu.h"

struct opts {
	const char *job, *input, *out, *peers, *peers_file;
	unsigned rank, blocks, threads, table_slots, stage, k, iters;
	int timeout_ms, hold_ms;
	struct gsock_opts go;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mr-worker --job wordcount|kmeans --input FILE [options]\n"
		"  -j, --job NAME          wordcount (text) or kmeans (an mr-gen points file)\n"
		"  -i, --input FILE        the whole input; this worker reads its split\n"
		"  -o, --out FILE          where this worker's part of the result goes (stdout)\n"
		"  -r, --rank N            this worker's place in the peer list (0)\n"
		"  -p, --peers A,B,...     every worker's address, HOST:PORT or /unix/path, in rank\n"
		"                          order (none: one worker, no network)\n"
		"  -f, --peers-file FILE   the same, one address a line ('#' starts a comment)\n"
		"  -d, --gpu N             the GPU (CUDA ordinal) to run on (0)\n"
		"  -b, --blocks N          blocks of the job kernel, all resident (64)\n"
		"  -t, --threads N         threads a block (256, at most 512; 1 on the host backend)\n"
		"  -T, --table-slots N     word table slots, a power of two (1048576)\n"
		"  -S, --stage N           word count: received records held for every block\n"
		"                          to add at once (the table's slots); more are added\n"
		"                          by one block as they come\n"
		"  -k, --k N               k-means: clusters, 1..%d (16)\n"
		"  -n, --iters N           k-means: iterations (10)\n"
		"  -w, --timeout MS        bound on each quiet wait for a peer (30000)\n"
		"  -H, --hold-shuffle MS   test aid: senders pause halfway this long\n"
		"  -s, --control PATH      gsockd's control socket\n",
		MR_KM_MAX_K);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Peers from "A,B,..." or a file; the count, or -1 (said). */
static int read_peers(const struct opts *o, struct mr_job *j)
{
	char buf[8192], *save = NULL, *tok;
	size_t n = 0;
	int count = 0;

	if (o->peers_file) {
		FILE *f = fopen(o->peers_file, "r");

		if (!f) {
			fprintf(stderr, "mr-worker: cannot read %s: %s\n",
				o->peers_file, strerror(errno));
			return -1;
		}
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		for (char *c = buf; *c; c++)
			if (*c == '#')
				while (*c && *c != '\n')
					*c++ = ' ';
	} else {
		snprintf(buf, sizeof(buf), "%s", o->peers ? o->peers : "");
	}
	for (tok = strtok_r(buf, ", \t\r\n", &save); tok;
	     tok = strtok_r(NULL, ", \t\r\n", &save)) {
		if (count == MR_MAX_PEERS) {
			fprintf(stderr, "mr-worker: at most %d workers\n",
				MR_MAX_PEERS);
			return -1;
		}
		if (gsock_parse_addr(tok, &j->peer[count].addr,
				   &j->peer[count].len)) {
			fprintf(stderr, "mr-worker: cannot use address %s\n",
				tok);
			return -1;
		}
		count++;
	}
	return count ? count : 1;
}

static int hold_over; /* the kernel ended: watch_hold stops */

/* A test aid's voice: say when a sender starts its pause. */
static void *watch_hold(void *p)
{
	struct mr_job *j = p;
	struct timespec ts = { 0, 1000000 };

	while (!__atomic_load_n(&j->holding, __ATOMIC_ACQUIRE)) {
		if (__atomic_load_n(&hold_over, __ATOMIC_ACQUIRE))
			return NULL;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "mr-worker: rank %u holds its shuffle for %d ms\n",
		j->rank, j->hold_ms);
	return NULL;
}

/* The first error, as a sentence. */
static void say_error(const struct mr_job *j, const struct mr_result *r)
{
	static const char *const what[] = {
		[MR_E_LISTEN] = "cannot listen on its address",
		[MR_E_CONNECT] = "cannot connect to rank %u",
		[MR_E_ACCEPT] = "no worker connected in time",
		[MR_E_SEND] = "cannot send to rank %u",
		[MR_E_RECV] = "cannot receive from rank %u",
		[MR_E_PROTO] = "a connection that is not a shuffle stream of this job",
		[MR_E_TABLE] = "the word table is full (give --table-slots more)",
	};
	char head[128];

	if (r->what == MR_E_SHORT) {
		fprintf(stderr,
			"mr-worker: rank %u: rank %u's data ended after %llu of %llu bytes: that worker is gone; the job failed\n",
			j->rank, r->peer, (unsigned long long)r->done,
			(unsigned long long)r->total);
		return;
	}
	if (r->what < sizeof(what) / sizeof(what[0]) && what[r->what])
		snprintf(head, sizeof(head), what[r->what], r->peer);
	else
		snprintf(head, sizeof(head), "error %u", r->what);
	fprintf(stderr, "mr-worker: rank %u: %s: %s; the job failed\n",
		j->rank, head, strerror(-r->err));
}

/* Word count: the split, on the device. 0 or an exit status. */
static int load_words(struct gsock_ctx *ctx, const struct opts *o,
		      struct mr_job *j)
{
	int fd = open(o->input, O_RDONLY | O_CLOEXEC);
	struct stat st;
	const uint8_t *map = NULL;
	uint64_t from = 0, to = 0;
	uint8_t *dev;

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "mr-worker: cannot read %s: %s\n", o->input,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return EX_NOINPUT;
	}
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE,
			   fd, 0);
		if (map == MAP_FAILED) {
			fprintf(stderr, "mr-worker: cannot map %s: %s\n",
				o->input, strerror(errno));
			close(fd);
			return EX_IOERR;
		}
		mr_split(map, (uint64_t)st.st_size, j->rank, j->workers, &from,
			 &to);
	}
	close(fd);
	j->text_len = to - from;
	dev = gsock_dev_alloc(ctx, j->text_len + 1);
	if (!dev || (j->text_len && gsock_memcpy(ctx, dev, map + from,
						  j->text_len))) {
		fprintf(stderr,
			"mr-worker: cannot hold %llu bytes of text on the device\n",
			(unsigned long long)j->text_len);
		return EX_OSERR;
	}
	if (map)
		munmap((void *)map, (size_t)st.st_size);
	j->text = dev;
	j->table_mask = o->table_slots - 1;
	j->table = gsock_dev_alloc(ctx, (size_t)o->table_slots *
						sizeof(struct mr_slot));
	j->stage_recs = o->stage;
	if (j->workers > 1) {
		j->stage = gsock_dev_alloc(ctx, (size_t)j->stage_recs *
							sizeof(struct mr_word));
		j->out = gsock_dev_alloc(ctx, (size_t)o->table_slots *
						      sizeof(struct mr_word));
	}
	if (!j->table || (j->workers > 1 && (!j->out || !j->stage))) {
		fprintf(stderr,
			"mr-worker: cannot allocate a %u-slot word table on the device\n",
			o->table_slots);
		return EX_OSERR;
	}
	return 0;
}

static int cmp_words(const void *a, const void *b)
{
	const struct mr_word *x = a, *y = b;

	return strcmp((const char *)x->key, (const char *)y->key);
}

/* Word count: this worker's part, sorted, "WORD\tCOUNT" a line. */
static int write_words(struct gsock_ctx *ctx, const struct mr_job *j, FILE *f,
		       uint64_t *words, uint64_t *distinct)
{
	size_t n = (size_t)j->table_mask + 1, m = 0;
	struct mr_slot *t = malloc(n * sizeof(*t));
	struct mr_word *w = malloc(n * sizeof(*w));

	if (!t || !w || gsock_memcpy(ctx, t, j->table, n * sizeof(*t))) {
		free(t);
		free(w);
		return -1;
	}
	*words = 0;
	for (size_t i = 0; i < n; i++) {
		if (t[i].state != 2)
			continue;
		if (mr_part(t[i].hash, j->workers) != j->rank)
			continue;
		*words += t[i].w.count;
		w[m++] = t[i].w;
	}
	qsort(w, m, sizeof(*w), cmp_words);
	for (size_t i = 0; i < m; i++)
		fprintf(f, "%.*s\t%u\n", (int)w[i].len, (const char *)w[i].key,
			w[i].count);
	*distinct = m;
	free(t);
	free(w);
	return 0;
}

/* k-means: the split of the points and the first k as centroids. */
static int load_points(struct gsock_ctx *ctx, const struct opts *o,
		       struct mr_job *j)
{
	int fd = open(o->input, O_RDONLY | O_CLOEXEC);
	struct mr_points_hdr h;
	uint64_t from, to;
	size_t bytes, pb;
	float *buf = NULL;
	int status = EX_DATAERR;

	if (fd < 0) {
		fprintf(stderr, "mr-worker: cannot read %s: %s\n", o->input,
			strerror(errno));
		return EX_NOINPUT;
	}
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != MR_POINTS_MAGIC || !h.dim || h.dim > MR_KM_MAX_DIM ||
	    h.n < o->k) {
		fprintf(stderr,
			"mr-worker: %s is not a points file of 1..%d dimensions with at least k = %u points (make one with mr-gen points)\n",
			o->input, MR_KM_MAX_DIM, o->k);
		goto out;
	}
	j->dim = h.dim;
	j->k = o->k;
	j->iters = o->iters;
	pb = (size_t)h.dim * sizeof(float);
	from = h.n / j->workers * j->rank;
	to = j->rank + 1 == j->workers ? h.n : h.n / j->workers * (j->rank + 1);
	j->npts = to - from;
	bytes = (size_t)j->npts * pb;
	buf = malloc(bytes > o->k * pb ? bytes : o->k * pb);
	j->pts = gsock_dev_alloc(ctx, bytes + 1);
	j->cent = gsock_dev_alloc(ctx, o->k * pb);
	j->acc = gsock_dev_alloc(ctx, mr_acc_bytes(o->k, h.dim));
	j->pacc = gsock_dev_alloc(ctx, mr_acc_bytes(o->k, h.dim));
	status = EX_OSERR;
	if (!buf || !j->pts || !j->cent || !j->acc || !j->pacc) {
		fprintf(stderr, "mr-worker: cannot hold %llu points on the device\n",
			(unsigned long long)j->npts);
		goto out;
	}
	status = EX_IOERR;
	if (pread(fd, buf, bytes, (off_t)(sizeof(h) + from * pb)) !=
		    (ssize_t)bytes ||
	    gsock_memcpy(ctx, (void *)j->pts, buf, bytes) ||
	    pread(fd, buf, o->k * pb, sizeof(h)) != (ssize_t)(o->k * pb) ||
	    gsock_memcpy(ctx, j->cent, buf, o->k * pb)) {
		fprintf(stderr, "mr-worker: %s is shorter than its header says\n",
			o->input);
		goto out;
	}
	status = 0;
out:
	free(buf);
	close(fd);
	return status;
}

static int write_centroids(struct gsock_ctx *ctx, const struct mr_job *j,
			   FILE *f)
{
	size_t n = (size_t)j->k * j->dim;
	float *c = malloc(n * sizeof(*c));

	if (!c || gsock_memcpy(ctx, c, j->cent, n * sizeof(*c))) {
		free(c);
		return -1;
	}
	for (uint32_t i = 0; i < j->k; i++)
		for (uint32_t d = 0; d < j->dim; d++)
			fprintf(f, "%.9g%c", c[i * j->dim + d],
				d + 1 == j->dim ? '\n' : ' ');
	free(c);
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "job", required_argument, NULL, 'j' },
		{ "input", required_argument, NULL, 'i' },
		{ "out", required_argument, NULL, 'o' },
		{ "rank", required_argument, NULL, 'r' },
		{ "peers", required_argument, NULL, 'p' },
		{ "peers-file", required_argument, NULL, 'f' },
		{ "gpu", required_argument, NULL, 'd' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "table-slots", required_argument, NULL, 'T' },
		{ "stage", required_argument, NULL, 'S' },
		{ "k", required_argument, NULL, 'k' },
		{ "iters", required_argument, NULL, 'n' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "hold-shuffle", required_argument, NULL, 'H' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "j:i:o:r:p:f:d:b:t:T:S:k:n:w:H:s:h",
				  lo, NULL)) != -1) {
		switch (opt) {
		case 'j': o->job = optarg; break;
		case 'i': o->input = optarg; break;
		case 'o': o->out = optarg; break;
		case 'r': o->rank = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'p': o->peers = optarg; break;
		case 'f': o->peers_file = optarg; break;
		case 'd': o->go.device = atoi(optarg); break;
		case 'b': o->blocks = (unsigned)strtoul(optarg, NULL, 0); break;
		case 't': o->threads = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'T': o->table_slots = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'S': o->stage = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'k': o->k = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': o->iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'w': o->timeout_ms = atoi(optarg); break;
		case 'H': o->hold_ms = atoi(optarg); break;
		case 's': o->go.control = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (optind < argc || !o->job || !o->input ||
	    (strcmp(o->job, "wordcount") && strcmp(o->job, "kmeans"))) {
		usage(stderr);
		return EX_USAGE;
	}
	if (!o->stage)
		o->stage = o->table_slots;
	/* the host backend runs a block as one thread (app_start) */
	if (o->threads > MR_THREADS_MAX && strcmp(gsock_backend(), "host")) {
		fprintf(stderr, "mr-worker: at most %d threads a block\n",
			MR_THREADS_MAX);
		return EX_USAGE;
	}
	if (!o->blocks || !o->threads || o->timeout_ms <= 0 || !o->k ||
	    o->k > MR_KM_MAX_K || !o->table_slots ||
	    (o->table_slots & (o->table_slots - 1))) {
		fprintf(stderr,
			"mr-worker: blocks, threads and timeout must be positive, k 1..%d, table slots a power of two\n",
			MR_KM_MAX_K);
		return EX_USAGE;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { .blocks = 64, .threads = 256, .table_slots = 1 << 20,
			  .k = 16, .iters = 10, .timeout_ms = 30000 };
	struct mr_result r0, r;
	struct gsock_ctx *ctx;
	struct mr_job *j;
	pthread_t holder;
	int status, wc, workers;
	double t0, t_load, t_job, t_out;
	uint64_t words = 0, distinct = 0;
	FILE *out = stdout;

	status = parse(argc, argv, &o);
	if (status)
		return status;
	wc = !strcmp(o.job, "wordcount");
	o.go.nslots = o.blocks;
	o.go.nsocks = 2 * MR_MAX_PEERS + 4;
	o.go.ring_size = 1 << 20;
	t0 = now_s();
	ctx = app_start("mr-worker", &o.go, &o.threads);
	if (!ctx)
		return EX_UNAVAILABLE;
	status = EX_OSERR;
	j = gsock_alloc(ctx, sizeof(*j));
	if (!j)
		goto out_fini;
	workers = read_peers(&o, j);
	status = EX_USAGE;
	if (workers < 0)
		goto out_free;
	if (o.rank >= (unsigned)workers ||
	    (workers > 1 && o.blocks < (unsigned)workers)) {
		fprintf(stderr,
			"mr-worker: rank %u of %d workers; a job of several workers needs blocks >= workers\n",
			o.rank, workers);
		goto out_free;
	}
	j->rank = o.rank;
	j->workers = (uint32_t)workers;
	j->blocks = o.blocks;
	j->timeout_ms = o.timeout_ms;
	j->hold_ms = o.hold_ms;
	j->listen.addr = j->peer[o.rank].addr;
	j->listen.addrlen = j->peer[o.rank].len;
	memset(&r0, 0, sizeof(r0));
	r0.lfd = -1;
	for (int i = 0; i < MR_MAX_PEERS; i++)
		r0.kfd[i] = -1;
	j->res = gsock_dev_alloc(ctx, sizeof(*j->res));
	if (!j->res || gsock_memcpy(ctx, j->res, &r0, sizeof(r0))) {
		status = EX_OSERR;
		goto out_free;
	}
	status = wc ? load_words(ctx, &o, j) : load_points(ctx, &o, j);
	if (status)
		goto out_free;
	if (o.out && !(out = fopen(o.out, "w"))) {
		fprintf(stderr, "mr-worker: cannot write %s: %s\n", o.out,
			strerror(errno));
		status = EX_CANTCREAT;
		goto out_free;
	}
	t_load = now_s();
	status = gsock_launch(ctx, wc ? (const void *)mr_wordcount :
					(const void *)mr_kmeans,
			      o.blocks, o.threads, j);
	if (status) {
		fprintf(stderr, "mr-worker: cannot launch %u blocks: %s\n",
			o.blocks, strerror(-status));
		gsock_stop(ctx);
		gsock_wait(ctx);
		status = EX_UNAVAILABLE;
		goto out_close;
	}
	if (o.hold_ms > 0 &&
	    pthread_create(&holder, NULL, watch_hold, j) != 0)
		o.hold_ms = 0;
	status = gsock_wait(ctx);
	if (o.hold_ms > 0) {
		__atomic_store_n(&hold_over, 1, __ATOMIC_RELEASE);
		pthread_join(holder, NULL);
	}
	t_job = now_s();
	if (status || gsock_memcpy(ctx, &r, j->res, sizeof(r))) {
		fprintf(stderr, "mr-worker: rank %u: the job's kernel failed\n",
			o.rank);
		status = EX_SOFTWARE;
		goto out_close;
	}
	if (r.claim || !r.t_end) {
		if (r.claim)
			say_error(j, &r);
		else
			fprintf(stderr,
				"mr-worker: rank %u: stopped before the job ended%s\n",
				o.rank,
				gsock_bridge_gone(ctx) ? " (gsockd went away)" :
							 "");
		status = EX_UNAVAILABLE;
		goto out_close;
	}
	if (wc ? write_words(ctx, j, out, &words, &distinct) :
		 write_centroids(ctx, j, out)) {
		status = EX_IOERR;
		goto out_close;
	}
	if (fflush(out)) {
		status = EX_IOERR;
		goto out_close;
	}
	t_out = now_s();
	if (wc)
		fprintf(stderr,
			"mr-worker: rank=%u workers=%u job=wordcount backend=%s bytes=%llu part_words=%llu part_distinct=%llu load_s=%.4f meet_s=%.4f job_s=%.4f map_s=%.4f shuffle_s=%.4f out_s=%.4f sent=%llu received=%llu\n",
			o.rank, j->workers, gsock_backend(),
			(unsigned long long)j->text_len,
			(unsigned long long)words,
			(unsigned long long)distinct, t_load - t0,
			(r.t_start - r.t_launch) / 1e9,
			(r.t_end - r.t_start) / 1e9,
			(r.t_map - r.t_start) / 1e9,
			(r.t_end - r.t_map) / 1e9, t_out - t_job,
			(unsigned long long)r.sent,
			(unsigned long long)r.received);
	else
		fprintf(stderr,
			"mr-worker: rank=%u workers=%u job=kmeans backend=%s points=%llu dim=%u k=%u iters=%u load_s=%.4f meet_s=%.4f job_s=%.4f exchange_s=%.4f out_s=%.4f sent=%llu received=%llu\n",
			o.rank, j->workers, gsock_backend(),
			(unsigned long long)j->npts, j->dim, j->k, j->iters,
			t_load - t0, (r.t_start - r.t_launch) / 1e9,
			(r.t_end - r.t_start) / 1e9,
			r.xchg_ns / 1e9, t_out - t_job,
			(unsigned long long)r.sent,
			(unsigned long long)r.received);
	status = 0;
out_close:
	if (out != stdout)
		fclose(out);
out_free:
	/* the process ends here: its device buffers go with it */
	gsock_free(ctx, j);
out_fini:
	gsock_fini(ctx);
	return status;
}
