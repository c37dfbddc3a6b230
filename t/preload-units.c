/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the preload's logic, linked directly (no LD_PRELOAD):
 * the fd table's references, the route rules of gsock.conf (parse
 * errors with their line, prefixes, port ranges, roles, programs, first
 * match wins, the default route), and a reader's wait for an announced
 * GPU send on the direct path (flight.h), raced against a writer thread.
 */
#include <config.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../conf/gsconf.h"
#include "../preload/fdtab.h"
#include "../preload/flight.h"
#include "tap.h"

static char reported[1024];

static void report(const char *msg)
{
	snprintf(reported + strlen(reported),
		 sizeof(reported) - strlen(reported), "%s\n", msg);
}

static const struct pl_sock *wanted;

/* pl_fd_find: the entry wanted. */
static int is_wanted(int fd, const struct pl_sock *s)
{
	(void)fd;
	return s == wanted;
}

static struct sockaddr_in v4(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port) };

	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static cfg_t *parse_text(const char *text)
{
	char path[] = "/tmp/gsock-units-XXXXXX";
	int fd = mkstemp(path);
	cfg_t *cfg;

	if (fd < 0 || write(fd, text, strlen(text)) < 0)
		return NULL;
	close(fd);
	reported[0] = 0;
	cfg = gs_conf_parse(path, 1, report);
	unlink(path);
	return cfg;
}

static enum gs_route route(const struct gs_rules *r, const char *prog,
			   enum gs_role role, const char *ip, int port,
			   int *line)
{
	struct sockaddr_in a = v4(ip, port);

	return gs_rules_match(r, prog, role, (struct sockaddr *)&a, line);
}

/* ---- pl_flight_landed: a reader's wait for an announced GPU send ---- */

static struct gs_dpipe fp;
static uint32_t fclosed;
static volatile int fgo;
static long fspin;

