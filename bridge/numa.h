/* SPDX-License-Identifier: Apache-2.0 */
/* Placement of gsockd's workers near the GPU they serve (libnuma). */
#ifndef BR_NUMA_H
#define BR_NUMA_H

/*
 * Decide once, from the numa_node key and the host: the node to run the
 * workers on, or -1 (one node, no libnuma, or nothing to go by). Logs
 * the decision in one line.
 */
void br_numa_decide(long conf_node);

/* The node decided, or -1. */
int br_numa_node(void);

/* Run the calling thread on node's cores, allocate there; 0 or -1, errno. */
int br_numa_run_on(int node);

#endif
