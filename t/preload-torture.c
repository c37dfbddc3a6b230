/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preload-torture: the calls programs make under load, each checked and
 * summed up in one line that does not depend on timing, so that a run
 * under libgsock-preload.so must print exactly what a run without it
 * prints (t/preload-torture.t compares them):
 *
 *   eintr      a signal without SA_RESTART interrupts recv and accept;
 *              with SA_RESTART recv goes on and gets its bytes
 *   dup2       dup2/dup3/close racing a thread that sends on the target
 *   fork       fork while other threads create and close sockets: every
 *              child makes a socket and exits
 *   spawn      posix_spawn and vfork+exec children write to an inherited
 *              socket
 *   cloexec    exec keeps a socket without FD_CLOEXEC, closes one with it
 *   select     select on descriptor 1000, poll on a descriptor above 4096
 *   manyfds    more than 65,536 sockets at once, the last one used
 *   scm        a TCP socket passed over a unix socket (SCM_RIGHTS), by
 *              sendmsg and as the second message of a sendmmsg; then an
 *              SCM_RIGHTS header too short to be one (EINVAL)
 *   storm      1 MiB echoed while SA_RESTART signals hit every 100 us
 *   execs      every exec call (execl, execlp, execle, execv, execvp,
 *              execve, execvpe, fexecve, execveat) runs its program with
 *              its arguments (and environment, where it takes one)
 *   exec-rs    exec with a connected socket open (no FD_CLOEXEC), then with
 *              FD_CLOEXEC: on the kernel route exec goes on; on the rsocket
 *              route the first is refused (EOPNOTSUPP), the second goes on;
 *              a vfork child's exec goes on either way.
 *              Only when named: the process that execs is this one.
 *   vfork-close  a vfork child closes its copy of a connection: the
 *              parent's carries on. Only when named.
 *   peer-killed  a connection whose peer (a process of its own that never
 *              reads) is killed while this end waits to send: the wait
 *              ends, a send fails (a reset), and shutdown (ENOTCONN, as
 *              after a TCP reset) and close return at once; then a peer
 *              that closes in order: EOF, and shutdown is no error; then
 *              a peer alive that reads nothing: shutdown returns at once.
 *              Only when named.
 *
 * usage: preload-torture [TEST...]   (default: all but exec-rs)
 *
 * $TORTURE_RELAY=PORT: the tests' TCP pairs are two connections to a
 * relay on 127.0.0.1:PORT (gcall-probe relay), not one to a listener of
 * this process; see tcp_pair().
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static const char *self;

static void die(const char *what)
{
	printf("%s: failed: %s\n", what, strerror(errno));
	exit(1);
}

/*
 * A listener on 127.0.0.1, any port; on $TORTURE_IP instead if set (an
 * address that an RDMA device serves, for the rsocket route).
 */
static int listener(struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	const char *ip = getenv("TORTURE_IP");

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ip && inet_pton(AF_INET, ip, &sa->sin_addr) != 1)
		die("TORTURE_IP");
	if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) ||
	    listen(fd, 1024) || getsockname(fd, (struct sockaddr *)sa, &len))
		die("listener");
	return fd;
}

/*
 * A connected TCP pair: *a the connecting end, *b the accepted one. With
 * $TORTURE_RELAY (a port on 127.0.0.1 where gcall-probe's relay joins
 * the connections it accepts in pairs), both ends connect to the relay,
 * one after the other, so the pair's bytes cross a g-call program; under
 * the preload both ends then take the same-host direct path.
 */
static void tcp_pair(int *a, int *b, int cloexec)
{
	const char *relay = getenv("TORTURE_RELAY");
	int type = SOCK_STREAM | (cloexec ? SOCK_CLOEXEC : 0);
	struct sockaddr_in sa;
	int l = -1;

	if (relay) {
		memset(&sa, 0, sizeof(sa));
		sa.sin_family = AF_INET;
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sa.sin_port = htons((uint16_t)atoi(relay));
	} else {
		l = listener(&sa);
	}
	*a = socket(AF_INET, type, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof(sa)))
		die("connect");
	if (relay) {
		*b = socket(AF_INET, SOCK_STREAM, 0);
		if (*b < 0 || connect(*b, (struct sockaddr *)&sa, sizeof(sa)))
			die("connect to the relay");
		return;
	}
	*b = accept(l, NULL, NULL);
	if (*b < 0)
		die("accept");
	close(l);
}

