/* SPDX-License-Identifier: Apache-2.0 */
/* The probes' CUDA runtime check: say which call failed and why, exit 1. */
#ifndef PROBES_CK_H
#define PROBES_CK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                               \
	do {                                                                \
		cudaError_t e_ = (x);                                       \
		if (e_ != cudaSuccess) {                                    \
			fprintf(stderr, "%s: %s\n", #x,                     \
				cudaGetErrorString(e_));                    \
			exit(1);                                            \
		}                                                           \
	} while (0)
#endif
