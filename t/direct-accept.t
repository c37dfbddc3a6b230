#!/bin/sh
# The same-host direct path the other way round: a GPU application's
# gconnect to a preloaded CPU program's listener. The preload names its
# listeners to gsockd; gsockd holds a gconnect that only such listeners
# can take until the program's accept claims the segment (side 1), or
# direct_accept_ms passes (then the bridge carries it). Bytes come back
# intact through a threaded and an epoll server, one accepting in forked
# children, two sharing a port (SO_REUSEPORT; one without the preload
# keeps the port bridged), one started before gsockd (named at its first
# accept after gsockd starts, and again after gsockd is stopped, killed
# or, socket-activated, restarted on the same socket; not after a touch
# of the socket's file), through a pipe of the
# server layer to a fake memcached, and on every fallback: a listener
# that accepts late, one that is not preloaded, a pool used up (and half
# of it waiting for accepts), and
# direct_accept_ms = 0; with direct = off its accepts do not ask gsockd
# again. A killed server ends the GPU client's connection
# with an error, not a hang; a killed GPU client and a killed gsockd end
# the server's, whose descriptors are closed.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
[ -f "$PRELOAD" ] || skip_all "libgsock-preload.so is not built"
time_limit 240
plan 56
STAT=$GSOCK_BUILD/bridge/gsock-stat
PROBE=$GSOCK_BUILD/t/srv-probe-$BACKEND

# pre_helper NAME MODE ARGS...: echo_clients.py MODE under the preload
# (its log in $TMP/NAME.err); its port in HP, its pid in HPID.
pre_helper() {
	_n=$1; shift
	run_helper "$_n" env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug python3 "$PY" "$@"
	_r=$?
	HPID=$HELPER_PID
	HP=$HELPER_PORT
	return $_r
}

# accepted NAME: connections the preloaded program NAME took directly.
accepted() { grep -c 'direct path, segment .* (accepted end)' "$TMP/$1.err"; }

# client NAME ARGS...: the GPU echo client; its output to the TAP log.
client() {
	_n=$1; shift
	timeout 60 "$CLIENT" "$@" >"$TMP/$_n" 2>&1
	_r=$?
	sed 's/^/# /' "$TMP/$_n"
	return $_r
}

# restart_gsockd CONF: a new gsockd with that conf file.
restart_gsockd() {
	kill "$GSOCKD_PID" 2>/dev/null
	wait "$GSOCKD_PID" 2>/dev/null
	GSOCKD_CONF=$1 start_gsockd
}

# direct_server NAME MODE WHAT B: a preloaded MODE server, B connections
# of the GPU client to it, intact and each direct.
direct_server() {
	pre_helper "$1" "$2" 127.0.0.1:0 || exit 1
	client "c_$1" -b "$4" -n 1000 -i 50 "127.0.0.1:$HP"
	ok $? "GPU client -> $3: intact"
	is "$(accepted "$1")" "$4" "its $4 connections were direct"
	pkill -P "$HPID" 2>/dev/null # forked children first: they outlive it
	kill "$HPID"
}

# streaming NAME N B: the GPU client streams over B more connections to
# the preloaded server NAME (CPID, output in $TMP/s_NAME) until N of its
# connections are direct, and a little more.
streaming() {
	"$CLIENT" -b "$3" -n 1000 -i 100000000 "127.0.0.1:$HP" >"$TMP/s_$1" 2>&1 &
	CPID=$!
	PIDS="$PIDS $CPID"
	for _ in $(seq 100); do [ "$(accepted "$1")" = "$2" ] && break; sleep 0.05; done
	sleep 0.3
}

# client_fails NAME PID WHAT: kill -9 PID; the streaming client (CPID)
# fails, within 10 s.
client_fails() {
	t0=$(now_ms)
	kill -9 "$2"
	wait "$CPID"
	r=$?
	t1=$(now_ms)
	sed 's/^/# /' "$TMP/s_$1"
	[ "$r" -ne 0 ] && [ $((t1 - t0)) -lt 10000 ]
	ok $? "$3: the GPU client fails (status $r) in $((t1 - t0)) ms, no hang"
}

start_gsockd || exit 1

