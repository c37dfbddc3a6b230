/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The preload's fd table (contract in fdtab.h): a two-level array, so a
 * process with few routed sockets pays a few pages, not PL_FD_MAX
 * pointers.
 */
#include <config.h>

#include <stdlib.h>

#include "fdtab.h"

#define CHUNK_BITS 12
#define CHUNK (1 << CHUNK_BITS)
#define NCHUNKS (PL_FD_MAX / CHUNK)

static struct pl_sock **chunks[NCHUNKS];
void (*pl_sock_release)(struct pl_sock *s);
void (*pl_sock_release_direct)(struct pl_sock *s);
static pthread_rwlock_t tab_lock = PTHREAD_RWLOCK_INITIALIZER;

struct pl_sock *pl_sock_new(int domain)
{
	struct pl_sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->refs = 1;
	pthread_mutex_init(&s->lock, NULL);
	s->state = PL_UNDECIDED;
	s->route = GS_ROUTE_OS;
	s->domain = domain;
	s->rs = -1;
	s->watch_fd = -1;
	return s;
}

void pl_sock_put(struct pl_sock *s)
{
	if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		if (s->dc && pl_sock_release_direct)
			pl_sock_release_direct(s);
		if (pl_sock_release)
			pl_sock_release(s);
		pthread_mutex_destroy(&s->lock);
		free(s);
	}
}

static struct pl_sock **slot_of(int fd)
{
	struct pl_sock **c;

	if (fd < 0 || fd >= PL_FD_MAX)
		return NULL;
	c = __atomic_load_n(&chunks[fd >> CHUNK_BITS], __ATOMIC_ACQUIRE);
	return c ? &c[fd & (CHUNK - 1)] : NULL;
}

struct pl_sock *pl_fd_get(int fd)
{
	struct pl_sock **slot = slot_of(fd);
	struct pl_sock *s;

	if (!slot || !__atomic_load_n(slot, __ATOMIC_ACQUIRE))
		return NULL;
	pthread_rwlock_rdlock(&tab_lock);
	s = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (s)
		__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	pthread_rwlock_unlock(&tab_lock);
	return s;
}

/* fds[i]'s entry if keep(s, i, arg) says yes, else NULL (under tab_lock). */
static struct pl_sock *kept(const int *fds, int i,
			    int (*keep)(const struct pl_sock *s, int i,
					const void *arg),
			    const void *arg)
{
	struct pl_sock **slot = slot_of(fds[i]);
	struct pl_sock *s = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;

	return s && keep(s, i, arg) ? s : NULL;
}

int pl_fd_get_at(const int *fds, int n,
		 int (*keep)(const struct pl_sock *s, int i, const void *arg),
		 const void *arg, struct pl_sock **out)
{
	int got = 0;

	pthread_rwlock_rdlock(&tab_lock);
	for (int i = 0; i < n; i++) {
		out[i] = kept(fds, i, keep, arg);
		if (out[i]) {
			__atomic_add_fetch(&out[i]->refs, 1, __ATOMIC_ACQ_REL);
			got++;
		}
	}
	pthread_rwlock_unlock(&tab_lock);
	return got;
}

/* pl_fd_get_each's keep, as kept() asks. */
static int keep_plain(const struct pl_sock *s, int i, const void *arg)
{
	int (*const *keep)(const struct pl_sock *) = arg;

	(void)i;
	return (*keep)(s);
}

int pl_fd_get_each(const int *fds, int n, int (*keep)(const struct pl_sock *s),
		   struct pl_sock **out, int max)
{
	int got = 0;

	pthread_rwlock_rdlock(&tab_lock);
	for (int i = 0; i < n; i++) {
		struct pl_sock *s = kept(fds, i, keep_plain, &keep);

		if (!s)
			continue;
		if (got == max) {
			got = -1;
			break;
		}
		__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
		out[got++] = s;
	}
	pthread_rwlock_unlock(&tab_lock);
	if (got < 0)
		for (int i = 0; i < max; i++)
			pl_sock_put(out[i]);
	return got;
}