static int full(int fd, void *p, size_t n, int sending)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = sending ? send(fd, (char *)p + done, n - done,
					   MSG_NOSIGNAL) :
				      recv(fd, (char *)p + done, n - done, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static volatile sig_atomic_t hits;

static void on_signal(int sig)
{
	(void)sig;
	hits++;
}

static void handle(int sig, int restart)
{
	struct sigaction sa = { .sa_handler = on_signal };

	sa.sa_flags = restart ? SA_RESTART : 0;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void alarm_in_ms(int ms)
{
	struct itimerval it = { { 0, 0 }, { ms / 1000, (ms % 1000) * 1000 } };

	setitimer(ITIMER_REAL, &it, NULL);
}

struct later {
	int fd, ms;
};

static void *send_later(void *p)
{
	struct later *l = p;
	struct timespec ts = { 0, l->ms * 1000000L };

	nanosleep(&ts, NULL);
	if (send(l->fd, "hello", 5, MSG_NOSIGNAL) != 5)
		die("send_later");
	return NULL;
}

static void t_eintr(void)
{
	struct sockaddr_in sa;
	struct later l;
	pthread_t th;
	char buf[16];
	int a, b, lfd, e1, e2, n;

	tcp_pair(&a, &b, 0);
	handle(SIGALRM, 0);
	alarm_in_ms(50);
	n = (int)recv(a, buf, sizeof(buf), 0);
	e1 = errno;
	lfd = listener(&sa);
	alarm_in_ms(50);
	if (accept(lfd, NULL, NULL) >= 0)
		die("accept with nobody connecting");
	e2 = errno;
	handle(SIGALRM, 1);
	l = (struct later){ b, 150 };
	pthread_create(&th, NULL, send_later, &l);
	alarm_in_ms(50);
	n = (int)recv(a, buf, sizeof(buf), 0) + (n < 0 ? 0 : 1000);
	pthread_join(th, NULL);
	printf("eintr: recv %s, accept %s; with SA_RESTART recv got %d bytes\n",
	       e1 == EINTR ? "EINTR" : strerror(e1),
	       e2 == EINTR ? "EINTR" : strerror(e2), n);
	close(a);
	close(b);
	close(lfd);
	signal(SIGALRM, SIG_DFL);
}

struct sender {
	int fd;
	volatile int stop;
	long sent;
};

static void *keep_sending(void *p)
{
	struct sender *s = p;
	char c = 'x';

	while (!s->stop)
		if (send(s->fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
			s->sent++;
	return NULL;
}

/* Whether fd is the connection of descriptor same (its local port). */
static int names(int fd, int same)
{
	struct sockaddr_in x, y;
	socklen_t lx = sizeof(x), ly = sizeof(y);

	return !getsockname(fd, (struct sockaddr *)&x, &lx) &&
	       !getsockname(same, (struct sockaddr *)&y, &ly) &&
	       x.sin_port == y.sin_port;
}

static void t_dup2(void)
{
	const int rounds = 200, target = 200;
	int ok = 0;

	for (int i = 0; i < rounds; i++) {
		int a, b, c, d;
		struct sender s;
		pthread_t th;

		tcp_pair(&a, &b, 0);
		tcp_pair(&c, &d, 0);
		if (dup2(a, target) != target)
			die("dup2");
		s = (struct sender){ target, 0, 0 };
		pthread_create(&th, NULL, keep_sending, &s);
		if ((i & 1 ? dup3(c, target, O_CLOEXEC) : dup2(c, target)) !=
		    target)
			die("dup2 over a busy descriptor");
		s.stop = 1;
		pthread_join(th, NULL);
		ok += names(target, c) && fcntl(target, F_GETFD) ==
						   (i & 1 ? FD_CLOEXEC : 0);
		close(target);
		close(a);
		close(b);
		close(c);
		close(d);
	}
	printf("dup2: %d of %d dup2/dup3 over a descriptor in use took\n", ok,
	       rounds);
}

static volatile int churn_stop;

/*
 * Other threads inside the preload all the time: sockets made, some
 * connecting without blocking (to a listener nobody drains), closed.
 */
static void *churn(void *p)
{
	struct sockaddr_in *sa = p;
	unsigned seed = (unsigned)(uintptr_t)&seed;

	while (!churn_stop) {
		int fd = socket(AF_INET, SOCK_STREAM, 0), fd2;

		if (fd < 0)
			continue;
		if (rand_r(&seed) & 1) {
			fcntl(fd, F_SETFL, O_NONBLOCK);
			connect(fd, (struct sockaddr *)sa, sizeof(*sa));
		}
		fd2 = dup(fd);
		close(fd);
		if (fd2 >= 0)
			close(fd2);
	}
	return NULL;
}

static void t_fork(void)
{
	const int rounds = 200;
	struct sockaddr_in sa, busy;
	pthread_t th[3];
	int lfd = listener(&sa), bfd = listener(&busy), done = 0, hung = 0;

	fcntl(lfd, F_SETFL, O_NONBLOCK);
	churn_stop = 0;
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, churn, &busy);
	for (int i = 0; i < rounds; i++) {
		pid_t pid = fork();
		int st = 0, c;

		if (pid == 0) {
			int fd = socket(AF_INET, SOCK_STREAM, 0);

			if (fd < 0 || connect(fd, (struct sockaddr *)&sa,
					      sizeof(sa)))
				_exit(2);
			close(fd);
			_exit(0);
		}
		if (pid < 0)
			die("fork");
		for (int k = 0; k < 500; k++) { /* 5 s */
			struct timespec ts = { 0, 10000000 };

			if (waitpid(pid, &st, WNOHANG) == pid)
				break;
			if (k == 499) {
				kill(pid, SIGKILL);
				waitpid(pid, &st, 0);
				hung++;
			}
			nanosleep(&ts, NULL);
		}
		done += WIFEXITED(st) && WEXITSTATUS(st) == 0;
		while ((c = accept(lfd, NULL, NULL)) >= 0) /* lfd: O_NONBLOCK */
			close(c);
	}
	churn_stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	close(lfd);
	close(bfd);
	printf("fork: %d of %d children made a connection and exited; %d hung\n",
	       done, rounds, hung);
}

/* The line a child wrote to an inherited socket (b is the peer). */
static void read_line(int b, char *out, size_t n)
{
	size_t k = 0;

	while (k + 1 < n) {
		ssize_t r = recv(b, out + k, 1, 0);

		if (r <= 0 || out[k] == '\n')
			break;
		k++;
	}
	out[k] = 0;
}

static void t_spawn(void)
{
	char *argv[] = { "sh", "-c", "echo spawned >&7", NULL };
	posix_spawn_file_actions_t fa;
	char l1[64], l2[64];
	int a, b, st;
	pid_t pid;

	tcp_pair(&a, &b, 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, a, 7);
	if (posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ))
		die("posix_spawn");
	posix_spawn_file_actions_destroy(&fa);
	read_line(b, l1, sizeof(l1));
	waitpid(pid, &st, 0);
	if (dup2(a, 7) != 7)
		die("dup2");
	argv[2] = "echo vforked >&7";
	pid = vfork();
	if (pid == 0) {
		execve("/bin/sh", argv, environ);
		_exit(127);
	}
	read_line(b, l2, sizeof(l2));
	waitpid(pid, &st, 0);
	printf("spawn: posix_spawn child said '%s', vfork child said '%s'\n",
	       l1, l2);
	close(7);
	close(a);
	close(b);
}

static void t_cloexec(void)
{
	char fa[16], fb[16], buf[64];
	int a, a2, b, b2, st;
	pid_t pid;

	tcp_pair(&a, &a2, 1);
	tcp_pair(&b, &b2, 0);
	snprintf(fa, sizeof(fa), "%d", a);
	snprintf(fb, sizeof(fb), "%d", b);
	pid = fork();
	if (pid == 0) {
		char *argv[] = { (char *)self, "cloexec-child", fa, fb, NULL };

		execve(self, argv, environ);
		_exit(127);
	}
	close(a);
	close(b);
	read_line(b2, buf, sizeof(buf));
	waitpid(pid, &st, 0);
	printf("cloexec: the exec'd child said '%s' (status %d); the FD_CLOEXEC socket's peer %s\n",
	       buf, WEXITSTATUS(st),
	       recv(a2, fa, 1, 0) == 0 ? "saw it close" : "did not see it close");
	close(a2);
	close(b2);
}

static int cloexec_child(int a, int b)
{
	char msg[64];

	snprintf(msg, sizeof(msg), "first %s, second %s\n",
		 fcntl(a, F_GETFD) < 0 && errno == EBADF ? "closed" : "open",
		 fcntl(b, F_GETFD) == 0 ? "open" : "closed");
	return full(b, msg, strlen(msg), 1) ? 1 : 0;
}

static void t_exec_rs(void)
{
	struct sockaddr_in sa;
	int l = listener(&sa), c = socket(AF_INET, SOCK_STREAM, 0), a = -1, st;
	char b = 'x', fd[16];
	pid_t pid;

	if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (a = accept(l, NULL, NULL)) < 0 || full(c, &b, 1, 1) ||
	    full(a, &b, 1, 0))
		die("exec-rs: a connection");
	snprintf(fd, sizeof(fd), "%d", c);
	/* a vfork child's exec goes on: the connection stays its parent's */
	pid = vfork();
	if (pid == 0) {
		execl("/proc/self/exe", self, "exec-rs-child", "vfork", fd,
		      (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st))
		printf("exec-rs: a vfork child: exec refused\n");
	execl("/proc/self/exe", self, "exec-rs-child", "open", fd,
	      (char *)NULL);
	printf("exec-rs: the connection open: exec refused (%s)\n",
	       strerror(errno));
	fcntl(c, F_SETFD, FD_CLOEXEC); /* both ends: a's is a connection too */
	fcntl(a, F_SETFD, FD_CLOEXEC);
	execl("/proc/self/exe", self, "exec-rs-child", "cloexec", fd,
	      (char *)NULL);
	printf("exec-rs: with FD_CLOEXEC: exec refused too (%s)\n",
	       strerror(errno));
}

/*
 * A child of t_execs: exec this program by way of call number k, with
 * the arguments "exec-child NAME" and, where the call takes one, an
 * environment of TORTURE_EXEC=NAME.
 */
static const char *const exec_calls[] = { "execl",   "execlp",	"execle",
					  "execv",   "execvp",	"execve",
					  "execvpe", "fexecve", "execveat" };

static void exec_by(size_t k, const char *dir)
{
	const char *name = exec_calls[k], *exe = "/proc/self/exe";
	char env0[64], *env[] = { env0, NULL };
	char *argv[] = { (char *)self, "exec-child", (char *)name, NULL };

	snprintf(env0, sizeof(env0), "TORTURE_EXEC=%s", name);
	setenv("PATH", dir, 1); /* the p calls find "preload-torture" there */
	/* what the calls that take envp (execle, execve and after) must drop */
	setenv("TORTURE_EXEC", k == 2 || k >= 5 ? "wrong" : name, 1);
	switch (k) {
	case 0:
		execl(exe, self, "exec-child", name, (char *)NULL);
		break;
	case 1:
		execlp("preload-torture", self, "exec-child", name,
		       (char *)NULL);
		break;
	case 2:
		execle(exe, self, "exec-child", name, (char *)NULL, env);
		break;
	case 3:
		execv(exe, argv);
		break;
	case 4:
		execvp("preload-torture", argv);
		break;
	case 5:
		execve(exe, argv, env);
		break;
	case 6:
		execvpe("preload-torture", argv, env);
		break;
	case 7:
		fexecve(open(exe, O_RDONLY | O_CLOEXEC), argv, env);
		break;
	default:
		execveat(AT_FDCWD, exe, argv, env, 0);
		break;
	}
	_exit(127);
}

static void t_execs(void)
{
	char dir[4096];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	size_t ok = 0, k;

	if (n <= 0)
		die("readlink /proc/self/exe");
	dir[n] = 0;
	*strrchr(dir, '/') = 0;
	for (k = 0; k < sizeof(exec_calls) / sizeof(exec_calls[0]); k++) {
		pid_t pid = fork();
		int st;

		if (pid == 0)
			exec_by(k, dir);
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			die("execs: fork");
		ok += WIFEXITED(st) && WEXITSTATUS(st) == 42;
	}
	printf("execs: %zu of %zu exec calls ran the program with its arguments and environment\n",
	       ok, k);
}

/* The program t_execs started: 42 when it got what exec_by gave. */
static int exec_child(const char *name)
{
	const char *env = getenv("TORTURE_EXEC");

	return env && !strcmp(env, name) ? 42 : 1;
}

/* The program exec-rs started: what it found at the descriptor. */
static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/*
 * vfork-close: a vfork child closes its copy of a connection and exits;
 * the parent's goes on carrying bytes both ways.
 */
static void t_vfork_close(void)
{
	int a, b, st, good;
	char c = 'v', got = 0;
	pid_t pid;

	tcp_pair(&a, &b, 0);
	pid = vfork();
	if (pid == 0) {
		close(a);
		_exit(0);
	}
	good = pid > 0 && waitpid(pid, &st, 0) == pid && !full(a, &c, 1, 1) &&
	       !full(b, &got, 1, 0) && got == 'v' && !full(b, &c, 1, 1) &&
	       !full(a, &got, 1, 0);
	printf("vfork-close: after a vfork child closed its copy, the connection %s\n",
	       good ? "carries bytes both ways" : "is broken");
	close(a);
	close(b);
}

/* The descriptors this process has open. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n - 1; /* the directory's own */
}

static void *wait_epoll(void *arg)
{
	struct epoll_event ev;

	for (;;)
		epoll_wait(*(int *)arg, &ev, 1, -1);
	return NULL;
}

static void *wait_poll(void *arg)
{
	struct pollfd p = { *(int *)arg, POLLIN, 0 };

	for (;;)
		poll(&p, 1, -1);
	return NULL;
}

/*
 * Threads cancelled inside their waits (epoll_wait, poll: cancellation
 * points) on connections nobody writes to: once the connections are
 * closed, nothing of them may stay open (a wait holds a reference to
 * each connection it covers; the preload's descriptors behind a
 * connection go with its last reference).
 */
static void t_cancel(void)
{
	int a, b, ep, before = open_fds(), left;
	struct epoll_event ev = { .events = EPOLLIN };
	pthread_t te, tp;
	void *re = NULL, *rp = NULL;

	tcp_pair(&a, &b, 0);
	ep = epoll_create1(0);
	ev.data.fd = a;
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) < 0)
		die("epoll");
	pthread_create(&te, NULL, wait_epoll, &ep);
	pthread_create(&tp, NULL, wait_poll, &b);
	usleep(200000);
	pthread_cancel(te);
	pthread_cancel(tp);
	pthread_join(te, &re);
	pthread_join(tp, &rp);
	close(ep);
	close(a);
	close(b);
	left = open_fds() - before;
	printf("cancel: threads cancelled in epoll_wait and poll %s; %d descriptors left open\n",
	       re == PTHREAD_CANCELED && rp == PTHREAD_CANCELED ? "ended" :
								"did not end",
	       left);
}

