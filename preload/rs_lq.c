/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rsocket route's listen queue (see rs.h): a thread per listening
 * rsocket accepts ahead and hands established connections to accept,
 * poll and epoll through an eventfd.
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "route.h"
#include "rs.h"
#include "rs_int.h"

/*
 * The accepting thread of a listener. What it accepts waits in q, and
 * the eventfd, readable while q holds some, is what poll, epoll and a
 * blocking accept wait on beside the kernel listener (rpoll over a
 * listening rsocket and other descriptors can sleep through a
 * connection). The thread never sleeps inside rpoll: librdmacm wakes
 * every thread blocked in rpoll on any rsocket event, which would put this
 * one on the path of every message the application's rpoll gets. It
 * checks without waiting and sleeps in between: 1 ms while peers arrive,
 * backing off to LQ_IDLE_US when none has for a while. It hands over
 * only connections that are established (pl_rs_settle).
 */
#define LQ_MAX 128
#define LQ_BUSY_US 1000
#define LQ_IDLE_US 10000

struct pl_lq {
	pthread_t thread;
	int r; /* the listening rsocket */
	int efd; /* eventfd, semaphore mode: one count per queued rsocket */
	int stop; /* atomic */
	pthread_mutex_t lock;
	int q[LQ_MAX], head, n; /* lock */
};

/*
 * An accepted rsocket may still be "accepting" (its established event
 * not taken); rsocket's readv then reads it as the end of the stream.
 * rpoll completes the accept; wait for that, up to a second (the peer is
 * connecting right now). Returns 0 once the rsocket is established.
 */
int pl_rs_settle(int r)
{
	struct pollfd p = { r, POLLOUT, 0 };
	int i, got = 0;

	for (i = 0; i < 50 && !got; i++)
		got = pl_rs_rpoll(&p, 1, 20);
	pl_log(PL_LOG_DEBUG, "rsocket %d accepted: rpoll %d, revents %#x after %d tries",
	       r, got, p.revents, i);
	return got == 1 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP)) ? 0 : -1;
}

static void *lq_run(void *arg)
{
	struct pl_lq *q = arg;
	unsigned idle = 0;
	uint64_t one = 1;

	pl_busy++; /* librdmacm's own descriptors are not ours */
	while (!__atomic_load_n(&q->stop, __ATOMIC_ACQUIRE)) {
		int c = pl_rdmacm.raccept(q->r, NULL, NULL); /* non-blocking */

		if (c < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				pl_log(PL_LOG_DEBUG, "raccept: %s", strerror(errno));
			usleep(idle++ < 1000 ? LQ_BUSY_US : LQ_IDLE_US);
			continue;
		}
		idle = 0;
		/* at once: raccept gave c to librdmacm's connect service (rs.c) */
		pl_rs_cm_nonblock(c);
		if (pl_rs_settle(c) < 0) {
			pl_rdmacm.rclose(c); /* never completed its connection */
			continue;
		}
		pthread_mutex_lock(&q->lock);
		if (q->n == LQ_MAX) {
			pthread_mutex_unlock(&q->lock);
			pl_rdmacm.rclose(c); /* the backlog is full: refuse, as the kernel would */
			continue;
		}
		q->q[(q->head + q->n++) % LQ_MAX] = c;
		pthread_mutex_unlock(&q->lock);
		if (write(q->efd, &one, sizeof(one)) != sizeof(one))
			pl_log(PL_LOG_WARN, "listener eventfd: %s", strerror(errno));
	}
	return NULL;
}

struct pl_lq *pl_rs_lq_start(int r)
{
	struct pl_lq *q = calloc(1, sizeof(*q));
	int e;

	if (!q)
		return NULL;
	q->r = r;
	q->efd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&q->lock, NULL);
	if (q->efd < 0)
		goto err_free;
	e = pl_rs_start_thread(&q->thread, 0, lq_run, q);
	if (e == 0)
		return q;
	errno = e;
	pl_real.close(q->efd);
err_free:
	pthread_mutex_destroy(&q->lock);
	free(q);
	return NULL;
}

/* An accepted rsocket from q, or -1 (EAGAIN) when none waits. */
int pl_rs_lq_fd(const struct pl_lq *q)
{
	return q->efd;
}

int pl_rs_lq_take(struct pl_lq *q)
{
	uint64_t one;
	int c;

	if (pl_real.read(q->efd, &one, sizeof(one)) != sizeof(one)) {
		errno = EAGAIN;
		return -1;
	}
	pthread_mutex_lock(&q->lock);
	c = q->q[q->head];
	q->head = (q->head + 1) % LQ_MAX;
	q->n--;
	pthread_mutex_unlock(&q->lock);
	return c;
}

void pl_rs_lq_stop(struct pl_lq *q)
{
	__atomic_store_n(&q->stop, 1, __ATOMIC_RELEASE);
	pthread_join(q->thread, NULL);
	while (q->n) {
		RS(pl_rdmacm.rclose(q->q[q->head]));
		q->head = (q->head + 1) % LQ_MAX;
		q->n--;
	}
	pl_real.close(q->efd);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
