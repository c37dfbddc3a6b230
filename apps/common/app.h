/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the host sides of the example applications share: sockets made
 * from address text (gsock_parse_addr) and, for the g-call programs,
 * start-up (libgsock, signals).
 */
#ifndef APP_H
#define APP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "gsock.h" /* gsock_parse_addr, gsock_format_addr */

/* A connected blocking TCP or unix socket to spec, TCP_NODELAY; -1, errno. */
int app_connect(const char *spec);
/*
 * A non-blocking TCP or unix socket to spec, TCP_NODELAY, its connect
 * begun: connected, or still connecting (writable when that is done;
 * SO_ERROR says how it ended). -1 with errno when it failed at once
 * (a unix socket whose listen queue is full: EAGAIN). A program with a
 * deadline uses this: a blocking connect to a full listen queue waits
 * out the kernel's SYN retries, two minutes.
 */
int app_connect_nb(const char *spec);
/*
 * Send (sending != 0) or receive exactly n bytes on a blocking socket,
 * again after EINTR; 0, or -1 on an error or the peer's end.
 */
int app_io_all(int fd, void *p, size_t n, int sending);
/* A listening socket on spec (SO_REUSEADDR, and SO_REUSEPORT if asked). */
int app_listen(const char *spec, int reuseport);

/*
 * A binary PGM (P5, maxval <= 255) of min_side..max_side pixels a side,
 * read into a malloc'd buffer; NULL with errno (EINVAL: not such a PGM).
 */
uint8_t *app_pgm_read(const char *path, uint32_t *w, uint32_t *h,
		      uint32_t min_side, uint32_t max_side);
/* Write one; 0 or -1 with errno. */
int app_pgm_write(const char *path, const uint8_t *img, uint32_t w,
		  uint32_t h);

struct gsock_ctx;
struct gsock_opts;
struct app_listener;
/*
 * Register with gsockd (saying why on stderr if that fails), make SIGINT
 * and SIGTERM stop the kernels, and set *threads to 1 on the host backend.
 * A program may call it once per GPU (go->device), up to APP_MAX_CONTEXTS
 * times; a signal stops the kernels of all.
 */
#define APP_MAX_CONTEXTS 16
struct gsock_ctx *app_start(const char *prog, const struct gsock_opts *go,
			    unsigned *threads);

/* Wait until block 0 listens (0) or failed (-errno); the kernel runs. */
int app_wait_listening(struct gsock_ctx *ctx, struct app_listener *l);
/*
 * A g-call server's life: launch kernel on blocks x threads with arg,
 * wait until block 0 listens on l, say where ("PROG: listening on ADDR
 * (BACKEND, blocks x threads, DETAIL)"), sleep until the kernel ends (a
 * signal, gsockd's death). Returns 0, a <sysexits.h> status, or -1 when
 * the kernel could not be launched (said on stderr).
 */
int app_run_server(struct gsock_ctx *ctx, const char *prog, const void *kernel,
		   unsigned blocks, unsigned threads, void *arg,
		   struct app_listener *l, const char *listen_at,
		   const char *detail);

#endif
