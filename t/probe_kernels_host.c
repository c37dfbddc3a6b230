/* SPDX-License-Identifier: Apache-2.0 */
/* gcall-probe's kernel for the host backend. */
#include "probe_kernels.cu"
