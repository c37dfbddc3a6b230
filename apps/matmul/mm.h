/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The matrix product server: the wire protocol every variant speaks and
 * the tiled product kernel the GPU variants share (G in g-call blocks, C
 * in a kernel the CPU launches). The CPU variant P calls OpenBLAS.
 *
 * Wire protocol (little-endian; requests answered in order):
 *
 *   request   offset  size    field
 *             0       4       magic MM_REQ_MAGIC
 *             4       4       seq: echoed in the response
 *             8       4       n: the side (1..the server's largest)
 *             12      4       zero
 *             16      4n^2    A, float32, row by row
 *             16+4n^2 4n^2    B
 *
 *   response  0       4       magic MM_RESP_MAGIC
 *             4       4       seq
 *             8       4       status: 0 or MM_E_*
 *             12      4       n
 *             16      4n^2    C = A B (status 0 only)
 *
 * A wrong magic or a side out of range is answered with its error and
 * the connection is closed.
 */
#ifndef MM_H
#define MM_H

#include <stdint.h>

#include "gsock_port.h"

#define MM_REQ_MAGIC 0x31514d4du /* "MMQ1" */
#define MM_RESP_MAGIC 0x31524d4du /* "MMR1" */
#define MM_TILE 64 /* output tile side */
#define MM_BK 16 /* depth of one step of a tile */
#define MM_THREADS 256 /* CUDA threads per block the tile is written for */

struct mm_hdr {
	uint32_t magic;
	uint32_t seq;
	uint32_t n_or_status; /* n in a request, status in a response */
	uint32_t n; /* zero in a request, n in a response */
};

enum mm_status {
	MM_OK = 0, /* C follows */
	MM_E_SIZE = -2, /* n is 0 or larger than the server takes; closes */
	MM_E_PROTO = -4, /* wrong magic; closes */
};

GSOCK_HD uint32_t mm_tiles(uint32_t n)
{
	uint32_t t = (n + MM_TILE - 1) / MM_TILE;

	return t * t;
}

/*
 * Block-cooperative: output tile `tile` of C = A B, all n x n row-major.
 * On CUDA the block has MM_THREADS threads, each computing a 4 x 4 patch
 * from MM_BK-deep slices of A and B staged in shared memory (sa and sb,
 * MM_BK * MM_TILE floats each); one host thread walks the tile row by row.
 */
GSOCK_DEVICE void mm_tile(const float *A, const float *B, float *C, uint32_t n,
			  uint32_t tile, float *sa, float *sb)
{
	uint32_t per_row = (n + MM_TILE - 1) / MM_TILE;
	uint32_t row0 = tile / per_row * MM_TILE,
		 col0 = tile % per_row * MM_TILE;
#ifdef __CUDA_ARCH__
	uint32_t t = threadIdx.x, tx = t % 16, ty = t / 16;
	float acc[4][4] = { { 0 } };

	for (uint32_t k0 = 0; k0 < n; k0 += MM_BK) {
		for (uint32_t i = t; i < MM_BK * MM_TILE; i += MM_THREADS) {
			uint32_t r = i / MM_BK, k = i % MM_BK;
			uint32_t gr = row0 + r, gk = k0 + k, c = i % MM_TILE;

			sa[k * MM_TILE + r] = gr < n && gk < n ?
						      A[(size_t)gr * n + gk] :
						      0.0f;
			gk = k0 + i / MM_TILE;
			sb[i] = gk < n && col0 + c < n ?
					B[(size_t)gk * n + col0 + c] :
					0.0f;
		}
		__syncthreads();
		for (uint32_t k = 0; k < MM_BK; k++) {
			float a[4], b[4];

			for (int i = 0; i < 4; i++) {
				a[i] = sa[k * MM_TILE + ty * 4 + i];
				b[i] = sb[k * MM_TILE + tx * 4 + i];
			}
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++)
					acc[i][j] += a[i] * b[j];
		}
		__syncthreads();
	}
	for (int i = 0; i < 4; i++) {
		uint32_t r = row0 + ty * 4 + i;

		for (int j = 0; j < 4; j++) {
			uint32_t c = col0 + tx * 4 + j;

			if (r < n && c < n)
				C[(size_t)r * n + c] = acc[i][j];
		}
	}
#else
	uint32_t r1 = row0 + MM_TILE < n ? row0 + MM_TILE : n;
	uint32_t c1 = col0 + MM_TILE < n ? col0 + MM_TILE : n;

	(void)sa;
	(void)sb;
	for (uint32_t r = row0; r < r1; r++) {
		float *out = C + (size_t)r * n;

		for (uint32_t c = col0; c < c1; c++)
			out[c] = 0.0f;
		for (uint32_t k = 0; k < n; k++) {
			float a = A[(size_t)r * n + k];
			const float *b = B + (size_t)k * n;

			for (uint32_t c = col0; c < c1; c++)
				out[c] += a * b[c];
		}
	}
#endif
}

#endif /* MM_H */
