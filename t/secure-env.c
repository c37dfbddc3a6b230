/* SPDX-License-Identifier: Apache-2.0 */
/*
 * secure-env PRELOAD: load the preload with dlopen (as the loader would
 * for a program in secure-execution mode, where LD_PRELOAD paths are
 * ignored) and make one TCP connection attempt through its socket and
 * connect. Run set-user-ID by t/preload-torture.t: the preload must then
 * ignore GSOCK_LOG and log nothing.
 */
#include <config.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(1),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int (*sock)(int, int, int);
	int (*conn)(int, const struct sockaddr *, socklen_t);
	void *h;
	int fd;

	if (argc != 2 || !(h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "secure-env: %s\n", argc == 2 ? dlerror() : "usage: secure-env PRELOAD");
		return 64;
	}
	sock = (int (*)(int, int, int))dlsym(h, "socket");
	conn = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(h, "connect");
	if (!sock || !conn)
		return 69;
	fd = sock(AF_INET, SOCK_STREAM, 0);
	conn(fd, (struct sockaddr *)&sa, sizeof(sa));
	printf("secure-env: secure mode %lu\n", getauxval(AT_SECURE));
	return 0;
}
