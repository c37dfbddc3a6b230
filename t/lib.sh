# SPDX-License-Identifier: Apache-2.0
# Shared by the end-to-end tests: TAP output, a private gsockd, the GPU
# programs of the backend under test, and clean-up of everything started,
# also when a test fails or times out.
#
# GSOCK_TEST_BACKEND=host|cuda picks the programs (default host);
# GSOCK_TEST_WORKERS the gsockd workers (default 4, more than CI's cores,
# so that sockets cross threads everywhere; t/workers.t runs with 1);
# GSOCK_TEST_IO gsockd's --io (default auto: io_uring where the kernel
# allows it; t/io.t runs the bridge tests with each).

set -u
: "${GSOCK_BUILD:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${GSOCK_SRC:=$GSOCK_BUILD}"
BACKEND=${GSOCK_TEST_BACKEND:-host}
WORKERS=${GSOCK_TEST_WORKERS:-4}
IO=${GSOCK_TEST_IO:-auto}
GSOCKD=$GSOCK_BUILD/bridge/gsockd
SERVER=$GSOCK_BUILD/apps/echo/gsock-echo-server-$BACKEND
CLIENT=$GSOCK_BUILD/apps/echo/gsock-echo-client-$BACKEND
PROBE=$GSOCK_BUILD/t/gcall-probe-$BACKEND
PY=$GSOCK_SRC/t/echo_clients.py
PRELOAD=$GSOCK_BUILD/preload/libgsock-preload.so
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gsock-test.XXXXXX")
export GSOCK_CONTROL=$TMP/gsockd.sock
PIDS=""
tap_n=0
tap_fail=0

cleanup() {
	[ -n "${WATCHDOG:-}" ] && kill -TERM "$WATCHDOG" 2>/dev/null
	for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ "$tap_fail" -ne 0 ] && [ -f "$TMP/gsockd.log" ]; then
		echo "# gsockd log:"; sed 's/^/#   /' "$TMP/gsockd.log" | tail -40
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "not ok - test timed out"; exit 1' ALRM

# Bound the whole test: after $1 seconds, fail it.
# The watchdog keeps no descriptor of the test open, so that the TAP
# driver never waits for it.
time_limit() {
	( exec >/dev/null 2>&1 </dev/null; sleep "$1" & w=$!
	  trap 'kill $w; exit 0' TERM; wait $w; kill -ALRM $$ ) &
	WATCHDOG=$!
}