pre_helper thr echo-server 127.0.0.1:0 || exit 1
grep -q 'listener named to gsockd.*: ok' "$TMP/thr.err"
ok $? "the preloaded server's listener is named to gsockd"
client c1 -b 4 -n 1000 -i 50 "127.0.0.1:$HP"
ok $? "GPU client -> preloaded threaded echo server, 4 connections: intact"
is "$(accepted thr)" 4 "each of the 4 connections was accepted on the direct path"
client c2 -b 2 -n 3000000 -i 2 "127.0.0.1:$HP"
ok $? "3 MB round trips (larger than the 1 MiB rings): intact"
is "$(accepted thr)" 6 "those 2 connections were direct too"
kill "$HPID"

pre_helper ep epoll-echo-server 127.0.0.1:0 || exit 1
client c3 -b 3 -n 20000 -i 30 "127.0.0.1:$HP"
ok $? "GPU client -> preloaded epoll echo server (non-blocking accept): intact"
is "$(accepted ep)" 3 "its 3 connections were direct"

# Killed mid-stream: the GPU client learns it, within seconds.
streaming ep 5 2
"$STAT" -j >"$TMP/st.json"
n=$(python3 - "$TMP/st.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sum(s["path"] == "direct" for a in d["applications"] for s in a["socket_list"] if s["state"] == "connected"))
PY
)
is "$n" 2 "gsock-stat: the GPU client's 2 connections are direct"
client_fails ep "$HPID" "a killed server"

# A killed GPU client: the preloaded server's threads see the end and
# close; its descriptors go back to what they were before.
pre_helper kc echo-server 127.0.0.1:0 || exit 1
fd0=$(ls /proc/"$HPID"/fd | wc -l)
streaming kc 2 2
kill -9 "$CPID"
wait "$CPID" 2>/dev/null
is "$(fds_settle "$HPID" "$fd0")" "$fd0" "a killed GPU client: the server's 2 direct connections end and are closed"
kill "$HPID"

# Accepts in forked children, on the parent's named listener; a listener
# moved to another descriptor after a subprocess ran (vfork).
direct_server fork fork-echo-server "preloaded server accepting in 2 forked children" 4
direct_server dup dup-echo-server "preloaded server whose listener moved (dup2) after a subprocess ran" 2

# Two preloaded listeners sharing a port (SO_REUSEPORT), both named.
pre_helper rp1 reuseport-echo-server 127.0.0.1:0 || exit 1
RP=$HP
pre_helper rp2 reuseport-echo-server "127.0.0.1:$RP" || exit 1
client c10 -b 8 -n 1000 -i 20 "127.0.0.1:$RP"
ok $? "GPU client -> two preloaded listeners on one port: intact"
is "$(($(accepted rp1) + $(accepted rp2)))" 8 "all 8 connections were direct, whichever listener took them"
kill "$HPID"
# One of them replaced by a program without the preload: the kernel may
# hand a connection to it, so none is held.
start_helper reuseport-echo-server "127.0.0.1:$RP" || exit 1
n1=$(accepted rp1)
client c11 -b 6 -n 1000 -i 20 "127.0.0.1:$RP"
ok $? "a port shared with a listener without the preload: intact"
is "$(accepted rp1)" "$n1" "none of its connections was direct"
pkill -f "reuseport-echo-server 127.0.0.1:" 2>/dev/null

pre_helper late late-echo-server 127.0.0.1:0 1.5 || exit 1
client c5 -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "a preloaded server that accepts 1.5 s late: intact on the bridge"
is "$(accepted late)" 0 "its connections were not direct (direct_accept_ms passed)"
kill "$HPID"

start_helper echo-server 127.0.0.1:0 || exit 1
client c6 -b 2 -n 1000 -i 20 "127.0.0.1:$HELPER_PORT"
ok $? "a server without the preload: intact on the bridge"
kill "$HELPER_PID"

