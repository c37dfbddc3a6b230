/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ESPCN x3 (espcn.h) over a batch of pictures with im2col kernels and
 * cuBLAS's SGEMM, written once for the two servers that run it: the
 * graph server G (gserver_graph.cu captures ecb_model into each turn's
 * graph) and C's cuBLAS stage (stage_cublas.cu runs it on its stream).
 *
 * A batch is a plane of pixels: picture i's pixel (x, y) is plane pixel
 * at + y w + x, and owner[q] says whose plane pixel q is (i); a plane
 * pixel of i's before its at is a gap (G writes the answer's head
 * there), which computes nothing. Each layer is
 * one im2col (its columns: K floats a plane pixel; before it, the
 * layer before's outputs get their bias and tanh) and one SGEMM (the
 * weights' transpose times the columns: the outputs come pixel by pixel,
 * as the next im2col reads them); the last layer's outputs go through
 * the pixel shuffle into each picture's answer, 3w x 3h bytes at out +
 * 9 at.
 *
 * Capture-safe: the calls allocate nothing and wait for nothing, and a
 * captured SGEMM keeps its sizes, so the SGEMMs run over cap plane
 * pixels while the kernels read how many are in use when they run
 * (*pixels: G's count is only known on the device).
 */
#ifndef ESPCN_CUBLAS_CUH
#define ESPCN_CUBLAS_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "espcn.h"

#define ECB_GRID 2048 /* blocks of the grid-stride kernels */
#define ECB_K_MAX (ESPCN_C1 * 9) /* the widest layer's columns: floats a pixel */
/* The largest batch, plane pixels: a 1024x1024 picture and some. */
#define ECB_PIXELS_MAX ((1u << 20) + (1u << 16))
/* The kernels' 32-bit indices: a column entry's, a layer output's. */
typedef char ecb_indices_fit[(uint64_t)ECB_PIXELS_MAX * ECB_K_MAX < (1ull << 32) ? 1 : -1];

/* One picture of a batch (device memory). */
struct ecb_pic {
	const uint8_t *in; /* its w x h bytes */
	uint32_t at; /* the plane pixel of its pixel (0, 0) */
	uint32_t w, h;
	uint32_t pad;
};

/* A batch as the kernels see it; every pointer device memory. */
struct ecb_batch {
	const float *weights; /* ESPCN_NPARAMS */
	struct ecb_pic *pics;
	uint32_t *owner; /* a plane pixel's picture: its index in pics */
	const uint32_t *pixels; /* plane pixels in use, read as a kernel runs; */
	uint32_t n; /* or, where pixels is NULL, n */
	float *col; /* im2col columns: up to ECB_K_MAX floats a plane pixel */
	float *a, *b, *c; /* the layers' outputs: 64, 32, 9 floats a pixel */
	uint8_t *out; /* 9 bytes a plane pixel: the answers */
};

/*
 * A batch's device memory, one allocation of ecb_size bytes: the
 * weights, npics pictures, then the planes of cap pixels (owner, col, a,
 * b, c, out), each part 256-byte aligned. Their offsets in off; the
 * total.
 */
static inline size_t ecb_layout(size_t off[8], uint32_t cap, uint32_t npics)
{
	size_t px = cap, at = 0;
	size_t n[8] = { 4ull * ESPCN_NPARAMS, sizeof(struct ecb_pic) * npics,
			4 * px, 4 * px * ECB_K_MAX, 4 * px * ESPCN_C1,
			4 * px * ESPCN_C2, 4 * px * ESPCN_C3, 9 * px };

	for (int i = 0; i < 8; i++) {
		off[i] = at;
		at += (n[i] + 255) & ~(size_t)255;
	}
	return at;
}

static inline size_t ecb_size(uint32_t cap, uint32_t npics)
{
	size_t off[8];

	return ecb_layout(off, cap, npics);
}

/* b's buffers in mem (ecb_size bytes); the weights are the caller's to copy. */
static inline void ecb_carve(struct ecb_batch *b, void *mem, uint32_t cap,
			     uint32_t npics)
{
	char *m = (char *)mem;
	size_t o[8];

	ecb_layout(o, cap, npics);
	b->weights = (const float *)(m + o[0]);
	b->pics = (struct ecb_pic *)(m + o[1]);
	b->owner = (uint32_t *)(m + o[2]);
	b->col = (float *)(m + o[3]);
	b->a = (float *)(m + o[4]);
	b->b = (float *)(m + o[5]);
	b->c = (float *)(m + o[6]);
	b->out = (uint8_t *)(m + o[7]);
}

__device__ static uint32_t ecb_pixels(const struct ecb_batch *b)
{
	return b->pixels ? *(volatile const uint32_t *)b->pixels : b->n;
}

/* Plane pixel q's picture, and the pixel's place in it; 0, or -1 in a gap. */
__device__ static int ecb_where(const struct ecb_batch *b, uint32_t q,
				const struct ecb_pic **pp, uint32_t *x,
				uint32_t *y)
{
	const struct ecb_pic *p = &b->pics[b->owner[q]];

	*pp = p;
	if (q < p->at)
		return -1;
	*x = (q - p->at) % p->w;
	*y = (q - p->at) / p->w;
	return 0;
}

/*
 * The outputs of the layer before l (l 1: a, l 2: b) get their bias and
 * tanh, in place, once each (the columns hold each value up to 9 times).
 */
__global__ static void __launch_bounds__(256) ecb_act(struct ecb_batch b, int l)
{
	uint32_t cin = l == 1 ? ESPCN_C1 : ESPCN_C2, total = ecb_pixels(&b) * cin;
	float *v = l == 1 ? b.a : b.b;
	const float *bias = b.weights + (l == 1 ? ESPCN_B1 : ESPCN_B2);

	for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += gridDim.x * blockDim.x)
		v[e] = tanhf(v[e] + bias[e % cin]);
}

