/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock.conf's schema and checks, read with libconfuse, and the
 * preload's route rules (first match wins).
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gsconf.h"

static gs_conf_report conf_report;
static const char *conf_path; /* sections' cfg_t carry no file name */

static void conf_error(cfg_t *cfg, const char *fmt, va_list ap)
{
	char what[400], line[512];

	vsnprintf(what, sizeof(what), fmt, ap);
	snprintf(line, sizeof(line), "%s:%d: %s",
		 conf_path, cfg->line,
		 what);
	if (conf_report)
		conf_report(line);
}

/* Integer keys of gsockd and their allowed ranges. */
static const struct {
	const char *key;
	long min, max;
} int_keys[] = {
	{ "busy_poll_us", 0, 10000000 }, { "idle_sleep_us", 10, 1000000 },
	{ "watch_min_us", 1, 1000000 },	 { "max_apps", 1, 4096 },
	{ "max_arena_mb", 1, 1 << 20 },	 { "accept_queue", 1, 65536 },
	{ "linger_ms", 0, 3600000 },	 { "workers", 0, 64 },
	{ "numa_node", -1, 1023 },	 { "hello_timeout_ms", 10, 600000 },
	{ "max_sockets", 1, 1 << 20 },	 { "max_slots", 1, 1 << 20 },
	{ "direct_conns", 1, 65536 },
	{ "direct_ring_size", 4096, 64 << 20 },
	{ "direct_accept_ms", 0, 60000 },
};

static int validate_int(cfg_t *cfg, cfg_opt_t *opt)
{
	long v = cfg_opt_getnint(opt, 0);

	for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++) {
		if (strcmp(int_keys[i].key, opt->name))
			continue;
		if (v < int_keys[i].min || v > int_keys[i].max) {
			cfg_error(cfg, "%s: %ld is out of range (%ld..%ld)",
				  opt->name, v, int_keys[i].min,
				  int_keys[i].max);
			return -1;
		}
		if (!strcmp(opt->name, "direct_ring_size") && (v & (v - 1))) {
			cfg_error(cfg, "%s: %ld is not a power of two",
				  opt->name, v);
			return -1;
		}
	}
	return 0;
}

/* A string key whose value must be one of a list. */
static int one_of(cfg_t *cfg, const char *key, const char *v,
		  const char *const *choices, const char *said)
{
	for (int i = 0; choices[i]; i++)
		if (!strcmp(v, choices[i]))
			return 0;
	cfg_error(cfg, "%s: \"%s\" is not one of %s", key, v, said);
	return -1;
}

static const char *const levels[] = { "error", "warn", "info", "debug",
				      NULL };
static const char *const logs[] = { "stderr", "syslog", NULL };
static const char *const routes[] = { "os", "rsocket", NULL };
static const char *const transports[] = { "tcp", "rsocket", NULL };
static const char *const ios[] = { "auto", "io_uring", "epoll", NULL };
static const char *const roles[] = { "any", "server", "client", NULL };
static const char *const directs[] = { "auto", "off", NULL };
static const char *const naps[] = { "learn", "off", NULL };

