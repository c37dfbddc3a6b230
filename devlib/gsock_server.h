/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server layer, host side and shared layout: what a g-call server's
 * host program and its kernel share (struct gsrv, in gsock_alloc memory),
 * and gsrv_main(), which parses the standard options, sizes the arena,
 * serves from one or several GPUs on one port, handles SIGINT and
 * SIGTERM, prints the report and frees what it made. The device side is
 * gsock_server.cuh; gsock-server(3) documents both.
 */
#ifndef GSOCK_SERVER_H
#define GSOCK_SERVER_H

#include <getopt.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gsock_ctx;

/* Steps a handler may time with gsrv_step() (their sums per block). */
#define GSRV_STEPS 8

/* One block's counters; the host reads them after the kernel ends. */
struct gsrv_stats {
	uint64_t conns; /* connections closed */
	uint64_t requests; /* gsrv_done() calls that kept the connection */
	uint64_t bytes; /* what the handler counted with gsrv_count() */
	uint64_t errors; /* connections that ended with an error */
	int64_t last_error; /* the last of those errors (negative errno) */
	uint64_t busy_ns; /* time from gsrv_next() to gsrv_done() */
	uint64_t step_ns[GSRV_STEPS]; /* gsrv_step() sums */
	uint64_t batches; /* a pipe block: writes to its backend */
	uint64_t refused; /* block 0: waiting clients it refused (queue_ns) */
	uint64_t most; /* the most connections it held at once */
};

/*
 * A pipe block's counters are a struct gsrv_stats too: conns counts the
 * backend connections it opened, requests the asks it answered, bytes
 * their payloads, errors the asks it answered with an error, batches its
 * writes, and step_ns[GSRV_PIPE_*] where its time went.
 */
enum {
	GSRV_PIPE_ASK, /* taking asks, writing them */
	GSRV_PIPE_RECV, /* receiving replies */
	GSRV_PIPE_HAND, /* handing them out */
	GSRV_PIPE_IDLE, /* nothing to do */
};

/* How long waiting clients may see no place taken or freed (-Q). */
#define GSRV_QUEUE_MS 1000

/*
 * How long a block that holds connections leaves a waiting client to the
 * blocks that hold fewer before it takes the client itself.
 */
#define GSRV_SPREAD_US 1000

/*
 * How often a block that holds connections, has room for more and served
 * one in the last GSRV_IDLE_LOOK_US looks for waiting clients (blocks
 * that hold none, or have been idle that long, are woken by them).
 * Each look is a read of host memory that cuts the block's wait short:
 * face verification's two Gs on one port, one per H200, served 1.77-2.02x
 * one G with 1000 against 1.49-1.60x with 100, six rounds alternating
 * (bench/README.md, 2026-11-28); a client that finds no block empty may
 * so wait up to 1 ms for its accept. A build may set it
 * (CPPFLAGS=-DGSRV_LOOK_US=100).
 */
#ifndef GSRV_LOOK_US
#define GSRV_LOOK_US 1000
#endif
#define GSRV_IDLE_LOOK_US 1000

/* The longest request one ask carries. */
#define GSRV_ASK_MAX 320
/* Asks a pipe writes at once, and has in flight at most. */
#define GSRV_PIPE_BATCH 64
#define GSRV_PIPE_FIFO 256

/*
 * A serving block's ask to its pipe (device memory). The block writes
 * req, len, dst and cap, then seq; the pipe takes it (taken = seq),
 * copies the reply's payload to dst, writes result, then done = seq.
 */
struct gs_srv_ask {
	uint64_t seq; /* the block: the number of its latest ask */
	uint64_t taken; /* the pipe: the latest it has taken */
	uint64_t done; /* the pipe: the latest it has answered */
	int64_t result; /* the pipe: the payload's length, or -errno */
	uint8_t *dst; /* where the payload goes */
	uint32_t cap; /* at most this many bytes of it */
	uint32_t len; /* request bytes in req */
	uint8_t req[GSRV_ASK_MAX];
};

/*
 * A pipe block's state (the block's shared memory; its counters go to
 * stats[blocks + p] as it ends). Its memory (pipe_mem + p x pipe_stride,
 * device memory) holds the text of a write (GSRV_PIPE_BATCH x
 * GSRV_ASK_MAX bytes), then its reply buffer (pipe_bufsize bytes).
 */
struct gs_srv_pipe {
	struct gsrv_stats st; /* its counters */
	uint8_t *mem; /* its memory */
	uint32_t fifo[GSRV_PIPE_FIFO]; /* asking blocks, in order */
	uint32_t head, tail; /* asks answered, asks written (counts) */
	uint32_t pos, have; /* reply buffer: handed out, received up to */
	uint64_t skip; /* bytes of a reply too large to keep, to drop */
	uint64_t quiet_since; /* the last reply byte, or the first ask */
	uint64_t t; /* the last split of its time */
	int32_t fd; /* the backend connection, or -1 */
	int32_t pad;
};