/*
 * Plane pixel q's column, by one warp (lane: its lane): the K = cin kk kk
 * inputs of the pixel in the weights' order (input channel, row,
 * column), zero outside the picture; src the layer before's outputs (cin
 * floats a pixel), or NULL for the picture's bytes. Inlined with constant
 * cin and kk, so that its divisions are by constants.
 */
__device__ __forceinline__ static void ecb_column(const struct ecb_batch *b,
						  uint32_t q, const float *src,
						  uint32_t cin, uint32_t kk,
						  uint32_t lane)
{
	uint32_t K = cin * kk * kk, half = kk / 2, x = 0, y = 0;
	const struct ecb_pic *j;
	float *col = b->col + (size_t)q * K;
	int gap = ecb_where(b, q, &j, &x, &y);

	for (uint32_t k = lane; k < K; k += 32) {
		uint32_t i = k / (kk * kk), r = k % (kk * kk);
		/* unsigned: a row or column before the picture's wraps past it */
		uint32_t yy = y + r / kk - half, xx = x + r % kk - half;
		float v = 0;

		if (!gap && yy < j->h && xx < j->w) {
			size_t p = (size_t)yy * j->w + xx;

			v = src ? src[(j->at + p) * cin + i] : j->in[p] / 255.0f;
		}
		col[k] = v;
	}
}

/*
 * Layer l's columns of plane pixels [lo, hi): column q holds the inputs
 * of plane pixel q (a warp a pixel, so that a warp's stores are one
 * run); layers 1 and 2 read values that ecb_act made.
 */
__global__ static void __launch_bounds__(256) ecb_im2col(struct ecb_batch b, int l,
							 uint32_t lo, uint32_t hi)
{
	uint32_t total = ecb_pixels(&b), lane = threadIdx.x & 31;

	hi = hi < total ? hi : total;
	for (uint32_t q = lo + (blockIdx.x * blockDim.x + threadIdx.x) / 32; q < hi;
	     q += gridDim.x * blockDim.x / 32) {
		if (l == 0)
			ecb_column(&b, q, NULL, 1, 5, lane);
		else if (l == 1)
			ecb_column(&b, q, b.a, ESPCN_C1, 3, lane);
		else
			ecb_column(&b, q, b.b, ESPCN_C2, 3, lane);
	}
}

