/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's log: levels, to stderr or syslog. Lines of one kind (one format
 * string) beyond BR_LOG_BURST in a second are counted, not written, so a
 * flood of bad clients cannot flood the log; the count is written with
 * the next line of that kind, or by br_log_flush() once the second is
 * over. Debug lines are never held back.
 */
#ifndef BR_LOG_H
#define BR_LOG_H

enum br_log_level {
	BR_LOG_ERROR, /* gsockd cannot do what it was asked */
	BR_LOG_WARN, /* an application or peer misbehaved; gsockd carries on */
	BR_LOG_INFO, /* applications coming and going */
	BR_LOG_DEBUG, /* every command */
};

void br_log_open(enum br_log_level level, int use_syslog);
void br_log_close(void);
/* Parse "error", "warn", "info" or "debug"; -1 if none of them. */
int br_log_level_parse(const char *s);
void br_log(enum br_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Write the counts of lines held back in seconds that are over. */
void br_log_flush(void);

#define BR_LOG_BURST 10 /* lines of one kind a second */

#define br_err(...) br_log(BR_LOG_ERROR, __VA_ARGS__)
#define br_warn(...) br_log(BR_LOG_WARN, __VA_ARGS__)
#define br_info(...) br_log(BR_LOG_INFO, __VA_ARGS__)
#define br_dbg(...) br_log(BR_LOG_DEBUG, __VA_ARGS__)

#endif
