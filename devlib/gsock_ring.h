/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte-ring arithmetic shared by the bridge, libgsock and device code.
 * A ring is ring_size bytes (a power of two) with free-running u64 head
 * (consumer) and tail (producer) counters; the byte at counter c lives at
 * offset c & (ring_size - 1). These helpers only compute; callers load and
 * store the counters with the ordering their side needs.
 */
#ifndef GSOCK_RING_H
#define GSOCK_RING_H

#include <stdint.h>

#include "gsock_port.h"

/* Bytes in the ring; a value above size means the counters are corrupt. */
GSOCK_HD uint64_t gs_ring_used(uint64_t head, uint64_t tail)
{
	return tail - head;
}

/* Whether head and tail describe a possible ring state. */
GSOCK_HD int gs_ring_sane(uint64_t head, uint64_t tail, uint32_t size)
{
	return tail - head <= (uint64_t)size;
}

/* Free bytes; only meaningful when gs_ring_sane(). */
GSOCK_HD uint64_t gs_ring_free(uint64_t head, uint64_t tail, uint32_t size)
{
	return (uint64_t)size - (tail - head);
}

/*
 * Split len bytes starting at counter pos into at most two contiguous
 * pieces of the ring: [off, off + *first) and [0, len - *first).
 */
GSOCK_HD uint32_t gs_ring_split(uint64_t pos, uint64_t len, uint32_t size,
				uint64_t *first)
{
	uint32_t off = (uint32_t)(pos & (uint64_t)(size - 1));
	uint64_t to_end = (uint64_t)size - off;

	*first = len < to_end ? len : to_end;
	return off;
}

#endif /* GSOCK_RING_H */
