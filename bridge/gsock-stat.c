/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock-stat: what gsockd is doing now, like ss(8) for GPU sockets. It
 * asks gsockd over the control socket (a read-only request, same user
 * only; protocol in gsock_ctl.h) and prints every application and every
 * socket, as a table or JSON, once or every few seconds with rates.
 * See gsock-stat(1).
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "../devlib/gsock_arena.h"
#include "../devlib/gsock_ring.h"
#include "../devlib/ctl_peer.h"
#include "../devlib/gsock_ctl.h"

struct sample {
	struct gs_stat_rec *r;
	size_t n;
	double t; /* seconds, monotonic */
};

/*
 * Where a socket's bytes move: "devmem" (direct, a ring of it in a
 * receiver's GPU memory), "direct", "bridge"; none for a socket that is
 * not connected.
 */
static const char *path_name(const struct gs_stat_rec *r, const char *none)
{
	if (r->u.sock.direct == 2)
		return "devmem";
	if (r->u.sock.direct)
		return "direct";
	return r->u.sock.state == GS_SS_CONNECTED ||
		       r->u.sock.state == GS_SS_CLOSING ?
		       "bridge" :
		       none;
}

static const char *state_name(uint32_t s)
{
	static const char *const names[] = {
		[GS_SS_OPEN] = "open",		 [GS_SS_LISTEN] = "listen",
		[GS_SS_CONNECTING] = "connecting", [GS_SS_CONNECTED] = "connected",
		[GS_SS_CLOSING] = "closing",
	};

	return s < sizeof(names) / sizeof(names[0]) && names[s] ? names[s] :
								  "?";
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Root may read any user's gsockd at a path it names with -s; anyone
 * else, and root at the default path (/tmp without XDG_RUNTIME_DIR, where
 * any user may bind first), only their own or root's.
 */
static bool any_owner;

/* One answer from gsockd into s; 0, or EX_* with a sentence on stderr. */
static int ask(const char *path, struct sample *s)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct gs_ctl_hello req = { .magic = GS_CTL_STATS_MAGIC,
				    .version = GS_STATS_VERSION };
	struct timeval tv = { 5, 0 };
	union {
		struct gs_ctl_welcome w;
		struct gs_ctl_reply r;
	} first;
	size_t cap = 0, batch = 1024;
	bool ended = false;
	char why[256];
	ssize_t n;
	int fd;

	s->r = NULL;
	s->n = 0;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "gsock-stat: control socket path too long: %s\n", path);
		return EX_USAGE;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	/* A listen queue that stays full must not hang us either. */
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "gsock-stat: cannot reach gsockd at %s: %s\n",
			path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return EX_UNAVAILABLE;
	}
	if (!any_owner && !gs_ctl_peer_ok(fd, path, why, sizeof(why))) {
		fprintf(stderr, "gsock-stat: %s\n", why);
		close(fd);
		return EX_UNAVAILABLE;
	}
	/* A stuck gsockd must not hang us. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = recv(fd, &first, sizeof(first), 0);
	if (n == (ssize_t)sizeof(first.r) && first.r.magic == GS_CTL_MAGIC) {
		first.r.msg[sizeof(first.r.msg) - 1] = 0;
		fprintf(stderr, "gsock-stat: gsockd refused: %s\n", first.r.msg);
		close(fd);
		return EX_UNAVAILABLE;
	}
	if (n != (ssize_t)sizeof(first.w) ||
	    first.w.magic != GS_CTL_WELCOME_MAGIC) {
		fprintf(stderr, "gsock-stat: %s did not greet like gsockd (%zd bytes%s%s)\n",
			path, n, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
		close(fd);
		return EX_PROTOCOL;
	}
	if (send(fd, &req, sizeof(req), MSG_NOSIGNAL) < 0) {
		fprintf(stderr, "gsock-stat: cannot ask gsockd: %s\n", strerror(errno));
		close(fd);
		return EX_UNAVAILABLE;
	}
	for (;;) {
		if (cap - s->n < batch) {
			struct gs_stat_rec *r;

			cap = cap ? 2 * cap : 2 * batch;
			r = realloc(s->r, cap * sizeof(*r));
			if (!r) {
				fprintf(stderr, "gsock-stat: out of memory\n");
				close(fd);
				return EX_OSERR;
			}
			s->r = r;
		}
		n = recv(fd, s->r + s->n, batch * sizeof(*s->r), MSG_TRUNC);
		if (n <= 0)
			break;
		if ((size_t)n > batch * sizeof(*s->r) || n % sizeof(*s->r)) {
			fprintf(stderr, "gsock-stat: a message of %zd bytes is not whole records (mismatched gsockd?)\n", n);
			close(fd);
			return EX_PROTOCOL;
		}
		if (n == sizeof(*s->r) && s->r[s->n].kind == GS_STAT_END) {
			ended = s->r[s->n].u.end.records == s->n;
			break;
		}
		s->n += (size_t)n / sizeof(*s->r);
	}
	close(fd);
	if (n < 0 && !ended) {
		fprintf(stderr, "gsock-stat: reading gsockd's answer: %s\n", strerror(errno));
		return EX_UNAVAILABLE;
	}
	if (!ended || !s->n || s->r[0].kind != GS_STAT_BRIDGE) {
		fprintf(stderr, n == 0 && !s->n ?
			"gsock-stat: gsockd closed without answering (is it older than gsock-stat?)\n" :
			"gsock-stat: gsockd's answer was cut short\n");
		return EX_PROTOCOL;
	}
	s->t = now_s();
	return 0;
}

/* The same socket in the previous sample, or NULL (or not comparable). */
static const struct gs_stat_rec *before(const struct sample *p,
					 const struct gs_stat_rec *r)
{
	for (size_t i = 0; p && i < p->n; i++) {
		const struct gs_stat_rec *q = &p->r[i];

		if (q->kind == GS_STAT_SOCK && q->arena == r->arena &&
		    q->u.sock.id == r->u.sock.id &&
		    q->u.sock.rx_bytes <= r->u.sock.rx_bytes &&
		    q->u.sock.tx_bytes <= r->u.sock.tx_bytes &&
		    !strcmp(q->u.sock.peer, r->u.sock.peer))
			return q;
	}
	return NULL;
}

