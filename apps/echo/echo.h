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

#include "gsock.cuh"

/* Per-block counters of the server. */
struct echo_block_stats {
	uint64_t conns;
	uint64_t bytes;
	int64_t last_error; /* the last error that ended a connection */
};

struct echo_server_args {
	struct sockaddr_storage addr; /* where to listen */
	uint32_t addrlen;
	uint32_t bufsize; /* bytes per block buffer */
	uint8_t *bufs; /* device memory: blocks * bufsize */
	int32_t listen_fd; /* block 0 publishes it */
	int32_t ready; /* 0 not yet, 1 listening, < 0 -errno */
	struct sockaddr_storage bound; /* the address actually bound */
	uint32_t boundlen;
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

/* Fill ss from "HOST:PORT", "[V6]:PORT", "PORT" (any IPv4) or "/unix/path". */
int echo_parse_addr(const char *spec, struct sockaddr_storage *ss,
		    uint32_t *len);
/* Write ss as text, as echo_parse_addr reads it. */
void echo_format_addr(const struct sockaddr_storage *ss, char *buf, size_t len);

struct gsock_ctx;
struct gsock_opts;
/*
 * Register with gsockd (saying why on stderr if that fails), make SIGINT
 * and SIGTERM stop the kernels, and set *threads to 1 on the host backend.
 */
struct gsock_ctx *echo_start(const char *prog, const struct gsock_opts *go,
			     unsigned *threads);

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
