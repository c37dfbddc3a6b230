/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rsocket route's fork-safe mode (RDMAV_FORK_SAFE=1, the switch
 * rsocket(7) documents for the same purpose). An rsocket does not survive
 * fork: its verbs resources stay the parent's. So in this mode a
 * connection starts on the kernel and moves to an rsocket at its first
 * data call, made by whichever process owns it by then (the child of a
 * forking server, typically). Both ends must run in this mode to move; a
 * connection with a plain peer stays on TCP, its bytes untouched.
 *
 * The move, over the kernel connection ("server" is the accepting side).
 * Until both ends have said they take part, they say so out of band
 * (one urgent byte each way, which a plain peer never reads: urgent data
 * is not in the stream), so a plain peer's stream is never touched:
 *
 *   server                                  client
 *   ------                                  ------
 *   at accept (before any fork):
 *   urgent 'G' (the offer) -------------->  at its first data call, waits
 *                                           up to PL_FORK_WAIT_MS for it
 *                                           (the server's data or end
 *                                           first: a plain server)
 *   at its first data call, waits  <------  urgent 'Y' (taken)
 *   up to PL_FORK_WAIT_MS for it (data
 *   or end first: a plain client)
 *   listens on a new rsocket, port P
 *   REP: "gsockFK2" P[2] 0[6] nonce[8] -->  waits for it (the only
 *                                           other answer: 'N')
 *                                <=======  rconnect to the server's
 *                                          address, port P; nonce over it
 *                                <-------  verdict: 'R' connected, 'T' not
 *   verdict: 'R' if the rsocket that
 *   sent the nonce is accepted, else 'T' -->
 *
 * A server that stops waiting for 'Y' withdraws with an urgent 'N' (no
 * byte of its own is in the stream yet, so a plain client's kernel drops
 * the unread offer, and a late 'Y' is out of band: dropped unseen). So a
 * client that said 'Y' hears REP or 'N', never the server's data first.
 *
 * Both ends read the other's verdict before they leave, so nothing of the
 * exchange is left in the stream for the application; 'R' from both
 * moves the connection to the rsocket and the kernel connection is
 * dropped. A peer that fails in the middle of it (ends, or sends
 * something else) leaves the connection reset, never a stream with bytes
 * that were not the application's.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "route.h"
#include "rs.h"
#include "rs_int.h"

/* How long either end waits for the other to take part. */
#define PL_FORK_WAIT_MS 2000
/* How long either end waits for the other's verdict (it is connecting). */
#define PL_FORK_VERDICT_MS 30000

#define FK_OFFER 'G'
#define FK_YES 'Y'
#define FK_WITHDRAWN 'N'
#define FK_MOVED 'R'
#define FK_STAY 'T'

static const char rep_magic[8] = "gsockFK2";

/* What a step of the move ended in. */
enum fk_result {
	FK_OK, /* done */
	FK_PLAIN, /* the peer does not take part: stay on TCP, stream untouched */
	FK_NO_RSOCKET, /* both take part, no rsocket connection came of it: TCP */
	FK_BROKEN, /* the exchange failed midway: the connection is unusable */
};

/* Wait for ev on kernel descriptor fd until deadline: its revents, 0 on timeout. */
static short k_wait(int fd, short ev, long long deadline)
{
	for (;;) {
		struct pollfd p = { fd, ev, 0 };
		long long left = deadline - pl_now_ms();
		int r;

		if (left < 0)
			left = 0;
		r = pl_real.poll(&p, 1, (int)left);
		if (r > 0)
			return p.revents;
		if (r == 0 || errno != EINTR)
			return 0;
	}
}

static int k_send_all(int fd, const void *buf, size_t n, long long deadline)
{
	size_t done = 0;

	while (done < n) {
		ssize_t put = pl_real.send(fd, (const char *)buf + done,
					   n - done,
					   MSG_DONTWAIT | MSG_NOSIGNAL);

		if (put > 0)
			done += (size_t)put;
		else if ((errno != EAGAIN && errno != EINTR) ||
			 !k_wait(fd, POLLOUT, deadline))
			return -1;
	}
	return 0;
}

