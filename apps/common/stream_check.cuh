/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device code (both backends) that checks received bytes against the
 * stream pattern of stream.h, 8 bytes at a time: the GPU echo server's
 * sink and the GPU echo client's one-way streams. One block checking byte
 * by byte held a one-connection stream to ~7 GB/s.
 */
#ifndef GSOCK_STREAM_CHECK_CUH
#define GSOCK_STREAM_CHECK_CUH

#include "gsock.cuh"
#include "stream.h"

#define SC_B80 0x8080808080808080ull
#define SC_B7F 0x7f7f7f7f7f7f7f7full
#define SC_B01 0x0101010101010101ull

/* a + b byte by byte, each byte mod 256 (no carry into the next). */
GSOCK_DEVICE uint64_t stream_add_bytes(uint64_t a, uint64_t b)
{
	return ((a & SC_B7F) + (b & SC_B7F)) ^ ((a ^ b) & SC_B80);
}

/*
 * The 8 stream bytes from offset o, little-endian: stream_byte(o + j) is
 * stream_byte(o) + 131 j, plus 7 from the byte that crosses a multiple of
 * 256 on (o >> 8 grows there).
 */
GSOCK_DEVICE uint64_t stream_word(uint64_t o)
{
	const uint64_t k = 0x95128f0c89068300ull; /* bytes: 131 j mod 256 */
	unsigned s = (unsigned)(o & 255);
	uint64_t e = stream_add_bytes(k, SC_B01 * stream_byte(o));

	if (s > 248)
		e = stream_add_bytes(e, 0x0707070707070707ull << 8 * (256 - s));
	return e;
}

/* How many of d's 8 bytes are not 0. */
GSOCK_DEVICE unsigned stream_nonzero_bytes(uint64_t d)
{
	uint64_t t = (((d & SC_B7F) + SC_B7F) | d) & SC_B80;

	return (unsigned)(((t >> 7) * SC_B01) >> 56);
}

/*
 * Block-wide: this thread's count of wrong bytes in part `part` of
 * `parts` of buf[0, n), whose first byte is the stream's byte off (so
 * that parts blocks check one chunk side by side; 0 of 1 is all of it).
 * The 8-byte words are shared out; the bytes before buf's first aligned
 * word and after its last one are part 0's.
 */
GSOCK_DEVICE uint64_t stream_wrong(const uint8_t *buf, uint64_t n,
				   uint64_t off, unsigned part, unsigned parts)
{
	uint64_t head = (8 - ((uintptr_t)buf & 7)) & 7, words, lo, hi, bad = 0;
	uint64_t i, o, nt = gs_bdim();
	const uint64_t *w;

	if (head > n)
		head = n;
	words = (n - head) / 8;
	lo = words * part / parts;
	hi = words * (part + 1) / parts;
	w = (const uint64_t *)(buf + head);
	o = off + head;
	/*
	 * Four loads a thread before their checks: one at a time, each
	 * waits on memory, and the sink checks after every grecv, not
	 * beside it.
	 */
	for (i = lo + gs_tid(); i + 3 * nt < hi; i += 4 * nt) {
		uint64_t a = w[i], b = w[i + nt], c = w[i + 2 * nt],
			 d = w[i + 3 * nt];

		bad += stream_nonzero_bytes(a ^ stream_word(o + 8 * i)) +
		       stream_nonzero_bytes(b ^ stream_word(o + 8 * (i + nt))) +
		       stream_nonzero_bytes(c ^
					    stream_word(o + 8 * (i + 2 * nt))) +
		       stream_nonzero_bytes(d ^
					    stream_word(o + 8 * (i + 3 * nt)));
	}
	for (; i < hi; i += nt)
		bad += stream_nonzero_bytes(w[i] ^ stream_word(o + 8 * i));
	if (part)
		return bad;
	for (uint64_t k = gs_tid(); k < head; k += nt)
		bad += buf[k] != stream_byte(off + k);
	for (uint64_t k = head + words * 8 + gs_tid(); k < n; k += nt)
		bad += buf[k] != stream_byte(off + k);
	return bad;
}

#endif
