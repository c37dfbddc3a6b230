/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sockets for the example applications, made from the address text a
 * user types on a command line (gsock_parse_addr).
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

int app_connect(const char *spec)
{
	struct sockaddr_storage ss;
	uint32_t len;
	int fd, one = 1;

	if (gsock_parse_addr(spec, &ss, &len)) {
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

int app_connect_nb(const char *spec)
{
	struct sockaddr_storage ss;
	uint32_t len;
	int fd, one = 1;

	if (gsock_parse_addr(spec, &ss, &len)) {
		errno = EINVAL;
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -1;
	if (ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 &&
	    errno != EINPROGRESS) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
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

	if (gsock_parse_addr(spec, &ss, &len)) {
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
