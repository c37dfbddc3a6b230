/* SPDX-License-Identifier: Apache-2.0 */
/* gsockd's configuration: defaults, gsock.conf, then the command line. */
#ifndef BR_CONF_H
#define BR_CONF_H

#include <stdint.h>
#include <sys/un.h>

/* How workers move bytes (the io key). */
enum br_io_mode { BR_IO_AUTO, BR_IO_URING, BR_IO_EPOLL };

struct br_conf {
	char control[sizeof(((struct sockaddr_un *)0)->sun_path)];
	long busy_poll_us; /* the longest a worker spins for an answer */
	int answer_nap; /* nap a learnt answer time before the spin (learn) */
	long watch_min_us; /* the doorbell watch's shortest period */
	long idle_sleep_us; /* and its longest, short of a deep idle */
	int log_level; /* enum br_log_level */
	int log_syslog; /* 1: syslog, 0: stderr */
	long max_apps; /* applications registered at once (and control
			  connections waiting for their hello) */
	long max_arena_mb; /* largest arena an application may register */
	long max_sockets; /* sockets in one application's arena */
	long max_slots; /* command slots in one application's arena */
	long hello_timeout_ms; /* a control connection's time to say hello */
	long accept_queue; /* connections accepted ahead of gaccept */
	long linger_ms; /* how long a closed socket may drain its tx ring */
	long workers; /* worker threads; 0: automatic */
	long numa_node; /* where workers run; -1: the GPU's node */
	int io; /* enum br_io_mode: BR_IO_AUTO, BR_IO_URING, BR_IO_EPOLL */
	int rsocket; /* transport rsocket: TCP endpoints through the preload */
	int direct; /* same-host peers skip the bridge (direct = auto) */
	int direct_device; /* direct rings in the receiver's GPU memory (auto) */
	long direct_conns; /* direct connections at once: the pool's segments */
	long direct_ring_size; /* bytes per direct ring, a power of two */
	long direct_accept_ms; /* a gconnect waits this long for a preloaded accept */
	char preload_library[4096]; /* libgsock-preload.so, for that */
};

/* Fill the built-in defaults. */
void br_conf_defaults(struct br_conf *c);

/*
 * Read path into c. required: a missing file is an error (named on the
 * command line or in $GSOCK_CONF). Returns 0, or -1 after logging each
 * problem with the file, line and key.
 */
int br_conf_load(struct br_conf *c, const char *path, int required);

/* "auto", "io_uring", "epoll" to enum br_io_mode; -1 for anything else. */
int br_io_mode_parse(const char *s);

/* The integer in a /proc file such as a sysctl's, or dflt. */
int br_proc_int(const char *path, int dflt);

#endif
