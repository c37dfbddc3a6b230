/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gsockd: the bridge daemon. It owns the real sockets of GPU endpoints
 * and moves bytes between them and the applications' arenas. This file
 * holds the options, the control socket and the event loop, which spins
 * while there is traffic and sleeps in epoll otherwise.
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "bridge.h"
#include "log.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif

struct br br;

static struct br_ev control_ev = { BR_EV_CONTROL };
static struct br_ev signal_ev = { BR_EV_SIGNAL };

uint64_t br_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gsockd [options]\n"
		"  -c, --conf FILE       configuration (default $GSOCK_CONF, then %s/gsock.conf)\n"
		"  -s, --control PATH    control socket (default $GSOCK_CONTROL, then gsock.conf, then per user)\n"
		"  -l, --log-level LVL   error, warn, info or debug\n"
		"  -v, --verbose         same as --log-level debug\n"
		"      --syslog          log to syslog instead of stderr\n"
		"      --check-conf      read the configuration, report, and exit\n"
		"  -V, --version         print the version and exit\n"
		"  -h, --help            this text\n",
		SYSCONFDIR);
}

static int read_unpriv_port(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "r");
	int port = 1024;

	if (f) {
		if (fscanf(f, "%d", &port) != 1)
			port = 1024;
		fclose(f);
	}
	return port;
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
	if (chmod(tmp, 0600) < 0 || listen(fd, 64) < 0 || rename(tmp, path) < 0) {
		br_err("cannot listen on the control socket %s: %s", path,
		       strerror(errno));
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
		br_app_accept(ctl_fd);
		break;
	case BR_EV_APP:
		br_app_event((struct br_app *)e, ev->events);
		break;
	case BR_EV_SOCK:
		br_sock_event((struct br_sock *)e, ev->events);
		break;
	case BR_EV_SIGNAL:
		*stop = 1;
		break;
	}
}

/*
 * The loop. GPU doorbells cannot wake epoll, so the loop polls the
 * arenas: without a pause while anything happened in the last
 * busy_poll_us, then once per idle_sleep_us, and not at all while no
 * application is registered.
 */
static void run(int ctl_fd)
{
	struct epoll_event evs[128];
	uint64_t last_busy = br_now_ns();
	int stop = 0;

	while (!stop) {
		uint64_t now = br_now_ns();
		int busy = now - last_busy <
			   (uint64_t)br.conf.busy_poll_us * 1000;
		/* With no application registered there is no arena to poll. */
		int timeout =
			busy	 ? 0 :
			!br.apps ? -1 :
				   (int)((br.conf.idle_sleep_us + 999) / 1000);
		int n = epoll_wait(br.epfd, evs, 128, timeout);
		int work = n > 0;

		for (int i = 0; i < n; i++)
			dispatch(&evs[i], ctl_fd, &stop);
		for (struct br_app *a = br.apps; a; a = a->next)
			work |= br_app_poll(a) > 0;
		br_reap();
		if (work)
			last_busy = br_now_ns();
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
	int required = 1;
	struct epoll_event ev = { .events = EPOLLIN };

	while ((opt = getopt_long(argc, argv, "c:s:l:vVh", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			conf = optarg;
			break;
		case 's':
			control = optarg;
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
	br.unpriv_port = read_unpriv_port();
	br.epfd = epoll_create1(EPOLL_CLOEXEC);
	sig_fd = signals_open();
	if (br.epfd < 0 || sig_fd < 0) {
		br_err("cannot create epoll or signalfd: %s", strerror(errno));
		return EX_OSERR;
	}
	ctl_fd = control_open(br.conf.control);
	if (ctl_fd < 0)
		return EX_UNAVAILABLE;
	ev.data.ptr = &control_ev;
	epoll_ctl(br.epfd, EPOLL_CTL_ADD, ctl_fd, &ev);
	ev.data.ptr = &signal_ev;
	epoll_ctl(br.epfd, EPOLL_CTL_ADD, sig_fd, &ev);
	br_info("listening on %s (busy poll %ld us, idle sleep %ld us, transport %s)",
		br.conf.control, br.conf.busy_poll_us, br.conf.idle_sleep_us,
		br.conf.rsocket ? "rsocket" : "tcp");
	run(ctl_fd);
	br_info("stopping: closing %u applications", br.napps);
	for (struct br_app *a = br.apps; a; a = a->next)
		a->dead = true;
	br_reap();
	close(ctl_fd);
	unlink(br.conf.control);
	close(sig_fd);
	close(br.epfd);
	br_log_close();
	return 0;
}
