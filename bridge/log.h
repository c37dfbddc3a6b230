/* SPDX-License-Identifier: Apache-2.0 */
/* gsockd's log: levels, to stderr or syslog. */
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

#define br_err(...) br_log(BR_LOG_ERROR, __VA_ARGS__)
#define br_warn(...) br_log(BR_LOG_WARN, __VA_ARGS__)
#define br_info(...) br_log(BR_LOG_INFO, __VA_ARGS__)
#define br_dbg(...) br_log(BR_LOG_DEBUG, __VA_ARGS__)

#endif
