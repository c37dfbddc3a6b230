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
	uint64_t mismatch_at; /* byte offset of a wrong byte */
};

#define ECHO_MISMATCH 1

struct echo_client_args {
	struct sockaddr_storage addr; /* the server */
	uint32_t addrlen;
	uint32_t size; /* bytes per round trip */
	uint32_t iters; /* round trips per block */
	uint32_t seed;
	uint32_t group; /* blocks per connection: consecutive blocks (-k) */
	struct ggroup_sync *sync; /* device memory: one per connection */
	uint8_t *sbuf, *rbuf; /* device memory: connections * size each */
	uint64_t *rtt_ns; /* connections * iters (rank 0 writes) */
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