int pl_fd_set(int fd, struct pl_sock *s)
{
	struct pl_sock **c, *old = NULL;
	int r = -1;

	if (fd < 0 || fd >= PL_FD_MAX)
		return -1;
	pthread_rwlock_wrlock(&tab_lock);
	c = chunks[fd >> CHUNK_BITS];
	if (!c) {
		c = calloc(CHUNK, sizeof(*c));
		if (!c)
			goto out_unlock;
		__atomic_store_n(&chunks[fd >> CHUNK_BITS], c, __ATOMIC_RELEASE);
	}
	__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	old = __atomic_exchange_n(&c[fd & (CHUNK - 1)], s, __ATOMIC_ACQ_REL);
	r = 0;
out_unlock:
	pthread_rwlock_unlock(&tab_lock);
	/*
	 * After the lock: the last reference closes a direct connection,
	 * which takes list_lock, and fork takes list_lock before this one.
	 */
	pl_sock_put(old);
	return r;
}

void pl_fd_lock_all(void)
{
	pthread_rwlock_wrlock(&tab_lock);
}

void pl_fd_unlock_all(void)
{
	pthread_rwlock_unlock(&tab_lock);
}

void pl_fd_forked(void)
{
	/*
	 * The child's thread has a new id, and glibc's rwlock unlock tells
	 * a writer by its id: start the lock afresh. Nothing else runs in
	 * the child yet, and the table was not being changed at the fork.
	 */
	pthread_rwlock_init(&tab_lock, NULL);
}

int pl_fd_find(int (*match)(int fd, const struct pl_sock *s))
{
	int found = -1;

	/*
	 * Never wait (exec may come from a signal handler that interrupted
	 * a writer, or from a vfork child): a table being changed right now
	 * is not looked at.
	 */
	if (pthread_rwlock_tryrdlock(&tab_lock))
		return -1;
	for (int k = 0; k < NCHUNKS && found < 0; k++) {
		struct pl_sock **c =
			__atomic_load_n(&chunks[k], __ATOMIC_ACQUIRE);

		for (int i = 0; c && i < CHUNK && found < 0; i++) {
			struct pl_sock *s =
				__atomic_load_n(&c[i], __ATOMIC_ACQUIRE);

			if (s && match(k * CHUNK + i, s))
				found = k * CHUNK + i;
		}
	}
	pthread_rwlock_unlock(&tab_lock);
	return found;
}

struct pl_sock *pl_fd_take(int fd)
{
	struct pl_sock **slot = slot_of(fd), *old;

	if (!slot || !__atomic_load_n(slot, __ATOMIC_ACQUIRE))
		return NULL;
	pthread_rwlock_wrlock(&tab_lock);
	old = __atomic_exchange_n(slot, NULL, __ATOMIC_ACQ_REL);
	pthread_rwlock_unlock(&tab_lock);
	return old;
}

int pl_fd_has(int fd)
{
	struct pl_sock **slot = slot_of(fd);

	return slot && __atomic_load_n(slot, __ATOMIC_ACQUIRE) != NULL;
}

int pl_fd_take_range(unsigned lo, unsigned hi, struct pl_fd_taken **out)
{
	unsigned top = hi < PL_FD_MAX - 1 ? hi : PL_FD_MAX - 1;
	int n = 0, k = 0;

	*out = NULL;
	if (lo > top)
		return 0;
	pthread_rwlock_wrlock(&tab_lock);
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned fd = lo; fd <= top; fd++) {
			struct pl_sock **c = chunks[fd >> CHUNK_BITS];

			if (!c) { /* a whole chunk of plain descriptors */
				fd |= CHUNK - 1;
				continue;
			}
			if (!c[fd & (CHUNK - 1)])
				continue;
			if (pass == 0) {
				n++;
				continue;
			}
			(*out)[k].fd = (int)fd;
			(*out)[k++].s = __atomic_exchange_n(&c[fd & (CHUNK - 1)], NULL,
							    __ATOMIC_ACQ_REL);
		}
		if (pass == 0 && (!n || !(*out = malloc((size_t)n * sizeof(**out))))) {
			n = n ? -1 : 0;
			break;
		}
	}
	pthread_rwlock_unlock(&tab_lock);
	return n;
}

void pl_fd_clear(int fd)
{
	pl_sock_put(pl_fd_take(fd));
}
