/* SPDX-License-Identifier: Apache-2.0 */
/* A few lines of TAP for C unit tests. */
#ifndef TAP_H
#define TAP_H

#include <stdio.h>

static int tap_n, tap_failed;

#define tap_plan(n) printf("1..%d\n", (n))
#define ok(cond, ...)                                                 \
	do {                                                          \
		int ok_ = !!(cond);                                   \
		printf("%sok %d - ", ok_ ? "" : "not ", ++tap_n);     \
		printf(__VA_ARGS__);                                  \
		printf("\n");                                         \
		if (!ok_) {                                           \
			tap_failed++;                                 \
			printf("#   failed at %s:%d: %s\n", __FILE__, \
			       __LINE__, #cond);                      \
		}                                                     \
	} while (0)
#define tap_exit() return tap_failed ? 1 : 0

#endif
