/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address text for the example applications: what a user types on a
 * command line, resolved with getaddrinfo, and the sockets made from it.
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "app.h"

int app_parse_addr(const char *spec, struct sockaddr_storage *ss, uint32_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res;
	char host[256] = "0.0.0.0";
	const char *port = spec, *colon;

	memset(ss, 0, sizeof(*ss));
	if (spec[0] == '/') {
		struct sockaddr_un *un = (struct sockaddr_un *)ss;

		if (strlen(spec) >= sizeof(un->sun_path))
			return -1;
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, spec);
		*len = sizeof(*un);
		return 0;
	}
	colon = strrchr(spec, ':');
	if (colon) {
		size_t n = (size_t)(colon - spec);

		if (spec[0] == '[' && n >= 2 && spec[n - 1] == ']') {
			spec++;
			n -= 2;
		}
		if (n >= sizeof(host))
			return -1;
		memcpy(host, spec, n);
		host[n] = 0;
		port = colon + 1;
	}
	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

void app_format_addr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_UNIX) {
		snprintf(buf, len, "%s",
			 ((const struct sockaddr_un *)ss)->sun_path);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;

		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		const struct sockaddr_in *a = (const void *)ss;

		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(a->sin_port));
	}
}

int app_connect(const char *spec)
{
	struct sockaddr_storage ss;
	uint32_t len;
	int fd, one = 1;

	if (app_parse_addr(spec, &ss, &len)) {
		errno = EINVAL;
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	if (ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int app_io_all(int fd, void *p, size_t n, int sending)
{
	while (n) {
		ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) :
				      recv(fd, p, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p = (char *)p + k;
		n -= (size_t)k;
	}
	return 0;
}

int app_listen(const char *spec, int reuseport)
{
	struct sockaddr_storage ss;
	uint32_t len;
	int fd, one = 1;

	if (app_parse_addr(spec, &ss, &len)) {
		errno = EINVAL;
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 1024) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}