/* The last layer's 9 values of each pixel, with their bias, into its answer. */
__global__ static void __launch_bounds__(256) ecb_shuffle(struct ecb_batch b)
{
	uint32_t total = ecb_pixels(&b);

	for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;
	     e < total * ESPCN_C3; e += gridDim.x * blockDim.x) {
		uint32_t q = e / ESPCN_C3, o = e % ESPCN_C3, x, y;
		const struct ecb_pic *j;
		float v;

		if (ecb_where(&b, q, &j, &x, &y))
			continue;
		v = (b.c[e] + b.weights[ESPCN_B3 + o]) * 255.0f;
		v = v < 0 ? 0 : v > 255 ? 255 : v;
		b.out[9ull * j->at +
		      ((size_t)y * ESPCN_R + o / ESPCN_R) * j->w * ESPCN_R +
		      (size_t)x * ESPCN_R + o % ESPCN_R] = (uint8_t)rintf(v);
	}
}

/* Layer l's SGEMM over plane pixels [lo, hi), on h's stream: 0 or -EIO. */
static inline int ecb_sgemm(cublasHandle_t h, const struct ecb_batch *b,
			    uint32_t lo, uint32_t hi, int l)
{
	static const struct {
		uint32_t w, cout, K;
	} L[3] = { { ESPCN_W1, ESPCN_C1, 25 },
		   { ESPCN_W2, ESPCN_C2, ESPCN_C1 * 9 },
		   { ESPCN_W3, ESPCN_C3, ESPCN_C2 * 9 } };
	float *outs[3] = { b->a, b->b, b->c }, one = 1, zero = 0;

	return cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, L[l].cout, hi - lo,
			   L[l].K, &one, b->weights + L[l].w, L[l].K,
			   b->col + (size_t)lo * L[l].K, L[l].K, &zero,
			   outs[l] + (size_t)lo * L[l].cout, L[l].cout) ==
			       CUBLAS_STATUS_SUCCESS ?
		       0 :
		       -EIO;
}

/* Plane pixels [*lo, *hi) of part k of n of cap: 256-pixel multiples. */
static inline void ecb_part(uint32_t cap, int n, int k, uint32_t *lo, uint32_t *hi)
{
	uint32_t per = ((cap + n - 1) / n + 255) & ~255u;

	*lo = (uint32_t)k * per < cap ? (uint32_t)k * per : cap;
	*hi = *lo + per < cap ? *lo + per : cap;
}

/*
 * The model on b's first cap plane pixels, each layer's im2col and SGEMM
 * cut into n column ranges run side by side on st[0..n-1] (h[k] on
 * st[k]; st[0] forks them and joins them with the 3 n events ev, which
 * n of 1 needs none), so that one range's im2col runs while another's
 * SGEMM does: 0, or -EIO where cuBLAS refused an SGEMM. A kernel's launch
 * error is the caller's to read (cudaGetLastError, or the capture's end).
 */
