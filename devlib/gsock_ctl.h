/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control socket protocol between libgsock and gsockd: an AF_UNIX
 * SOCK_SEQPACKET connection that lives as long as the application. Its
 * first message hands over the arena; its end, either way, ends the
 * application's registration.
 *
 *   bridge -> app   gs_ctl_welcome: the protocol version and how many
 *                   workers (doorbell queues) the arena should have; with
 *                   dsegs > 0, the direct pool's memfd in SCM_RIGHTS
 *                   (gsock_arena.h, gs_dseg); or a gs_ctl_reply refusing
 *                   the application
 *   app -> bridge   gs_ctl_hello, with the arena memfd in SCM_RIGHTS, and
 *                   whether its device reaches the direct pool; where the
 *                   welcome asked for one (rx_pools) and the device could
 *                   make it, the descriptor of its receive pool follows
 *                   the memfd's (below)
 *   bridge -> app   gs_ctl_reply: status 0, or -errno and a sentence
 *
 * Receive pools: an application's direct rings in its own device memory
 * (gsock_arena.h, gs_dseg.dev), one ring of dring_size bytes per segment,
 * segment s's at s x dring_size, exported as a descriptor (a CUDA
 * shareable allocation on the cuda backend, a memfd on the host backend).
 * gsockd gives each pool an index (< GS_MAX_PEERS) and, after the reply,
 * tells every registered application of every other's: a gs_ctl_peer
 * with the pool's descriptor in SCM_RIGHTS. The application maps the
 * pool for its device and answers with a gs_ctl_peer_ack; from then on
 * gsockd may put the ring of a pipe whose receiver owns that pool into
 * it (never a pipe whose two ends are one application's: its two rings
 * would be one). A pool it cannot reach (GPUs without peer access) is
 * answered with an error, and those pipes keep their rings in the
 * segment. Once the pool's owner is gone and no segment has a ring in
 * it, gsockd says so (drop = 1, no descriptor, no answer), and each
 * application that mapped that use of the index (gen) lets it go.
 *
 * A reply and a welcome are told apart by their magic.
 *
 * A preloaded CPU program that connects to an address of this host asks
 * on a connection of its own (libgsock-preload.so, preload/direct.c):
 * after the welcome, which carries the pool to gsockd's own user, it
 * sends a gs_ctl_dconnect with one end of a socketpair in SCM_RIGHTS;
 * gsockd answers with a gs_ctl_dreply and closes. Status 0 means a
 * listener of an application of this gsockd takes the connection and
 * the segment is the caller's (side 0) once its connect(2) from src
 * reaches that listener; gsockd keeps the socketpair's end to wake the
 * caller with (gsock_arena.h, gs_dseg). -ENOENT means no such listener:
 * the connection takes the kernel.
 *
 * The other way round, a GPU application's gconnect to a preloaded
 * program's listener: the preload names each listener it listens on
 * (GS_CTL_DLISTEN_MAGIC, no descriptor; the answer's status says whether
 * gsockd took it). A gconnect that reaches only such listeners (the
 * kernel's own list says so) takes a segment, side 0, and is held after
 * its connect(2) completes; the pool's page counts such connections by
 * port (gs_dpool.pend_port), and while its port's count is not 0 the
 * preload asks after each connection from this host that a named
 * listener accepts (GS_CTL_DACCEPT_MAGIC, with a socketpair end). Status 0 gives it side 1 of the segment, and the
 * gconnect returns direct; one not claimed within direct_accept_ms
 * returns on the bridge.
 *
 * A live view (gsock-stat) asks on a connection of its own, and has no
 * arena: after the welcome it sends a gs_ctl_hello with magic
 * GS_CTL_STATS_MAGIC, version GS_STATS_VERSION, arena_size 0 and no
 * descriptor; gsockd answers with messages of whole gs_stat_rec records
 * (one GS_STAT_BRIDGE, then each application, then each socket, in no
 * order), then a message of one GS_STAT_END record that counts the ones
 * before it, and closes; an answer without it was cut short. It reads counters gsockd
 * keeps anyway; the data path pays nothing while nobody asks.
 */
#ifndef GSOCK_CTL_H
#define GSOCK_CTL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gsock_arena.h"

#define GS_CTL_MAGIC 0x6c746367u /* "gctl" */
#define GS_CTL_WELCOME_MAGIC 0x6c657767u /* "gwel" */
#define GS_CTL_VERSION 11

struct gs_ctl_welcome {
	uint32_t magic; /* GS_CTL_WELCOME_MAGIC */
	uint32_t version; /* GS_CTL_VERSION */
	uint32_t workers; /* gsockd's workers: doorbell queues to make */
	uint32_t dsegs; /* the direct pool's segments; 0: no pool, no fd */
	uint32_t dring_size; /* bytes per direct ring, a power of two */
	uint32_t rx_pools; /* 1: make a receive pool and send it with the hello */
	uint64_t pool_size; /* GS_DPOOL_SIZE(dsegs, dring_size) */
};

struct gs_ctl_hello {
	uint32_t magic; /* GS_CTL_MAGIC */
	uint32_t version; /* GS_CTL_VERSION */
	uint64_t arena_size; /* bytes of the memfd that comes with it */
	uint32_t direct; /* 1: the device reaches the direct pool */
	uint32_t pad;
	uint64_t rx_size; /* bytes of the receive pool whose descriptor follows, or 0 */
};

#define GS_CTL_PEER_MAGIC 0x72656570u /* "peer" */

/* bridge -> app: a receive pool to map (gsockd keeps its index). */
struct gs_ctl_peer {
	uint32_t magic; /* GS_CTL_PEER_MAGIC */
	uint32_t peer; /* the pool's index, < GS_MAX_PEERS */
	uint32_t gen; /* this use of the index; the answer names it */
	uint32_t drop; /* 1: let go of what this use of the index mapped */
	uint64_t size; /* bytes of the pool */
	int32_t pid; /* whose pool it is */
	uint32_t pad;
};

/* app -> bridge: what became of a gs_ctl_peer. */
struct gs_ctl_peer_ack {
	uint32_t magic; /* GS_CTL_PEER_MAGIC */
	uint32_t peer, gen; /* as in the gs_ctl_peer */
	int32_t status; /* 0: mapped; else -errno, its rings stay in segments */
};

struct gs_ctl_reply {
	uint32_t magic; /* GS_CTL_MAGIC */
	int32_t status; /* 0 accepted, else negative errno */
	char msg[248]; /* why, as a sentence, when status != 0 */
};

#define GS_CTL_DCONN_MAGIC 0x6e6f6364u /* "dcon" */

#define GS_CTL_DLISTEN_MAGIC 0x73696c64u /* "dlis" */
#define GS_CTL_DACCEPT_MAGIC 0x63636164u /* "dacc" */

/* GS_CTL_DLISTEN_MAGIC's flags */
#define GS_DL_REUSEPORT 1u /* the listener shares its port (SO_REUSEPORT) */
#define GS_DL_V4_TOO 2u /* an IPv6 wildcard that takes IPv4 too */

/*
 * A preload's request, by magic:
 *   GS_CTL_DCONN_MAGIC    connect(2) from src to dst is about to go out
 *                         (a socketpair end comes with it);
 *   GS_CTL_DLISTEN_MAGIC  the listener at dst (inode ino, flags) is a
 *                         preloaded program's (no descriptor);
 *   GS_CTL_DACCEPT_MAGIC  a listener of it accepted a connection from
 *                         src to dst (a socketpair end comes with it).
 */
struct gs_ctl_dconnect {
	uint32_t magic; /* one of the three above */
	uint32_t version; /* GS_CTL_VERSION */
	uint32_t dst_len, src_len; /* bytes of dst and src */
	uint8_t dst[28]; /* the address connected to: sockaddr_in or _in6 */
	uint8_t src[28]; /* the connecting socket's bound address */
	uint64_t ino; /* GS_CTL_DLISTEN_MAGIC: the listening socket's inode */
	uint32_t flags; /* GS_CTL_DLISTEN_MAGIC: GS_DL_* */
	uint32_t pad;
};

struct gs_ctl_dreply {
	uint32_t magic; /* GS_CTL_DCONN_MAGIC */
	int32_t status; /* 0: direct, else negative errno */
	uint32_t seg; /* status 0: the segment */
	uint32_t side; /* status 0: the caller's side (0 connected, 1 accepted) */
	char msg[112]; /* why, as a sentence, when status != 0 */
};

#define GS_CTL_STATS_MAGIC 0x61747367u /* "gsta" */
#define GS_STATS_VERSION 3

enum gs_stat_kind { GS_STAT_BRIDGE = 1, GS_STAT_APP, GS_STAT_SOCK, GS_STAT_END };

/* A socket's state, as gsock-stat names it. */
enum gs_stat_state {
	GS_SS_OPEN = 1, /* created, neither listening nor connected */
	GS_SS_LISTEN,
	GS_SS_CONNECTING,
	GS_SS_CONNECTED,
	GS_SS_CLOSING, /* closed by the application; unsent bytes draining */
};

struct gs_stat_rec {
	uint32_t kind; /* gs_stat_kind */
	int32_t pid; /* BRIDGE: gsockd's; APP, SOCK: the application's */
	uint32_t arena; /* APP, SOCK: the arena's serial (a process may have several) */
	uint32_t pad;
	union {
		struct {
			/* direct_held: segments of the direct pool in use */
			uint32_t workers, napps, io_uring, direct_held;
			/* since gsockd started: wake-up bytes written to
			 * preloaded programs' descriptors (the direct path),
			 * the doorbell watch's looks and those that found one */
			uint64_t direct_wakeups, watch_looks, watch_finds;
			uint32_t direct_segs, pad; /* the pool's segments (0: off) */
		} bridge;
		struct {
			uint32_t nslots, nsocks, ring_size, nworkers;
			uint64_t arena_size;
			char comm[16]; /* /proc/PID/comm */
			char device[32]; /* its GPU: "cuda:0 0000:3b:00.0" */
		} app;
		struct {
			uint32_t id; /* the application's descriptor */
			uint32_t worker; /* the gsockd worker that owns it */
			uint32_t state; /* gs_stat_state */
			uint32_t status; /* GS_ST_* as the application sees it */
			int32_t error; /* the socket's error (negative errno), or 0 */
			uint32_t poll_slot; /* 1 + the command slot (block) polling it, or 0 */
			uint32_t direct; /* 1: bytes move through a direct segment, not gsockd; 2: and a ring of it is in GPU memory */
			uint32_t pad2;
			uint64_t rx_bytes, tx_bytes; /* received into / sent from its rings */
			uint64_t rx_queued, tx_queued; /* in the rings: unread, unsent */
			uint64_t idle_ms; /* since bytes last moved (or it was made) */
			char local[64], peer[64]; /* addresses, printable */
		} sock;
		struct {
			uint64_t records; /* sent before this one */
		} end;
	} u;
};

/*
 * The per-user default control socket path: $XDG_RUNTIME_DIR/gsockd.sock,
 * else /tmp/gsockd-UID.sock.
 */
static inline void gs_ctl_default_path(char *buf, size_t len)
{
	const char *dir = getenv("XDG_RUNTIME_DIR");

	if (dir && *dir)
		snprintf(buf, len, "%s/gsockd.sock", dir);
	else
		snprintf(buf, len, "/tmp/gsockd-%u.sock", (unsigned)geteuid());
}

#endif /* GSOCK_CTL_H */