/*
 * A serving block's place in its loop (the first bytes of its region),
 * and its group's words: the server layer's own, in device memory.
 */
struct gs_srv_blk {
	int32_t started; /* gsrv_next() ran: lfd and the rest are set */
	int32_t lfd; /* the shared listener */
	int32_t n; /* connections held: pfd[0, n) */
	int32_t k; /* next pfd[] to look at since the last gpoll */
	int32_t cur; /* the pfd[] handed out, -1 none */
	int32_t lrev; /* the listener's revents at the last gpoll */
	int32_t end; /* < 0: the error that ends the block */
	int32_t wakes; /* a gsrv_wake_at() time may be set: gsrv_next looks */
	int32_t polled; /* gsrv_next_by: a gpoll since its last -EAGAIN */
	uint32_t gen; /* group: bumped for each work, and at the end */
	uint32_t arg; /* group: the work's argument */
	uint32_t stop; /* group: the serving block has ended */
	uint64_t done; /* group: the other blocks done with gen */
	uint64_t t_next; /* when cur was handed out */
	uint64_t t_step; /* the last gsrv_step() mark */
	/* block 0, the doorman (gs_srv_door): */
	uint64_t door_moves; /* *s->moves when it last looked */
	uint64_t door_since; /* clients seen waiting, no move since; 0 none */
	uint64_t spread_since; /* left a client to fewer-holding blocks; 0 no */
	uint64_t look_at; /* gs_srv_look: when to read the listener's queue */
	int32_t counted; /* in s->held (from gs_srv_begin to gs_srv_finish) */
	int32_t pad;
};

/*
 * The server: gsrv_main() fills it on the host and copies it to device
 * memory before the launch, so that the blocks read it at device-memory
 * speed (struct gsrv_pub is the part they write for the host). Each serving
 * block's own memory (device memory, one region of blk_stride bytes per
 * block, or per group of group_blocks blocks):
 *
 *   | offset      | what                                     |
 *   |-------------|------------------------------------------|
 *   | 0           | its state (struct gs_srv_blk)            |
 *   | pfd_off     | struct gpollfd[per_block + 1]            |
 *   | slot_off    | int32_t[per_block]: state slot of each   |
 *   | last_off    | uint64_t[per_block]: last use, by slot   |
 *   | wake_off    | uint64_t[per_block]: wake-up, by slot    |
 *   | state_off   | per_block x conn_size: connection state  |
 *   | buf_off     | bufsize bytes: the block's buffer        |
 */
struct gsrv {
	/* set by the host before the launch */
	struct sockaddr_storage addr; /* where to listen */
	uint32_t addrlen;
	int32_t reuseport; /* SO_REUSEPORT: several GPUs share the port */
	uint32_t per_block; /* connections a block holds at once (>= 1) */
	uint32_t group_blocks; /* blocks per group (1: every block serves) */
	uint32_t bufsize; /* bytes of each block's buffer */
	uint32_t conn_size; /* bytes of state per connection (zeroed) */
	uint32_t blk_stride, pfd_off, slot_off, last_off, wake_off, state_off,
		buf_off;
	uint64_t idle_ns; /* close a connection quiet this long (0: never) */
	/*
	 * Refuse waiting clients (accept and close them at once) once no
	 * block has taken or let go of a connection for this long while
	 * they wait (0: they wait for a place however long it takes).
	 */
	uint64_t queue_ns;
	uint64_t *moves; /* device memory: connections taken or let go */
	/*
	 * Device memory, per_block + 1 counters: held[k] is how many serving
	 * blocks that have started and not ended hold k connections.
	 */
	uint32_t *held;
	uint8_t *blk; /* device memory: blocks x blk_stride */
	struct gsrv_stats *stats; /* device memory: serving blocks, pipes */
	void *app; /* the application's own arguments */
	/* pipes: blocks launched after the serving blocks (gsock_pipe.cuh) */
	uint32_t pipes; /* how many (0: none) */
	uint32_t blocks; /* serving blocks (groups): pipe p is stats[blocks + p] */
	uint32_t pipe_bufsize; /* bytes of each pipe's reply buffer */
	uint32_t pipe_stride;
	uint64_t pipe_quiet_ns; /* a backend silent this long has failed */
	struct sockaddr_storage backend; /* where the pipes connect */
	uint32_t backendlen;
	struct gs_srv_ask *asks; /* device memory: one per serving block */
	uint8_t *pipe_mem; /* device memory: pipes x pipe_stride */
	struct gsrv_pub *pub; /* what block 0 tells everyone (host memory) */
};

/* Written by block 0 once it listens; read by the host and the blocks. */
struct gsrv_pub {
	int32_t listen_fd;
	int32_t ready; /* 0 not yet, 1 listening, < 0 -errno */
	struct sockaddr_storage bound; /* the address actually bound */
	uint32_t boundlen;
};

