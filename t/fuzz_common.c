/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's state and the loopback-only sandbox for its libFuzzer targets
 * (t/fuzz_common.h says what they share and why).
 */
#define _GNU_SOURCE
#include <config.h>

#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "../bridge/log.h"
#include "fuzz_common.h"

struct br br; /* gsockd's state; main.c's, which is not linked here */

/* The folder whose unix paths may be bound and reached, or NULL. */
static const char *allowed_dir;

void fz_sandbox_allow(const char *dir)
{
	allowed_dir = dir;
}

/* Whether a unix address names a path in the folder a harness allowed. */
static int allowed_unix(const struct sockaddr_un *un, socklen_t len)
{
	size_t n = strnlen(un->sun_path,
			   len - offsetof(struct sockaddr_un, sun_path));
	size_t d = allowed_dir ? strlen(allowed_dir) : 0;
	char path[sizeof(un->sun_path) + 1];

	if (!d || n <= d + 1 || n >= sizeof(path))
		return 0;
	memcpy(path, un->sun_path, n);
	path[n] = 0;
	return !strncmp(path, allowed_dir, d) && path[d] == '/' &&
	       !strstr(path, "/..");
}

/* Whether sa may be bound or connected to: loopback, abstract, unnamed. */
static int sandboxed(const struct sockaddr *sa, socklen_t len)
{
	const struct sockaddr_in *in = (const void *)sa;
	const struct sockaddr_in6 *in6 = (const void *)sa;
	const struct sockaddr_un *un = (const void *)sa;

	if (len < sizeof(sa_family_t))
		return 0;
	if (sa->sa_family == AF_UNIX)
		return len > offsetof(struct sockaddr_un, sun_path) &&
		       (un->sun_path[0] == 0 || allowed_unix(un, len));
	if (sa->sa_family == AF_INET && len >= sizeof(*in))
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127 ||
		       in->sin_addr.s_addr == 0;
	if (sa->sa_family == AF_INET6 && len >= sizeof(*in6))
		return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
		       IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
	return 1; /* the kernel refuses the rest itself */
}

int __wrap_bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (!sandboxed(sa, len)) {
		errno = EACCES;
		return -1;
	}
	return __real_bind(fd, sa, len);
}

int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (!sandboxed(sa, len)) {
		errno = ENETUNREACH;
		return -1;
	}
	return __real_connect(fd, sa, len);
}

void fz_bridge_init(uint32_t nworkers)
{
	br_conf_defaults(&br.conf);
	br.conf.max_arena_mb = 64;
	br_log_open(BR_LOG_ERROR, 0);
	br.conf.linger_ms = 0; /* closed sockets go at once */
	br.uid = geteuid();
	br.unpriv_port = 1024;
	br.epfd = epoll_create1(EPOLL_CLOEXEC);
	br.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	br.nworkers = nworkers;
	br.workers = calloc(nworkers, sizeof(*br.workers));
	if (br.epfd < 0 || br.wake_fd < 0 || !br.workers)
		abort();
	for (uint32_t i = 0; i < nworkers; i++)
		if (br_worker_init(&br.workers[i], i))
			abort();
}
