/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mr-worker: what its host program and its kernels share. One worker runs
 * on one GPU and holds its split of the input in device memory. A job is
 * one kernel launch whose blocks all stay resident: they map, meet at
 * grid barriers (device-memory words), and shuffle with g-calls to the
 * other workers; the host only loads the input, launches, waits and
 * writes the result.
 */
#ifndef MR_GPU_H
#define MR_GPU_H

#include "gapp.cuh"
#include "mr.h"

/* A word table entry: state 0 empty, 1 being written, 2 ready. */
struct mr_slot {
	uint32_t state;
	uint32_t hash;
	struct mr_word w;
};

/* What went wrong first (mr_result.what). */
enum mr_what {
	MR_E_NONE,
	MR_E_LISTEN, /* cannot listen on our own address */
	MR_E_CONNECT, /* cannot connect to peer */
	MR_E_ACCEPT, /* no peer connected within the timeout */
	MR_E_SEND, /* sending to peer failed */
	MR_E_RECV, /* receiving from peer failed */
	MR_E_SHORT, /* peer's stream ended early: done of total bytes */
	MR_E_PROTO, /* a stream that is not a shuffle stream of this job */
	MR_E_TABLE, /* the word table is full */
};

/* Device memory; the host copies it after the kernel. */
struct mr_result {
	uint32_t claim; /* the first error claims it */
	int32_t err; /* that error: negative errno, or 0 */
	uint32_t what; /* enum mr_what */
	uint32_t peer; /* the peer's rank, where there is one */
	uint64_t done, total; /* MR_E_SHORT: bytes received of expected */
	uint32_t bar_count, bar_gen; /* the grid barrier */
	uint32_t nrec[MR_MAX_PEERS]; /* records bound for each worker */
	uint32_t off[MR_MAX_PEERS]; /* where they start in the send buffer */
	uint32_t cur[MR_MAX_PEERS]; /* how many are in place */
	int32_t lfd; /* the listening socket */
	int32_t kfd[MR_MAX_PEERS]; /* k-means: connection to each peer */
	/*
	 * globaltimer / CLOCK_MONOTONIC ns: the launch, the job's start (all
	 * workers met), the map's end (word count), the job's end
	 */
	uint64_t t_launch, t_start, t_map, t_end;
	uint64_t xchg_ns; /* k-means: block 0's time in exchanges */
	uint64_t sent, received; /* shuffle bytes */
	uint32_t staged; /* word count: received records left in the stage */
};

struct mr_peer {
	struct sockaddr_storage addr;
	uint32_t len;
};

/* gsock_alloc memory: host and device. */
struct mr_job {
	uint32_t rank, workers;
	int32_t timeout_ms; /* bound on each quiet wait for a peer */
	int32_t hold_ms; /* test aid: senders pause halfway this long */
	uint32_t holding; /* a sender is pausing (the host says so) */
	uint32_t blocks; /* of the launch (all resident: grid barriers) */
	struct mr_peer peer[MR_MAX_PEERS];
	struct app_listener listen;
	struct mr_result *res; /* device memory */
	/* word count */
	const uint8_t *text; /* device memory: this worker's split */
	uint64_t text_len;
	struct mr_slot *table; /* device memory: table_mask + 1 slots */
	uint32_t table_mask;
	uint32_t stage_recs; /* records the stage holds: a table's worth */
	struct mr_word *out; /* device memory: records to send, by worker */
	struct mr_word *stage; /* device memory: a received chunk */
	/* k-means */
	const float *pts; /* device memory: npts x dim */
	uint64_t npts;
	uint32_t dim, k, iters, pad2;
	float *cent; /* device memory: k x dim */
	double *acc; /* device memory: k x dim sums, then k counts (u64) */
	double *pacc; /* device memory: a peer's acc, received */
};

/* Bytes of an acc: the sums, then the counts. */
GSOCK_HD size_t mr_acc_bytes(uint32_t k, uint32_t dim)
{
	return ((size_t)k * dim + k) * 8;
}

#ifdef __cplusplus
extern "C" {
#endif
GSOCK_KERNEL(mr_wordcount, gs, arg);
GSOCK_KERNEL(mr_kmeans, gs, arg);
#ifdef __cplusplus
}
#endif

#endif /* MR_GPU_H */