/* The writer of the race: announce, a short while, then the tail. */
static void *flight_writer(void *arg)
{
	long rounds = (long)arg;

	for (long i = 0; i < rounds; i++) {
		uint64_t t = __atomic_load_n(&fp.tail, __ATOMIC_RELAXED);

		while (__atomic_load_n(&fgo, __ATOMIC_ACQUIRE) != 1)
			sched_yield();
		__atomic_store_n(&fp.sending, t + 1, __ATOMIC_RELEASE);
		for (long k = 0; k < (i * 7919) % fspin; k++)
			__asm__ volatile("" ::: "memory");
		__atomic_store_n(&fp.tail, t + 64, __ATOMIC_RELEASE);
		__atomic_store_n(&fgo, 2, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void flight_tests(void)
{
	long long t0, d, early = 0, zeros = 0;
	long rounds = 10000;
	pthread_t w;
	int r;

	memset(&fp, 0, sizeof(fp));
	fp.tail = fp.head = 1000;
	t0 = pl_now_ns();
	r = pl_flight_landed(&fp, &fclosed, 1, 4096);
	ok(r == 0 && pl_now_ns() - t0 < 100000000LL,
	   "flight: nothing announced, an empty ring: no bytes, no wait");
	fp.tail = 1064;
	ok(pl_flight_landed(&fp, &fclosed, 1, 4096) == 1,
	   "flight: bytes in the ring: bytes");
	fp.head = 1064;
	fp.sending = 1001; /* the send from 1000 landed */
	ok(pl_flight_landed(&fp, &fclosed, 1, 4096) == 0,
	   "flight: an announce whose tail came: no bytes, no wait");
	fp.sending = 1065; /* from 1064, never landing */
	t0 = pl_now_ns();
	r = pl_flight_landed(&fp, &fclosed, 1, 4096);
	d = pl_now_ns() - t0;
	ok(r == 0 && d >= GS_DW_FLIGHT_NS && d < 1000000000LL,
	   "flight: an announce whose tail never comes: no bytes after %lld us (at least %d)",
	   d / 1000, GS_DW_FLIGHT_NS / 1000);
	fclosed = 2;
	t0 = pl_now_ns();
	r = pl_flight_landed(&fp, &fclosed, 1, 4096);
	ok(r == 0 && pl_now_ns() - t0 >= GS_DW_FLIGHT_NS,
	   "flight: the other side's close does not end the wait for this side's send");
	t0 = pl_now_ns();
	fclosed = 1;
	r = pl_flight_landed(&fp, &fclosed, 1, 4096);
	ok(r == 0 && pl_now_ns() - t0 < GS_DW_FLIGHT_NS,
	   "flight: the sender gone: no bytes, at once");
	fclosed = 0;
	/* A head past the tail: bytes taken from the lane before their tail. */
	ok(pl_unread(1064, 1000, 4096) == 64 && pl_unread(1000, 1000, 4096) == 0 &&
		   pl_unread(1000, 1248, 4096) == 0 &&
		   pl_unread(1000, 1000 + 2048, 4096) == 0 &&
		   pl_unread(1000, 1000 + 2049, 4096) > 4096,
	   "unread: a tail ahead counts, a head up to half a ring ahead is none, further is more than the ring (EIO)");
	fp.head = 1248; /* the send from 1064 taken from its lane */
	t0 = pl_now_ns();
	r = pl_flight_landed(&fp, &fclosed, 1, 4096);
	ok(r == 0 && pl_now_ns() - t0 >= GS_DW_FLIGHT_NS,
	   "flight: bytes taken from the lane ahead of the announced tail: no bytes, the tail is waited for");
	fp.head = 1064 + 4096;
	ok(pl_flight_landed(&fp, &fclosed, 1, 4096) == 1,
	   "flight: a head more than half a ring past the tail: a broken ring, said as bytes (the read says EIO)");
	/*
	 * The race: every round the writer announces a send and lands it a
	 * little later; the reader, started on the announce, must say bytes,
	 * unless its deadline passed first (the writer preempted that long).
	 * A reader that decided on a second load of the tail said "nothing"
	 * when the tail landed between its loads.
	 */
	memset(&fp, 0, sizeof(fp));
	fspin = 4000;
	if (pthread_create(&w, NULL, flight_writer, (void *)rounds)) {
		ok(0, "flight: the writer thread starts");
		return;
	}
	for (long i = 0; i < rounds; i++) {
		uint64_t t = __atomic_load_n(&fp.tail, __ATOMIC_ACQUIRE);

		__atomic_store_n(&fgo, 1, __ATOMIC_RELEASE);
		while (__atomic_load_n(&fp.sending, __ATOMIC_ACQUIRE) != t + 1)
			sched_yield();
		t0 = pl_now_ns();
		r = pl_flight_landed(&fp, &fclosed, 1, 4096);
		d = pl_now_ns() - t0;
		if (!r) {
			zeros++;
			if (d < GS_DW_FLIGHT_NS)
				early++;
		}
		while (__atomic_load_n(&fgo, __ATOMIC_ACQUIRE) != 2)
			sched_yield();
		__atomic_store_n(&fp.head, t + 64, __ATOMIC_RELAXED);
		__atomic_store_n(&fgo, 0, __ATOMIC_RELEASE);
	}
	pthread_join(w, NULL);
	ok(early == 0,
	   "flight: %ld sends raced against their reader: %lld said no bytes before the deadline (%lld past it)",
	   rounds, early, zeros - early);
}

int main(void)
{
	struct pl_sock *s = pl_sock_new(AF_INET), *t = pl_sock_new(AF_INET),
		       *got;
	struct gs_rules rules;
	uint8_t addr[16];
	uint16_t lo, hi;
	int fam, len, line;
	cfg_t *cfg;

	tap_plan(39);

	/* fd table */
	ok(pl_fd_get(7) == NULL, "an unknown fd has no entry");
	ok(pl_fd_set(7, s) == 0 && s->refs == 2, "a slot holds a reference");
	ok(pl_fd_set(9, s) == 0 && s->refs == 3, "dup: two slots, one entry");
	got = pl_fd_get(9);
	ok(got == s && s->refs == 4, "get takes a reference");
	pl_fd_clear(7);
	pl_fd_clear(9);
	ok(s->refs == 2, "clearing both slots drops their references");
	pl_sock_put(got);
	ok(pl_fd_get(7) == NULL && pl_fd_get(9) == NULL,
	   "cleared slots have no entry");
	ok(pl_fd_set(PL_FD_MAX, s) == -1 && pl_fd_get(-1) == NULL,
	   "fds out of range are refused");
	wanted = t;
	ok(pl_fd_find(is_wanted) == -1, "find: no match, -1");
	pl_fd_set(3, s);
	pl_fd_set(70000, t); /* another chunk */
	pl_fd_set(5000, t);
	ok(pl_fd_find(is_wanted) == 5000, "find: the lowest fd that matches");
	{
		struct pl_fd_taken *taken;
		int n = pl_fd_take_range(4, ~0u, &taken);

		ok(n == 2 && taken[0].fd == 5000 && taken[0].s == t &&
			   taken[1].fd == 70000 && taken[1].s == t && t->refs == 3 &&
			   !pl_fd_has(5000) && !pl_fd_has(70000) && pl_fd_has(3),
		   "take_range [4, max]: the two entries above 3, across chunks, with their fds, references kept");
		for (int i = 0; i < n; i++)
			pl_sock_put(taken[i].s);
		free(taken);
		got = pl_fd_get(3);
		ok(got == s && pl_fd_take_range(0, 2, &taken) == 0 && !taken,
		   "take_range leaves the rest; an empty range takes nothing");
		pl_sock_put(got);
	}
	pl_fd_clear(3);
	pl_sock_put(s);
	pl_sock_put(t);

	/* parsing */
	ok(gs_parse_prefix("10.1.0.0/16", &fam, addr, &len) == 0 &&
		   fam == AF_INET && len == 16,
	   "prefix 10.1.0.0/16");
	ok(gs_parse_prefix("fe80::/10", &fam, addr, &len) == 0 &&
		   fam == AF_INET6 && len == 10,
	   "prefix fe80::/10");
	ok(gs_parse_prefix("10.0.0.0/33", &fam, addr, &len) < 0 &&
		   gs_parse_prefix("nonsense", &fam, addr, &len) < 0,
	   "bad prefixes are refused");
	ok(gs_parse_ports("7000-7100", &lo, &hi) == 0 && lo == 7000 &&
		   hi == 7100 && gs_parse_ports("9-3", &lo, &hi) < 0 &&
		   gs_parse_ports("70000", &lo, &hi) < 0,
	   "port ranges");

	cfg = parse_text("preload {\n rule {\n  ports = \"x\"\n  route = \"os\"\n }\n}\n");
	ok(!cfg && strstr(reported, ":3: ports: \"x\" is not"),
	   "a bad value is reported with its line");
	cfg = parse_text("preload {\n rule {\n  address = \"10.0.0.0/8\"\n }\n}\n");
	ok(!cfg && strstr(reported, "rule: says neither route"),
	   "a rule that says neither route nor direct is reported");
	cfg = parse_text("preload {\n rule { route = \"fast\" }\n}\n");
	ok(!cfg && strstr(reported, ":2: route: \"fast\" is not one of os, rsocket"),
	   "an unknown route is reported with its line");

	cfg = parse_text(
		"preload {\n"
		"  default_route = \"rsocket\"\n"
		"  rule {\n"
		"    program = \"redis-*\"\n"
		"    role = \"server\"\n"
		"    ports = \"6379\"\n"
		"    route = \"rsocket\"\n"
		"  }\n"
		"  rule {\n"
		"    address = \"10.0.0.0/8\"\n"
		"    ports = \"1000-2000\"\n"
		"    route = \"os\"\n"
		"  }\n"
		"  rule {\n"
		"    address = \"10.0.0.0/8\"\n"
		"    route = \"rsocket\"\n"
		"  }\n"
		"}\n");
	ok(cfg && gs_rules_load(cfg, &rules) == 0 && rules.n == 3,
	   "three rules load");
	ok(route(&rules, "redis-server", GS_ROLE_SERVER, "0.0.0.0", 6379,
		 &line) == GS_ROUTE_RSOCKET && line == 8,
	   "program, role and port match the first rule");
	ok(route(&rules, "redis-server", GS_ROLE_CLIENT, "10.1.2.3", 1500,
		 &line) == GS_ROUTE_OS && line == 13,
	   "the role decides: a client falls to the second rule");
	ok(route(&rules, "nc", GS_ROLE_CLIENT, "10.1.2.3", 1500, &line) ==
			   GS_ROUTE_OS && line == 13,
	   "first match wins over a later, wider rule");
	ok(route(&rules, "nc", GS_ROLE_CLIENT, "10.1.2.3", 3000, &line) ==
			   GS_ROUTE_RSOCKET && line == 17,
	   "a port outside the range goes on to the next rule");
	ok(route(&rules, "nc", GS_ROLE_CLIENT, "11.0.0.1", 3000, &line) ==
			   GS_ROUTE_RSOCKET && line == 0,
	   "no match: the default route");
	ok(route(&rules, "nc", GS_ROLE_CLIENT, "9.255.255.255", 1500, &line) ==
			   GS_ROUTE_RSOCKET && line == 0,
	   "just outside the prefix: no match");
	gs_rules_free(&rules);
	cfg_free(cfg);

	/* direct: its own first match; rules that say only direct leave routes be. */
	cfg = parse_text("direct = \"auto\"\n"
			 "preload {\n"
			 "  rule {\n"
			 "    program = \"redis-*\"\n"
			 "    ports = \"6379\"\n"
			 "    direct = \"off\"\n"
			 "  }\n"
			 "  rule {\n"
			 "    route = \"os\"\n"
			 "  }\n"
			 "}\n");
	{
		struct sockaddr_in a = v4("127.0.0.1", 6379);

		ok(cfg && gs_rules_load(cfg, &rules) == 0 && rules.n == 2 &&
			   gs_rules_direct(&rules, "redis-cli",
					   (struct sockaddr *)&a, &line) == 0 &&
			   line == 7 &&
			   route(&rules, "redis-cli", GS_ROLE_CLIENT,
				 "127.0.0.1", 6379, &line) == GS_ROUTE_OS &&
			   line == 10,
		   "a rule of direct alone decides direct, and not the route");
		a = v4("127.0.0.1", 6380);
		ok(cfg && gs_rules_direct(&rules, "redis-cli",
					  (struct sockaddr *)&a, &line) == 1 &&
			   line == 0,
		   "no rule of direct: gsock.conf's direct");
	}
	gs_rules_free(&rules);
	cfg_free(cfg);
	cfg = parse_text("direct = \"off\"\n");
	{
		struct sockaddr_in a = v4("127.0.0.1", 1);

		ok(cfg && gs_rules_load(cfg, &rules) == 0 &&
			   gs_rules_direct(&rules, "x", (struct sockaddr *)&a,
					   &line) == 0,
		   "direct = off in gsock.conf: off for every client");
	}
	gs_rules_free(&rules);
	cfg_free(cfg);
	cfg = parse_text("busy_poll_us = 10\n");
	ok(cfg && gs_rules_load(cfg, &rules) == 0 && rules.n == 0 &&
		   rules.fallback == GS_ROUTE_OS,
	   "no preload section: no rules, the kernel route");
	cfg_free(cfg);
	flight_tests();
	tap_exit();
}
