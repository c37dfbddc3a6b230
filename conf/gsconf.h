/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsock.conf, the one configuration file of gsockd and the preload:
 * its schema, its checks (every mistake reported as "FILE:LINE: key:
 * what is wrong"), and the preload's route rules. gsockd and
 * libgsock-preload.so both link this, so both read the same file the
 * same way and gsockd --check-conf checks the preload's rules too.
 */
#ifndef GS_CONF_H
#define GS_CONF_H

#include <confuse.h>
#include <stdint.h>
#include <sys/socket.h>

/* Where a preloaded socket's bytes go. */
enum gs_route {
	GS_ROUTE_OS, /* the kernel */
	GS_ROUTE_RSOCKET, /* librdmacm's rsockets (RDMA) */
	GS_ROUTE_DIRECT, /* the same-host direct path (never a rule's) */
	GS_ROUTE_NONE, /* a rule that says nothing of the route */
};

/* Which side of a TCP connection a rule is about. */
enum gs_role {
	GS_ROLE_ANY, /* either */
	GS_ROLE_SERVER, /* the socket listens */
	GS_ROLE_CLIENT, /* the socket connects */
};

/* One `rule { ... }` of the preload section. */
struct gs_rule {
	char program[64]; /* fnmatch(3) pattern on the program's name */
	enum gs_role role;
	int family; /* 0: any address, else AF_INET or AF_INET6 */
	uint8_t addr[16]; /* network prefix, family's length */
	int prefix_len; /* bits of addr that must match */
	uint16_t port_lo, port_hi; /* inclusive; 0..65535 for any */
	enum gs_route route; /* GS_ROUTE_NONE: the rule only says direct */
	int direct; /* -1: not said; 0: off; 1: auto */
	int line; /* where it ends in the file (its closing brace), for logs */
};

struct gs_rules {
	enum gs_route fallback; /* route when no rule matches */
	int direct; /* gsock.conf's direct: 0 off, 1 auto */
	int n;
	struct gs_rule *rule;
};

/* Called with one whole line ("FILE:LINE: what") per problem found. */
typedef void (*gs_conf_report)(const char *msg);

/*
 * Parse path with the whole schema. required: a missing file is an
 * error, else it reads as an empty file. Returns the parsed cfg_t (free
 * with cfg_free) or NULL after reporting the first problem (parsing
 * stops there).
 */
cfg_t *gs_conf_parse(const char *path, int required, gs_conf_report report);

/* The rules of a parsed file; 0, or -1 when out of memory. */
int gs_rules_load(cfg_t *cfg, struct gs_rules *out);
void gs_rules_free(struct gs_rules *r);

/*
 * The route for a socket of program prog taking role towards sa (the
 * peer for a client, the bound address for a server); *line gets the
 * matching rule's line, 0 for the fallback.
 */
enum gs_route gs_rules_match(const struct gs_rules *r, const char *prog,
			     enum gs_role role, const struct sockaddr *sa,
			     int *line);

/*
 * Whether a client of program prog connecting to sa may take the direct
 * path (1) or not (0): the first matching rule that says direct, else
 * gsock.conf's direct. *line as for gs_rules_match.
 */
int gs_rules_direct(const struct gs_rules *r, const char *prog,
		    const struct sockaddr *sa, int *line);

/* Parse "ADDR/LEN", "ADDR" or "any"; 0 or -1. */
int gs_parse_prefix(const char *s, int *family, uint8_t addr[16], int *len);
/* Parse "N", "N-M" or "any"; 0 or -1. */
int gs_parse_ports(const char *s, uint16_t *lo, uint16_t *hi);

#endif
