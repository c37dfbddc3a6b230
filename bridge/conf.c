/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock.conf for gsockd, read with libconfuse: typed keys with defaults,
 * and every mistake reported as "FILE:LINE: key: what is wrong".
 */
#include <config.h>

#include <confuse.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../devlib/gsock_ctl.h"
#include "conf.h"
#include "log.h"

void br_conf_defaults(struct br_conf *c)
{
	memset(c, 0, sizeof(*c));
	gs_ctl_default_path(c->control, sizeof(c->control));
	c->busy_poll_us = 200;
	c->idle_sleep_us = 1000;
	c->log_level = BR_LOG_INFO;
	c->max_apps = 64;
	c->max_arena_mb = 4096;
	c->accept_queue = 128;
	c->linger_ms = 5000;
}

static void conf_error(cfg_t *cfg, const char *fmt, va_list ap)
{
	char what[512];

	vsnprintf(what, sizeof(what), fmt, ap);
	br_err("%s:%d: %s", cfg->filename ? cfg->filename : "gsock.conf",
	       cfg->line, what);
}

/* Integer keys and their allowed ranges. */
static const struct {
	const char *key;
	long min, max;
	size_t off;
} int_keys[] = {
	{ "busy_poll_us", 0, 10000000, offsetof(struct br_conf, busy_poll_us) },
	{ "idle_sleep_us", 10, 1000000,
	  offsetof(struct br_conf, idle_sleep_us) },
	{ "max_apps", 1, 4096, offsetof(struct br_conf, max_apps) },
	{ "max_arena_mb", 1, 1 << 20, offsetof(struct br_conf, max_arena_mb) },
	{ "accept_queue", 1, 65536, offsetof(struct br_conf, accept_queue) },
	{ "linger_ms", 0, 3600000, offsetof(struct br_conf, linger_ms) },
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
	}
	return 0;
}

static int validate_str(cfg_t *cfg, cfg_opt_t *opt)
{
	const char *v = cfg_opt_getnstr(opt, 0);

	if (!strcmp(opt->name, "log_level") && br_log_level_parse(v) < 0) {
		cfg_error(
			cfg,
			"log_level: \"%s\" is not one of error, warn, info, debug",
			v);
		return -1;
	}
	if (!strcmp(opt->name, "log") && strcmp(v, "stderr") &&
	    strcmp(v, "syslog")) {
		cfg_error(cfg, "log: \"%s\" is not one of stderr, syslog", v);
		return -1;
	}
	if (!strcmp(opt->name, "control") &&
	    (v[0] != '/' ||
	     strlen(v) >= sizeof(((struct br_conf *)0)->control))) {
		cfg_error(
			cfg,
			"control: \"%s\" must be an absolute path shorter than %zu bytes",
			v, sizeof(((struct br_conf *)0)->control));
		return -1;
	}
	return 0;
}

int br_conf_load(struct br_conf *c, const char *path, int required)
{
	cfg_opt_t opts[] = {
		CFG_STR("control", c->control, CFGF_NONE),
		CFG_INT("busy_poll_us", c->busy_poll_us, CFGF_NONE),
		CFG_INT("idle_sleep_us", c->idle_sleep_us, CFGF_NONE),
		CFG_STR("log_level", "info", CFGF_NONE),
		CFG_STR("log", "stderr", CFGF_NONE),
		CFG_INT("max_apps", c->max_apps, CFGF_NONE),
		CFG_INT("max_arena_mb", c->max_arena_mb, CFGF_NONE),
		CFG_INT("accept_queue", c->accept_queue, CFGF_NONE),
		CFG_INT("linger_ms", c->linger_ms, CFGF_NONE),
		CFG_END()
	};
	cfg_t *cfg;
	int r = -1;

	if (access(path, F_OK) < 0 && !required)
		return 0;
	cfg = cfg_init(opts, CFGF_NONE);
	if (!cfg) {
		br_err("out of memory reading %s", path);
		return -1;
	}
	cfg_set_error_function(cfg, conf_error);
	for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++)
		cfg_set_validate_func(cfg, int_keys[i].key, validate_int);
	cfg_set_validate_func(cfg, "log_level", validate_str);
	cfg_set_validate_func(cfg, "log", validate_str);
	cfg_set_validate_func(cfg, "control", validate_str);
	switch (cfg_parse(cfg, path)) {
	case CFG_SUCCESS:
		break;
	case CFG_FILE_ERROR:
		br_err("cannot read configuration %s: %s", path,
		       strerror(errno));
		goto out_free;
	default:
		br_err("configuration %s has errors (see above); fix them or run with --conf pointing elsewhere",
		       path);
		goto out_free;
	}
	snprintf(c->control, sizeof(c->control), "%s",
		 cfg_getstr(cfg, "control"));
	for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++)
		*(long *)((char *)c + int_keys[i].off) =
			cfg_getint(cfg, int_keys[i].key);
	c->log_level = br_log_level_parse(cfg_getstr(cfg, "log_level"));
	c->log_syslog = !strcmp(cfg_getstr(cfg, "log"), "syslog");
	r = 0;
out_free:
	cfg_free(cfg);
	return r;
}
