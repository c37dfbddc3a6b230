/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ring and doorbell arithmetic shared by the bridge, libgsock, device code
 * and the fuzzer. A ring is ring_size bytes (a power of two) with
 * free-running u64 head (consumer) and tail (producer) counters; the byte
 * at counter c lives at offset c & (ring_size - 1). A doorbell queue is
 * db_size u64 cells, written by ticket. These helpers only compute;
 * callers load and store with the ordering their side needs.
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

/* Socket id's rx ring in an arena's rings; its tx ring follows it. */
GSOCK_HD uint8_t *gs_sock_rx_ring(uint8_t *rings, uint32_t id,
				  uint32_t ring_size)
{
	return rings + (uint64_t)id * 2 * ring_size;
}

/*
 * Doorbell queue q's cells. A cell holds what it names (a socket id, or
 * GS_DB_CMD | a command slot) in its low half and its ticket + 1 in its
 * high half, so that a zeroed cell, or one of the ring's last lap, is
 * never taken for the current ticket's.
 */
GSOCK_HD uint64_t *gs_db_cells(uint64_t *db, uint32_t q, uint32_t db_size)
{
	return db + (uint64_t)q * db_size;
}

GSOCK_HD uint64_t gs_db_cell(uint64_t ticket, uint32_t what)
{
	return (uint64_t)(uint32_t)(ticket + 1) << 32 | what;
}

/* Whether cell was written for ticket. */
GSOCK_HD int gs_db_cell_for(uint64_t cell, uint64_t ticket)
{
	return (uint32_t)(cell >> 32) == (uint32_t)(ticket + 1);
}

/*
 * A socket's poll_slot word names the block that polls it: its command
 * slot + 1, 0 for none.
 */
GSOCK_HD uint32_t gs_poll_word(uint32_t slot)
{
	return slot + 1;
}

/* The slot a poll_slot word other than 0 names. */
GSOCK_HD uint32_t gs_poll_slot(uint32_t word)
{
	return word - 1;
}

#endif /* GSOCK_RING_H */
