/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared arena: the one piece of memory a GPU application and gsockd
 * both map. This header is the wire format between them. It is included by
 * the bridge (C), by libgsock (C) and by device code (nvcc or the C
 * compiler), so it holds layout and constants only, no code that touches
 * memory.
 *
 * Arena layout (offsets in the header, every part 64-byte aligned):
 *
 *   +--------------------+ 0
 *   | gs_arena_hdr       |  geometry (app writes once), event count
 *   +--------------------+ slots_off
 *   | gs_cmd[nslots]     |  one command slot per running threadblock
 *   +--------------------+ socks_off
 *   | gs_sock[nsocks]    |  ring counters and status per socket
 *   +--------------------+ dbq_off
 *   | gs_dbq[nqueues]    |  each doorbell queue's consumed count
 *   +--------------------+ db_off
 *   | u64[db_size]       |  doorbell queue 0's cells
 *   | u64[db_size] ...   |  queue 1's, up to nqueues
 *   +--------------------+ rings_off
 *   | rx ring | tx ring  |  ring_size bytes each, socket 0
 *   | rx ring | tx ring  |  socket 1 ...
 *   +--------------------+ arena_size
 *
 * Ownership: every word has exactly one writer, named beside it. The
 * bridge treats everything in the arena as untrusted input.
 */
#ifndef GSOCK_ARENA_H
#define GSOCK_ARENA_H

#include <stdint.h>

#define GS_ARENA_MAGIC 0x31636b6f7367ULL /* "gsock1" little-endian */
#define GS_ARENA_VERSION 6
#define GS_LINE 64

#define GS_ADDR_MAX 128 /* sizeof(struct sockaddr_storage) */

/* Limits the bridge enforces on geometry an application proposes. */
#define GS_MAX_SLOTS 4096
#define GS_MAX_SOCKS (1u << 20)
#define GS_MIN_RING 4096
#define GS_MAX_RING (64u << 20)
#define GS_MAX_DB 262144
#define GS_MAX_QUEUES 64 /* doorbell queues: one per gsockd worker */

/* Doorbell cell value: low 32 bits name what changed. */
#define GS_DB_CMD 0x80000000u /* bit set: a command slot; clear: a socket */

struct gs_arena_hdr {
	uint64_t magic; /* app, once: GS_ARENA_MAGIC */
	uint32_t version; /* app, once: GS_ARENA_VERSION */
	uint32_t hdr_size; /* app, once: sizeof(struct gs_arena_hdr) */
	uint64_t arena_size; /* app, once: bytes mapped */
	uint32_t nslots; /* app, once: command slots */
	uint32_t nsocks; /* app, once: socket entries */
	uint32_t ring_size; /* app, once: bytes per ring, power of two */
	uint32_t db_size; /* app, once: cells per doorbell queue, power of two */
	uint64_t slots_off; /* app, once */
	uint64_t socks_off; /* app, once */
	uint64_t db_off; /* app, once */
	uint64_t rings_off; /* app, once */
	uint32_t nqueues; /* app, once: doorbell queues, 1..GS_MAX_QUEUES */
	uint32_t pad_q;
	uint64_t dbq_off; /* app, once */
	uint8_t pad0[2 * GS_LINE - 88]; /* geometry ends on a line */
	char device[32]; /* app, once: its GPU, text ("cuda:0 0000:3b:00.0") */
	uint8_t pad1[GS_LINE - 32]; /* reserved */
};

/*
 * A doorbell queue. The application appends cells to queue q's ring of
 * db_size u64 cells: (ticket + 1) << 32 | what, written last with
 * release, so a cell is new when its high half equals the consumer's
 * count + 1. Each queue has one consumer, a gsockd worker; the bridge
 * tells the application which queue a socket's doorbells go to
 * (gs_sock.db_queue), so no worker reads another's traffic.
 *
 *   word    writer   meaning
 *   head    bridge   cells consumed (the producer waits while ticket -
 *                    head >= db_size)
 *   events  bridge   bumped (release) by queue q's worker after any change
 *                    a gpoll could see: rx bytes or EOF, tx space, an
 *                    error, a pending connection, a command done. A gpoll
 *                    waits on its own slot's wake (gs_cmd) and looks at
 *                    the sum of these now and then, for sockets another
 *                    block claimed. One per worker: no line is shared.
 */
