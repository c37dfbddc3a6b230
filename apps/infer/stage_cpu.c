/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stages that compute on the server thread, one source for three
 * programs: built with INFER_STAGE_HOST it is C's stage on the host
 * backend (the GPU code of espcn_gpu.h, a block being this thread); with
 * INFER_STAGE_BLAS, P's (im2col and OpenBLAS); otherwise P's without
 * OpenBLAS (espcn_run_cpu, the reference itself).
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "espcn_gpu.h"
#include "stage.h"

struct infer_stage {
	float p[ESPCN_NPARAMS];
	struct espcn_job jobs[INFER_STAGE_JOBS];
	uint64_t in_used, out_used;
	uint8_t *in, *out;
	float *scratch; /* INFER_STAGE_HOST: the block's */
#if defined(INFER_STAGE_BLAS)
	struct espcn_blas blas; /* its buffers, kept */
#endif
};

const char *infer_stage_name(void)
{
#if defined(INFER_STAGE_HOST)
	return "host";
#elif defined(INFER_STAGE_BLAS)
	return "openblas";
#else
	return "cpu";
#endif
}

struct infer_stage *infer_stage_open(const float *p, char *err, size_t errlen)
{
	struct infer_stage *s = calloc(1, sizeof(*s));

	if (s) {
		memcpy(s->p, p, sizeof(s->p));
		s->in = malloc(INFER_STAGE_PIXELS);
		s->out = malloc(9ull * INFER_STAGE_PIXELS);
		s->scratch = malloc(4ull * ESPCN_SCRATCH);
	}
	if (!s || !s->in || !s->out || !s->scratch) {
		snprintf(err, errlen, "out of memory for a batch");
		return NULL; /* the process is about to exit */
	}
	return s;
}

uint8_t *infer_stage_add(struct infer_stage *s, unsigned i, uint32_t w,
			 uint32_t h)
{
	if (i == 0)
		s->in_used = s->out_used = 0;
	if (i >= INFER_STAGE_JOBS ||
	    espcn_job_add(s->jobs, i, w, h, &s->in_used, INFER_STAGE_PIXELS,
			  &s->out_used, 9ull * INFER_STAGE_PIXELS))
		return NULL;
	return s->in + s->jobs[i].in_at;
}

int infer_stage_run(struct infer_stage *s, unsigned n, char *err,
		    size_t errlen)
{
	int r = 0;

	(void)err;
	(void)errlen;
#if defined(INFER_STAGE_HOST)
	espcn_batch_part(s->p, s->jobs, n, s->in, s->out, s->scratch, 0, 1);
#else
	for (unsigned i = 0; i < n && !r; i++) {
		const struct espcn_job *j = &s->jobs[i];

#if defined(INFER_STAGE_BLAS)
		r = espcn_run_blas(&s->blas, s->p, s->in + j->in_at, j->w,
				   j->h, s->out + j->out_at);
#else
		r = espcn_run_cpu(s->p, s->in + j->in_at, j->w, j->h,
				  s->out + j->out_at);
#endif
	}
#endif
	return r;
}

const uint8_t *infer_stage_out(struct infer_stage *s, unsigned i)
{
	return s->out + s->jobs[i].out_at;
}
