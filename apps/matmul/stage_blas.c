/* SPDX-License-Identifier: Apache-2.0 */
/* The OpenBLAS stage of the CPU-only server P: cblas_sgemm in place. */
#include <config.h>

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "stage.h"

struct mm_stage {
	float *in, *out;
};

const char *mm_stage_name(void)
{
	return "openblas";
}

struct mm_stage *mm_stage_open(uint32_t max_n, char *err, size_t errlen)
{
	struct mm_stage *s = calloc(1, sizeof(*s));
	size_t n2 = (size_t)max_n * max_n;

	if (s) {
		s->in = malloc(2 * n2 * sizeof(float));
		s->out = malloc(n2 * sizeof(float));
	}
	if (!s || !s->in || !s->out) {
		snprintf(err, errlen, "out of memory for %ux%u matrices", max_n,
			 max_n);
		mm_stage_close(s);
		return NULL;
	}
	return s;
}

void mm_stage_close(struct mm_stage *s)
{
	if (!s)
		return;
	free(s->in);
	free(s->out);
	free(s);
}

float *mm_stage_in(struct mm_stage *s)
{
	return s->in;
}

float *mm_stage_out(struct mm_stage *s)
{
	return s->out;
}

int mm_stage_run(struct mm_stage *s, uint32_t n)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
		    (int)n, 1.0f, s->in, (int)n, s->in + (size_t)n * n, (int)n,
		    0.0f, s->out, (int)n);
	return 0;
}