struct gs_dbq {
	uint64_t head;
	uint64_t events;
	uint8_t pad[GS_LINE - 16];
};

/* Command opcodes. Arguments are in gs_cmd.arg[] unless said otherwise. */
enum gs_op {
	GS_OP_NONE = 0, /* never valid */
	GS_OP_SOCKET, /* arg0 domain, arg1 type, arg2 protocol -> socket id */
	GS_OP_BIND, /* fd, addr -> 0 */
	GS_OP_LISTEN, /* fd, arg0 backlog -> 0 */
	GS_OP_ACCEPT, /* fd, arg0 non-zero: never wait -> socket id, out_addr = peer */
	GS_OP_CONNECT, /* fd, addr -> 0 */
	GS_OP_SHUTDOWN, /* fd, arg0 how (SHUT_RD/WR/RDWR) -> 0 */
	GS_OP_CLOSE, /* fd -> 0 */
	GS_OP_SETSOCKOPT, /* fd, arg0 level, arg1 name, arg2 int value -> 0 */
	GS_OP_GETSOCKNAME, /* fd -> 0, out_addr */
	GS_OP_GETPEERNAME, /* fd -> 0, out_addr */
	GS_OP_COUNT /* number of opcodes, never valid */
};

/*
 * A command slot. The application fills the request, then writes seq
 * (after a system-scope fence) and rings the doorbell with
 * GS_DB_CMD | slot. The bridge copies the request out, acts, writes the
 * reply and finally done_seq = seq.
 *
 *   word        writer   meaning
 *   seq         app      request number, written last
 *   op fd arg   app      request
 *   addr        app      sockaddr for bind/connect, addrlen bytes
 *   done_seq    bridge   equals seq when the reply is complete
 *   result      bridge   >= 0 success, negative errno
 *   out_addr    bridge   sockaddr for accept/getsockname/getpeername
 *   wake        bridge   bumped (release) after a change to any socket
 *                        whose poll_slot names this slot: what this
 *                        slot's block waits on in gpoll
 */
struct gs_cmd {
	uint64_t seq;
	uint32_t op;
	int32_t fd;
	int64_t arg[3];
	uint32_t addrlen;
	uint32_t pad0;
	uint8_t addr[GS_ADDR_MAX];
	uint8_t pad1[16]; /* request ends on a line */
	uint64_t done_seq;
	int64_t result;
	uint32_t out_addrlen;
	uint32_t pad2;
	uint8_t out_addr[GS_ADDR_MAX];
	uint64_t wake;
	uint8_t pad3[32]; /* reply ends on a line */
};

/* gs_sock.status bits (bridge writes). */
#define GS_ST_OPEN 0x1 /* entry in use by the application */
#define GS_ST_RX_EOF 0x2 /* peer sent FIN: no bytes after rx_tail */
#define GS_ST_CONNECTED 0x4 /* a connected stream socket */
#define GS_ST_LISTENING 0x8 /* a listening socket */
#define GS_ST_TX_SHUT 0x10 /* our side shut down for writing */

