/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A g-call program built out of the tree by t/install.t, against an
 * installed gsock, with pkg-config alone: one block connects to
 * 127.0.0.1:PORT, sends MESSAGE, reads as many bytes back, and the host
 * prints them. C for the host backend (cc, gsock-host), CUDA for the cuda
 * backend (nvcc -x cu, gsock-cuda).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsock.h>
#include <gsock.cuh>

struct job {
	struct sockaddr_in to;
	char msg[64];
	char got[64];
	int len;
	long result;
};

GSOCK_KERNEL(hello_kernel, gs, argp)
{
	struct job *j = (struct job *)argp;
	int fd = gsocket(gs, AF_INET, SOCK_STREAM, 0);
	long r = fd;

	if (fd >= 0) {
		r = gconnect(gs, fd, (const struct sockaddr *)&j->to,
			     sizeof(j->to));
		if (r == 0)
			r = gsend(gs, fd, j->msg, (size_t)j->len, 0);
		if (r == j->len)
			r = grecv(gs, fd, j->got, (size_t)j->len, MSG_WAITALL);
		gclose(gs, fd);
	}
	if (gs_tid() == 0)
		j->result = r;
}

int main(int argc, char **argv)
{
	char err[256];
	struct gsock_ctx *ctx;
	struct job *j;
	int r;

	if (argc != 3) {
		fprintf(stderr, "usage: %s PORT MESSAGE\n", argv[0]);
		return 64;
	}
	ctx = gsock_init(NULL, err, sizeof(err));
	if (!ctx) {
		fprintf(stderr, "gsock_init: %s\n", err);
		return 1;
	}
	j = (struct job *)gsock_alloc(ctx, sizeof(*j));
	j->to.sin_family = AF_INET;
	j->to.sin_port = htons((uint16_t)atoi(argv[1]));
	j->to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	snprintf(j->msg, sizeof(j->msg), "%s", argv[2]);
	j->len = (int)strlen(j->msg);
	r = gsock_launch(ctx, (const void *)hello_kernel, 1,
			 strcmp(gsock_backend(), "host") ? 64 : 1, j);
	if (r) {
		fprintf(stderr, "gsock_launch: %s\n", strerror(-r));
		gsock_fini(ctx);
		return 1;
	}
	gsock_wait(ctx);
	printf("%s backend: %ld: %.*s\n", gsock_backend(), j->result, j->len,
	       j->got);
	r = j->result == j->len && !memcmp(j->got, j->msg, (size_t)j->len) ?
		    0 :
		    1;
	gsock_fini(ctx);
	return r;
}
