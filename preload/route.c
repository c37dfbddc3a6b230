/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Route decisions (see route.h). The rules come from gsock.conf
 * ($GSOCK_CONF, else $(sysconfdir)/gsock.conf); a file with mistakes is
 * reported, line by line, and the program runs on the kernel route.
 */
#include <config.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../devlib/gsock_ctl.h"
#include "real.h"
#include "route.h"
#include "rs.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif

/* What GSOCK_TRANSPORT asks for. */
enum pl_transport {
	PL_T_AUTO, /* the rules decide; rsocket only where RDMA exists */
	PL_T_OS, /* every socket on the kernel */
	PL_T_RSOCKET, /* every TCP socket on rsocket, where RDMA exists */
};

static enum pl_log_level log_level = PL_LOG_WARN;
static enum pl_transport transport = PL_T_AUTO;
static struct gs_rules rules;
static int have_rdma;
static int fork_safe;
static int direct_env = 1; /* GSOCK_DIRECT=off: 0 */
static char control[108]; /* gsock.conf's control, or "" */

void pl_log(enum pl_log_level level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info",
					     "debug" };
	char line[640];
	va_list ap;
	int n;

	if (level > log_level)
		return;
	n = snprintf(line, sizeof(line), "gsock-preload[%d] %s: %s: ",
		     (int)getpid(), program_invocation_short_name,
		     names[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (pl_real.write(2, line, n) < 0) {
		/* Nowhere left to say it. */
	}
}

int pl_route_rdma_possible(void)
{
	return have_rdma && transport != PL_T_OS;
}

int pl_route_fork_safe(void)
{
	return fork_safe;
}

static void report(const char *msg)
{
	pl_log(PL_LOG_ERROR, "%s", msg);
}

/* An RDMA device is there when the kernel lists one. */
static int rdma_present(void)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d)))
		found = e->d_name[0] != '.';
	closedir(d);
	return found;
}

void pl_route_init(void)
{
	/*
	 * secure_getenv: in a process that changed its ids (set-user-ID,
	 * capabilities) the environment is its caller's, not to be trusted:
	 * no GSOCK_CONF file to read as root, no log level, the defaults.
	 */
	const char *lvl = secure_getenv("GSOCK_LOG");
	const char *t = secure_getenv("GSOCK_TRANSPORT");
	const char *path = secure_getenv("GSOCK_CONF");
	const char *fs = secure_getenv("RDMAV_FORK_SAFE");
	const char *dir = secure_getenv("GSOCK_DIRECT");
	int required = path && *path;
	cfg_t *cfg;

	if (lvl) {
		static const char *const names[] = { "error", "warn", "info",
						     "debug" };

		for (int i = 0; i <= PL_LOG_DEBUG; i++)
			if (!strcmp(lvl, names[i]))
				log_level = i;
	}
	if (t && !strcmp(t, "os"))
		transport = PL_T_OS;
	else if (t && !strcmp(t, "rsocket"))
		transport = PL_T_RSOCKET;
	else if (t && *t && strcmp(t, "auto"))
		pl_log(PL_LOG_WARN,
		       "GSOCK_TRANSPORT=%s is not auto, rsocket or os; using auto",
		       t);
	if (dir && !strcmp(dir, "off"))
		direct_env = 0;
	else if (dir && *dir && strcmp(dir, "auto"))
		pl_log(PL_LOG_WARN, "GSOCK_DIRECT=%s is not auto or off; using auto",
		       dir);
	have_rdma = rdma_present();
	fork_safe = fs && *fs && strcmp(fs, "0");
	if (!required)
		path = SYSCONFDIR "/gsock.conf";
	cfg = gs_conf_parse(path, required, report);
	if (!cfg || gs_rules_load(cfg, &rules)) {
		pl_log(PL_LOG_ERROR,
		       "ignoring the rules of %s: every socket takes the kernel route",
		       path);
		memset(&rules, 0, sizeof(rules));
	}
	if (cfg && cfg_size(cfg, "control"))
		snprintf(control, sizeof(control), "%s",
			 cfg_getstr(cfg, "control"));
	if (cfg)
		cfg_free(cfg);
	pl_log(PL_LOG_DEBUG, "transport %s, %d rules, RDMA device %s%s",
	       transport == PL_T_OS ? "os" :
	       transport == PL_T_RSOCKET ? "rsocket" : "auto",
	       rules.n, have_rdma ? "present" : "absent",
	       fork_safe ? ", fork-safe mode" : "");
}

static void addr_text(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)sa;

		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		port = ntohs(a->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)sa;

		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		port = ntohs(a->sin6_port);
	}
	snprintf(buf, len, sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u",
		 ip, port);
}

enum gs_route pl_route_decide(int fd, enum gs_role role,
			      const struct sockaddr *sa)
{
	char where[INET6_ADDRSTRLEN + 16], why[48] = "GSOCK_TRANSPORT";
	const char *side = role == GS_ROLE_SERVER ? "server at" : "client to";
	enum gs_route want;
	int line = 0;

	if (transport == PL_T_OS) {
		want = GS_ROUTE_OS;
	} else if (transport == PL_T_RSOCKET) {
		want = GS_ROUTE_RSOCKET;
	} else {
		want = gs_rules_match(&rules, program_invocation_short_name,
				      role, sa, &line);
		if (line)
			snprintf(why, sizeof(why), "the rule ending at line %d", line);
		else
			snprintf(why, sizeof(why), "the default route");
	}
	addr_text(sa, where, sizeof(where));
	if (want == GS_ROUTE_RSOCKET) {
		const char *no = have_rdma ? NULL : "this host has no RDMA device";

#ifdef HAVE_RDMACM
		if (!no && pl_rs_load(&no) == 0) {
			pl_log(PL_LOG_DEBUG, "fd %d (%s %s): rsocket, by %s", fd,
			       side, where, why);
			return GS_ROUTE_RSOCKET;
		}
#else
		if (!no)
			no = "this build has no librdmacm";
#endif
		pl_log(have_rdma ? PL_LOG_WARN : PL_LOG_INFO,
		       "fd %d (%s %s): %s asks for rsocket, but %s; using the kernel",
		       fd, side, where, why, no);
		return GS_ROUTE_OS;
	}
	pl_log(PL_LOG_DEBUG, "fd %d (%s %s): kernel, by %s", fd, side, where,
	       why);
	return GS_ROUTE_OS;
}

int pl_route_direct(int fd, const struct sockaddr *sa)
{
	char where[INET6_ADDRSTRLEN + 16];
	int line, d;

	if (!direct_env) {
		pl_log(PL_LOG_DEBUG, "fd %d: GSOCK_DIRECT=off", fd);
		return 0;
	}
	d = gs_rules_direct(&rules, program_invocation_short_name, sa, &line);
	addr_text(sa, where, sizeof(where));
	if (line)
		pl_log(PL_LOG_DEBUG, "fd %d (client to %s): direct %s, by the rule ending at line %d",
		       fd, where, d ? "auto" : "off", line);
	else if (!d)
		pl_log(PL_LOG_DEBUG, "fd %d (client to %s): direct off, by gsock.conf's direct",
		       fd, where);
	return d;
}

const char *pl_route_control(void)
{
	static char def[108];
	const char *env = secure_getenv("GSOCK_CONTROL");

	if (env && *env)
		return env;
	if (*control)
		return control;
	if (!*def)
		gs_ctl_default_path(def, sizeof(def));
	return def;
}