plan() { echo "1..$1"; }
skip_all() { echo "1..0 # SKIP $*"; trap - EXIT; rm -rf "$TMP"; exit 0; }
ok() { # ok COND-STATUS DESCRIPTION
	tap_n=$((tap_n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"
	else echo "not ok $tap_n - $2"; tap_fail=$((tap_fail + 1)); fi
}
is() { # is GOT EXPECTED DESCRIPTION
	if [ "$1" = "$2" ]; then ok 0 "$3"
	else ok 1 "$3"; echo "#   got '$1', expected '$2'"; fi
}
finish() { exit $((tap_fail != 0)); }

# The number of descriptors PID holds once it is back to WANT (or after
# 5 s, whatever it holds then).
fds_settle() { # PID WANT
	for _ in $(seq 100); do
		_fds=$(ls /proc/"$1"/fd | wc -l)
		[ "$_fds" = "$2" ] && break
		sleep 0.05
	done
	echo "$_fds"
}

# Run other test files (names under t/ without .t) with VAR=VALUE in
# their environment; each file's verdict is one check "t/NAME.t WITH".
rerun_tests() { # VAR=VALUE WITH NAME...
	_env=$1 _with=$2; shift 2
	for _t in "$@"; do
		env "$_env" sh "$GSOCK_SRC/t/$_t.t" >"$TMP/$_t.tap" 2>&1
		_st=$?
		_why=$(sed -n 's/^1\.\.0 # SKIP //p' "$TMP/$_t.tap")
		if [ -n "$_why" ]; then
			tap_n=$((tap_n + 1))
			echo "ok $tap_n - t/$_t.t $_with # SKIP $_why"
			continue
		fi
		ok $_st "t/$_t.t $_with: $(grep -c '^ok' "$TMP/$_t.tap") checks pass"
		grep '^not ok' "$TMP/$_t.tap" | sed 's/^/#   /' | head -20
	done
}

need_backend() {
	[ -x "$SERVER" ] || skip_all "the $BACKEND backend is not built (configure found no CUDA toolkit)"
	if [ "$BACKEND" = cuda ] && ! nvidia-smi -L >/dev/null 2>&1; then
		skip_all "no CUDA device"
	fi
	command -v python3 >/dev/null || skip_all "python3 is not installed"
}

# Face verification's tests: memcached and the enrolment tool.
need_facever() {
	command -v memcached >/dev/null || skip_all "memcached is not installed (scripts/setup installs it)"
	[ -x "$GSOCK_BUILD/apps/facever/facever-enrol" ] || skip_all "facever-enrol is not built (configure found no libmemcached; scripts/setup installs it)"
}

# Start gsockd on a private control socket; extra args go to gsockd.
start_gsockd() { # [gsockd options]; $GSOCKD_CONF: a conf file (default empty)
	[ -n "${GSOCKD_CONF:-}" ] || { GSOCKD_CONF=$TMP/gsock.conf; : >"$GSOCKD_CONF"; }
	# A killed gsockd leaves its socket's file: wait for the new one's.
	[ -n "${GSOCKD_PID:-}" ] && ! kill -0 "$GSOCKD_PID" 2>/dev/null && rm -f "$GSOCK_CONTROL"
	${GSOCKD_WRAPPER:-} "$GSOCKD" --conf "$GSOCKD_CONF" --control "$GSOCK_CONTROL" \
		--workers "$WORKERS" --io "$IO" --log-level "${GSOCKD_LOG_LEVEL:-info}" "$@" \
		>/dev/null 2>>"$TMP/gsockd.log" &
	GSOCKD_PID=$!
	PIDS="$PIDS $GSOCKD_PID"
	for _ in $(seq 200); do
		[ -S "$GSOCK_CONTROL" ] && return 0
		sleep 0.05
	done
	echo "# gsockd did not start"; cat "$TMP/gsockd.log"
	return 1
}

# start_app NAME PROGRAM ARGS...: start an application's server (output in
# $TMP/NAME.out and .err, pid in NAME_PID), wait until it says it listens.
start_app() {
	_name=$1; shift
	"$@" >"$TMP/$_name.out" 2>"$TMP/$_name.err" &
	eval "${_name}_PID=\$!"
	PIDS="$PIDS $!"
	for _ in $(seq 400); do
		grep -q 'listening on' "$TMP/$_name.out" && return 0
		sleep 0.05
	done
	echo "# $_name did not start:"; sed 's/^/#   /' "$TMP/$_name.err"
	return 1
}

# Start the GPU echo server; sets SERVER_PID and PORT (or the unix path).
start_server() {
	# new files: a server killed before and still ending writes to its own
	rm -f "$TMP/server.out" "$TMP/server.err"
	"$SERVER" "$@" >"$TMP/server.out" 2>"$TMP/server.err" &
	SERVER_PID=$!
	PIDS="$PIDS $SERVER_PID"
	for _ in $(seq 400); do
		if grep -q 'listening on' "$TMP/server.out"; then
			PORT=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/server.out" | head -1)
			return 0
		fi
		kill -0 "$SERVER_PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "# echo server did not start:"; sed 's/^/#   /' "$TMP/server.err"
	return 1
}

# Start a python helper server (see echo_clients.py); sets HELPER_PORT.
start_helper() { run_helper helper python3 "$PY" "$@"; }

# run_helper NAME COMMAND...: start a helper command (its output in
# $TMP/NAME.out and .err) and wait for its "listening PORT" line; sets
# HELPER_PID and HELPER_PORT.
run_helper() {
	_h=$1; shift
	"$@" >"$TMP/$_h.out" 2>"$TMP/$_h.err" &
	HELPER_PID=$!
	PIDS="$PIDS $HELPER_PID"
	for _ in $(seq 200); do
		HELPER_PORT=$(sed -n 's/^listening \(.*\)$/\1/p' "$TMP/$_h.out")
		[ -n "$HELPER_PORT" ] && return 0
		sleep 0.05
	done
	echo "# $_h did not start:"; sed 's/^/#   /' "$TMP/$_h.err"
	return 1
}

# srv_probe NAME ARGS...: start t/srv-probe-$BACKEND (the server layer's
# probe) with ARGS; its output in $TMP/NAME.out, its pid in NAME_PID, its
# port in P.
srv_probe() {
	_n=$1; shift
	"$GSOCK_BUILD/t/srv-probe-$BACKEND" -l 127.0.0.1:0 -t 64 -T 300 "$@" \
		>"$TMP/$_n.out" 2>"$TMP/$_n.err" &
	eval "${_n}_PID=\$!"
	PIDS="$PIDS $!"
	for _ in $(seq 400); do grep -q 'listening on' "$TMP/$_n.out" && break; sleep 0.05; done
	P=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/$_n.out")
}

# pipe_ask PORT KEY...: send the keys to a srv-probe on one 'K'
# connection, all at once; print the answers, one per line (a value as
# LEN:VALUE).
pipe_ask() {
	timeout 30 python3 -c "
import socket, sys
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
keys = sys.argv[2:]
s.sendall(b'K' + b''.join(k.encode() + b'\n' for k in keys))
out = b''
while out.count(b'\n') < len(keys):
    d = s.recv(65536)
    if not d:
        break
    out += d
sys.stdout.write(out.decode('latin-1'))" "$@"
}

# Value NAME from gcall-probe output in file $1.
probe_value() { sed -n "s/^$2 //p" "$1" | head -1; }

# Seconds since the epoch with milliseconds, for bounded-time checks.
now_ms() { date +%s%3N; }

# A TCP port nobody listens on now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Wait (5 s at most) until something listens on TCP port $1, without
# connecting to it (a connection would use up a one-shot server).
wait_listen() {
	hex=$(printf ':%04X' "$1")
	for _ in $(seq 100); do
		awk -v p="$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' \
			/proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		sleep 0.05
	done
	echo "# nothing listens on port $1"
	return 1
}

# Start "$@" in the background under the preload, logging decisions to $TMP/NAME.err.
bg_preloaded() {
	name=$1; shift
	env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
	PIDS="$PIDS $!"
	LAST_PID=$!
}