/*
 * What an application gives gsrv_main(). Zero fields take the defaults
 * (listen "7000", 16 blocks, 256 threads, 1 connection per block, a
 * 65536-byte buffer).
 */
struct gsrv_app {
	const char *name; /* the program's name, for its messages */
	const void *kernel; /* declared with GSOCK_KERNEL */
	const char *listen; /* the default address */
	unsigned blocks, threads, per_block, bufsize;
	unsigned group_blocks; /* blocks launched per serving block (1) */
	unsigned idle_ms; /* the default of -I: close idle connections (0) */
	/*
	 * The default of -Q: refuse clients that waited this long with no
	 * place taken or freed (0: GSRV_QUEUE_MS; -Q 0 lets them wait).
	 */
	unsigned queue_ms;
	uint32_t ring_size; /* the default of -r (libgsock's: 64 KiB) */
	uint32_t conn_size; /* bytes of state per connection */
	const char *requests; /* what the report calls requests ("requests") */
	const char *counted; /* what gsrv_count() counts ("bytes") */
	/* The names of the handler's gsrv_step() steps, NULL-ended. */
	const char *const *steps;
	/* The application's own options: getopt letters, long forms, help. */
	const char *opts;
	const struct option *longopts;
	const char *usage;
	/* One of its options (0, or a <sysexits.h> status to exit with). */
	int (*option)(struct gsrv_app *app, int opt, const char *arg);
	/*
	 * Bytes for s->app: zeroed host memory during setup, copied to
	 * device memory for the kernel before the launch, freed at the end.
	 */
	size_t app_size;
	/*
	 * Before each GPU's launch: fill s->app, or allocate what the kernel
	 * needs and point s->app at it; may change s->bufsize and
	 * s->conn_size. 0, or a <sysexits.h> status (say why on stderr).
	 */
	int (*setup)(struct gsrv_app *app, struct gsock_ctx *ctx,
		     struct gsrv *s);
	/*
	 * After the kernels ended, before the contexts go: free what setup
	 * allocated, report. Called for every GPU whose struct gsrv was
	 * made, in the reverse order of the GPUs, whether or not its setup
	 * ran or succeeded: it must cope with nothing set up, and with
	 * another GPU's setup having made what it sees.
	 */
	void (*teardown)(struct gsrv_app *app, struct gsock_ctx *ctx,
			 struct gsrv *s);
	/*
	 * A server whose kernels are not one persistent launch (a CUDA
	 * graph that launches itself again, say) starts them itself: launch
	 * after setup, with dev_s the struct gsrv its kernels take (device
	 * memory, ready) and the blocks and threads of the options; 0, or a
	 * <sysexits.h> status (say why on stderr). wait then sleeps until
	 * they have ended, which gsock_stop() (SIGINT, SIGTERM) or gsockd's
	 * end must bring about; 0 or a <sysexits.h> status. NULL: one
	 * gsock_launch() of kernel, and gsock_wait().
	 */
	int (*launch)(struct gsrv_app *app, struct gsock_ctx *ctx,
		      struct gsrv *s, struct gsrv *dev_s, unsigned blocks,
		      unsigned threads);
	int (*wait)(struct gsrv_app *app, struct gsock_ctx *ctx,
		    struct gsrv *s);
	/* Added to the "listening on" line, e.g. "sink"; may be NULL. */
	const char *detail;
	/*
	 * Pipes (gsock-server(3)): pipe blocks, each with one pipelined
	 * connection to the backend, that carry the serving blocks' asks.
	 * backend: its address (HOST:PORT, [V6]:PORT or a unix path), NULL
	 * for no pipes; pipes 0 with a backend: 8, or one per serving block
	 * if there are fewer. pipe_bufsize: the largest reply a pipe keeps (256 KiB);
	 * pipe_timeout_ms: how long a backend with asks in flight may be
	 * silent before its connection counts as failed (2000).
	 */
	unsigned pipes, pipe_bufsize, pipe_timeout_ms;
	const char *backend;
	void *data; /* the application's, untouched */
};

/*
 * Run a g-call server: parse argv (standard options, then the app's),
 * serve until SIGINT, SIGTERM or gsockd's end, report. Returns the
 * process's exit status (<sysexits.h>).
 */
int gsrv_main(struct gsrv_app *app, int argc, char **argv);

/*
 * The arena a server of blocks x per_block connections needs: slots for
 * the blocks, sockets for their connections, the listener, and one per
 * block for a closed connection whose id gsockd has not freed yet (it
 * frees it once the last bytes are sent).
 */
static inline uint32_t gsrv_nsocks(unsigned blocks, unsigned per_block)
{
	return blocks * (per_block + 1) + 1;
}

#ifdef __cplusplus
}
#endif

#endif