/*
 * One socket's status and ring counters. Counters are free-running u64
 * byte counts; bytes in a ring = tail - head, always <= ring_size.
 *
 *   word            writer   meaning
 *   rx_tail         bridge   bytes written into the rx ring
 *   status error    bridge   GS_ST_*, negative errno of a failed socket
 *   rx_blocked      bridge   1 while the bridge waits for rx space
 *   accept_pending  bridge   connections waiting for gaccept (listener)
 *   db_queue        bridge   the doorbell queue of the worker that owns
 *                            the socket; set before the socket's id is
 *                            handed to the application
 *   direct          bridge   0: bytes go through the bridge's rings
 *                            below; else 1 + (segment << 1 | side): the
 *                            connection's bytes move through that segment
 *                            of the direct pool (gs_dseg). Set before a
 *                            gconnect or gaccept that made it completes
 *   tx_head         bridge   bytes taken from the tx ring
 *   rx_head         app      bytes consumed from the rx ring
 *   poll_slot       app      1 + the command slot of the block that last
 *                            gpolled it (0: none); the bridge bumps that
 *                            slot's wake after every change it makes
 *   tx_tail         app      bytes written into the tx ring
 *
 * The application keeps its own copies of rx_head and tx_tail (and what
 * it last saw of rx_tail and tx_head) in device memory, so a g-call's
 * fast path reads nothing across PCIe but the counter it waits on.
 */
struct gs_sock {
	uint64_t rx_tail;
	uint32_t status;
	int32_t error;
	uint32_t rx_blocked;
	uint32_t accept_pending;
	uint32_t db_queue;
	uint32_t direct;
	uint8_t pad0[GS_LINE - 32];
	uint64_t tx_head;
	uint8_t pad1[GS_LINE - 8];
	uint64_t rx_head;
	uint32_t poll_slot;
	uint8_t pad2[GS_LINE - 12];
	uint64_t tx_tail;
	uint8_t pad3[GS_LINE - 8];
};

