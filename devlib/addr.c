/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address text: what a user types for an address on a command line
 * ("HOST:PORT", "[V6]:PORT", "PORT", "/unix/path"), resolved with
 * getaddrinfo, and an address written back the same way. Part of
 * libgsock (gsock.h) for g-call programs' host sides; the CPU-only
 * example programs compile it too.
 */
#include <config.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <netinet/in.h>

#include "gsock.h"

int gsock_parse_addr(const char *spec, struct sockaddr_storage *ss,
		     uint32_t *len)
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
	/* getaddrinfo would take 70000 as 4464: a port is 0 to 65535 */
	if (!*port || strspn(port, "0123456789") != strlen(port) ||
	    strlen(port) > 5 || atoi(port) > 65535)
		return -1;
	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

void gsock_format_addr(const struct sockaddr_storage *ss, char *buf, size_t len)
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
