/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU side of face verification, shared by the enrolment tool, the
 * load generator and the CPU servers: the generated face population, PGM
 * files, and a memcached client (libmemcached).
 */
#ifndef FV_CPU_H
#define FV_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "fv.h"

/*
 * Face `view` of `person` in a deterministic population, w x h grey
 * pixels: view 0 is the enrolment picture, the others are shifted by up
 * to 2 pixels, lit differently and noisy.
 */
void fv_face(uint32_t seed, uint32_t person, uint32_t view, uint32_t w,
	     uint32_t h, uint8_t *img);


/* The features of img on this CPU thread. */
void fv_features_cpu(const uint8_t *img, uint32_t w, uint32_t h, float *feats);
float fv_chi2_cpu(const float *a, const float *b);

/*
 * A memcached client (mc.c, on libmemcached). Every call is bounded by a
 * timeout, and a failed server is tried again on the next call, so that a
 * dead or stopped memcached costs errors, never a hang.
 */
#define MC_MAX_KEYS 64 /* keys one multi-get asks for */
struct memcached_st;
struct mc {
	struct memcached_st *st;
	const char *addr;
};

void mc_init(struct mc *m, const char *addr);
void mc_close(struct mc *m);
/* Store val under fv:<id>; 0, or -1 with a reason in err. */
int mc_set(struct mc *m, uint32_t id, const void *val, size_t len, char *err,
	   size_t errlen);
/*
 * Fetch the reference features of n ids with one pipelined request:
 * status[i] is 0 (feats[i * FV_NFEAT ...] filled), FV_E_UNKNOWN or
 * FV_E_STORE.
 */
void mc_get_feats(struct mc *m, const uint32_t *ids, unsigned n, float *feats,
		  int32_t *status);

#endif