/*
 * A library's fork handlers, registered before the preload's own, that
 * remake its epoll set in the child and duplicate and close one before
 * the fork: the preload's set bookkeeping must not deadlock on the lock
 * its own fork handlers hold meanwhile.
 */
static int atfork_ep = -1;

static void atfork_prepare(void)
{
	int d = dup(atfork_ep);

	if (d >= 0)
		close(d);
}

static void atfork_child(void)
{
	close(atfork_ep);
	atfork_ep = epoll_create1(EPOLL_CLOEXEC);
}

static void t_atfork(void)
{
	int st, kids = 0;

	pthread_atfork(atfork_prepare, NULL, atfork_child);
	atfork_ep = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < 20; i++) {
		pid_t p = fork();

		if (p == 0)
			_exit(atfork_ep >= 0 ? 0 : 1);
		if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) &&
		    WEXITSTATUS(st) == 0)
			kids++;
	}
	printf("atfork: %d of 20 forks with epoll-remaking fork handlers came back\n",
	       kids);
}

/*
 * peer-killed's peer: listens, says its port, accepts, then never reads
 * ("stay", until killed) or closes the connection in order ("close").
 */
static int peer_killed_child(const char *how)
{
	struct sockaddr_in sa;
	int l = listener(&sa), a;

	printf("%u\n", ntohs(sa.sin_port));
	a = accept(l, NULL, NULL);
	printf("%s\n", a < 0 ? "no" : "accepted");
	if (a >= 0 && !strcmp(how, "close"))
		close(a);
	while (a >= 0)
		pause(); /* until killed */
	return 1;
}

