/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the ring arithmetic and arena layout that the bridge,
 * libgsock and device code share: empty, full, wrap-around, counters near
 * 2^64, and a simulated producer/consumer pair moving bytes through a
 * ring with the split helper, checked byte for byte.
 */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gsock_arena.h"
#include "gsock_ring.h"
#include "tap.h"

__thread unsigned gsock_host_block_id;

/* Move total bytes through a ring from start counter; 1 if intact. */
static int stream_through(uint64_t start, uint32_t size, uint64_t total,
			  unsigned seed)
{
	uint8_t *ring = malloc(size), *out = malloc(total), *in = malloc(total);
	uint64_t head = start, tail = start, put = 0, got = 0;
	int intact;

	srand(seed);
	for (uint64_t i = 0; i < total; i++)
		in[i] = (uint8_t)rand();
	while (got < total) {
		uint64_t n = (uint64_t)rand() % (size + 1), first;
		uint32_t off;

		if (n > gs_ring_free(head, tail, size))
			n = gs_ring_free(head, tail, size);
		if (n > total - put)
			n = total - put;
		off = gs_ring_split(tail, n, size, &first);
		memcpy(ring + off, in + put, first);
		memcpy(ring, in + put + first, n - first);
		tail += n;
		put += n;
		if (!gs_ring_sane(head, tail, size))
			return 0;
		n = (uint64_t)rand() % (size + 1);
		if (n > gs_ring_used(head, tail))
			n = gs_ring_used(head, tail);
		off = gs_ring_split(head, n, size, &first);
		memcpy(out + got, ring + off, first);
		memcpy(out + got + first, ring, n - first);
		head += n;
		got += n;
	}
	intact = !memcmp(in, out, total);
	free(ring);
	free(out);
	free(in);
	return intact;
}

int main(void)
{
	const uint32_t size = 4096;
	uint64_t first, near = UINT64_MAX - 100;
	struct gs_layout l;
	uint32_t off;

	tap_plan(21);
	ok(gs_ring_used(0, 0) == 0 && gs_ring_free(0, 0, size) == size,
	   "empty ring: nothing used, all free");
	ok(gs_ring_used(10, 10 + size) == size &&
		   gs_ring_free(10, 10 + size, size) == 0,
	   "full ring: all used, nothing free");
	ok(gs_ring_sane(5, 5 + size, size) && !gs_ring_sane(5, 6 + size, size),
	   "more than size bytes is corrupt");
	ok(!gs_ring_sane(6, 5, size), "head past tail is corrupt");
	off = gs_ring_split(size - 10, 30, size, &first);
	ok(off == size - 10 && first == 10, "wrap-around splits at the end");
	off = gs_ring_split(3 * size + 7, 30, size, &first);
	ok(off == 7 && first == 30,
	   "no split when the bytes fit before the end");
	off = gs_ring_split(2 * size, size, size, &first);
	ok(off == 0 && first == size, "a full ring from offset 0 is one piece");
	ok(gs_ring_used(near, near + 200) == 200,
	   "counters across 2^64: used is tail - head");
	ok(gs_ring_free(near, near + 200, size) == size - 200,
	   "counters across 2^64: free");
	ok(gs_ring_sane(UINT64_MAX, 3, size) &&
		   gs_ring_used(UINT64_MAX, 3) == 4,
	   "tail wrapped to 3, head at 2^64-1: four bytes");
	off = gs_ring_split(UINT64_MAX - 1, 4, size, &first);
	ok(off == size - 2 && first == 2, "split at the 2^64 boundary");
	ok(stream_through(0, size, 1 << 20, 1),
	   "1 MiB through a 4 KiB ring intact");
	ok(stream_through(UINT64_MAX - 50000, size, 1 << 20, 2),
	   "1 MiB across the 2^64 wrap intact");
	ok(stream_through(UINT64_MAX - 3, 65536, 3 << 20, 3),
	   "3 MiB through a 64 KiB ring from 2^64-4 intact");
	ok(gs_arena_layout(256, 128, 65536, 1024, 4, &l) == 0 &&
		   l.slots_off == sizeof(struct gs_arena_hdr) &&
		   l.dbq_off == l.socks_off + 128ull * sizeof(struct gs_sock) &&
		   l.db_off == l.dbq_off + 4 * sizeof(struct gs_dbq) &&
		   l.rings_off >= l.db_off + 4ull * 1024 * 8 &&
		   l.rings_off % 4096 == 0 &&
		   l.size == l.rings_off + 128ull * 2 * 65536,
	   "layout: parts in order, a doorbell queue per worker, rings page aligned, size exact");
	ok(gs_arena_layout(1, 1, 4096, 1024, 0, &l) < 0 &&
		   gs_arena_layout(1, 1, 4096, 1024, GS_MAX_QUEUES + 1, &l) < 0,
	   "layout: zero or too many doorbell queues are refused");
	ok(gs_arena_layout(256, 128, 65537, 1024, 4, &l) < 0,
	   "layout: a ring size that is not a power of two is refused");
	ok(gs_arena_layout(0, 128, 65536, 1024, 4, &l) < 0 &&
		   gs_arena_layout(GS_MAX_SLOTS + 1, 128, 65536, 1024, 4, &l) < 0,
	   "layout: zero or too many slots are refused");
	ok(gs_arena_layout(1, GS_MAX_SOCKS + 1, 65536, 1024, 4, &l) < 0 &&
		   gs_arena_layout(1, 1, GS_MAX_RING * 2u, 1024, 4, &l) < 0,
	   "layout: too many sockets or too large rings are refused");
	ok(sizeof(struct gs_arena_hdr) == 192 && sizeof(struct gs_cmd) == 384 &&
		   sizeof(struct gs_sock) == 256,
	   "wire sizes are the ones t/bad_arena.py speaks");
	ok(gs_arena_layout(1, 1, 4096, 1000, 4, &l) < 0,
	   "layout: a doorbell that is not a power of two is refused");
	tap_exit();
}