static inline int ecb_model(cublasHandle_t *h, cudaStream_t *st,
			    cudaEvent_t *ev, int n, const struct ecb_batch *b,
			    uint32_t cap)
{
	int r = 0;

	for (int l = 0; l < 3 && !r; l++) {
		cudaEvent_t *e = n > 1 ? ev + n * l : NULL; /* a fork, n - 1 joins */

		if (l)
			ecb_act<<<ECB_GRID, 256, 0, st[0]>>>(*b, l);
		if (n > 1)
			cudaEventRecord(e[0], st[0]);
		for (int k = 0; k < n && !r; k++) {
			uint32_t lo, hi;

			ecb_part(cap, n, k, &lo, &hi);
			if (k)
				cudaStreamWaitEvent(st[k], e[0], 0);
			ecb_im2col<<<ECB_GRID / n, 256, 0, st[k]>>>(*b, l, lo, hi);
			if (hi > lo)
				r = ecb_sgemm(h[k], b, lo, hi, l);
			if (k) {
				cudaEventRecord(e[k], st[k]);
				cudaStreamWaitEvent(st[0], e[k], 0);
			}
		}
	}
	if (!r)
		ecb_shuffle<<<ECB_GRID, 256, 0, st[0]>>>(*b);
	return r;
}

/* Load the kernels now: lazy loading would do it inside a capture. */
static inline void ecb_load(void)
{
	struct cudaFuncAttributes fa;

	cudaFuncGetAttributes(&fa, (const void *)ecb_act);
	cudaFuncGetAttributes(&fa, (const void *)ecb_im2col);
	cudaFuncGetAttributes(&fa, (const void *)ecb_shuffle);
}

/*
 * The streams, cuBLAS handles and events ecb_model runs n ranges on: st[0]
 * is the caller's (the stream a capture begins on), the others and every
 * handle ecb_branches_open's, each handle with its part of ws (ws_each
 * bytes: none may be allocated in a capture).
 */
#define ECB_BRANCHES_MAX 8
struct ecb_branches {
	int n;
	cudaStream_t st[ECB_BRANCHES_MAX];
	cublasHandle_t h[ECB_BRANCHES_MAX];
	cudaEvent_t ev[3 * ECB_BRANCHES_MAX];
};

/* Close what ecb_branches_open made (a half-made set too). */
static inline void ecb_branches_close(struct ecb_branches *b)
{
	for (int k = 0; k < ECB_BRANCHES_MAX; k++) {
		if (b->h[k])
			cublasDestroy(b->h[k]);
		if (k && b->st[k])
			cudaStreamDestroy(b->st[k]);
	}
	for (int i = 0; i < 3 * ECB_BRANCHES_MAX; i++)
		if (b->ev[i])
			cudaEventDestroy(b->ev[i]);
	memset(b, 0, sizeof(*b));
}

/* n branches from st0 (b zeroed): 0, or -1 with what was made closed. */
static inline int ecb_branches_open(struct ecb_branches *b, int n,
				    cudaStream_t st0, void *ws, size_t ws_each)
{
	if (n < 1 || n > ECB_BRANCHES_MAX)
		return -1;
	b->n = n;
	b->st[0] = st0;
	for (int k = 0; k < n; k++)
		if ((k && cudaStreamCreateWithFlags(&b->st[k], cudaStreamNonBlocking)) ||
		    cublasCreate(&b->h[k]) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetStream(b->h[k], b->st[k]) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetWorkspace(b->h[k], (char *)ws + (size_t)k * ws_each,
				       ws_each) != CUBLAS_STATUS_SUCCESS)
			goto fail;
	for (int i = 0; i < 3 * n; i++)
		if (cudaEventCreateWithFlags(&b->ev[i], cudaEventDisableTiming))
			goto fail;
	return 0;
fail:
	ecb_branches_close(b);
	return -1;
}

/*
 * Outside a capture: the kernels loaded and cuBLAS's choice of its
 * kernels for each range of a batch of cap pixels made, so that a
 * capture of ecb_model over cap loads nothing.
 */
static inline int ecb_warm(const struct ecb_branches *br,
			   const struct ecb_batch *m, uint32_t cap)
{
	int r = 0;

	ecb_load();
	for (int k = 0; k < br->n && !r; k++) {
		uint32_t lo, hi;

		ecb_part(cap, br->n, k, &lo, &hi);
		for (int l = 0; l < 3 && hi > lo && !r; l++)
			r = ecb_sgemm(br->h[k], m, lo, hi, l);
	}
	return r;
}

#endif