static int k_recv_all(int fd, void *buf, size_t n, long long deadline)
{
	size_t done = 0;

	while (done < n) {
		ssize_t got = pl_real.recv(fd, (char *)buf + done, n - done,
					   MSG_DONTWAIT);

		if (got > 0)
			done += (size_t)got;
		else if (got == 0 || (errno != EAGAIN && errno != EINTR) ||
			 !k_wait(fd, POLLIN, deadline))
			return -1;
	}
	return 0;
}

/* Read n bytes from rsocket r (non-blocking) until deadline. */
static int rs_recv_all(int r, void *buf, size_t n, long long deadline)
{
	size_t done = 0;

	while (done < n) {
		struct pollfd p = { r, POLLIN, 0 };
		ssize_t got = RS(pl_rdmacm.rrecv(r, (char *)buf + done,
						 n - done, MSG_DONTWAIT));
		long long left = deadline - pl_now_ms();

		if (got > 0) {
			done += (size_t)got;
			continue;
		}
		if (got == 0 || (errno != EAGAIN && errno != EINTR) ||
		    left <= 0)
			return -1;
		pl_rs_rpoll(&p, 1, (int)left);
	}
	return 0;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port_be)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = port_be;
	else
		((struct sockaddr_in *)ss)->sin_port = port_be;
}

static uint16_t get_port(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ?
		       ((const struct sockaddr_in6 *)ss)->sin6_port :
		       ((const struct sockaddr_in *)ss)->sin_port;
}

/* Wait until deadline for the peer's urgent byte; 0 if its data or end comes first. */
static char k_urgent(int fd, long long deadline)
{
	long long t0 = pl_now_ms();
	short ev = k_wait(fd, POLLPRI | POLLIN, deadline);
	char b = 0;

	if (ev & POLLPRI)
		pl_real.recv(fd, &b, 1, MSG_OOB | MSG_DONTWAIT);
	pl_log(PL_LOG_DEBUG,
	       "fd %d: urgent byte %#x after %lld ms (revents %#x)", fd,
	       (unsigned char)b, pl_now_ms() - t0, ev);
	return b;
}

/*
 * After 'Y': whether REP comes, by deadline; it is then taken into rep.
 * A withdrawal ('N', urgent) or anything else first leaves the stream as
 * it is, the application's.
 */
static int k_take_rep(int fd, char *rep, size_t n, long long deadline)
{
	for (;;) {
		ssize_t got = pl_real.recv(fd, rep, n, MSG_PEEK | MSG_DONTWAIT);
		short ev;

		if (got <= 0 && !(got < 0 && errno == EAGAIN))
			return 0; /* its end, or an error: the application's to see */
		if (got > 0 &&
		    memcmp(rep, rep_magic, got < 8 ? (size_t)got : 8))
			return 0;
		if (got == (ssize_t)n)
			return pl_real.recv(fd, rep, n, MSG_DONTWAIT) ==
			       (ssize_t)n;
		ev = k_wait(fd, POLLIN | POLLPRI, deadline);
		if (!ev ||
		    ((ev & POLLPRI) && k_urgent(fd, deadline) == FK_WITHDRAWN))
			return 0;
	}
}

/*
 * The client's side, on a connected kernel socket: take the offer, say
 * yes, connect the rsocket, and agree. *out is the rsocket on FK_OK.
 */
static enum fk_result fork_active(int fd, int domain, int *out)
{
	long long deadline = pl_now_ms() + PL_FORK_WAIT_MS;
	char yes = FK_YES, rep[24], mine = FK_STAY, theirs = 0;
	struct sockaddr_storage ss;
	uint16_t port_be;
	socklen_t len = sizeof(ss);
	int r = -1;

