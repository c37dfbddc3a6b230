/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd: the bridge daemon. It owns the real sockets of GPU endpoints
 * and moves bytes between them and the applications' arenas. This file
 * holds the options, the control socket and the control thread's loop:
 * registration, clean-up, and the turns of the doorbell watch (watch.c)
 * that wakes a sleeping worker (worker.c moves the bytes).
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "../devlib/ctl_peer.h"
#include "../devlib/gsock_ctl.h"
#include "bridge.h"
#include "log.h"
#include "numa.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif

struct br br;

static struct br_ev control_ev = { BR_EV_CONTROL };
static struct br_ev signal_ev = { BR_EV_SIGNAL };
static struct br_ev wake_ev = { BR_EV_WAKE };
static struct br_ev timer_ev;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsockd [options]\n"
		"  -c, --conf FILE       configuration (default $GSOCK_CONF, then %s/gsock.conf)\n"
		"  -s, --control PATH    control socket (default $GSOCK_CONTROL, then gsock.conf, then per user)\n"
		"  -w, --workers N       worker threads (default: gsock.conf, else a quarter of the cores)\n"
		"      --io MODE         epoll, io_uring or auto (default: gsock.conf, else epoll)\n"
		"  -l, --log-level LVL   error, warn, info or debug\n"
		"  -v, --verbose         same as --log-level debug\n"
		"      --syslog          log to syslog instead of stderr\n"
		"      --check-conf      read the configuration, report, and exit\n"
		"  -V, --version         print the version and exit\n"
		"  -h, --help            this text\n",
		SYSCONFDIR);
}

/*
 * systemd socket activation (gsockd.socket): the control socket comes as
 * descriptor 3 (LISTEN_FDS=1, LISTEN_PID ours), bound and with the unit's
 * mode; its path is the unit's, which gsockd must not remove. Returns 3,
 * -1 when not activated, or -2 (said why) when what came is unusable.
 */
