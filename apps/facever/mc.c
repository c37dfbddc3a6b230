/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small memcached client for the CPU programs, speaking meta commands:
 *
 *   set:  "ms fv:<id> <len> T0\r\n" <len bytes> "\r\n"  ->  "HD\r\n"
 *   get:  "mg fv:<id> v\r\n"  ->  "VA <len>\r\n" <len bytes> "\r\n" | "EN\r\n"
 *
 * Gets of one batch go out in one write and their replies are read in
 * order. Every read and write has a timeout (SO_RCVTIMEO/SO_SNDTIMEO), so
 * a stopped memcached turns into FV_E_STORE answers, and the connection
 * is made again on the next call.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "app.h"
#include "fv_cpu.h"

#define MC_TIMEOUT_MS 1000

void mc_init(struct mc *m, const char *addr)
{
	m->fd = -1;
	m->addr = addr;
	m->off = m->len = 0;
}

void mc_close(struct mc *m)
{
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
	m->off = m->len = 0;
}

static int mc_open(struct mc *m)
{
	struct timeval tv = { MC_TIMEOUT_MS / 1000,
			      (MC_TIMEOUT_MS % 1000) * 1000 };

	if (m->fd >= 0)
		return 0;
	m->fd = app_connect(m->addr);
	if (m->fd < 0)
		return -1;
	setsockopt(m->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(m->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return 0;
}

/* Make at least want bytes readable at buf + off; 0, or -1 (EOF counts). */
static int mc_fill(struct mc *m, size_t want)
{
	if (m->len - m->off >= want)
		return 0;
	memmove(m->buf, m->buf + m->off, m->len - m->off);
	m->len -= m->off;
	m->off = 0;
	while (m->len < want) {
		ssize_t k = recv(m->fd, m->buf + m->len,
				 sizeof(m->buf) - m->len, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		m->len += (size_t)k;
	}
	return 0;
}

/* The next reply line (without "\r\n") into line; its length, or -1. */
static int mc_line(struct mc *m, char *line, size_t cap)
{
	for (size_t scanned = 0;;) {
		char *nl = memchr(m->buf + m->off + scanned, '\n',
				  m->len - m->off - scanned);

		if (nl) {
			size_t n = (size_t)(nl - (m->buf + m->off));

			if (n == 0 || nl[-1] != '\r' || n > cap)
				return -1;
			memcpy(line, m->buf + m->off, n - 1);
			line[n - 1] = 0;
			m->off += n + 1;
			return (int)(n - 1);
		}
		scanned = m->len - m->off;
		if (scanned >= cap || mc_fill(m, scanned + 1))
			return -1;
	}
}

/* Copy n value bytes (and eat the "\r\n" after them) into dst. */
static int mc_value(struct mc *m, void *dst, size_t n)
{
	while (n) {
		size_t k;

		if (mc_fill(m, 1))
			return -1;
		k = m->len - m->off < n ? m->len - m->off : n;
		memcpy(dst, m->buf + m->off, k);
		dst = (char *)dst + k;
		m->off += k;
		n -= k;
	}
	if (mc_fill(m, 2) || memcmp(m->buf + m->off, "\r\n", 2))
		return -1;
	m->off += 2;
	return 0;
}

/* Skip a value of n bytes and its "\r\n". */
static int mc_skip(struct mc *m, size_t n)
{
	while (n) {
		size_t k;

		if (mc_fill(m, 1))
			return -1;
		k = m->len - m->off < n ? m->len - m->off : n;
		m->off += k;
		n -= k;
	}
	return mc_value(m, NULL, 0);
}

int mc_set(struct mc *m, uint32_t id, const void *val, size_t len, char *err,
	   size_t errlen)
{
	char cmd[64], key[16], line[128];
	int n;

	key[fv_key(key, id)] = 0;
	n = snprintf(cmd, sizeof(cmd), "ms %s %zu T0\r\n", key, len);
	if (mc_open(m) || app_io_all(m->fd, cmd, (size_t)n, 1) ||
	    app_io_all(m->fd, (void *)val, len, 1) ||
	    app_io_all(m->fd, (void *)"\r\n", 2, 1) ||
	    mc_line(m, line, sizeof(line)) < 0) {
		snprintf(err, errlen, "memcached at %s: %s", m->addr,
			 errno ? strerror(errno) : "connection closed");
		mc_close(m);
		return -1;
	}
	if (strcmp(line, "HD")) {
		snprintf(err, errlen, "memcached at %s refused %s: %s", m->addr,
			 key, line);
		return -1;
	}
	return 0;
}

/* One round of mc_get_feats on an open connection; -1 if it broke. */
static int mc_get_round(struct mc *m, const uint32_t *ids, unsigned n,
			float *feats, int32_t *status)
{
	char cmd[64 * 32], line[128];
	size_t used = 0;
	unsigned sent = 0, i;

	for (i = 0; i < n; i++) {
		char key[16];

		key[fv_key(key, ids[i])] = 0;
		used += (size_t)snprintf(cmd + used, sizeof(cmd) - used,
					 "mg %s v\r\n", key);
		if (used + 32 > sizeof(cmd) || i + 1 == n) {
			if (app_io_all(m->fd, cmd, used, 1))
				return -1;
			used = 0;
			for (; sent <= i; sent++) {
				long len;

				if (mc_line(m, line, sizeof(line)) < 0)
					return -1;
				if (!strcmp(line, "EN")) {
					status[sent] = FV_E_UNKNOWN;
					continue;
				}
				if (strncmp(line, "VA ", 3))
					return -1;
				len = strtol(line + 3, NULL, 10);
				if (len < 0 || len > (1 << 20))
					return -1;
				if (len != FV_FEAT_BYTES) {
					/* not features: skip it, fail only this one */
					if (mc_skip(m, (size_t)len))
						return -1;
					status[sent] = FV_E_STORE;
					continue;
				}
				if (mc_value(m, feats + (size_t)sent * FV_NFEAT,
					     FV_FEAT_BYTES))
					return -1;
				status[sent] = 0;
			}
		}
	}
	return 0;
}

void mc_get_feats(struct mc *m, const uint32_t *ids, unsigned n, float *feats,
		  int32_t *status)
{
	/* A connection that was open may have died since: one retry on a new one. */
	for (int tries = m->fd >= 0 ? 2 : 1; tries; tries--) {
		if (mc_open(m) == 0 &&
		    mc_get_round(m, ids, n, feats, status) == 0)
			return;
		mc_close(m);
	}
	for (unsigned i = 0; i < n; i++)
		status[i] = FV_E_STORE;
}
