/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU stage: the shared maths on the server thread itself. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>

#include "fv_cpu.h"
#include "stage.h"

struct fv_stage {
	size_t used; /* picture bytes of the batch */
	uint32_t w[FV_STAGE_JOBS], h[FV_STAGE_JOBS];
	size_t at[FV_STAGE_JOBS];
	uint8_t *pictures; /* FV_STAGE_BYTES */
	float *stored; /* FV_STAGE_JOBS * FV_NFEAT */
};

const char *fv_stage_name(void)
{
	return "cpu";
}

struct fv_stage *fv_stage_open(char *err, size_t errlen)
{
	struct fv_stage *s = calloc(1, sizeof(*s));

	if (s) {
		s->pictures = malloc(FV_STAGE_BYTES);
		s->stored = malloc(sizeof(float) * FV_STAGE_JOBS * FV_NFEAT);
	}
	if (!s || !s->pictures || !s->stored) {
		snprintf(err, errlen, "out of memory for a batch");
		return NULL; /* the process is about to exit */
	}
	return s;
}

uint8_t *fv_stage_picture(struct fv_stage *s, unsigned i, uint32_t w,
			  uint32_t h)
{
	if (i == 0)
		s->used = 0;
	if (i >= FV_STAGE_JOBS || s->used + (size_t)w * h > FV_STAGE_BYTES)
		return NULL;
	s->w[i] = w;
	s->h[i] = h;
	s->at[i] = s->used;
	s->used += (size_t)w * h;
	return s->pictures + s->at[i];
}

float *fv_stage_stored(struct fv_stage *s)
{
	return s->stored;
}

int fv_stage_run(struct fv_stage *s, unsigned n, float *dist)
{
	float query[FV_NFEAT];

	for (unsigned i = 0; i < n; i++) {
		fv_features_cpu(s->pictures + s->at[i], s->w[i], s->h[i],
				query);
		dist[i] = fv_chi2_cpu(query, s->stored + (size_t)i * FV_NFEAT);
	}
	return 0;
}