static int validate_str(cfg_t *cfg, cfg_opt_t *opt)
{
	const char *v = cfg_opt_getnstr(opt, 0);
	const char *k = opt->name;
	uint8_t addr[16];
	uint16_t lo, hi;
	int fam, len;

	if (!strcmp(k, "log_level"))
		return one_of(cfg, k, v, levels, "error, warn, info, debug");
	if (!strcmp(k, "log"))
		return one_of(cfg, k, v, logs, "stderr, syslog");
	if (!strcmp(k, "route") || !strcmp(k, "default_route"))
		return one_of(cfg, k, v, routes, "os, rsocket");
	if (!strcmp(k, "transport"))
		return one_of(cfg, k, v, transports, "tcp, rsocket");
	if (!strcmp(k, "io"))
		return one_of(cfg, k, v, ios, "auto, io_uring, epoll");
	if (!strcmp(k, "direct") || !strcmp(k, "direct_device"))
		return one_of(cfg, k, v, directs, "auto, off");
	if (!strcmp(k, "answer_nap"))
		return one_of(cfg, k, v, naps, "learn, off");
	if (!strcmp(k, "preload_library") && v[0] != '/') {
		cfg_error(cfg, "preload_library: \"%s\" must be an absolute path", v);
		return -1;
	}
	if (!strcmp(k, "role"))
		return one_of(cfg, k, v, roles, "any, server, client");
	if (!strcmp(k, "control") && (v[0] != '/' || strlen(v) >= 108)) {
		cfg_error(cfg,
			  "control: \"%s\" must be an absolute path shorter than 108 bytes",
			  v);
		return -1;
	}
	if (!strcmp(k, "address") && gs_parse_prefix(v, &fam, addr, &len)) {
		cfg_error(cfg,
			  "address: \"%s\" is not ADDRESS, ADDRESS/LENGTH or any",
			  v);
		return -1;
	}
	if (!strcmp(k, "ports") && gs_parse_ports(v, &lo, &hi)) {
		cfg_error(cfg,
			  "ports: \"%s\" is not PORT, LOW-HIGH (0..65535) or any",
			  v);
		return -1;
	}
	if (!strcmp(k, "program") && strlen(v) >= 64) {
		cfg_error(cfg, "program: \"%s\" is longer than 63 bytes", v);
		return -1;
	}
	return 0;
}

/* A rule must say where it sends what it matches. */
static int validate_rule(cfg_t *cfg, cfg_opt_t *opt)
{
	cfg_t *rule = cfg_opt_getnsec(opt, cfg_opt_size(opt) - 1);

	if (!cfg_size(rule, "route") && !cfg_size(rule, "direct")) {
		cfg_error(cfg,
			  "rule: says neither route (os or rsocket) nor direct (auto or off)");
		return -1;
	}
	return 0;
}

