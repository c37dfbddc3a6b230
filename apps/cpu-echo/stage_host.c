/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stage without a GPU (for builds and CI without CUDA): the copies
 * and the kernel become one memcpy, so the server's code paths still run.
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "stage.h"

struct stage {
	uint8_t *in, *out;
};

const char *stage_name(void)
{
	return "host (memcpy stand-in, no GPU)";
}

struct stage *stage_open(size_t cap, char *err, size_t errlen)
{
	struct stage *s = calloc(1, sizeof(*s));

	(void)err;
	(void)errlen;
	if (s) {
		s->in = malloc(cap);
		s->out = malloc(cap);
	}
	return s && s->in && s->out ? s : NULL;
}

uint8_t *stage_in(struct stage *s)
{
	return s->in;
}

uint8_t *stage_out(struct stage *s)
{
	return s->out;
}

int stage_run(struct stage *s, size_t n)
{
	memcpy(s->out, s->in, n);
	return 0;
}
