/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where gsockd's workers run. The rings live in host memory that a GPU
 * reaches over PCIe, and a worker copies between them and its sockets:
 * both belong on the NUMA node the GPU hangs off. The node is the
 * numa_node key, else the node of the first NVIDIA GPU's PCI function
 * (sysfs; gsockd links no CUDA), else none. On a one-node host nothing
 * is placed.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_LIBNUMA
#include <numa.h>
#endif

#include "log.h"
#include "numa.h"

static int chosen = -1;

int br_numa_node(void)
{
	return chosen;
}

/* The number in sysfs file dir/dev/name (base 16 or 10), or def. */
static long sysfs_num(const char *dir, const char *dev, const char *name,
		      int base, long def)
{
	char path[512], buf[32];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", dir, dev, name);
	f = fopen(path, "r");
	if (!f)
		return def;
	if (fgets(buf, sizeof(buf), f))
		def = strtol(buf, NULL, base);
	fclose(f);
	return def;
}

/* The NUMA node of the first NVIDIA display or 3D controller, or -1. */
static int gpu_node(char *which, size_t len)
{
	const char *dir = "/sys/bus/pci/devices";
	DIR *d = opendir(dir);
	struct dirent *e;
	int node = -1;

	if (!d)
		return -1;
	while (node < 0 && (e = readdir(d))) {
		if (sysfs_num(dir, e->d_name, "vendor", 16, 0) != 0x10de ||
		    (sysfs_num(dir, e->d_name, "class", 16, 0) >> 16) != 0x03)
			continue;
		node = (int)sysfs_num(dir, e->d_name, "numa_node", 10, -1);
		snprintf(which, len, "GPU %s", e->d_name);
		if (node < 0)
			node = 0; /* sysfs says -1 on hosts without NUMA */
	}
	closedir(d);
	return node;
}

void br_numa_decide(long conf_node)
{
#ifdef HAVE_LIBNUMA
	char which[300] = "numa_node in gsock.conf";
	int nodes, node = (int)conf_node;

	if (numa_available() < 0) {
		br_info("NUMA: the kernel has no NUMA support; workers are not placed");
		return;
	}
	nodes = numa_num_configured_nodes();
	if (node < 0)
		node = gpu_node(which, sizeof(which));
	if (nodes <= 1) {
		br_info("NUMA: one node on this host; workers are not placed");
		return;
	}
	if (node < 0 || node >= nodes) {
		br_info("NUMA: %d nodes, %s; workers are not placed",
			nodes, node < 0 ? "no NVIDIA GPU found" :
					  "numa_node is past the last node");
		return;
	}
	chosen = node;
	br_info("NUMA: workers run on node %d of %d (%s)", node, nodes, which);
#else
	(void)conf_node;
	(void)gpu_node;
	br_info("NUMA: gsockd was built without libnuma; workers are not placed");
#endif
}

int br_numa_run_on(int node)
{
#ifdef HAVE_LIBNUMA
	if (numa_run_on_node(node) < 0)
		return -1;
	numa_set_preferred(node);
	return 0;
#else
	(void)node;
	errno = ENOSYS;
	return -1;
#endif
}