/* Start a peer (peer_killed_child how), connect to it: the connection. */
static int peer_connect(const char *how, pid_t *pid, FILE **f)
{
	struct sockaddr_in sa;
	const char *ip = getenv("TORTURE_IP");
	char line[32] = "";
	int out[2], c;

	if (pipe(out))
		die("peer-killed: pipe");
	*pid = fork();
	if (*pid == 0) {
		dup2(out[1], 1);
		close(out[0]);
		execl("/proc/self/exe", self, "peer-killed-child", how, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	*f = fdopen(out[0], "r");
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ip && inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
		die("TORTURE_IP");
	if (*pid < 0 || !*f || !fgets(line, sizeof(line), *f))
		die("peer-killed: the peer's port");
	sa.sin_port = htons((uint16_t)atoi(line));
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) ||
	    !fgets(line, sizeof(line), *f) || strcmp(line, "accepted\n"))
		die("peer-killed: a connection");
	return c;
}

static void peer_stop(pid_t pid, FILE *f)
{
	int st;

	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	fclose(f);
}

/* Fill every buffer between c and a peer that reads nothing (1 GiB at most). */
static void fill(int c)
{
	static char buf[65536];
	size_t total = 0;

	for (double t = now_s(); total < (1u << 30) && now_s() - t < 20;) {
		ssize_t r = send(c, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r > 0) {
			total += (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			die("peer-killed: filling the connection");
		struct pollfd w = { c, POLLOUT, 0 };

		if (poll(&w, 1, 200) == 0)
			break; /* full */
	}
}

static void *shutdown_run(void *arg)
{
	int *c = arg;

	c[1] = shutdown(c[0], SHUT_WR) < 0 ? errno : 0;
	__atomic_store_n(&c[2], 1, __ATOMIC_RELEASE);
	return NULL;
}

static void t_peer_killed(void)
{
	static char buf[65536];
	const char *sent = "no send failed";
	int c, st, waited;
	double t, shut_s, close_s;
	FILE *f;
	pid_t pid;

	c = peer_connect("stay", &pid, &f);
	fill(c);
	peer_stop(pid, f);
	{
		struct pollfd w = { c, POLLOUT, 0 };

		waited = poll(&w, 1, 10000) == 1;
	}
	for (t = now_s(); now_s() - t < 10;) {
		ssize_t r = send(c, buf, 1, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			sent = errno == ECONNRESET || errno == EPIPE ?
				       "a send failed (a reset)" :
				       strerror(errno);
			break;
		}
		usleep(10000);
	}
	t = now_s();
	errno = 0;
	st = shutdown(c, SHUT_WR) < 0 ? errno : 0;
	shut_s = now_s() - t;
	t = now_s();
	close(c);
	close_s = now_s() - t;
	printf("peer-killed: the wait %s, %s, shutdown returned %s (%s), close %s\n",
	       waited ? "ended" : "did not end in 10 s", sent,
	       shut_s < 2 ? "at once" : "late", st ? strerror(st) : "no error",
	       close_s < 2 ? "at once" : "late");
	if (shut_s >= 2 || close_s >= 2)
		fprintf(stderr, "peer-killed: shutdown took %.1f s, close %.1f s\n", shut_s, close_s);

	/* A peer that closed in order: EOF, and shutdown is no error. */
	c = peer_connect("close", &pid, &f);
	{
		struct pollfd w = { c, POLLIN, 0 };
		ssize_t r = -1;

		while (poll(&w, 1, 10000) == 1 && (r = recv(c, buf, sizeof(buf), 0)) > 0)
			;
		st = shutdown(c, SHUT_WR) < 0 ? errno : 0;
		printf("peer-killed: a peer that closed in order: %s, then shutdown: %s\n",
		       r == 0 ? "EOF" : "no EOF", st ? strerror(st) : "no error");
	}
	close(c);
	peer_stop(pid, f);

	/*
	 * A peer alive that reads nothing: shutdown does not wait for it
	 * (its own thread, given 5 s), as the kernel's does not.
	 */
	c = peer_connect("stay", &pid, &f);
	fill(c);
	{
		int arg[3] = { c, 0, 0 };
		pthread_t th;

		if (pthread_create(&th, NULL, shutdown_run, arg))
			die("peer-killed: a thread");
		for (t = now_s(); !__atomic_load_n(&arg[2], __ATOMIC_ACQUIRE) && now_s() - t < 5;)
			usleep(10000);
		if (__atomic_load_n(&arg[2], __ATOMIC_ACQUIRE)) {
			pthread_join(th, NULL);
			printf("peer-killed: a peer alive that reads nothing: shutdown returned at once (%s)\n",
			       arg[1] ? strerror(arg[1]) : "no error");
		} else {
			printf("peer-killed: a peer alive that reads nothing: shutdown still waits after 5 s\n");
			fflush(stdout);
			_exit(1); /* the thread cannot be had back */
		}
	}
	close(c);
	peer_stop(pid, f);
}

static int exec_rs_child(const char *how, int fd)
{
	int fl = fcntl(fd, F_GETFD);

	printf("exec-rs: %s: exec went on; the descriptor %s\n",
	       !strcmp(how, "open")  ? "the connection open" :
	       !strcmp(how, "vfork") ? "a vfork child" :
				       "with FD_CLOEXEC",
	       fl < 0 ? "is closed" : "is open");
	return 0;
}

static void t_select(void)
{
	struct rlimit rl;
	struct pollfd p;
	fd_set rs;
	struct timeval tv = { 5, 0 };
	int a, b, high = 4099, r1, r2 = -1;
	char c;

	tcp_pair(&a, &b, 0);
	if (dup2(a, 1000) != 1000)
		die("dup2 to 1000");
	send(b, "s", 1, 0);
	FD_ZERO(&rs);
	FD_SET(1000, &rs);
	r1 = select(1001, &rs, NULL, NULL, &tv);
	r1 = r1 == 1 && FD_ISSET(1000, &rs) && recv(1000, &c, 1, 0) == 1;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur <= (rlim_t)high && rl.rlim_max > (rlim_t)high) {
		rl.rlim_cur = high + 1;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (dup2(a, high) == high) {
		send(b, "p", 1, 0);
		p = (struct pollfd){ high, POLLIN, 0 };
		r2 = poll(&p, 1, 5000) == 1 && (p.revents & POLLIN) &&
		     recv(high, &c, 1, 0) == 1 && c == 'p';
		close(high);
	}
	printf("select: descriptor 1000 %s; poll on descriptor %d %s\n",
	       r1 ? "readable" : "NOT readable", high,
	       r2 < 0 ? "not possible (limit)" :
	       r2	 ? "readable" :
			   "NOT readable");
	close(1000);
	close(a);
	close(b);
}

static void t_manyfds(void)
{
	const int want = 70000;
	struct rlimit rl;
	int *fds, n = 0, a, b, ok = 0;
	char buf[8];

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < (rlim_t)want + 64) {
		printf("manyfds: the open-file limit (%llu) is under %d: not tried\n",
		       (unsigned long long)rl.rlim_max, want + 64);
		return;
	}
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	fds = malloc(want * sizeof(*fds));
	while (fds && n < want) {
		fds[n] = socket(AF_INET, SOCK_STREAM, 0);
		if (fds[n] < 0)
			break;
		n++;
	}
	tcp_pair(&a, &b, 0);
	if (n == want && a > 65536 && full(a, "above", 5, 1) == 0 &&
	    full(b, buf, 5, 0) == 0 && !memcmp(buf, "above", 5))
		ok = 1;
	printf("manyfds: %d sockets open at once; a connection above descriptor 65536 %s\n",
	       n, ok ? "carried bytes" : "FAILED");
	close(a);
	close(b);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
}

/*
 * Pass a, one end of a TCP pair, to a child over a unix socket: with
 * sendmsg, or (mmsg) as the second of two messages of one sendmmsg, the
 * first a byte with no descriptor. The child writes through what it got.
 */
static void scm_pass(int mmsg)
{
	char cbuf[CMSG_SPACE(sizeof(int))], line[64], c = 0, c0 = 0;
	struct iovec iov = { &c, 1 }, iov0 = { &c0, 1 };
	struct mmsghdr mm[2] = { { .msg_hdr = { .msg_iov = &iov0,
						 .msg_iovlen = 1 } } };
	struct msghdr *m = &mm[1].msg_hdr;
	struct cmsghdr *cm;
	const char *how = mmsg ? "sendmmsg" : "sendmsg";
	int sp[2], a, b, st, sent, first = 0;
	pid_t pid;

	m->msg_iov = &iov;
	m->msg_iovlen = 1;
	m->msg_control = cbuf;
	m->msg_controllen = sizeof(cbuf);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
		die("socketpair");
	tcp_pair(&a, &b, 0);
	pid = fork();
	if (pid == 0) {
		int fd;

		close(sp[0]);
		if (mmsg && recv(sp[1], &c0, 1, 0) != 1)
			_exit(2);
		if (recvmsg(sp[1], m, 0) != 1 || !(cm = CMSG_FIRSTHDR(m)))
			_exit(2);
		memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
		_exit(full(fd, "passed\n", 7, 1) ? 3 : 0);
	}
	close(sp[1]);
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &a, sizeof(a));
	if (mmsg) {
		sent = first = sendmmsg(sp[0], mm, 2, 0);
		/* the first alone went: the rest again, as programs do */
		if (sent == 1)
			sent = sendmmsg(sp[0], mm + 1, 1, 0) == 1 ? 2 : 1;
	} else {
		sent = sendmsg(sp[0], m, 0) == 1 ? 2 : 1;
	}
	if (sent != 2) {
		/* refused (a direct connection): say so, end the child */
		printf("scm: %s refused: %s%s\n", how, strerror(errno),
		       first == 1 ? " (the message before it went)" : "");
		close(sp[0]);
		waitpid(pid, &st, 0);
		close(a);
		close(b);
		return;
	}
	close(a);
	read_line(b, line, sizeof(line));
	waitpid(pid, &st, 0);
	printf("scm: %s: the receiving process wrote '%s' (status %d)\n", how,
	       line, WEXITSTATUS(st));
	close(b);
	close(sp[0]);
}

