/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's keys of gsock.conf. The schema and its checks are shared with
 * the preload (conf/gsconf.c); this file turns them into struct br_conf.
 */
#include <config.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../conf/gsconf.h"
#include "../devlib/gsock_ctl.h"
#include "conf.h"
#include "log.h"

void br_conf_defaults(struct br_conf *c)
{
	memset(c, 0, sizeof(*c));
	gs_ctl_default_path(c->control, sizeof(c->control));
	c->busy_poll_us = 50;
	c->answer_nap = 1;
	c->watch_min_us = 20;
	c->idle_sleep_us = 1000;
	c->log_level = BR_LOG_INFO;
	c->max_apps = 64;
	c->max_arena_mb = 4096;
	c->max_sockets = 262144;
	c->max_slots = 65536;
	c->hello_timeout_ms = 10000;
	c->accept_queue = 128;
	c->linger_ms = 5000;
	c->workers = 0;
	c->numa_node = -1;
	c->io = BR_IO_EPOLL; /* measured faster than io_uring: gsock.conf */
	c->direct = 1;
	c->direct_device = 1;
	c->direct_conns = 256;
	c->direct_ring_size = 1048576;
	c->direct_accept_ms = 200;
	snprintf(c->preload_library, sizeof(c->preload_library), "%s",
		 LIBDIR "/libgsock-preload.so");
}

int br_io_mode_parse(const char *s)
{
	static const char *const names[] = { "auto", "io_uring", "epoll" };

	for (int i = 0; i < 3; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static void report(const char *msg)
{
	br_err("%s", msg);
}

int br_conf_load(struct br_conf *c, const char *path, int required)
{
	cfg_t *cfg = gs_conf_parse(path, required, report);
	static const struct {
		const char *key;
		size_t off;
	} ints[] = {
		{ "busy_poll_us", offsetof(struct br_conf, busy_poll_us) },
		{ "idle_sleep_us", offsetof(struct br_conf, idle_sleep_us) },
		{ "watch_min_us", offsetof(struct br_conf, watch_min_us) },
		{ "max_apps", offsetof(struct br_conf, max_apps) },
		{ "max_arena_mb", offsetof(struct br_conf, max_arena_mb) },
		{ "max_sockets", offsetof(struct br_conf, max_sockets) },
		{ "max_slots", offsetof(struct br_conf, max_slots) },
		{ "hello_timeout_ms",
		  offsetof(struct br_conf, hello_timeout_ms) },
		{ "accept_queue", offsetof(struct br_conf, accept_queue) },
		{ "linger_ms", offsetof(struct br_conf, linger_ms) },
		{ "workers", offsetof(struct br_conf, workers) },
		{ "numa_node", offsetof(struct br_conf, numa_node) },
		{ "direct_conns", offsetof(struct br_conf, direct_conns) },
		{ "direct_ring_size",
		  offsetof(struct br_conf, direct_ring_size) },
		{ "direct_accept_ms",
		  offsetof(struct br_conf, direct_accept_ms) },
	};

	if (!cfg)
		return -1;
	if (cfg_size(cfg, "control"))
		snprintf(c->control, sizeof(c->control), "%s",
			 cfg_getstr(cfg, "control"));
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		*(long *)((char *)c + ints[i].off) = cfg_getint(cfg, ints[i].key);
	c->log_level = br_log_level_parse(cfg_getstr(cfg, "log_level"));
	c->log_syslog = !strcmp(cfg_getstr(cfg, "log"), "syslog");
	c->rsocket = !strcmp(cfg_getstr(cfg, "transport"), "rsocket");
	c->direct = !strcmp(cfg_getstr(cfg, "direct"), "auto");
	c->direct_device = !strcmp(cfg_getstr(cfg, "direct_device"), "auto");
	c->answer_nap = !strcmp(cfg_getstr(cfg, "answer_nap"), "learn");
	c->io = br_io_mode_parse(cfg_getstr(cfg, "io")); /* validated */
	snprintf(c->preload_library, sizeof(c->preload_library), "%s",
		 cfg_getstr(cfg, "preload_library"));
	cfg_free(cfg);
	return 0;
}

int br_proc_int(const char *path, int dflt)
{
	FILE *f = fopen(path, "re");
	int v = dflt;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}