/* Bytes per second in and out since the previous sample; NAN: unknown. */
static void rates(const struct sample *p, const struct sample *s,
		  const struct gs_stat_rec *r, double *in, double *out)
{
	const struct gs_stat_rec *q = before(p, r);
	double dt = p ? s->t - p->t : 0;

	*in = *out = NAN;
	if (q && dt > 0) {
		*in = (double)(r->u.sock.rx_bytes - q->u.sock.rx_bytes) / dt;
		*out = (double)(r->u.sock.tx_bytes - q->u.sock.tx_bytes) / dt;
	}
}

static size_t open_socks(const struct sample *s, uint32_t arena)
{
	size_t k = 0;

	for (size_t i = 0; i < s->n; i++)
		k += s->r[i].kind == GS_STAT_SOCK && s->r[i].arena == arena;
	return k;
}

static void json_str(const char *v, size_t max)
{
	putchar('"');
	for (size_t i = 0; i < max && v[i]; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_rate(const char *key, double v)
{
	if (isnan(v))
		printf(",\"%s\":null", key);
	else
		printf(",\"%s\":%.0f", key, v);
}

/* p: the previous sample, or NULL; rates: print rate fields (null without p). */
static void print_json(const struct sample *p, const struct sample *s,
		       bool rate)
{
	const struct gs_stat_rec *b = &s->r[0];
	bool first_app = true;

	printf("{\"gsockd\":{\"pid\":%d,\"workers\":%u,\"io\":\"%s\",\"applications\":%u,"
	       "\"direct_segments\":%u,\"direct_held\":%u,"
	       "\"direct_wakeups\":%llu,\"watch_looks\":%llu,\"watch_finds\":%llu},\"applications\":[",
	       b->pid, b->u.bridge.workers, b->u.bridge.io_uring ? "io_uring" : "epoll",
	       b->u.bridge.napps, b->u.bridge.direct_segs, b->u.bridge.direct_held,
	       (unsigned long long)b->u.bridge.direct_wakeups,
	       (unsigned long long)b->u.bridge.watch_looks,
	       (unsigned long long)b->u.bridge.watch_finds);
	for (size_t i = 0; i < s->n; i++) {
		const struct gs_stat_rec *a = &s->r[i];
		bool first_sock = true;

		if (a->kind != GS_STAT_APP)
			continue;
		printf("%s{\"pid\":%d,\"arena\":%u,\"command\":",
		       first_app ? "" : ",", a->pid, a->arena);
		first_app = false;
		json_str(a->u.app.comm, sizeof(a->u.app.comm));
		printf(",\"device\":");
		json_str(a->u.app.device, sizeof(a->u.app.device));
		printf(",\"slots\":%u,\"sockets\":%u,\"ring_size\":%u,\"arena_bytes\":%llu,\"workers\":%u,\"open\":%zu,\"socket_list\":[",
		       a->u.app.nslots, a->u.app.nsocks, a->u.app.ring_size,
		       (unsigned long long)a->u.app.arena_size, a->u.app.nworkers,
		       open_socks(s, a->arena));
		for (size_t k = 0; k < s->n; k++) {
			const struct gs_stat_rec *r = &s->r[k];
			double in, out;

			if (r->kind != GS_STAT_SOCK || r->arena != a->arena)
				continue;
			printf("%s{\"fd\":%u,\"state\":\"%s\",\"local\":", first_sock ? "" : ",",
			       r->u.sock.id, state_name(r->u.sock.state));
			first_sock = false;
			json_str(r->u.sock.local, sizeof(r->u.sock.local));
			printf(",\"peer\":");
			json_str(r->u.sock.peer, sizeof(r->u.sock.peer));
			printf(",\"rx_bytes\":%llu,\"tx_bytes\":%llu,\"rx_queued\":%llu,\"tx_queued\":%llu,\"idle_ms\":%llu,\"worker\":%u,\"poll_slot\":%u,\"error\":%d,\"eof\":%s,\"path\":\"%s\"",
			       (unsigned long long)r->u.sock.rx_bytes,
			       (unsigned long long)r->u.sock.tx_bytes,
			       (unsigned long long)r->u.sock.rx_queued,
			       (unsigned long long)r->u.sock.tx_queued,
			       (unsigned long long)r->u.sock.idle_ms, r->u.sock.worker,
			       r->u.sock.poll_slot, r->u.sock.error,
			       r->u.sock.status & GS_ST_RX_EOF ? "true" : "false",
			       path_name(r, "bridge"));
			if (rate) {
				rates(p, s, r, &in, &out);
				json_rate("rx_rate", in);
				json_rate("tx_rate", out);
			}
			putchar('}');
		}
		printf("]}");
	}
	printf("]}\n");
}

/* A byte count the way people read them: 999, 12.3K, 4.56M, 7.89G. */
static const char *human(double v, char *buf, size_t len)
{
	static const char units[] = " KMGTP";
	int u = 0;

	if (isnan(v))
		return "-";
	while (v >= 1000 && units[u + 1]) {
		v /= 1000;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.*f%c", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
	return buf;
}

static void print_table(const struct sample *p, const struct sample *s, bool watch)
{
	const struct gs_stat_rec *b = &s->r[0];
	char h[6][16];

	printf("gsockd pid %d: %u workers, io %s, %u application%s; direct pool %u of %u segments held, %llu direct wake-ups, doorbell watch %llu looks (%llu found one)\n",
	       b->pid, b->u.bridge.workers,
	       b->u.bridge.io_uring ? "io_uring" : "epoll", b->u.bridge.napps,
	       b->u.bridge.napps == 1 ? "" : "s", b->u.bridge.direct_held,
	       b->u.bridge.direct_segs,
	       (unsigned long long)b->u.bridge.direct_wakeups,
	       (unsigned long long)b->u.bridge.watch_looks,
	       (unsigned long long)b->u.bridge.watch_finds);
	for (size_t i = 0; i < s->n; i++) {
		const struct gs_stat_rec *a = &s->r[i];

		if (a->kind != GS_STAT_APP)
			continue;
		printf("\npid %d (%.15s) on %.32s: %u slots, %u sockets of %u-byte rings, arena %s bytes, %u workers; %zu open\n",
		       a->pid, a->u.app.comm,
		       *a->u.app.device ? a->u.app.device : "an unnamed device",
		       a->u.app.nslots, a->u.app.nsocks,
		       a->u.app.ring_size, human((double)a->u.app.arena_size, h[0], sizeof(h[0])),
		       a->u.app.nworkers, open_socks(s, a->arena));
		printf("%5s %-10s %-6s %-24s %-24s %7s %7s %6s %6s %8s %3s %4s%s\n", "FD",
		       "STATE", "PATH", "LOCAL", "PEER", "RECV", "SENT", "RX-Q", "TX-Q", "IDLE",
		       "W", "SLOT", watch ? "   RECV/s   SENT/s" : "");
		for (size_t k = 0; k < s->n; k++) {
			const struct gs_stat_rec *r = &s->r[k];
			char state[16];
			double in, out;

			if (r->kind != GS_STAT_SOCK || r->arena != a->arena)
				continue;
			snprintf(state, sizeof(state), "%s%s", state_name(r->u.sock.state),
				 r->u.sock.status & GS_ST_RX_EOF ? ",eof" : "");
			printf("%5u %-10s %-6s %-24.64s %-24.64s %7s %7s %6s %6s %7.1fs %3u %4s",
			       r->u.sock.id, state,
			       path_name(r, "-"),
			       r->u.sock.local, r->u.sock.peer,
			       human((double)r->u.sock.rx_bytes, h[0], sizeof(h[0])),
			       human((double)r->u.sock.tx_bytes, h[1], sizeof(h[1])),
			       human((double)r->u.sock.rx_queued, h[2], sizeof(h[2])),
			       human((double)r->u.sock.tx_queued, h[3], sizeof(h[3])),
			       (double)r->u.sock.idle_ms / 1000, r->u.sock.worker,
			       r->u.sock.poll_slot ?
				       (snprintf(h[4], sizeof(h[4]), "%u", gs_poll_slot(r->u.sock.poll_slot)), h[4]) :
				       "-");
			if (watch) {
				rates(p, s, r, &in, &out);
				printf(" %8s %8s", human(in, h[5], sizeof(h[5])),
				       human(out, h[4], sizeof(h[4])));
			}
			if (r->u.sock.error)
				printf("  error %s", strerror(-r->u.sock.error));
			putchar('\n');
		}
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsock-stat [-j] [-w SECONDS [-n COUNT]] [-s PATH]\n"
		"  -j, --json            JSON (one object per sample)\n"
		"  -w, --watch SECONDS   ask again every SECONDS, with rates\n"
		"  -n, --count N         with -w: stop after N samples\n"
		"  -s, --control PATH    gsockd's control socket (default $GSOCK_CONTROL, then per user)\n"
		"  -h, --help            this text\n");
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "watch", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'n' },
		{ "control", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sample prev = { 0 }, cur;
	const char *path = getenv("GSOCK_CONTROL");
	char def[108], *end;
	double watch = 0;
	long count = -1;
	bool json = false;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, "jw:n:s:h", longs, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = true;
			break;
		case 'w':
			watch = strtod(optarg, &end);
			if (*end || !(watch >= 0.05 && watch <= 86400)) {
				fprintf(stderr, "gsock-stat: -w takes seconds, 0.05 to 86400, not '%s'\n", optarg);
				return EX_USAGE;
			}
			break;
		case 'n':
			count = strtol(optarg, &end, 10);
			if (*end || count < 1) {
				fprintf(stderr, "gsock-stat: -n takes a count of 1 or more, not '%s'\n", optarg);
				return EX_USAGE;
			}
			break;
		case 's':
			path = optarg;
			any_owner = geteuid() == 0;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gsock-stat: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return EX_USAGE;
	}
	if (count > 0 && !watch) {
		fprintf(stderr, "gsock-stat: -n goes with -w\n");
		return EX_USAGE;
	}
	if (!path || !*path) {
		gs_ctl_default_path(def, sizeof(def));
		path = def;
	}
	for (long i = 0;; i++) {
		rc = ask(path, &cur);
		if (rc)
			return rc;
		if (json)
			print_json(i ? &prev : NULL, &cur, watch > 0);
		else
			print_table(i ? &prev : NULL, &cur, watch > 0);
		fflush(stdout);
		free(prev.r);
		prev = cur;
		if (!watch || (count > 0 && i + 1 >= count))
			break;
		if (!json)
			putchar('\n');
		usleep((useconds_t)(watch * 1e6));
	}
	free(prev.r);
	return 0;
}
