/* SPDX-License-Identifier: Apache-2.0 */
/*
 * register-signals N USEC: registers with gsockd N times in a row
 * (gsock_init, gsock_fini) while a SIGALRM handler installed without
 * SA_RESTART runs every USEC microseconds, as an application's own timer
 * would. Every blocking call of the registration is then interrupted now
 * and then; none of that may read as gsockd's refusal or as its absence.
 * Prints "registered N of N, SIGNALS signals" or the first error (exit 1).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../devlib/gsock.h"

static volatile sig_atomic_t signals;

static void on_alarm(int sig)
{
	(void)sig;
	signals++;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	struct itimerval it = { { 0, 0 }, { 0, 0 } };
	struct gsock_opts o = { .nslots = 1, .nsocks = 1 };
	char err[512];
	long n, usec;

	if (argc != 3 || (n = strtol(argv[1], NULL, 10)) < 1 ||
	    (usec = strtol(argv[2], NULL, 10)) < 1 || usec > 999999) {
		fprintf(stderr, "usage: register-signals N USEC (1..999999)\n");
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm; /* no SA_RESTART: calls end with EINTR */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL)) {
		perror("register-signals: sigaction");
		return 2;
	}
	it.it_interval.tv_usec = it.it_value.tv_usec = usec;
	setitimer(ITIMER_REAL, &it, NULL);
	for (long i = 0; i < n; i++) {
		struct gsock_ctx *ctx = gsock_init(&o, err, sizeof(err));

		if (!ctx) {
			printf("registration %ld of %ld failed: %s\n", i + 1, n,
			       err);
			return 1;
		}
		gsock_fini(ctx);
	}
	printf("registered %ld of %ld, %d signals\n", n, n, (int)signals);
	return 0;
}
