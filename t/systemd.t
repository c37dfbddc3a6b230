#!/bin/sh
# gsockd under systemd: the shipped user units pass systemd-analyze verify
# (where systemd-analyze exists), and socket activation works as systemd
# does it (a listening SOCK_SEQPACKET socket as descriptor 3, LISTEN_FDS=1,
# LISTEN_PID): gsockd serves a GPU application on it, leaves its path in
# place when it stops, and refuses a descriptor that is not such a socket.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 120
plan 9
if command -v systemd-analyze >/dev/null 2>&1; then
	mkdir -p -m 700 "$TMP/xdg"
	cp "$GSOCK_SRC/conf/gsockd.socket" "$TMP/"
	# The unit as installed, pointing at this build's gsockd.
	sed -e "s|^ExecStart=[^ ]*|ExecStart=$GSOCKD|" -e "s|--conf [^ ]*|--conf $GSOCK_SRC/conf/gsock.conf|" \
		"$GSOCK_BUILD/conf/gsockd.service" >"$TMP/gsockd.service"
	XDG_RUNTIME_DIR=$TMP/xdg systemd-analyze --user --man=no verify \
		"$TMP/gsockd.socket" "$TMP/gsockd.service" >"$TMP/verify" 2>&1
	r=$?
	ok $r "systemd-analyze --user verify: gsockd.socket and gsockd.service"
	[ $r = 0 ] || sed 's/^/#   /' "$TMP/verify"
else
	echo "ok $((tap_n += 1)) # SKIP systemd-analyze is not installed"
fi
grep -q "^ExecStart=.*/gsockd --conf .*/gsock.conf$" "$GSOCK_BUILD/conf/gsockd.service"
ok $? "gsockd.service starts the installed gsockd with the installed gsock.conf: $(grep ExecStart "$GSOCK_BUILD/conf/gsockd.service")"

# activate PATH [FD3KIND]: what systemd does for gsockd.socket, then exec
# gsockd; FD3KIND tcp or file hands it the wrong thing.
activate() {
	python3 - "$1" "${2:-unix}" "$GSOCKD" "$TMP/gsock.conf" "$WORKERS" <<'PY' &
import os, socket, sys, time
path, kind, gsockd, conf, workers = sys.argv[1:]
if kind == "unix":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(path); os.chmod(path, 0o600); s.listen(64)
elif kind == "tcp":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
else:
    s = open(conf)
pid = os.fork()
if pid == 0:
    os.dup2(s.fileno(), 3)
    os.set_inheritable(3, True)  # dup2 onto itself keeps close-on-exec
    os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
    os.environ.pop("GSOCK_CONTROL", None)
    os.execv(gsockd, [gsockd, "--conf", conf, "--workers", workers])
print("gsockd", pid, flush=True)
_, st = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(st), flush=True)
# Like systemd: the socket stays open after gsockd ends, for the next start.
if kind == "unix":
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.connect(path)
    print("still listening", flush=True)
PY
}
: >"$TMP/gsock.conf"
activate "$TMP/act.sock" >"$TMP/act.out" 2>"$TMP/gsockd.log"
ACT=$!
PIDS="$PIDS $ACT"
for _ in $(seq 200); do grep -q "listening on" "$TMP/gsockd.log" && break; sleep 0.05; done
grep -q "listening on $TMP/act.sock, from socket activation" "$TMP/gsockd.log"
ok $? "gsockd takes descriptor 3 as its control socket: $(grep 'listening on' "$TMP/gsockd.log")"
GSOCK_CONTROL=$TMP/act.sock start_server -b 1
out=$(printf 'through an activated gsockd' | timeout 20 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); m = sys.stdin.buffer.read()
s.sendall(m); got = b""
while len(got) < len(m): got += s.recv(4096)
print(got.decode())' "$PORT")
is "$out" "through an activated gsockd" "a GPU server registered through the activated socket echoes bytes"
kill "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
kill -TERM "$(sed -n 's/^gsockd //p' "$TMP/act.out")"
wait $ACT
is "$(sed -n 's/^exit //p' "$TMP/act.out")" 0 "gsockd stops cleanly on SIGTERM"
grep -q "still listening" "$TMP/act.out" && [ -S "$TMP/act.sock" ]
ok $? "it leaves the unit's socket in place (a next client would start it again)"

activate "$TMP/tcp.sock" tcp >"$TMP/act2.out" 2>"$TMP/err"
wait $!
is "$(sed -n 's/^exit //p' "$TMP/act2.out")" 78 "a TCP socket as descriptor 3: gsockd exits with EX_CONFIG"
grep -q "descriptor 3 is not a listening AF_UNIX SOCK_SEQPACKET socket" "$TMP/err"
ok $? "saying why: $(grep -o 'socket activation.*' "$TMP/err" | head -1)"
# LISTEN_PID naming another process: not for gsockd; it binds its own socket.
LISTEN_FDS=1 LISTEN_PID=1 "$GSOCKD" --conf "$TMP/gsock.conf" --control "$TMP/own.sock" 2>"$TMP/own.log" &
OWN=$!
PIDS="$PIDS $OWN"
for _ in $(seq 200); do [ -S "$TMP/own.sock" ] && break; sleep 0.05; done
[ -S "$TMP/own.sock" ] && ! grep -q "socket activation" "$TMP/own.log"
ok $? "LISTEN_PID of another process is ignored: gsockd binds its own control socket"
finish
