/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU echo client: what its host program and kernel share. The
 * argument struct lives in gsock_alloc() memory, which both sides reach;
 * each block writes only its own entries.
 */
#ifndef ECHO_H
#define ECHO_H

#include <stdint.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "gsock.cuh"

/* Per-block result of the client (a group's blocks: the same). */
struct echo_client_result {
	int64_t error; /* 0, a negative errno, or ECHO_MISMATCH */
	uint64_t mismatch_at; /* an echo's wrong byte; a stream's count */
	uint64_t wrong; /* a stream: the wrong bytes this block counted */
};

#define ECHO_MISMATCH 1
#define ECHO_SHORT 2 /* -m down: the stream ended early */

/* What each connection does (-m). */
enum echo_client_mode {
	ECHO_ROUND_TRIPS, /* echo: send size bytes, check them back */
	ECHO_UP, /* send iters * size stream bytes to a sink, check its answer */
	ECHO_DOWN, /* read iters * size stream bytes from a source, check them */
};

struct echo_client_args {
	struct sockaddr_storage addr; /* the server */
	uint32_t addrlen;
	uint32_t mode; /* enum echo_client_mode */
	uint32_t size; /* bytes per round trip (a stream: per call) */
	uint32_t iters; /* round trips per block (a stream: calls) */
	uint32_t seed;
	uint32_t group; /* blocks per connection: consecutive blocks (-k) */
	struct ggroup_sync *sync; /* device memory: one per connection */
	uint64_t stride; /* bytes of sbuf and rbuf a connection */
	uint8_t *sbuf, *rbuf; /* device memory: connections * stride each */
	uint64_t *rtt_ns; /* connections * iters (rank 0 writes) */
	uint64_t *span_ns; /* a stream's first and last clock, 2 a connection */
	struct echo_client_result *result; /* one per block */
};

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL(echo_client_kernel, gs, arg);
#ifdef __cplusplus
}
#endif

#endif
