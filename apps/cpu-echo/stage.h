/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU stage of cgpu-echo-server, the CPU-managed GPU server gsock is
 * measured against (the design GPUnet replaced): the CPU receives, copies
 * the bytes to the GPU, launches a kernel that processes them (here: an
 * echo, out = in), copies the result back and sends it. One stage per
 * server thread, each with its own stream and buffers. cpu-echo-server
 * links stage_none.c and has no stage.
 */
#ifndef CPU_ECHO_STAGE_H
#define CPU_ECHO_STAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct stage;

/* What the stage is ("cuda", "host (memcpy stand-in)"), or NULL for none. */
const char *stage_name(void);
/* A stage whose buffers hold cap bytes; NULL with a reason in err. */
struct stage *stage_open(size_t cap, char *err, size_t errlen);
/* Its input and output buffers (pinned host memory on cuda). */
uint8_t *stage_in(struct stage *s);
uint8_t *stage_out(struct stage *s);
/* in[0, n) to the GPU, the kernel, the result to out; returns when done. */
int stage_run(struct stage *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif
