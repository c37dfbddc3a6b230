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

/* A socket of spec's family (flags: SOCK_NONBLOCK or 0), its address in ss. */
static int app_socket(const char *spec, int flags, struct sockaddr_storage *ss,
		      uint32_t *len)
{
	if (gsock_parse_addr(spec, ss, len)) {
		errno = EINVAL;
		return -1;
	}
	return socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
}

/* fd, or -1 with errno after closing fd, as r (0 or -1) says. */
static int app_fd_or_close(int fd, int r)
{
	int e = errno;

	if (!r)
		return fd;
	close(fd);
	errno = e;
	return -1;
}

/* Connect to spec: blocking, or with nonblock begun (EINPROGRESS). */
static int app_dial(const char *spec, int nonblock)
{
	struct sockaddr_storage ss;
	uint32_t len;
	int fd, one = 1, r;

	fd = app_socket(spec, nonblock ? SOCK_NONBLOCK : 0, &ss, &len);
	if (fd < 0)
		return -1;
	if (nonblock && ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r = connect(fd, (struct sockaddr *)&ss, len) < 0 &&
	    !(nonblock && errno == EINPROGRESS);
	if (app_fd_or_close(fd, -r) < 0)
		return -1;
	if (!nonblock && ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int app_connect(const char *spec)
{
	return app_dial(spec, 0);
}

int app_connect_nb(const char *spec)
{
	return app_dial(spec, 1);
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

	fd = app_socket(spec, SOCK_NONBLOCK, &ss, &len);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	return app_fd_or_close(fd, -(bind(fd, (struct sockaddr *)&ss, len) < 0 ||
				     listen(fd, 1024) < 0));
}