# A preloaded server that started before gsockd: its listener found none
# to be named to, and is named at its first accept once gsockd runs.
kill "$GSOCKD_PID"
wait "$GSOCKD_PID" 2>/dev/null
pre_helper early echo-server 127.0.0.1:0 || exit 1
grep -q 'no gsockd at' "$TMP/early.err" && ! grep -q 'listener named' "$TMP/early.err"
ok $? "a preloaded server started while no gsockd runs: its listener is not named"
start_gsockd || exit 1
client c12 -b 1 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "gsockd started after it: the first GPU client's connection is intact on the bridge"
is "$(accepted early)" 0 "that connection was not direct"
grep -q 'listener named to gsockd.*: ok' "$TMP/early.err"
ok $? "its accept named the listener to gsockd"
client c13 -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "GPU client -> it again: intact"
is "$(accepted early)" 2 "those 2 connections were direct"
# gsockd restarts: the new one knows none of its listeners. An accept (a
# second after the last look) finds the old pool marked closed (a stop),
# or the control socket another file whose gsockd is another (a kill -9),
# and names the listener again; a file merely touched names nothing.
# restarted SIGNAL N WHAT: gsockd ended by SIGNAL and started again; the
# listener named for the Nth time, then 2 more direct connections.
restarted() {
	_n0=$(accepted early)
	kill "-$1" "$GSOCKD_PID"
	wait "$GSOCKD_PID" 2>/dev/null
	start_gsockd || exit 1
	sleep 1.1
	client "r$1" -b 1 -n 1000 -i 20 "127.0.0.1:$HP" &&
		[ "$(accepted early)" = "$_n0" ] &&
		[ "$(grep -c 'listener named to gsockd.*: ok' "$TMP/early.err")" = "$2" ]
	ok $? "$3: the next GPU connection is intact on the bridge, and its accept names the listener again"
	client "r2$1" -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
	ok $? "$3: then GPU clients are intact"
	is "$(($(accepted early) - _n0))" 2 "$3: and direct"
}
restarted TERM 2 "gsockd stopped and started"
restarted KILL 3 "gsockd killed (-9) and started"
touch "$GSOCK_CONTROL"
sleep 1.1
client c17 -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "gsockd's control socket touched: GPU clients intact"
is "$(accepted early) $(grep -c 'listener named to gsockd.*: ok' "$TMP/early.err")" "8 3" \
	"and direct, the listener not named again"
kill "$HPID"

# Under socket activation the control socket outlives gsockd: a stopped
# gsockd's mark in its pool is what says the next one knows nothing.
python3 - "$TMP/act.sock" "$GSOCKD" "$GSOCKD_CONF" "$WORKERS" >"$TMP/activator.out" 2>>"$TMP/gsockd.log" <<'PY' &
import os, socket, sys
path, gsockd, conf, workers = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path); os.chmod(path, 0o600); s.listen(64)
for _ in range(2):  # like systemd: the socket stays, gsockd starts again
    pid = os.fork()
    if pid == 0:
        os.dup2(s.fileno(), 3)
        os.set_inheritable(3, True)
        os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
        os.environ.pop("GSOCK_CONTROL", None)
        os.execv(gsockd, [gsockd, "--conf", conf, "--workers", workers])
    print("gsockd", pid, flush=True)
    os.waitpid(pid, 0)
PY
ACT=$!
PIDS="$PIDS $ACT"
act_pid() { # the Nth activated gsockd's pid, once it listens
	for _ in $(seq 200); do
		_p=$(sed -n "$1{s/^gsockd //p}" "$TMP/activator.out")
		[ -n "$_p" ] && [ "$(grep -c 'from socket activation' "$TMP/gsockd.log")" -ge "$1" ] && { echo "$_p"; return; }
		sleep 0.05
	done
}
A1=$(act_pid 1)
GSOCK_CONTROL=$TMP/act.sock pre_helper act echo-server 127.0.0.1:0 || exit 1
GSOCK_CONTROL=$TMP/act.sock client c18 -b 2 -n 1000 -i 20 "127.0.0.1:$HP" && [ "$(accepted act)" = 2 ]
ok $? "socket-activated gsockd: a preloaded server's GPU clients are direct"
kill -TERM "$A1"
A2=$(act_pid 2)
sleep 1.1
GSOCK_CONTROL=$TMP/act.sock client c19 -b 1 -n 1000 -i 20 "127.0.0.1:$HP" &&
	[ "$(accepted act)" = 2 ] &&
	[ "$(grep -c 'listener named to gsockd.*: ok' "$TMP/act.err")" = 2 ]
ok $? "it restarted on the same socket: the next connection is bridged, and its accept names the listener again"
GSOCK_CONTROL=$TMP/act.sock client c20 -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "then GPU clients are intact"
is "$(accepted act)" 4 "and direct"
kill "$HPID" "$A2" 2>/dev/null
wait "$ACT" 2>/dev/null

