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
};

struct probe_args {
	uint32_t mode;
	struct sockaddr_storage addr; /* peer (recv), or a closed port (errors) */
	uint32_t addrlen;
	uint64_t count; /* send: bytes to send (byte k is k * 7 % 251) */
	uint8_t *buf; /* device memory, 4096 bytes */
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