/*
 * An SCM_RIGHTS header too short to be one, by sendmsg and sendmmsg, in
 * a process that made an epoll set (so the preload looks at what is
 * passed): the kernel's EINVAL, not a crash.
 */
static void scm_malformed(void)
{
	char cbuf[CMSG_SPACE(sizeof(int))], c = 0;
	struct iovec iov = { &c, 1 };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1,
					   .msg_control = cbuf,
					   .msg_controllen = sizeof(cbuf) } };
	struct cmsghdr *cm;
	int sp[2], ep = epoll_create1(0), r1, e1, r2, e2;

	if (ep < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
		die("epoll_create1/socketpair");
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&mm.msg_hdr);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = 0;
	r1 = (int)sendmsg(sp[0], &mm.msg_hdr, 0);
	e1 = errno;
	r2 = sendmmsg(sp[0], &mm, 1, 0);
	e2 = errno;
	printf("scm: an SCM_RIGHTS header of length 0: sendmsg %s, sendmmsg %s\n",
	       r1 < 0 ? strerror(e1) : "sent", r2 < 0 ? strerror(e2) : "sent");
	close(sp[0]);
	close(sp[1]);
	close(ep);
}

static void t_scm(void)
{
	scm_pass(0);
	scm_pass(1);
	scm_malformed();
}

