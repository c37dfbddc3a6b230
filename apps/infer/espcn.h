/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ESPCN x3 super-resolution (Shi et al., CVPR 2016) on grey 8-bit
 * pictures, the model the inference server serves:
 *
 *   conv 5x5, 1 -> 64 channels, tanh
 *   conv 3x3, 64 -> 32 channels, tanh
 *   conv 3x3, 32 -> 9 channels
 *   pixel shuffle: the 9 channels of pixel (x, y) become the 3x3 block
 *   of the output at (3x, 3y), channel 3 dy + dx at (3x + dx, 3y + dy)
 *
 * Convolutions are "same" (zero padding, stride 1). Input pixels are
 * scaled to [0, 1]; an output value v becomes the pixel round(255 v),
 * clamped to 0..255. A w x h picture (ESPCN_MIN_SIDE..ESPCN_MAX_SIDE a
 * side) becomes 3w x 3h.
 *
 * Weights file (little-endian, nothing after the last float):
 *
 *   offset  size  field
 *   0       8     magic "ESPCNW1\0"
 *   8       4     r, the scale (3)
 *   12      4     c1, the first layer's channels (64)
 *   16      4     c2, the second's (32)
 *   20      4     n, the floats that follow (ESPCN_NPARAMS)
 *   24      4n    float32: w1[c1][5][5], b1[c1], w2[c2][c1][3][3], b2[c2],
 *                 w3[r r][c2][3][3], b3[r r]
 *
 * w[o][i][ky][kx] weighs input channel i at (x + kx - k/2, y + ky - k/2)
 * for output channel o at (x, y).
 */
#ifndef ESPCN_H
#define ESPCN_H

#include <stddef.h>
#include <stdint.h>

#define ESPCN_R 3
#define ESPCN_C1 64
#define ESPCN_C2 32
#define ESPCN_C3 (ESPCN_R * ESPCN_R)
#define ESPCN_MIN_SIDE 4
#define ESPCN_MAX_SIDE 1024
#define ESPCN_MAGIC "ESPCNW1"
#define ESPCN_HDR_BYTES 24

#ifdef __cplusplus
extern "C" {
#endif

/* Where each tensor starts in the parameters (floats). */
#define ESPCN_W1 0
#define ESPCN_B1 (ESPCN_W1 + ESPCN_C1 * 25)
#define ESPCN_W2 (ESPCN_B1 + ESPCN_C1)
#define ESPCN_B2 (ESPCN_W2 + ESPCN_C2 * ESPCN_C1 * 9)
#define ESPCN_W3 (ESPCN_B2 + ESPCN_C2)
#define ESPCN_B3 (ESPCN_W3 + ESPCN_C3 * ESPCN_C2 * 9)
#define ESPCN_NPARAMS (ESPCN_B3 + ESPCN_C3)

/*
 * Deterministic weights from seed: uniform in +-sqrt(6 / (fan_in +
 * fan_out)) (Glorot), biases in +-0.01. p holds ESPCN_NPARAMS floats.
 */
void espcn_weights_make(float *p, uint32_t seed);
/* Write p as a weights file; 0, or -1 with a sentence in err. */
int espcn_weights_write(const char *path, const float *p, char *err,
			size_t errlen);
/*
 * Read a weights file: ESPCN_NPARAMS floats in a malloc'd buffer, or
 * NULL with a sentence in err (unreadable, truncated, another shape,
 * bytes after the end, a value that is not finite).
 */
float *espcn_weights_load(const char *path, char *err, size_t errlen);
/*
 * A server's weights: espcn_weights_load(path), or NULL with why in err
 * (a sentence that names the file, or that -w WEIGHTS is required where
 * path is NULL) and *status the exit status (<sysexits.h>: EX_USAGE for
 * a path not given, EX_DATAERR).
 */
float *espcn_weights_open(const char *path, char *err, size_t errlen,
			  int *status);

/*
 * The model on this CPU thread, straight from the definition above (the
 * reference the servers' outputs are checked against): in is w x h, out
 * 3w x 3h. 0, or -1 when memory runs out.
 */
int espcn_run_cpu(const float *p, const uint8_t *in, uint32_t w, uint32_t h,
		  uint8_t *out);
/*
 * The last step: the 9 planes of w x h values at c, pixel-shuffled into
 * out (3w x 3h), each value v the pixel round(255 v) clamped to 0..255.
 */
void espcn_shuffle(const float *c, uint32_t w, uint32_t h, uint8_t *out);

#ifdef __cplusplus
}
#endif

#endif
