/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CPU reader's wait for a GPU send announced in a direct pipe
 * (gsock_arena.h: sending, want): the preload's (direct.c), here alone
 * so that t/preload-units.c can race it against a writer thread.
 */
#ifndef PL_FLIGHT_H
#define PL_FLIGHT_H

#include <stdint.h>

#include "../devlib/gsock_arena.h"
#include "clock.h"

/*
 * Bytes a pipe of ring bytes holds unread, from its tail and head. The
 * head may lead the tail for a moment (bytes taken from a GPU sender's
 * lane before their tail came, half a ring at most: gs_lane_hdr): none
 * then. A head further ahead is a broken peer's tail: more than the ring,
 * which readers take for a corrupt ring (EIO).
 */
static inline uint64_t pl_unread(uint64_t tail, uint64_t head, uint32_t ring)
{
	uint64_t d = tail - head;

	if ((int64_t)d >= 0 || head - tail > ring / 2)
		return d;
	return 0;
}

/*
 * After READER was set on pipe p and fenced, with no bytes seen: whether
 * bytes came after all. A GPU send announced in the pipe's sending word
 * (1 + the tail it sends from) whose tail has not come may have read
 * want before READER was there, and then rings nobody: wait for its
 * tail, GS_DW_FLIGHT_NS at most (its sender reads want again after its
 * tail past half that), or until the sender is gone (bit in *closed).
 * Each decision rests on one load of the tail: a tail that lands between
 * two loads is bytes, not "landed, nothing for us".
 */
static inline int pl_flight_landed(struct gs_dpipe *p, const uint32_t *closed,
				   uint32_t bit, uint32_t ring)
{
	long long until = 0;

	for (;;) {
		uint64_t s = __atomic_load_n(&p->sending, __ATOMIC_ACQUIRE);
		uint64_t t = __atomic_load_n(&p->tail, __ATOMIC_ACQUIRE);

		if (pl_unread(t, __atomic_load_n(&p->head, __ATOMIC_RELAXED),
			      ring))
			return 1;
		if (!s || t >= s)
			return 0; /* none announced, or it landed: nothing */
		if ((__atomic_load_n(closed, __ATOMIC_ACQUIRE) & bit) ||
		    (until && pl_now_ns() >= until))
			/* gone, or past the deadline: one look after it */
			return pl_unread(__atomic_load_n(&p->tail,
							 __ATOMIC_ACQUIRE),
					 __atomic_load_n(&p->head,
							 __ATOMIC_RELAXED),
					 ring) != 0;
		if (!until)
			until = pl_now_ns() + GS_DW_FLIGHT_NS;
		pl_relax();
	}
}

#endif /* PL_FLIGHT_H */