struct storm {
	pthread_t target;
	volatile int stop;
};

static void *storm_run(void *p)
{
	struct storm *s = p;
	struct timespec ts = { 0, 100000 };

	while (!s->stop) {
		pthread_kill(s->target, SIGUSR1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *echo_back(void *p)
{
	int fd = *(int *)p;
	char buf[4096];

	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || full(fd, buf, (size_t)r, 1))
			break;
	}
	return NULL;
}

static void t_storm(void)
{
	const size_t n = 1 << 20;
	unsigned char *out = malloc(n), *in = malloc(n);
	struct storm s = { pthread_self(), 0 };
	pthread_t st, ec;
	int a, b, same;

	if (!out || !in)
		die("malloc");
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)(i * 2654435761u >> 13);
	tcp_pair(&a, &b, 0);
	handle(SIGUSR1, 1);
	pthread_create(&ec, NULL, echo_back, &b);
	pthread_create(&st, NULL, storm_run, &s);
	/*
	 * The MiB again until the storm has landed well over ten signals
	 * (at most 200 times): on an idle fast machine one pass can end
	 * before ten, on a loaded one the storm's thread runs seldom.
	 */
	hits = 0;
	same = 1;
	for (int round = 0; round < 200 && (round == 0 || hits <= 50);
	     round++) {
		memset(in, 0, n);
		for (size_t off = 0; off < n; off += 65536) {
			if (full(a, out + off, 65536, 1) ||
			    full(a, in + off, 65536, 0))
				die("storm echo");
		}
		same &= !memcmp(in, out, n);
	}
	s.stop = 1;
	pthread_join(st, NULL);
	shutdown(a, SHUT_WR);
	pthread_join(ec, NULL);
	printf("storm: 1 MiB echoed %s under SA_RESTART signals (%s)\n",
	       same ? "intact" : "CORRUPTED",
	       hits > 10 ? "many delivered" : "few delivered");
	signal(SIGUSR1, SIG_IGN);
	close(a);
	close(b);
	free(in);
	free(out);
}

