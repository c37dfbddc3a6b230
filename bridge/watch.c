/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The doorbell watch. GPU doorbells cannot wake epoll, so something must
 * look for them in host memory: the watch, run by the control thread
 * between its events, alone looks at the doorbell queues of sleeping
 * workers and wakes a worker through its eventfd when a cell waits in
 * one of its queues. Its period follows what it finds (br_watch_next),
 * so an idle gsockd looks a few hundred times a second and one that
 * serves slow applications looks every watch_min_us.
 */
#include <config.h>

#include <stdbool.h>
#include <sys/prctl.h>

#include "bridge.h"
#include "log.h"

/* After this long without a find, the period may grow this much more. */
#define BR_DEEP_IDLE_NS 1000000000ull
#define BR_DEEP_IDLE_FACTOR 4

/* Nanoseconds between looks; the control thread's, and workers' hurry. */
static uint64_t period_ns;
/* Counts, logged as gsockd stops: the control thread's, but hurries. */
static uint64_t n_looks, n_finds, n_hurries; /* n_hurries: atomic */

void br_watch_start(void)
{
	/* A period of tens of microseconds wants a timer that keeps it. */
	prctl(PR_SET_TIMERSLACK, 1000ul);
	__atomic_store_n(&period_ns, (uint64_t)br.conf.idle_sleep_us * 1000,
			 __ATOMIC_RELAXED);
}

uint64_t br_watch_period_ns(void)
{
	return __atomic_load_n(&period_ns, __ATOMIC_RELAXED);
}

int br_watch(void)
{
	int found = 0;

	n_looks++;
	for (struct br_app *a = br.apps; a; a = a->next) {
		if (a->pending || br_app_dead(a))
			continue;
		for (uint32_t q = 0; q < a->nqueues; q++) {
			struct br_worker *w = &br.workers[q % a->nworkers];

			if (__atomic_load_n(&w->sleeping, __ATOMIC_SEQ_CST) ==
				    1 &&
			    br_app_pending(a, q)) {
				br_wake(w->wake_fd);
				found = 1;
			}
		}
	}
	n_finds += found;
	return found;
}

void br_watch_counts(uint64_t *looks, uint64_t *finds)
{
	*looks = n_looks;
	*finds = n_finds;
}

void br_watch_report(void)
{
	br_info("doorbell watch: %llu looks, %llu found a doorbell; workers hurried it %llu times",
		(unsigned long long)n_looks, (unsigned long long)n_finds,
		(unsigned long long)__atomic_load_n(&n_hurries,
						    __ATOMIC_RELAXED));
}

/*
 * After a look: watch_min_us after a find, else a quarter longer than
 * the last period (an answer late by a little is still found soon), up
 * to idle_sleep_us (BR_DEEP_IDLE_FACTOR times that when quiet for
 * BR_DEEP_IDLE_NS). A worker's hurry meanwhile wins.
 */
void br_watch_next(int found, uint64_t quiet_ns)
{
	uint64_t min = (uint64_t)br.conf.watch_min_us * 1000;
	uint64_t max = (uint64_t)br.conf.idle_sleep_us * 1000;
	uint64_t p = __atomic_load_n(&period_ns, __ATOMIC_RELAXED);
	uint64_t next = found ? min : p + p / 4 + 1;

	if (quiet_ns > BR_DEEP_IDLE_NS)
		max *= BR_DEEP_IDLE_FACTOR;
	if (next > max)
		next = max;
	if (next < min)
		next = min;
	__atomic_compare_exchange_n(&period_ns, &p, next, false,
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/*
 * A worker goes to sleep owed an answer (worker.c, lapse): the watch
 * starts again from its shortest period, at once if it was sleeping
 * longer. Costs a write only when the watch was slow.
 */
void br_watch_hurry(void)
{
	uint64_t min = (uint64_t)br.conf.watch_min_us * 1000;

	if (__atomic_load_n(&period_ns, __ATOMIC_RELAXED) > min) {
		__atomic_add_fetch(&n_hurries, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&period_ns, min, __ATOMIC_RELAXED);
		br_wake(br.wake_fd);
	}
}