/*
 * The direct pool: one memfd that gsockd makes and every application it
 * serves maps (they are one user's processes), cut into segments. When
 * both ends of a connection are applications of this gsockd on this
 * host, gsockd sets the connection up as over TCP (the kernel's
 * connection stays, holding the ports and the addresses, carrying FIN
 * and RST), then hands both ends one segment, and the bytes move through
 * it with no gsockd work: the sender writes into the receiver's ring.
 * Side 0 is the end that connected, side 1 the end that accepted; pipe
 * k carries side k's bytes to side k ^ 1, in the segment's ring k.
 *
 *   word     writer           meaning
 *   tail     sending side     bytes written into the pipe's ring
 *   sending  GPU sending side 1 + the tail a send to a CPU side starts
 *                             from, or 0: see want, below
 *   head     receiving side   bytes consumed from it (with lanes, below,
 *                             it may pass the tail for a moment)
 *   closed   bridge           GS_DC_SIDE(k) once side k closed or died:
 *                             the other side's sends fail (EPIPE) when
 *                             its ring is full, as TCP's fail after RST
 *   cpu      bridge           GS_DC_SIDE(k): side k is a CPU program
 *                             under the preload, which sleeps on a
 *                             descriptor; set before either side learns
 *                             the segment
 *   eof      bridge, preload  GS_DC_SIDE(k) once side k shut its sending
 *                             down: the CPU side's reads end (EOF)
 *   reset    bridge, preload  GS_DC_SIDE(k): side k reset the connection
 *   want     CPU side         per pipe, GS_DW_*: the CPU side waits on its
 *                             descriptor for the pipe's bytes (READER) or
 *                             space (WRITER); whoever clears a bit (the
 *                             bridge on a doorbell, or the CPU side
 *                             itself) raises the descriptor
 *   tokens   bridge, CPU side per pipe, the wake-up bytes in the CPU
 *                             side's descriptor or on their way: a writer
 *                             adds 1 before its write and takes it back
 *                             if the write fails, a reader takes what it
 *                             read
 *   lock     CPU side         per pipe: its threads and forked processes
 *                             take turns on the pipe
 *   spill_in, spill_out       per pipe: bytes written into the CPU side's
 *                             descriptor to make it unwritable while the
 *                             ring is full, and bytes taken back out
 *   dev      bridge           GS_DC_SIDE(k): pipe k's ring is not in the
 *                             segment but in the receiving side's receive
 *                             pool (gsock_ctl.h), at seg x ring bytes:
 *                             the sender writes into the receiver's GPU
 *                             memory; set for two GPU sides only, before
 *                             either learns the segment
 *   dpeer    bridge           per side k: 1 + the index of side k's
 *                             receive pool, or 0
 *   sgen     bridge           this use of the segment (1 .. 2^32 - 1,
 *                             counting on): tags the counters' copies in
 *                             the receive pools, below
 *
 * When both pipes' rings lie in receive pools (dev has both bits), each
 * pool also holds copies of the counters its owner reads: the tail of
 * the pipe it receives on (written by the sender with the tail) and the
 * head of the pipe it sends on (written by the receiver with the head),
 * each as sgen << 32 | (count mod 2^32) in the pool's gs_dctr for the
 * segment (a ring of at most 2^26 bytes keeps the count's distance from
 * the reader's own under 2^31, so the 32 bits it keeps are enough). So each side waits on its own GPU's memory, not across PCIe;
 * a copy of another sgen (a segment's earlier use) reads as no change.
 * The segment's counters stay the whole truth, for gsockd and the CPU.
 *
 * A GPU side whose peer is a CPU side reads want after publishing its
 * head (WRITER) and rings its doorbell when the bit is set; the bridge
 * then takes the spill back out. For READER, a send of at most 64 KiB
 * reads want before its copy, so that the read does not wait behind the
 * tail: the sending thread first stores 1 + the tail it sends from in
 * its pipe's sending word, fences, then reads want, and after its tail
 * rings when READER was set then (or, where that read is older than
 * 100 us at the tail, reads want again after it); the bridge then
 * writes one byte into the CPU side's descriptor. A CPU side that sets
 * READER and finds no bytes reads sending after its fence: while it
 * says a send from at or past the tail is on its way (sending > tail),
 * that send may have read want before READER came, so the CPU side
 * waits for its tail (200 us at most, after which the sender's own late
 * read sees READER) instead of sleeping. Both sides fence between their
 * store and their load, so the sender sees READER or the CPU side sees
 * the announce. A send that queues nothing (an error, or a full ring
 * with MSG_DONTWAIT) stores 0 there again. Nothing of this is looked at
 * between two GPU sides.
 *
 * Lanes. Where a pipe's ring lies in the receiver's pool (two GPU
 * sides), a send of at most GS_LANE_MAX bytes, made whole in one go, also
 * leaves a copy of its bytes in the pool's gs_dctr lane for the segment,
 * where the receiver looks when its ring seems empty: the lane's units
 * carry their own validity, so one read both finds and brings the bytes,
 * where the ring costs two (the tail, then the bytes) and waits for the
 * sender's fence before the tail. The ring and the tail stay the whole
 * truth: the copy is only a faster way to the same bytes, and gsockd
 * never looks at a lane. The receiver's head may pass the tail for a
 * moment (bytes taken from a copy before its tail came, at most half a
 * ring): whoever counts unread bytes counts tail - head only when it is
 * positive. A lane is GS_LANE_UNITS units of 8 bytes, each written with
 * one store: 4 bytes of value (low half) and the copy's tag (high half):
 *
 *   unit 0   the stream position (the tail before) of the first byte,
 *            low 32 bits
 *   unit 1   the length | position bits 32..55 << 8
 *   unit 2.. the bytes, 4 a unit, little-endian
 *
 * The tag counts the pipe's copies from 1 (0 never: a zeroed unit is
 * no copy's); a receiver takes a copy when both header units and every
 * unit of the bytes carry one tag and its position is where the
 * receiver stands. Every 65536th copy (tags 1, 65537, ...) writes every
 * unit, so no unit keeps a tag that comes round again. A copy names its
 * position modulo 2^56: a stream that moved a multiple of 2^56 bytes
 * (over 8 days at 100 GB/s) since its last small send, and finds its ring
 * empty just then, would take that copy again. The receiver
 * zeroes its lane when it learns the segment, then sets lane_ok[k] to
 * GS_LANE_OK(sgen) (below); the sender writes no copy before it has read
 * that. (A segment with a CPU side keeps sgen 0; gsockd zeroes the whole
 * gs_dseg, lane_ok with it, each time it hands the segment out.)
 *
 *   lane_ok   receiving side   per pipe, above
 *
 * A pipe from a GPU side to a CPU side has its lane in the segment
 * (lane[k], host memory), written as above across PCIe, where the CPU
 * side finds the bytes as soon as they land: the GPU's stores are
 * posted, so the copy comes a system fence and a store sooner than the
 * tail. The CPU side zeroes the lane and sets lane_ok[k] when it
 * learns the segment, and looks there, under the pipe's lock, when the
 * ring seems empty. (The other way, a GPU polling a CPU side's lane
 * across PCIe found the bytes later than the tail and the ring did.)
 *
 *   lane      GPU sending side  per pipe, its lane to a CPU side (above)
 *
 * Segment layout: gs_dseg (one page), ring 0, ring 1; the segments lie
 * GS_DSEG_STRIDE() bytes apart from the pool's start.
 */
