/* SPDX-License-Identifier: Apache-2.0 */
/* The MapReduce kernels for the host backend: the same source, a C compiler. */
#include "kernels.cu"