static const struct {
	const char *name;
	void (*fn)(void);
	int named_only; /* not in the default run */
} tests[] = {
	{ "eintr", t_eintr, 0 },     { "dup2", t_dup2, 0 },
	{ "fork", t_fork, 0 },	     { "spawn", t_spawn, 0 },
	{ "cloexec", t_cloexec, 0 }, { "select", t_select, 0 },
	{ "manyfds", t_manyfds, 0 }, { "scm", t_scm, 0 },
	{ "storm", t_storm, 0 },     { "execs", t_execs, 0 },
	{ "exec-rs", t_exec_rs, 1 },  { "peer-killed", t_peer_killed, 1 },
	{ "vfork-close", t_vfork_close, 1 },
	{ "cancel", t_cancel, 1 },
	{ "atfork", t_atfork, 1 },
};

int main(int argc, char **argv)
{
	int ran = 0;

	self = argv[0];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "cloexec-child"))
		return cloexec_child(atoi(argv[2]), atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "exec-child"))
		return exec_child(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "exec-rs-child"))
		return exec_rs_child(argv[2], atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "peer-killed-child"))
		return peer_killed_child(argv[2]);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		int want = argc == 1 && !tests[i].named_only;

		for (int k = 1; k < argc; k++)
			want |= !strcmp(argv[k], tests[i].name);
		if (want) {
			tests[i].fn();
			ran++;
		}
	}
	if (!ran) {
		fprintf(stderr, "preload-torture: no such test\n");
		return 64;
	}
	return 0;
}
