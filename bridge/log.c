/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's log: one line per event, prefixed with its level, at most
 * BR_LOG_BURST a second of one kind (log.h).
 */
#include <config.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "log.h"

static enum br_log_level log_level = BR_LOG_INFO;
static int log_syslog;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const int syslog_prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };

/* Lines of one kind (format string) held back in the current second. */
struct br_log_kind {
	const char *fmt;
	enum br_log_level level;
	uint64_t second; /* the second its count is for */
	unsigned lines; /* written in that second */
	unsigned long held; /* held back since the last line written */
};

#define BR_LOG_KINDS 128
static struct br_log_kind kinds[BR_LOG_KINDS];
static pthread_mutex_t kinds_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t flushed_second;

static uint64_t log_second(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

static void emit(enum br_log_level level, const char *fmt, va_list ap,
		 unsigned long held)
{
	if (log_syslog) {
		char line[1024];

		vsnprintf(line, sizeof(line), fmt, ap);
		if (held)
			syslog(syslog_prio[level],
			       "%s [%lu more like it not logged]", line, held);
		else
			syslog(syslog_prio[level], "%s", line);
		return;
	}
	flockfile(stderr);
	fprintf(stderr, "gsockd: %s: ", level_names[level]);
	vfprintf(stderr, fmt, ap);
	if (held)
		fprintf(stderr, " [%lu more like it not logged]", held);
	fputc('\n', stderr);
	funlockfile(stderr);
}

static void emit_held(const struct br_log_kind *k)
{
	if (log_syslog) {
		syslog(syslog_prio[k->level],
		       "%lu lines like \"%s\" not logged (more than %d a second)",
		       k->held, k->fmt, BR_LOG_BURST);
		return;
	}
	fprintf(stderr,
		"gsockd: %s: %lu lines like \"%s\" not logged (more than %d a second)\n",
		level_names[k->level], k->held, k->fmt, BR_LOG_BURST);
}

/*
 * Whether a line of fmt may be written now; *held: how many of its kind
 * were held back before it, to say with it. A full table admits all.
 */
static int admit(enum br_log_level level, const char *fmt,
		 unsigned long *held)
{
	uint64_t now = log_second();
	size_t i = ((uintptr_t)fmt >> 4) % BR_LOG_KINDS;
	struct br_log_kind *k = NULL;
	int ok = 1;

	*held = 0;
	pthread_mutex_lock(&kinds_lock);
	for (size_t n = 0; n < BR_LOG_KINDS; n++) {
		struct br_log_kind *c = &kinds[(i + n) % BR_LOG_KINDS];

		if (c->fmt == fmt || !c->fmt) {
			k = c;
			break;
		}
	}
	if (k) {
		if (!k->fmt)
			*k = (struct br_log_kind){ .fmt = fmt, .level = level };
		if (k->second != now) {
			k->second = now;
			k->lines = 0;
		}
		ok = k->lines < BR_LOG_BURST;
		if (ok) {
			k->lines++;
			*held = k->held;
			k->held = 0;
		} else {
			k->held++;
		}
	}
	pthread_mutex_unlock(&kinds_lock);
	return ok;
}

void br_log_flush(void)
{
	uint64_t now = log_second();

	if (__atomic_load_n(&flushed_second, __ATOMIC_RELAXED) == now)
		return;
	__atomic_store_n(&flushed_second, now, __ATOMIC_RELAXED);
	pthread_mutex_lock(&kinds_lock);
	if (!log_syslog)
		flockfile(stderr);
	for (size_t i = 0; i < BR_LOG_KINDS; i++) {
		struct br_log_kind *k = &kinds[i];

		if (k->fmt && k->held && k->second != now) {
			emit_held(k);
			k->held = 0;
		}
	}
	if (!log_syslog)
		funlockfile(stderr);
	pthread_mutex_unlock(&kinds_lock);
}

void br_log_open(enum br_log_level level, int use_syslog)
{
	log_level = level;
	log_syslog = use_syslog;
	if (use_syslog)
		openlog("gsockd", LOG_PID, LOG_DAEMON);
}

void br_log_close(void)
{
	pthread_mutex_lock(&kinds_lock);
	for (size_t i = 0; i < BR_LOG_KINDS; i++)
		if (kinds[i].fmt && kinds[i].held) {
			emit_held(&kinds[i]);
			kinds[i].held = 0;
		}
	pthread_mutex_unlock(&kinds_lock);
	if (log_syslog)
		closelog();
}

int br_log_level_parse(const char *s)
{
	for (int i = 0; i <= BR_LOG_DEBUG; i++)
		if (!strcmp(s, level_names[i]))
			return i;
	return -1;
}

void br_log(enum br_log_level level, const char *fmt, ...)
{
	unsigned long held = 0;
	va_list ap;

	if (level > log_level)
		return;
	if (level != BR_LOG_DEBUG && !admit(level, fmt, &held))
		return;
	va_start(ap, fmt);
	emit(level, fmt, ap, held);
	va_end(ap);
}
