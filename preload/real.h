/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real socket calls under the preload: one table, filled from
 * dlsym(RTLD_NEXT) once (pl_init), and a thread-local guard that sends
 * calls the preload makes itself (or its libraries make for it) straight
 * to the real functions.
 */
#ifndef PL_REAL_H
#define PL_REAL_H

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Every interposed call: return type, name, parameter list. */
#define PL_CALLS(X)                                                          \
	X(int, socket, (int, int, int))                                      \
	X(int, bind, (int, const struct sockaddr *, socklen_t))              \
	X(int, listen, (int, int))                                           \
	X(int, accept, (int, struct sockaddr *, socklen_t *))                \
	X(int, accept4, (int, struct sockaddr *, socklen_t *, int))          \
	X(int, connect, (int, const struct sockaddr *, socklen_t))           \
	X(ssize_t, read, (int, void *, size_t))                              \
	X(ssize_t, readv, (int, const struct iovec *, int))                  \
	X(ssize_t, recv, (int, void *, size_t, int))                         \
	X(ssize_t, recvfrom,                                                 \
	  (int, void *, size_t, int, struct sockaddr *, socklen_t *))        \
	X(ssize_t, recvmsg, (int, struct msghdr *, int))                     \
	X(int, recvmmsg,                                                     \
	  (int, struct mmsghdr *, unsigned int, int, struct timespec *))     \
	X(ssize_t, write, (int, const void *, size_t))                       \
	X(ssize_t, writev, (int, const struct iovec *, int))                 \
	X(ssize_t, send, (int, const void *, size_t, int))                   \
	X(ssize_t, sendto,                                                   \
	  (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int))               \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int))         \
	X(ssize_t, sendfile, (int, int, off_t *, size_t))                    \
	X(ssize_t, sendfile64, (int, int, off_t *, size_t))                  \
	X(int, poll, (struct pollfd *, nfds_t, int))                         \
	X(int, ppoll,                                                        \
	  (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *)) \
	X(int, pselect, (int, fd_set *, fd_set *, fd_set *,                  \
			 const struct timespec *, const sigset_t *))         \
	X(int, epoll_create, (int))                                          \
	X(int, epoll_create1, (int))                                         \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *))             \
	X(int, epoll_wait, (int, struct epoll_event *, int, int))            \
	X(int, epoll_pwait,                                                  \
	  (int, struct epoll_event *, int, int, const sigset_t *))           \
	X(int, epoll_pwait2, (int, struct epoll_event *, int,                \
			      const struct timespec *, const sigset_t *))    \
	X(int, close, (int))                                                 \
	X(int, close_range, (unsigned int, unsigned int, int))               \
	X(void, closefrom, (int))                                            \
	X(int, shutdown, (int, int))                                         \
	X(int, dup, (int))                                                   \
	X(int, dup2, (int, int))                                             \
	X(int, dup3, (int, int, int))                                        \
	X(int, fcntl, (int, int, ...))                                       \
	X(int, fcntl64, (int, int, ...))                                     \
	X(int, ioctl, (int, unsigned long, ...))                             \
	X(int, setsockopt, (int, int, int, const void *, socklen_t))         \
	X(int, getsockopt, (int, int, int, void *, socklen_t *))             \
	X(int, getsockname, (int, struct sockaddr *, socklen_t *))           \
	X(int, getpeername, (int, struct sockaddr *, socklen_t *))           \
	X(pid_t, fork, (void))                                               \
	X(int, execve, (const char *, char *const[], char *const[]))         \
	X(int, execv, (const char *, char *const[]))                         \
	X(int, execvp, (const char *, char *const[]))                        \
	X(int, execvpe, (const char *, char *const[], char *const[]))        \
	X(int, fexecve, (int, char *const[], char *const[]))                 \
	X(int, execveat, (int, const char *, char *const[], char *const[], int)) \
	X(ssize_t, __read_chk, (int, void *, size_t, size_t))                \
	X(ssize_t, __recv_chk, (int, void *, size_t, size_t, int))           \
	X(ssize_t, __recvfrom_chk, (int, void *, size_t, size_t, int,        \
				    struct sockaddr *, socklen_t *))         \
	X(int, __poll_chk, (struct pollfd *, nfds_t, int, size_t))           \
	X(int, __ppoll_chk, (struct pollfd *, nfds_t,                        \
			     const struct timespec *, const sigset_t *, size_t))

#define PL_FIELD(ret, name, args) ret(*name) args;
struct pl_real {
	PL_CALLS(PL_FIELD)
};
#undef PL_FIELD

extern struct pl_real pl_real;

/* Resolve the table and read the configuration, once, thread-safely. */
void pl_init(void);

/* Non-zero while this thread is inside the preload. */
extern __thread int pl_busy;
/* The entry whose call this thread is in (set by the fd-call wrappers). */
struct pl_sock;
extern __thread struct pl_sock *pl_cur_sock;
/* Forks this process is away from its first ancestor with the preload. */
extern unsigned pl_fork_gen;
/*
 * The process whose rsockets are live: set at init and in a fork()ed
 * child. A vfork() or clone() child runs no atfork handler, so it is
 * told apart by getpid() alone.
 */
extern pid_t pl_pid;

#endif
