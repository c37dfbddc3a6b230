/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What gsockd's libFuzzer targets (t/fuzz_ctl.c, t/fuzz_arena.c) share:
 * gsockd's state with its workers driven by br_worker_turn() on the
 * fuzzer's one thread, and the sandbox the targets are linked with
 * (-Wl,--wrap=bind,--wrap=connect): sockets that a fuzzed arena asks for
 * are real, but reach nothing beyond loopback and no unix path on this
 * machine outside a harness's own folder.
 */
#ifndef T_FUZZ_COMMON_H
#define T_FUZZ_COMMON_H

#include <stdint.h>
#include <sys/socket.h>

#include "../bridge/bridge.h"

/*
 * gsockd's state for the fuzzer, with nworkers workers made (no threads);
 * aborts when it cannot.
 */
void fz_bridge_init(uint32_t nworkers);

/*
 * Let unix paths in folder dir be bound and connected to too (NULL: again
 * none): a harness's own folder, which it checks is left empty.
 */
void fz_sandbox_allow(const char *dir);

/* The real calls, for the harness's own sockets. */
int __real_bind(int fd, const struct sockaddr *sa, socklen_t len);
int __real_connect(int fd, const struct sockaddr *sa, socklen_t len);

#endif