# The server layer's pipe (face verification's memcached asks).
if [ -x "$PROBE" ]; then
	MP=$(free_port)
	env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug python3 "$GSOCK_SRC/t/fake_mc.py" "$MP" "$TMP/mc.log" \
		>"$TMP/mc.out" 2>"$TMP/mc.err" &
	PIDS="$PIDS $!"
	wait_listen "$MP"
	srv_probe p -b 2 -m 4 -F 1 -M "127.0.0.1:$MP" -R 4096 -W 300
	got=$(pipe_ask "$P" v5 miss v1000)
	want=$(python3 -c "print('5:abcde'); print('E2'); print('1000:' + ''.join(chr(97 + i % 26) for i in range(1000)))")
	is "$got" "$want" "server-layer pipe to a preloaded fake memcached: hit, miss, 1000-byte hit"
	is "$(accepted mc)" 1 "the pipe's connection was accepted on the direct path"
else
	for _ in 1 2; do
		tap_n=$((tap_n + 1))
		echo "ok $tap_n - # SKIP t/srv-probe-$BACKEND is not built"
	done
fi

# Bad requests get a clear answer; nothing is taken.
AB="python3 $GSOCK_SRC/t/ctl_abuse.py dreq $GSOCK_CONTROL"
is "$($AB accept bad 127.0.0.1:5 0)" "status -22 malformed addresses" \
	"an accept's request with addresses of no family: EINVAL, said so"
is "$($AB accept 127.0.0.1:5 127.0.0.1:6 0)" "status -2 no gconnect waits for this connection" \
	"an accept's request no gconnect waits for: ENOENT, said so"
is "$($AB listen 127.0.0.1:5 bad 0)" "status -22 malformed listener" \
	"a listener named without its inode: EINVAL, said so"
is "$($AB listen bad bad 7)" "status -22 malformed listener" \
	"a listener of no family: EINVAL, said so"

# A pool of one segment: the first connection takes it, the rest bridge.
printf 'direct_conns = 1\n' >"$TMP/one.conf"
restart_gsockd "$TMP/one.conf" || exit 1
pre_helper one echo-server 127.0.0.1:0 || exit 1
client c7 -b 3 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "direct_conns = 1, 3 connections: intact"
is "$(accepted one)" 1 "one of them was direct, the others bridged"
kill "$HPID"

# At most half the pool waits for accepts: of a pool of 2 segments, one
# gconnect waits for a server that accepts 1.5 s late (within a 3 s
# direct_accept_ms), the other is bridged at once.
printf 'direct_conns = 2\ndirect_accept_ms = 3000\n' >"$TMP/half.conf"
restart_gsockd "$TMP/half.conf" || exit 1
pre_helper half late-echo-server 127.0.0.1:0 1.5 || exit 1
client c14 -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "direct_conns = 2, 2 connections to a server accepting 1.5 s late: intact"
is "$(accepted half)" 1 "one waited and was direct, the other (past half the pool) bridged"
kill "$HPID"

# gsockd killed under a direct accepted connection: both ends learn it.
pre_helper gk echo-server 127.0.0.1:0 || exit 1
fd0=$(ls /proc/"$HPID"/fd | wc -l)
streaming gk 1 1
client_fails gk "$GSOCKD_PID" "gsockd killed"
is "$(fds_settle "$HPID" "$fd0")" "$fd0" "and the preloaded server's end of it ends and is closed"
kill "$HPID"

printf 'direct_accept_ms = 0\n' >"$TMP/zero.conf"
restart_gsockd "$TMP/zero.conf" || exit 1
pre_helper zero echo-server 127.0.0.1:0 || exit 1
grep -q 'direct_accept_ms = 0' "$TMP/zero.err"
ok $? "direct_accept_ms = 0: gsockd declines the listener, saying why"
client c8 -b 2 -n 1000 -i 20 "127.0.0.1:$HP"
ok $? "and the connections are intact on the bridge"
is "$(accepted zero)" 0 "none of them direct"
kill "$HPID"

# gsockd with the direct path off offers no pool: the listener is not
# named, and its accepts do not ask again (only a missing gsockd is asked
# again), however long apart.
printf 'direct = "off"\n' >"$TMP/off.conf"
restart_gsockd "$TMP/off.conf" || exit 1
pre_helper off echo-server 127.0.0.1:0 || exit 1
client c9 -b 1 -n 100 -i 2 "127.0.0.1:$HP" && sleep 1.2 &&
	client c10 -b 1 -n 100 -i 2 "127.0.0.1:$HP"
ok $? "direct = off: connections a second apart are intact on the bridge"
is "$(grep -c 'offers no direct pool' "$TMP/off.err")" 1 "the listener asked gsockd once, at listen, not again at its accepts"
kill "$HPID"
finish