	if (k_urgent(fd, deadline) != FK_OFFER ||
	    pl_real.send(fd, &yes, 1, MSG_OOB | MSG_DONTWAIT | MSG_NOSIGNAL) !=
		    1 ||
	    !k_take_rep(fd, rep, sizeof(rep), pl_now_ms() + PL_FORK_VERDICT_MS))
		return FK_PLAIN;
	if (pl_real.getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return FK_BROKEN;
	memcpy(&port_be, rep + 8, 2);
	set_port(&ss, port_be);
	r = RS(pl_rdmacm.rsocket(domain, SOCK_STREAM, 0));
	if (r >= 0 &&
	    RS(pl_rdmacm.rconnect(r, (struct sockaddr *)&ss, len)) == 0 &&
	    RS(pl_rdmacm.rsend(r, rep + 16, 8, 0)) == 8)
		mine = FK_MOVED;
	else
		pl_log(PL_LOG_DEBUG, "fd %d: rsocket to port %u: %s", fd,
		       ntohs(port_be), strerror(errno));
	if (k_send_all(fd, &mine, 1, pl_now_ms() + PL_FORK_VERDICT_MS) < 0 ||
	    k_recv_all(fd, &theirs, 1, pl_now_ms() + PL_FORK_VERDICT_MS) < 0) {
		mine = FK_STAY;
		theirs = 0;
	}
	if (mine == FK_MOVED && theirs == FK_MOVED) {
		*out = r;
		return FK_OK;
	}
	if (r >= 0)
		RS(pl_rdmacm.rclose(r));
	return theirs == FK_STAY || theirs == FK_MOVED ? FK_NO_RSOCKET :
							 FK_BROKEN;
}

/*
 * The server's private listener for one move: on the connection's own
 * address, a port of librdmacm's choosing (in *port_be). -1 if none.
 */
static int fork_listener(int fd, int domain, uint16_t *port_be)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int l = RS(pl_rdmacm.rsocket(domain, SOCK_STREAM, 0));

