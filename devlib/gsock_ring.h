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

#include "gsock_arena.h"
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

/*
 * A direct pipe's lane (gsock_arena.h): the tag after seq, 0 never (a
 * zeroed unit is no copy's).
 */
GSOCK_HD uint32_t gs_lane_tag(uint32_t seq)
{
	return seq + 1 ? seq + 1 : 1;
}

/*
 * How many units a copy of n bytes with tag writes: every 65536th copy
 * (tags 1, 65537, ...) writes all GS_LANE_UNITS, so a unit past the
 * copies between keeps a tag at most 65535 copies old, never one that
 * comes round again (a reader that sees the new header beside old units
 * sees other tags).
 */
GSOCK_HD unsigned gs_lane_units(uint32_t tag, uint32_t n)
{
	return (tag & 0xffff) == 1 ? GS_LANE_UNITS : GS_LANE_HDR + (n + 3) / 4;
}

/* Unit u of the copy of buf[0, n) at stream position pos, with tag. */
GSOCK_HD uint64_t gs_lane_unit(uint32_t tag, uint64_t pos, const uint8_t *buf,
			       uint32_t n, unsigned u)
{
	uint32_t w = 0;

	if (u == 0) {
		w = (uint32_t)pos;
	} else if (u == 1) {
		w = n | (uint32_t)(pos >> 32 & 0xffffff) << 8;
	} else {
		uint32_t o = (u - GS_LANE_HDR) * 4;

		for (uint32_t b = 0; b < 4 && o + b < n; b++)
			w |= (uint32_t)buf[o + b] << 8 * b;
	}
	return (uint64_t)tag << 32 | w;
}

/*
 * The lane's header units h0 and h1, if they name a copy that starts at
 * stream position head and would leave the bytes taken ahead of the tail
 * seen (tail) within half a ring of size bytes: tag << 32 | length; else
 * 0. (An honest sender publishes each copy's tail right after it; a
 * lying one only stalls its own stream.)
 */
GSOCK_HD uint64_t gs_lane_hdr(uint64_t h0, uint64_t h1, uint64_t head,
			      uint64_t tail, uint32_t size)
{
	uint32_t tag = (uint32_t)(h0 >> 32), w = (uint32_t)h1;
	uint32_t n = w & 0xff;

	if (!tag || (uint32_t)(h1 >> 32) != tag || (uint32_t)h0 != (uint32_t)head ||
	    w >> 8 != (uint32_t)(head >> 32 & 0xffffff) || !n ||
	    n > GS_LANE_MAX || (int64_t)(head + n - tail) > (int64_t)(size / 2))
		return 0;
	return (uint64_t)tag << 32 | n;
}

#endif /* GSOCK_RING_H */
