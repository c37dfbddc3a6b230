/* SPDX-License-Identifier: Apache-2.0 */
/* gsockd's log: one line per event, prefixed with its level. */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "log.h"

static enum br_log_level log_level = BR_LOG_INFO;
static int log_syslog;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const int syslog_prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };

void br_log_open(enum br_log_level level, int use_syslog)
{
	log_level = level;
	log_syslog = use_syslog;
	if (use_syslog)
		openlog("gsockd", LOG_PID, LOG_DAEMON);
}

void br_log_close(void)
{
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
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	if (log_syslog) {
		vsyslog(syslog_prio[level], fmt, ap);
	} else {
		flockfile(stderr);
		fprintf(stderr, "gsockd: %s: ", level_names[level]);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		funlockfile(stderr);
	}
	va_end(ap);
}
