/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd's state: registered applications, their arenas and the real
 * sockets behind each arena socket. gsockd is one thread; nothing here is
 * locked. Objects reachable from epoll (struct br_ev) are freed only by
 * br_reap(), after a loop turn's events are handled.
 */
#ifndef BR_BRIDGE_H
#define BR_BRIDGE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../devlib/gsock_arena.h"
#include "conf.h"

/* What an epoll event's data.ptr points at. */
enum br_ev_kind {
	BR_EV_CONTROL, /* the control socket: applications connect here */
	BR_EV_APP, /* an application's control connection */
	BR_EV_SOCK, /* a real socket of an arena socket */
	BR_EV_SIGNAL, /* signalfd: SIGINT, SIGTERM */
};

struct br_ev {
	enum br_ev_kind kind;
};

/* A real socket's life in the bridge. */
enum br_sock_state {
	BS_FREE, /* id available */
	BS_OPEN, /* created, not yet listening or connected */
	BS_LISTEN, /* listening; accepts ahead into acceptq */
	BS_CONNECTING, /* non-blocking connect in flight */
	BS_CONNECTED, /* moving bytes */
	BS_CLOSING, /* closed by the app; draining its tx ring */
};

struct br_app;

struct br_sock {
	struct br_ev ev; /* BR_EV_SOCK */
	struct br_app *app;
	uint32_t id; /* index in the arena's socket table */
	int fd;
	int domain;
	enum br_sock_state state;
	bool readable; /* edge seen, not yet drained to EAGAIN */
	bool writable; /* edge seen, no EAGAIN since */
	bool in_epoll;
	bool shut_wr_pending; /* shutdown(SHUT_WR) once tx drains */
	uint32_t status; /* the bridge's copy of gs_sock.status */
	uint64_t rx_tail; /* the bridge's copy of gs_sock.rx_tail */
	uint64_t tx_head; /* the bridge's copy of gs_sock.tx_head */
	int wait_slot; /* slot waiting on connect, or -1 */
	int *acceptq; /* accepted fds not yet taken by gaccept */
	uint32_t acceptq_len, acceptq_cap;
	uint64_t close_deadline_ns; /* BS_CLOSING: give up draining then */
	char unix_path[108]; /* AF_UNIX path we bound, unlinked on close */
	struct br_sock *next_free;
};

/* A command slot's request, copied out of the arena before use. */
struct br_slot {
	uint64_t seq; /* request being served, or last served */
	bool parked; /* waiting for a connection (accept) or connect */
	uint32_t op;
	int32_t fd;
};

struct br_app {
	struct br_ev ev; /* BR_EV_APP */
	struct br_app *next;
	int ctl_fd;
	pid_t pid;
	uid_t uid;
	bool pending; /* connected, its hello (and arena) not yet received */
	bool dead; /* rejected or gone: br_reap() frees it */
	uint8_t *base; /* the arena, mapped */
	uint64_t size;
	/* geometry, validated once at registration, never re-read */
	uint32_t nslots, nsocks, ring_size, db_size;
	struct gs_arena_hdr *hdr;
	struct gs_cmd *slots;
	struct gs_sock *socks;
	uint64_t *db;
	uint8_t *rings;
	uint64_t db_head;
	struct br_sock *sk; /* nsocks */
	struct br_slot *slot; /* nslots */
	struct br_sock *free_list;
	uint32_t nclosing; /* sockets in BS_CLOSING */
};

struct br {
	struct br_conf conf;
	int epfd;
	struct br_app *apps;
	uint32_t napps;
	uid_t uid;
	int unpriv_port; /* lowest port an unprivileged user may bind */
};

extern struct br br;

uint64_t br_now_ns(void);

/* app.c */
void br_app_accept(int ctl_listen_fd);
void br_app_event(struct br_app *a, uint32_t events);
int br_app_poll(struct br_app *a);
void br_app_reject(struct br_app *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void br_app_complete(struct br_app *a, uint32_t slot, int64_t result,
		     const void *addr, uint32_t addrlen);
void br_reap(void);

/* sock.c */
void br_sock_command(struct br_app *a, uint32_t slot, const struct gs_cmd *c);
void br_sock_event(struct br_sock *s, uint32_t events);
void br_sock_pump(struct br_sock *s);
void br_sock_close_all(struct br_app *a);
void br_sock_tick(struct br_app *a);

#endif
