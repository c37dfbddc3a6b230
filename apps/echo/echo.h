/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU echo server and client: what their host programs and kernels
 * share. Argument structs live in gsock_alloc() memory, which both sides
 * reach; each block writes only its own entries.
 */
#ifndef ECHO_H
#define ECHO_H

#include <stdint.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "gapp.cuh"
#include "stream.h"

/* Per-block counters of the server. */
struct echo_block_stats {
	uint64_t conns;
	uint64_t bytes;
	int64_t last_error; /* the last error that ended a connection */
};

/* What the one-connection-per-block server does with a connection (-M). */
enum echo_mode {
	ECHO_ECHO, /* send back what arrives */
	ECHO_SINK, /* read to the end, check, answer count and wrong bytes */
	ECHO_SOURCE, /* send the stream pattern until the peer goes */
};

struct echo_server_args {
	struct app_listener listen;
	uint32_t mode; /* enum echo_mode */
	uint32_t bufsize; /* bytes a grecv or gsend moves at most */
	uint32_t stride; /* bytes from one block's buffer to the next */
	uint8_t *bufs; /* device memory: blocks * stride */
	struct echo_block_stats *stats; /* one per block */
	uint32_t per_block; /* multiplexing: connections per block (else 0) */
	struct gpollfd *pfds; /* multiplexing: blocks * (per_block + 1) */
};

/* Per-block result of the client. */
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
	uint8_t *sbuf, *rbuf; /* device memory: blocks * size each */
	uint64_t *rtt_ns; /* blocks * iters */
	struct echo_client_result *result; /* one per block */
};

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL(echo_server_kernel, gs, arg);
GSOCK_KERNEL(echo_mux_kernel, gs, arg);
GSOCK_KERNEL(echo_client_kernel, gs, arg);
#ifdef __cplusplus
}
#endif

#endif
