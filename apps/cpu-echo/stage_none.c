/* SPDX-License-Identifier: Apache-2.0 */
/* cpu-echo-server: no GPU stage. */
#include <config.h>

#include <stdio.h>

#include "stage.h"

const char *stage_name(void)
{
	return NULL;
}

struct stage *stage_open(size_t cap, char *err, size_t errlen)
{
	(void)cap;
	snprintf(err, errlen, "built without a GPU stage");
	return NULL;
}

uint8_t *stage_in(struct stage *s)
{
	(void)s;
	return NULL;
}

uint8_t *stage_out(struct stage *s)
{
	(void)s;
	return NULL;
}

int stage_run(struct stage *s, size_t n)
{
	(void)s;
	(void)n;
	return -1;
}
