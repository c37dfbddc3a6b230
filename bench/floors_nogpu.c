/* SPDX-License-Identifier: Apache-2.0 */
#include <config.h>

#include "floors.h"

int floors_gpu(double *mapped_rtt_us, double *h2d_gbs, double *d2h_gbs,
	       const char **why)
{
	(void)mapped_rtt_us;
	(void)h2d_gbs;
	(void)d2h_gbs;
	*why = "built without CUDA";
	return -1;
}

int floors_peer(double *peer_gbs, const char **why)
{
	(void)peer_gbs;
	*why = "built without CUDA";
	return -1;
}
