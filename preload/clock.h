/* SPDX-License-Identifier: Apache-2.0 */
/* The preload's clock and spin pause, one definition for its files. */
#ifndef PL_CLOCK_H
#define PL_CLOCK_H

#include <time.h>

/* CLOCK_MONOTONIC, ns. */
static inline long long pl_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* One turn of a spin: the CPU's pause hint where it has one. */
static inline void pl_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#endif /* PL_CLOCK_H */
