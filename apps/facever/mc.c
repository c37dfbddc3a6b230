/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU programs' memcached client, on libmemcached: a batch's keys go
 * out in one multi-get and come back as they arrive. Every wait is
 * bounded (MC_TIMEOUT_MS), and a failed server is tried again on the next
 * call, so a dead or stopped memcached costs errors, never a hang.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libmemcached/memcached.h>

#include "fv_cpu.h"

#define MC_TIMEOUT_MS 1000

void mc_init(struct mc *m, const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	size_t n = colon ? (size_t)(colon - addr) : 0;

	m->addr = addr;
	m->st = memcached_create(NULL);
	if (!m->st)
		return;
	if (addr[0] == '/') {
		memcached_server_add_unix_socket(m->st, addr);
	} else if (colon && n < sizeof(host)) {
		if (addr[0] == '[' && n >= 2) /* [V6]:PORT */
			addr++, n -= 2;
		memcpy(host, addr, n);
		host[n] = 0;
		memcached_server_add(m->st, host, (in_port_t)atoi(colon + 1));
	}
	memcached_behavior_set(m->st, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
	memcached_behavior_set(m->st, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT,
			       MC_TIMEOUT_MS);
	memcached_behavior_set(m->st, MEMCACHED_BEHAVIOR_POLL_TIMEOUT,
			       MC_TIMEOUT_MS);
	memcached_behavior_set(m->st, MEMCACHED_BEHAVIOR_RCV_TIMEOUT,
			       MC_TIMEOUT_MS * 1000);
	memcached_behavior_set(m->st, MEMCACHED_BEHAVIOR_SND_TIMEOUT,
			       MC_TIMEOUT_MS * 1000);
	/* a failed server is tried again at once: it may have restarted */
	memcached_behavior_set(m->st, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 0);
}

void mc_close(struct mc *m)
{
	memcached_free(m->st);
	m->st = NULL;
}

int mc_set(struct mc *m, uint32_t id, const void *val, size_t len, char *err,
	   size_t errlen)
{
	char key[16];
	uint32_t klen = fv_key(key, id);
	memcached_return_t rc = m->st ? memcached_set(m->st, key, klen, val,
						      len, 0, 0) :
					MEMCACHED_MEMORY_ALLOCATION_FAILURE;

	if (rc == MEMCACHED_SUCCESS)
		return 0;
	snprintf(err, errlen, "memcached at %s: %s", m->addr,
		 m->st ? memcached_last_error_message(m->st) :
			 "cannot set up a client");
	return -1;
}

/* One multi-get round; 0, or -1 when memcached failed before the end. */
static int mc_get_round(struct mc *m, const uint32_t *ids, unsigned n,
			float *feats, int32_t *status)
{
	char keys[MC_MAX_KEYS][16];
	const char *kp[MC_MAX_KEYS];
	size_t kl[MC_MAX_KEYS];
	memcached_result_st res;
	memcached_return_t rc;

	for (unsigned i = 0; i < n; i++) {
		kl[i] = fv_key(keys[i], ids[i]);
		kp[i] = keys[i];
		status[i] = FV_E_UNKNOWN; /* unless it comes */
	}
	if (memcached_mget(m->st, kp, kl, n) != MEMCACHED_SUCCESS ||
	    !memcached_result_create(m->st, &res))
		return -1;
	while (memcached_fetch_result(m->st, &res, &rc)) {
		const char *key = memcached_result_key_value(&res);
		size_t klen = memcached_result_key_length(&res);

		for (unsigned i = 0; i < n; i++) { /* an id may be asked twice */
			if (status[i] != FV_E_UNKNOWN || kl[i] != klen ||
			    memcmp(kp[i], key, klen))
				continue;
			status[i] = FV_E_STORE;
			if (memcached_result_length(&res) == FV_FEAT_BYTES) {
				memcpy(feats + (size_t)i * FV_NFEAT,
				       memcached_result_value(&res),
				       FV_FEAT_BYTES);
				status[i] = 0;
			}
		}
	}
	memcached_result_free(&res);
	return rc == MEMCACHED_END || rc == MEMCACHED_SUCCESS ||
			       rc == MEMCACHED_NOTFOUND ?
		       0 :
		       -1;
}

void mc_get_feats(struct mc *m, const uint32_t *ids, unsigned n, float *feats,
		  int32_t *status)
{
	for (unsigned at = 0; at < n; at += MC_MAX_KEYS) {
		unsigned k = n - at < MC_MAX_KEYS ? n - at : MC_MAX_KEYS;
		/* a connection that was open may have died since: once more */
		int ok = m->st && (!mc_get_round(m, ids + at, k,
						 feats + (size_t)at * FV_NFEAT,
						 status + at) ||
				   !mc_get_round(m, ids + at, k,
						 feats + (size_t)at * FV_NFEAT,
						 status + at));

		for (unsigned i = at; !ok && i < at + k; i++)
			status[i] = FV_E_STORE;
	}
}