struct gs_dpipe {
	uint64_t tail;
	uint64_t sending; /* a GPU sender's announce: see want, below */
	uint8_t pad0[GS_LINE - 16];
	uint64_t head;
	uint8_t pad1[GS_LINE - 8];
};

#define GS_DC_SIDE(k) (1u << (k))
/* Receive pools gsockd names at once (gsock_ctl.h): dpeer's range. */
#define GS_MAX_PEERS 64
#define GS_DSEG_HDR 4096

#define GS_DW_READER 0x1
#define GS_DW_WRITER 0x2
/*
 * How long a CPU side that armed READER waits for an announced send's
 * tail (sending, above), ns; the sender reads want again after its tail
 * when its early read is older than half of it.
 */
#define GS_DW_FLIGHT_NS 200000

#define GS_LANE_UNITS 64
#define GS_LANE_HDR 2 /* header units before the bytes */
#define GS_LANE_MAX ((GS_LANE_UNITS - GS_LANE_HDR) * 4) /* 248 bytes */
#define GS_LANE_OK(sgen) (1ull << 32 | (sgen))

struct gs_dseg {
	struct gs_dpipe pipe[2];
	uint32_t closed;
	uint32_t cpu;
	uint32_t eof;
	uint32_t reset;
	uint32_t want[2];
	uint32_t dev;
	uint32_t dpeer[2];
	uint32_t sgen;
	uint8_t pad0[GS_LINE - 40];
	uint32_t tokens[2];
	uint32_t lock[2];
	uint64_t spill_in[2], spill_out[2];
	uint64_t lane_ok[2];
	uint64_t lane[2][GS_LANE_UNITS];
	uint8_t pad1[GS_DSEG_HDR - 6 * GS_LINE -
		     2 * GS_LANE_UNITS * sizeof(uint64_t)];
};

/* Bytes from one segment's start to the next's. */
#define GS_DSEG_STRIDE(dring_size) (GS_DSEG_HDR + 2 * (uint64_t)(dring_size))

/*
 * A receive pool (gsock_ctl.h): segment s's ring at s x ring bytes, then
 * one gs_dctr per segment, zeroed when the pool is made.
 */
struct gs_dctr {
	uint64_t tail; /* of the pipe into the pool's owner */
	uint8_t pad0[GS_LINE - 8];
	uint64_t head; /* of the pipe out of it */
	uint8_t pad1[GS_LINE - 8];
	uint64_t lane[GS_LANE_UNITS]; /* of the pipe into the owner */
};

#define GS_DCTR_BITS 32
#define GS_DCTR_MASK ((1ull << GS_DCTR_BITS) - 1)
#define GS_SGEN_MASK 0xffffffffu
#define GS_RXPOOL_SIZE(dsegs, dring_size)                                      \
	((uint64_t)(dsegs) * ((dring_size) + sizeof(struct gs_dctr)))
#define GS_RXPOOL_CTR(base, dsegs, dring_size, seg)                            \
	((struct gs_dctr *)((uint8_t *)(base) +                                \
			    (uint64_t)(dsegs) * (dring_size)) +                \
	 (seg))