static int control_inherited(char *path, size_t len)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	struct sockaddr_un sa = { 0 };
	socklen_t sl = sizeof(sa), il = sizeof(int);
	int type = 0, listening = 0;

	if (!pid || !fds || atol(pid) != (long)getpid())
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (strcmp(fds, "1") != 0) {
		br_err("socket activation passed %s descriptors; gsockd takes one, its control socket",
		       fds);
		return -2;
	}
	if (getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &il) < 0 ||
	    type != SOCK_SEQPACKET ||
	    getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &il) < 0 ||
	    !listening || getsockname(3, (struct sockaddr *)&sa, &sl) < 0 ||
	    sa.sun_family != AF_UNIX || !sa.sun_path[0]) {
		br_err("socket activation: descriptor 3 is not a listening AF_UNIX SOCK_SEQPACKET socket with a path (gsockd.socket needs ListenSequentialPacket=PATH)");
		return -2;
	}
	if (fcntl(3, F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(3, F_SETFL, fcntl(3, F_GETFL) | O_NONBLOCK) < 0) {
		br_err("socket activation: descriptor 3: %s", strerror(errno));
		return -2;
	}
	snprintf(path, len, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
	return 3;
}

/*
 * Bind the control socket, mode 0600; refuse if a live gsockd has it. It
 * is bound under a temporary name and renamed into place once listening,
 * so a client that sees the path can connect at once.
 */
static int control_open(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char tmp[sizeof(sa.sun_path)];
	mode_t old;
	int fd, n;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	n = snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	if (n < 0 || n >= (int)sizeof(tmp)) {
		br_err("control socket path %s is too long", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		char why[256];

		if (!gs_ctl_peer_ok(fd, path, why, sizeof(why)))
			br_err("cannot take the control socket: %s (use --control, or set XDG_RUNTIME_DIR)",
			       why);
		else
			br_err("another gsockd is running at %s (stop it, or use --control)",
			       path);
		goto err_close;
	}
	close(fd);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	strcpy(sa.sun_path, tmp);
	unlink(tmp);
	old = umask(077);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		umask(old);
		br_err("cannot bind the control socket %s: %s", path,
		       strerror(errno));
		goto err_close;
	}
	umask(old);
	/* rename() replaces a stale socket of a dead gsockd, atomically. */
	if (chmod(tmp, 0600) < 0 || listen(fd, SOMAXCONN) < 0 || rename(tmp, path) < 0) {
		struct stat st;
		int e = errno;

		/* in a sticky folder (/tmp) another user's file stays put */
		if (lstat(path, &st) == 0 && st.st_uid != geteuid())
			br_err("cannot take the control socket: %s belongs to uid %u (use --control, or set XDG_RUNTIME_DIR)",
			       path, (unsigned)st.st_uid);
		else
			br_err("cannot listen on the control socket %s: %s",
			       path, strerror(e));
		goto err_unlink;
	}
	return fd;
err_unlink:
	unlink(tmp);
err_close:
	close(fd);
	return -1;
}

static int signals_open(void)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

static void dispatch(struct epoll_event *ev, int ctl_fd, int *stop)
{
	struct br_ev *e = ev->data.ptr;

	switch (e->kind) {
	case BR_EV_CONTROL:
		for (int i = 0; i < 64 && br_app_accept(ctl_fd); i++)
			; /* a burst in one turn, and the loop goes on */
		break;
	case BR_EV_APP:
		br_app_event((struct br_app *)e, ev->events);
		break;
	case BR_EV_WAKE: {
		uint64_t v;

		if (read(br.wake_fd, &v, sizeof(v)) < 0) {
			/* EAGAIN: an earlier turn read it; br_reap() looks anyway */
		}
		break;
	}
	case BR_EV_TIMER: {
		uint64_t v;

		if (read(br.timer_fd, &v, sizeof(v)) < 0) {
			/* EAGAIN: a wait that other events ended first */
		}
		break;
	}
	case BR_EV_DIRECT:
		br_direct_event(e, ev->events);
		break;
	case BR_EV_SOCK: /* only in workers' sets */
		break;
	case BR_EV_SIGNAL:
		*stop = 1;
		break;
	}
}

/*
 * The control thread's loop: control connections, deaths, signals, and
 * the doorbell watch (watch.c), while an application is registered.
 */
static void run(int ctl_fd)
{
	struct epoll_event evs[64];
	uint64_t quiet_since = br_now_ns(), last_look = quiet_since;
	int stop = 0;

	br_watch_start();
	while (!stop) {
		int64_t wait = -1;
		int n, found, events = 0;
		uint64_t now;

		if (br.apps)
			wait = (int64_t)br_watch_period_ns();
		n = br_epoll_wait_ns(br.epfd, br.timer_fd, evs, 64, wait);
		found = 0;
		for (int i = 0, due = 0; i < n; i++) {
			struct br_ev *e = evs[i].data.ptr;

			events += e->kind != BR_EV_TIMER; /* the watch's own */
			dispatch(&evs[i], ctl_fd, &stop);
			/*
			 * A burst of events (direct connections' spills, a
			 * storm of connects) must not hold the watch back: it
			 * looks between them once its period is up.
			 */
			if (++due % 8 == 0 && br.apps &&
			    br_now_ns() - last_look >= br_watch_period_ns()) {
				found |= br_watch();
				last_look = br_now_ns();
			}
		}
		br_app_sweep(br_now_ns());
		br_direct_sweep(br_now_ns());
		br_reap();
		br_log_flush();
		found |= br_watch();
		now = last_look = br_now_ns();
		if (found || events)
			quiet_since = now;
		br_watch_next(found, now - quiet_since);
	}
}

/*
 * The rsocket transport. GPU endpoints' TCP sockets take the preload's
 * rsocket route: they listen on rsocket and on the kernel at the same
 * port, and connect over rsocket where the peer takes it (else over the
 * kernel). gsockd gets it by running itself again with the preload (one
 * implementation of rsocket semantics, tested with unmodified programs as
 * well); the variable set here says the second run is that one.
 */
static int rsocket_transport(char **argv)
{
	const char *lib = br.conf.preload_library, *old = getenv("LD_PRELOAD");
	char *pre;

	if (getenv("GSOCK_BRIDGE_RSOCKET")) {
		Dl_info where;
		void *f = dlsym(RTLD_DEFAULT, "accept4");

		/* The second run: is accept4 the preload's? */
		if (f && dladdr(f, &where) && where.dli_fname &&
		    strstr(where.dli_fname, "gsock-preload"))
			return 0;
		fprintf(stderr, "gsockd: transport rsocket: %s did not load (see the loader's message above)\n",
			lib);
		return -1;
	}
	if (access(lib, R_OK) < 0) {
		fprintf(stderr, "gsockd: transport rsocket needs %s: %s\n", lib,
			strerror(errno));
		return -1;
	}
	if (asprintf(&pre, "%s%s%s", lib, old ? " " : "", old ? old : "") < 0)
		return -1;
	setenv("LD_PRELOAD", pre, 1);
	setenv("GSOCK_TRANSPORT", "rsocket", 1);
	setenv("GSOCK_BRIDGE_RSOCKET", "1", 1);
	/*
	 * gsockd never forks, and the preload's fork-safe mode would make
	 * its one loop wait through each connection's move to rsocket.
	 */
	unsetenv("RDMAV_FORK_SAFE");
	execv("/proc/self/exe", argv);
	fprintf(stderr, "gsockd: cannot run again with %s: %s\n", lib,
		strerror(errno));
	free(pre);
	return -1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conf", required_argument, NULL, 'c' },
		{ "control", required_argument, NULL, 's' },
		{ "workers", required_argument, NULL, 'w' },
		{ "io", required_argument, NULL, 'I' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "syslog", no_argument, NULL, 'S' },
		{ "check-conf", no_argument, NULL, 'C' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *conf = NULL, *control = NULL;
	int level = -1, use_syslog = 0, check = 0, opt, ctl_fd, sig_fd;
	bool activated;
	int required = 1;
	long workers = -1;
	int io = -1;
	char *end;
	struct epoll_event ev = { .events = EPOLLIN };

	while ((opt = getopt_long(argc, argv, "c:s:w:l:vVh", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			conf = optarg;
			break;
		case 's':
			control = optarg;
			break;
		case 'w':
			errno = 0;
			workers = strtol(optarg, &end, 10);
			if (errno || *end || workers < 0 ||
			    workers > GS_MAX_QUEUES) {
				fprintf(stderr,
					"gsockd: --workers %s: use 0 (automatic) to %d\n",
					optarg, GS_MAX_QUEUES);
				return EX_USAGE;
			}
			break;
		case 'I':
			io = br_io_mode_parse(optarg);
			if (io < 0) {
				fprintf(stderr,
					"gsockd: --io %s: use auto, io_uring or epoll\n",
					optarg);
				return EX_USAGE;
			}
			break;
		case 'l':
			level = br_log_level_parse(optarg);
			if (level < 0) {
				fprintf(stderr,
					"gsockd: --log-level %s: use error, warn, info or debug\n",
					optarg);
				return EX_USAGE;
			}
			break;
		case 'v':
			level = BR_LOG_DEBUG;
			break;
		case 'S':
			use_syslog = 1;
			break;
		case 'C':
			check = 1;
			break;
		case 'V':
			printf("gsockd %s\n", PACKAGE_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gsockd: unexpected argument %s\n",
			argv[optind]);
		usage(stderr);
		return EX_USAGE;
	}
	if (!conf)
		conf = getenv("GSOCK_CONF");
	if (!conf || !*conf) {
		conf = SYSCONFDIR "/gsock.conf";
		required = 0;
	}
	br_conf_defaults(&br.conf);
	if (br_conf_load(&br.conf, conf, required))
		return EX_CONFIG;
	if (check) {
		printf("gsockd: %s is valid\n", conf);
		return 0;
	}
	if (workers >= 0)
		br.conf.workers = workers;
	if (io >= 0)
		br.conf.io = io;
	if (br.conf.rsocket && rsocket_transport(argv) < 0)
		return EX_CONFIG;
	if (!control || !*control)
		control = getenv("GSOCK_CONTROL");
	if (control && *control) {
		if (strlen(control) >= sizeof(br.conf.control)) {
			fprintf(stderr, "gsockd: --control %s: path too long\n",
				control);
			return EX_USAGE;
		}
		snprintf(br.conf.control, sizeof(br.conf.control), "%s",
			 control);
	}
	br_log_open(level >= 0 ? level : br.conf.log_level,
		    use_syslog || br.conf.log_syslog);
	br.uid = geteuid();
	br.unpriv_port =
		br_proc_int("/proc/sys/net/ipv4/ip_unprivileged_port_start", 1024);
	br.epfd = epoll_create1(EPOLL_CLOEXEC);
	br.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	sig_fd = signals_open(); /* before the workers: they inherit the mask */
	if (br.epfd < 0 || br.wake_fd < 0 || sig_fd < 0) {
		br_err("cannot create epoll, eventfd or signalfd: %s",
		       strerror(errno));
		return EX_OSERR;
	}
	ctl_fd = control_inherited(br.conf.control, sizeof(br.conf.control));
	if (ctl_fd == -2)
		return EX_CONFIG;
	activated = ctl_fd >= 0;
	if (!activated)
		ctl_fd = control_open(br.conf.control);
	if (ctl_fd < 0)
		return EX_UNAVAILABLE;
	br_numa_decide(br.conf.numa_node);
	/* rsocket's connections are not the kernel's: they stay bridged. */
	if (br.conf.rsocket)
		br.conf.direct = 0;
	if (br_direct_init() < 0) {
		if (!activated)
			unlink(br.conf.control);
		return EX_OSERR;
	}
	if (br_io_decide() < 0) {
		if (!activated)
			unlink(br.conf.control);
		return EX_CONFIG;
	}
	if (br_workers_start() < 0) {
		br_workers_stop();
		if (!activated)
			unlink(br.conf.control);
		return EX_OSERR;
	}
	ev.data.ptr = &control_ev;
	epoll_ctl(br.epfd, EPOLL_CTL_ADD, ctl_fd, &ev);
	ev.data.ptr = &signal_ev;
	epoll_ctl(br.epfd, EPOLL_CTL_ADD, sig_fd, &ev);
	ev.data.ptr = &wake_ev;
	epoll_ctl(br.epfd, EPOLL_CTL_ADD, br.wake_fd, &ev);
	br.timer_fd = br_timer_open(br.epfd, &timer_ev);
	br_info("listening on %s%s (%u workers%s, spin for answers up to %ld us, doorbell watch every %ld-%ld us, transport %s, direct %s)",
		br.conf.control, activated ? ", from socket activation" : "",
		br.nworkers,
		br.conf.workers ? "" : ", automatic: a quarter of the cores",
		br.conf.busy_poll_us, br.conf.watch_min_us,
		br.conf.idle_sleep_us, br.conf.rsocket ? "rsocket" : "tcp",
		br.conf.direct ? "auto" : "off");
	run(ctl_fd);
	br_info("stopping: closing %u applications", br.napps);
	br_watch_report();
	br_workers_stop();
	for (struct br_app *a = br.apps; a; a = a->next)
		__atomic_store_n(&a->dead, 1, __ATOMIC_RELEASE);
	br_reap();
	close(ctl_fd);
	if (!activated) /* else the socket unit's, still listening */
		unlink(br.conf.control);
	br_direct_fini();
	close(sig_fd);
	close(br.wake_fd);
	if (br.timer_fd >= 0)
		close(br.timer_fd);
	close(br.epfd);
	br_log_close();
	return 0;
}
