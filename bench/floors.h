/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU half of bench/floors (floors_gpu.cu; floors_nogpu.c without CUDA). */
#ifndef BENCH_FLOORS_H
#define BENCH_FLOORS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Mean GPU<->CPU round trip through mapped pinned memory (us), and pinned
 * copy bandwidth host->device and device->host (GB/s). Returns -1 with a
 * reason in why when there is no GPU.
 */
int floors_gpu(double *mapped_rtt_us, double *h2d_gbs, double *d2h_gbs,
	       const char **why);
/*
 * GPU 0 -> GPU 1 copy bandwidth (cudaMemcpyPeer, over NVLink or PCIe;
 * GB/s), or -1 with a reason in why with fewer than two GPUs.
 */
int floors_peer(double *peer_gbs, const char **why);

#ifdef __cplusplus
}
#endif

#endif