cfg_t *gs_conf_parse(const char *path, int required, gs_conf_report report)
{
	static cfg_opt_t rule_opts[] = {
		CFG_STR("program", "*", CFGF_NONE),
		CFG_STR("role", "any", CFGF_NONE),
		CFG_STR("address", "any", CFGF_NONE),
		CFG_STR("ports", "any", CFGF_NONE),
		CFG_STR("route", NULL, CFGF_NODEFAULT),
		CFG_STR("direct", NULL, CFGF_NODEFAULT),
		CFG_END()
	};
	static cfg_opt_t preload_opts[] = {
		CFG_STR("default_route", "os", CFGF_NONE),
		CFG_SEC("rule", rule_opts, CFGF_MULTI),
		CFG_END()
	};
	static cfg_opt_t opts[] = {
		CFG_STR("control", NULL, CFGF_NODEFAULT),
		CFG_INT("busy_poll_us", 50, CFGF_NONE),
		CFG_INT("watch_min_us", 20, CFGF_NONE),
		CFG_INT("idle_sleep_us", 1000, CFGF_NONE),
		CFG_STR("answer_nap", "learn", CFGF_NONE),
		CFG_STR("log_level", "info", CFGF_NONE),
		CFG_STR("log", "stderr", CFGF_NONE),
		CFG_INT("max_apps", 64, CFGF_NONE),
		CFG_INT("max_arena_mb", 4096, CFGF_NONE),
		CFG_INT("max_sockets", 262144, CFGF_NONE),
		CFG_INT("max_slots", 65536, CFGF_NONE),
		CFG_INT("hello_timeout_ms", 10000, CFGF_NONE),
		CFG_INT("accept_queue", 128, CFGF_NONE),
		CFG_INT("linger_ms", 5000, CFGF_NONE),
		CFG_INT("workers", 0, CFGF_NONE),
		CFG_INT("numa_node", -1, CFGF_NONE),
		CFG_STR("io", "epoll", CFGF_NONE),
		CFG_STR("transport", "tcp", CFGF_NONE),
		CFG_STR("direct", "auto", CFGF_NONE),
		CFG_STR("direct_device", "auto", CFGF_NONE),
		CFG_INT("direct_conns", 256, CFGF_NONE),
		CFG_INT("direct_ring_size", 1048576, CFGF_NONE),
		CFG_INT("direct_accept_ms", 200, CFGF_NONE),
		CFG_STR("preload_library", LIBDIR "/libgsock-preload.so",
			CFGF_NONE),
		CFG_SEC("preload", preload_opts, CFGF_NONE),
		CFG_END()
	};
	static const char *const str_keys[] = {
		"control",	    "log_level",	     "log", "io", "transport", "preload_library", "direct", "direct_device", "answer_nap",
		"preload|default_route", "preload|rule|program", "preload|rule|role",
		"preload|rule|address",	 "preload|rule|ports",	 "preload|rule|route",
		"preload|rule|direct",
	};
	char msg[512];
	cfg_t *cfg;
	int r;

	conf_report = report;
	conf_path = path;
	cfg = cfg_init(opts, CFGF_NONE);
	if (!cfg) {
		if (report)
			report("out of memory reading the configuration");
		return NULL;
	}
	cfg_set_error_function(cfg, conf_error);
	for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++)
		cfg_set_validate_func(cfg, int_keys[i].key, validate_int);
	for (size_t i = 0; i < sizeof(str_keys) / sizeof(str_keys[0]); i++)
		cfg_set_validate_func(cfg, str_keys[i], validate_str);
	cfg_set_validate_func(cfg, "preload|rule", validate_rule);
	if (access(path, F_OK) < 0 && !required)
		return cfg; /* every default */
	r = cfg_parse(cfg, path);
	if (r == CFG_SUCCESS)
		return cfg;
	if (r == CFG_FILE_ERROR)
		snprintf(msg, sizeof(msg), "cannot read configuration %s: %s",
			 path, strerror(errno));
	else
		snprintf(msg, sizeof(msg),
			 "configuration %s has errors (see above); fix them or point GSOCK_CONF or --conf elsewhere",
			 path);
	if (report)
		report(msg);
	cfg_free(cfg);
	return NULL;
}

int gs_parse_prefix(const char *s, int *family, uint8_t addr[16], int *len)
{
	char buf[INET6_ADDRSTRLEN + 8], *slash, *end;
	int max;

	if (!strcmp(s, "any")) {
		*family = 0;
		*len = 0;
		return 0;
	}
	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	slash = strchr(buf, '/');
	if (slash)
		*slash = 0;
	memset(addr, 0, 16);
	if (inet_pton(AF_INET, buf, addr) == 1)
		*family = AF_INET;
	else if (inet_pton(AF_INET6, buf, addr) == 1)
		*family = AF_INET6;
	else
		return -1;
	max = *family == AF_INET ? 32 : 128;
	*len = max;
	if (slash) {
		long v = strtol(slash + 1, &end, 10);

		if (!slash[1] || *end || v < 0 || v > max)
			return -1;
		*len = (int)v;
	}
	return 0;
}