	if (l < 0)
		return -1;
	if (pl_real.getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		goto err_close;
	set_port(&ss, 0);
	if (RS(pl_rdmacm.rbind(l, (struct sockaddr *)&ss, len)) < 0 ||
	    RS(pl_rdmacm.rlisten(l, 1)) < 0 ||
	    RS(pl_rdmacm.rfcntl(l, F_SETFL, O_NONBLOCK)) < 0)
		goto err_close;
	len = sizeof(ss);
	if (RS(pl_rdmacm.rgetsockname(l, (struct sockaddr *)&ss, &len)) < 0)
		goto err_close;
	*port_be = get_port(&ss);
	return l;
err_close:
	RS(pl_rdmacm.rclose(l));
	return -1;
}

/*
 * Accept, on l, the rsocket that sends nonce, until the client's verdict
 * (read into *verdict) says it will not come, or deadline (long: an
 * rsocket connect takes seconds on a loaded host, and the client says
 * when it gave up).
 */
static int fork_accept(int fd, int l, const char *nonce, char *verdict,
		       long long deadline)
{
	/* A client that says it connected ('R') is still waited for. */
	while (pl_now_ms() < deadline && (!*verdict || *verdict == FK_MOVED)) {
		int c = RS(pl_rdmacm.raccept(l, NULL, NULL));
		char got[8];

		if (c < 0) {
			if (!*verdict &&
			    pl_real.recv(fd, verdict, 1, MSG_DONTWAIT) == 0)
				break; /* the client is gone */
			usleep(1000);
			continue;
		}
		/* at once: raccept gave c to librdmacm's connect service (rs.c) */
		pl_rs_cm_nonblock(c);
		if (RS(pl_rs_settle(c)) == 0 &&
		    rs_recv_all(c, got, sizeof(got), deadline) == 0 &&
		    memcmp(got, nonce, sizeof(got)) == 0)
			return c;
		RS(pl_rdmacm.rclose(c)); /* not the one */
	}
	return -1;
}

int pl_rs_fork_offer(int fd)
{
	char offer = FK_OFFER;

	if (pl_real.send(fd, &offer, 1,
			 MSG_OOB | MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
		return -1;
	return 0;
}

/* The server's side, on an accepted kernel socket that was offered the move. */
static enum fk_result fork_passive(int fd, int domain, int *out)
{
	char rep[24] = { 0 }, theirs = 0, mine;
	uint16_t port_be = 0;
	int l = -1, c = -1;

	if (k_urgent(fd, pl_now_ms() + PL_FORK_WAIT_MS) != FK_YES) {
		/*
		 * Withdraw the offer, for a fork-safe client that answers
		 * late. Safe for a plain client: no byte of ours is in the
		 * stream yet, so the kernel drops the unread offer.
		 */
		char no = FK_WITHDRAWN;

		pl_real.send(fd, &no, 1, MSG_OOB | MSG_DONTWAIT | MSG_NOSIGNAL);
		return FK_PLAIN;
	}
	memcpy(rep, rep_magic, 8);
	l = fork_listener(fd, domain, &port_be);
	/* The port in network order already; 0 if there is no listener. */
	memcpy(rep + 8, &port_be, 2);
	if (getrandom(rep + 16, 8, 0) != 8 ||
	    k_send_all(fd, rep, sizeof(rep), pl_now_ms() + PL_FORK_WAIT_MS) < 0)
		goto err_close;
	if (l >= 0)
		c = fork_accept(fd, l, rep + 16, &theirs,
				pl_now_ms() + PL_FORK_VERDICT_MS);
	if (!theirs &&
	    k_recv_all(fd, &theirs, 1, pl_now_ms() + PL_FORK_VERDICT_MS) < 0)
		goto err_close;
	mine = c >= 0 && theirs == FK_MOVED ? FK_MOVED : FK_STAY;
	if (k_send_all(fd, &mine, 1, pl_now_ms() + PL_FORK_WAIT_MS) < 0)
		goto err_close;
	if (l >= 0)
		RS(pl_rdmacm.rclose(l));
	if (mine == FK_MOVED) {
		*out = c;
		return FK_OK;
	}
	if (c >= 0)
		RS(pl_rdmacm.rclose(c));
	return FK_NO_RSOCKET;
err_close:
	if (c >= 0)
		RS(pl_rdmacm.rclose(c));
	if (l >= 0)
		RS(pl_rdmacm.rclose(l));
	return FK_BROKEN;
}

/*
 * fd (the application's descriptor) now stands for rsocket r: the
 * kernel connection under it is swapped for an unconnected socket with
 * the same flags, so the number and F_GETFL stay the application's.
 */
static void adopt_moved(int fd, struct pl_sock *s, int r)
{
	int fl = pl_real.fcntl(fd, F_GETFL), fdfl = pl_real.fcntl(fd, F_GETFD);
	int cloexec = fdfl > 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0, k;

	pl_rs_replay_options(fd, r);
	pl_rs_ep_unwatch_kernel(fd, s);
	k = pl_real.socket(s->domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (k >= 0) {
		/* If it fails, the kernel connection just stays open, unused. */
		if (pl_real.dup3(k, fd, cloexec) == fd)
			pl_real.fcntl(fd, F_SETFL, fl);
		pl_real.close(k);
	}
	/* The rsocket stays non-blocking: RS_IO waits for blocking callers. */
	RS(pl_rdmacm.rfcntl(r, F_SETFL, O_NONBLOCK));
	s->nonblock = fl >= 0 && (fl & O_NONBLOCK);
	s->watch_fd = pl_rs_watch_peer(r);
	s->gen = pl_fork_gen;
	s->rs = r;
}

void pl_rs_fork_move(int fd, struct pl_sock *s)
{
	enum fk_result res = FK_PLAIN;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r = -1, plain = 0;

	pthread_mutex_lock(&s->lock);
	if (s->fork != PL_FORK_CLIENT && s->fork != PL_FORK_SERVER)
		goto out_unlock; /* another thread moved it */
	/* A client whose connect is still in progress moves later. */
	if (s->fork == PL_FORK_CLIENT &&
	    pl_real.getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		goto out_unlock;
	res = s->fork == PL_FORK_CLIENT ? fork_active(fd, s->domain, &r) :
					  fork_passive(fd, s->domain, &r);
	s->fork = PL_FORK_NONE;
	if (res == FK_OK) {
		adopt_moved(fd, s, r);
		pl_log(PL_LOG_INFO, "fd %d: moved to rsocket (fork-safe mode)",
		       fd);
	} else {
		static const char *const why[] = {
			[FK_PLAIN] =
				"the peer does not move to rsocket (is RDMAV_FORK_SAFE=1 set on both ends?); staying on TCP",
			[FK_NO_RSOCKET] =
				"both ends would move, but no rsocket connection could be made; staying on TCP",
			[FK_BROKEN] =
				"the move to rsocket broke off midway; the connection is shut down",
		};

		pl_log(res == FK_PLAIN ? PL_LOG_INFO : PL_LOG_WARN, "fd %d: %s",
		       fd, why[res]);
		if (res == FK_BROKEN)
			pl_real.shutdown(fd, SHUT_RDWR);
		s->route = GS_ROUTE_OS;
		plain = 1;
	}
out_unlock:
	pthread_mutex_unlock(&s->lock);
	if (plain)
		pl_fd_clear(fd); /* a plain kernel descriptor from now on */
}