/*
 * After the last segment, one page the whole pool shares:
 *   listen_gen  bridge  counts changes to the bridge's direct listeners,
 *                       so a preload that was told no GPU application
 *                       listens at an address asks again only once it
 *                       moves
 *   cpu_pend    bridge  gconnects held for a preloaded program's accept
 *                       (gsock_ctl.h)
 *   closed      bridge  set as gsockd stops: a preloaded program names
 *                       its listeners named to it to the next gsockd
 *   pend_port   bridge  the same by destination port, modulo
 *                       GS_PEND_PORTS: while a listener's port's count
 *                       is not 0, the preload asks after the connections
 *                       it accepts there from this host
 */
#define GS_PEND_PORTS 1024
struct gs_dpool {
	uint32_t listen_gen;
	uint32_t cpu_pend;
	uint32_t closed;
	uint16_t pend_port[GS_PEND_PORTS];
	uint8_t pad[GS_DSEG_HDR - 12 - 2 * GS_PEND_PORTS];
};

/* The pool's bytes, and where its shared page lies. */
#define GS_DPOOL_SIZE(dsegs, dring_size)                                       \
	((uint64_t)(dsegs) * GS_DSEG_STRIDE(dring_size) + GS_DSEG_HDR)
#define GS_DPOOL_OF(base, dsegs, dring_size)                                   \
	((struct gs_dpool *)((uint8_t *)(base) +                               \
			     (uint64_t)(dsegs) * GS_DSEG_STRIDE(dring_size)))

#ifndef __cplusplus
_Static_assert(sizeof(struct gs_dseg) == GS_DSEG_HDR, "segment layout");
_Static_assert(sizeof(struct gs_dctr) % GS_LINE == 0, "counter copies");
_Static_assert(sizeof(struct gs_dpool) == GS_DSEG_HDR, "pool page layout");
_Static_assert(sizeof(struct gs_arena_hdr) == 3 * GS_LINE, "header layout");
_Static_assert(sizeof(struct gs_cmd) % GS_LINE == 0, "slot layout");
_Static_assert(__builtin_offsetof(struct gs_cmd, done_seq) % GS_LINE == 0,
	       "reply on its own line");
_Static_assert(sizeof(struct gs_sock) == 4 * GS_LINE, "socket layout");
_Static_assert(sizeof(struct gs_dbq) == GS_LINE, "doorbell queue layout");
#endif

/*
 * Where each part of an arena of the given geometry lies. Both sides
 * compute it; the bridge accepts an arena only if its header agrees.
 */
struct gs_layout {
	uint64_t slots_off, socks_off, dbq_off, db_off, rings_off, size;
};

static inline int gs_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* Returns 0, or -1 when the geometry is out of the bridge's limits. */
static inline int gs_arena_layout(uint32_t nslots, uint32_t nsocks,
				  uint32_t ring_size, uint32_t db_size,
				  uint32_t nqueues, struct gs_layout *l)
{
	const uint64_t page = 4096;

	if (!nslots || nslots > GS_MAX_SLOTS || !nsocks ||
	    nsocks > GS_MAX_SOCKS || !gs_pow2(ring_size) ||
	    ring_size < GS_MIN_RING || ring_size > GS_MAX_RING ||
	    !gs_pow2(db_size) || db_size > GS_MAX_DB || !nqueues ||
	    nqueues > GS_MAX_QUEUES)
		return -1;
	l->slots_off = sizeof(struct gs_arena_hdr);
	l->socks_off = l->slots_off + (uint64_t)nslots * sizeof(struct gs_cmd);
	l->dbq_off = l->socks_off + (uint64_t)nsocks * sizeof(struct gs_sock);
	l->db_off = l->dbq_off + (uint64_t)nqueues * sizeof(struct gs_dbq);
	l->rings_off = (l->db_off + (uint64_t)nqueues * db_size * 8 + page -
			1) & ~(page - 1);
	l->size = l->rings_off + (uint64_t)nsocks * 2 * ring_size;
	return 0;
}

#endif /* GSOCK_ARENA_H */
