/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gcall-probe: kernels that exercise single g-call behaviours for the
 * tests and report each result as a number, by name.
 */
#ifndef PROBE_H
#define PROBE_H

#include "../apps/echo/echo.h"

#define PROBE_MAX 32

enum probe_mode {
	PROBE_RECV, /* connect, grecv until <= 0, then one gsend */
	PROBE_ERRORS, /* bad calls must fail with the right errno */
	PROBE_COPY, /* the block copy, every alignment pair: no gsockd needed */
	PROBE_SEND, /* listen at addr, accept one, gsend count bytes, gclose */
	PROBE_RELAY, /* listen at addr; join accepted connections in pairs */
	PROBE_SELF, /* listen at addr, connect to it, talk to itself */
	PROBE_LANE, /* a direct connection's lane, made up: no gsockd needed */
};

/*
 * The relay: connections accepted one after another are joined in pairs,
 * first with second, third with fourth, ...; what one sends the other
 * receives, and one's end of stream shuts the other's writing down. A
 * pair is closed when both have ended. Two sockets of a CPU program
 * connected to it one after the other thus act as one TCP pair whose
 * bytes cross the GPU (t/preload-torture.t's direct round).
 */
#define RELAY_CONNS 64
#define RELAY_BUF 16384

struct relay_conn {
	int32_t fd; /* -1: free */
	int32_t peer; /* the index it is joined to, -1 while it waits */
	uint32_t len, off; /* bytes of its buffer read from it, sent on */
	uint32_t eof; /* it ended its stream, or failed */
	uint32_t pad;
};

#define RELAY_MEM (RELAY_CONNS * (sizeof(struct relay_conn) + RELAY_BUF))
/*
 * The copy probe's source and destination halves: its longest copies
 * span several rounds of gs_copy_far's loads (8 x 16 bytes a thread) at
 * up to 128 threads, one partial round at 384.
 */
#define COPY_HALF 40960

struct probe_args {
	uint32_t mode;
	struct sockaddr_storage addr; /* peer (recv), or a closed port (errors) */
	uint32_t addrlen;
	uint64_t count; /* send: bytes to send (byte k is k * 7 % 251) */
	uint8_t *buf; /* device memory: 4096 bytes, more for copy and relay */
	uint32_t n;
	char name[PROBE_MAX][24];
	int64_t value[PROBE_MAX];
	int32_t done;
};

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL(probe_kernel, gs, arg);
#ifdef __cplusplus
}
#endif

#endif