int gs_parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
{
	char *end;
	long a, b;

	if (!strcmp(s, "any")) {
		*lo = 0;
		*hi = 65535;
		return 0;
	}
	a = strtol(s, &end, 10);
	if (end == s || a < 0 || a > 65535)
		return -1;
	b = a;
	if (*end == '-') {
		const char *p = end + 1;

		b = strtol(p, &end, 10);
		if (end == p || b < a || b > 65535)
			return -1;
	}
	if (*end)
		return -1;
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

static enum gs_route route_of(const char *s)
{
	return !strcmp(s, "rsocket") ? GS_ROUTE_RSOCKET : GS_ROUTE_OS;
}

int gs_rules_load(cfg_t *cfg, struct gs_rules *out)
{
	cfg_t *pre = cfg_getsec(cfg, "preload");
	int n = pre ? (int)cfg_size(pre, "rule") : 0;

	memset(out, 0, sizeof(*out));
	out->fallback = pre ? route_of(cfg_getstr(pre, "default_route")) :
			      GS_ROUTE_OS;
	out->direct = strcmp(cfg_getstr(cfg, "direct"), "off") ? 1 : 0;
	if (!n)
		return 0;
	out->rule = calloc(n, sizeof(*out->rule));
	if (!out->rule)
		return -1;
	for (int i = 0; i < n; i++) {
		cfg_t *c = cfg_getnsec(pre, "rule", i);
		struct gs_rule *r = &out->rule[i];
		const char *role = cfg_getstr(c, "role");

		snprintf(r->program, sizeof(r->program), "%s",
			 cfg_getstr(c, "program"));
		r->role = !strcmp(role, "server") ? GS_ROLE_SERVER :
			  !strcmp(role, "client") ? GS_ROLE_CLIENT :
						    GS_ROLE_ANY;
		gs_parse_prefix(cfg_getstr(c, "address"), &r->family, r->addr,
				&r->prefix_len);
		gs_parse_ports(cfg_getstr(c, "ports"), &r->port_lo,
			       &r->port_hi);
		r->route = cfg_size(c, "route") ?
				   route_of(cfg_getstr(c, "route")) :
				   GS_ROUTE_NONE;
		r->direct = !cfg_size(c, "direct")		   ? -1 :
			    strcmp(cfg_getstr(c, "direct"), "off") ? 1 :
								     0;
		r->line = c->line;
	}
	out->n = n;
	return 0;
}

void gs_rules_free(struct gs_rules *r)
{
	free(r->rule);
	memset(r, 0, sizeof(*r));
}

/* Whether the first len bits of a and b agree. */
static int prefix_eq(const uint8_t *a, const uint8_t *b, int len)
{
	int bytes = len / 8, bits = len % 8;

	if (memcmp(a, b, bytes))
		return 0;
	return !bits || !((a[bytes] ^ b[bytes]) & (0xff << (8 - bits)));
}

static int rule_matches(const struct gs_rule *r, const char *prog,
			enum gs_role role, const struct sockaddr *sa)
{
	const uint8_t *addr;
	uint16_t port;

	if (r->role != GS_ROLE_ANY && r->role != role)
		return 0;
	if (fnmatch(r->program, prog, 0))
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)sa;

		addr = (const uint8_t *)&a->sin_addr;
		port = ntohs(a->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)sa;

		addr = (const uint8_t *)&a->sin6_addr;
		port = ntohs(a->sin6_port);
	} else {
		return 0;
	}
	if (port < r->port_lo || port > r->port_hi)
		return 0;
	if (!r->family)
		return 1;
	return r->family == sa->sa_family &&
	       prefix_eq(addr, r->addr, r->prefix_len);
}

enum gs_route gs_rules_match(const struct gs_rules *r, const char *prog,
			     enum gs_role role, const struct sockaddr *sa,
			     int *line)
{
	for (int i = 0; i < r->n; i++) {
		if (r->rule[i].route != GS_ROUTE_NONE &&
		    rule_matches(&r->rule[i], prog, role, sa)) {
			*line = r->rule[i].line;
			return r->rule[i].route;
		}
	}
	*line = 0;
	return r->fallback;
}

int gs_rules_direct(const struct gs_rules *r, const char *prog,
		    const struct sockaddr *sa, int *line)
{
	for (int i = 0; i < r->n; i++) {
		if (r->rule[i].direct >= 0 &&
		    rule_matches(&r->rule[i], prog, GS_ROLE_CLIENT, sa)) {
			*line = r->rule[i].line;
			return r->rule[i].direct;
		}
	}
	*line = 0;
	return r->direct;
}
