#!/bin/sh
# The same-host direct path from a preloaded CPU program to a GPU
# application's listener: unmodified clients (python3, loadgen, rtt-client)
# move their bytes through a segment of the direct pool. Bytes come back
# intact through blocking calls, threads, epoll (edge-triggered, through
# full rings), select, fork, dup and shutdown; bytes that came while
# nobody looked make every kind of wait return; names and options are the
# TCP connection's; exec and SCM_RIGHTS with a direct descriptor are
# refused; bytes written around the preload reset the connection loudly;
# a killed client, a killed server and a killed gsockd each end the other
# side within a second; a used-up pool, GSOCK_DIRECT=off and a rule with
# direct = off give the kernel's path, intact. A multiplexed server (a
# block holding several connections, its next one right after each
# answer) serves a paced epoll client and a closed loop on direct
# connections; waits that owe an answer nap and take it themselves, with
# no wake-up byte from gsockd, and waits that sleep owing a slow one look
# for it themselves. An epoll wait reports ready members itself.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
[ -f "$PRELOAD" ] || skip_all "libgsock-preload.so is not built"
time_limit 300
plan 66
STAT=$GSOCK_BUILD/bridge/gsock-stat
DC=$GSOCK_SRC/t/direct_clients.py
printf 'direct_conns = 3\ndirect_ring_size = 262144\n' >"$TMP/small.conf"
GSOCKD_CONF=$TMP/small.conf start_gsockd || exit 1
start_server -l 127.0.0.1:0 -b 4 || exit 1

pre() { env LD_PRELOAD="$PRELOAD" GSOCK_LOG=info "$@"; }
# bgpre OUT COMMAND...: pre in the background; $! is the program itself.
bgpre() {
	out=$1
	shift
	env LD_PRELOAD="$PRELOAD" GSOCK_LOG=info "$@" >"$out" 2>&1 &
}

# client NAME MODE ARGS...: run a mode of direct_clients.py under the
# preload; its lines go to the TAP log.
client() {
	name=$1
	shift
	pre timeout 60 python3 "$DC" "$@" >"$TMP/$name" 2>"$TMP/$name.err"
	r=$?
	sed 's/^/# /' "$TMP/$name" "$TMP/$name.err"
	return $r
}

# wait_connected FILE: until a direct_clients.py mode says it is connected.
wait_connected() {
	for _ in $(seq 100); do grep -q connected "$1" && break; sleep 0.05; done
}

# direct_socks FILE: connected sockets of the server on the direct path.
direct_socks() {
	python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sum(s["path"] == "direct" for a in d["applications"] for s in a["socket_list"] if s["state"] == "connected"))
PY
}

pre timeout 60 python3 "$PY" sizes "$PORT" 1 100 65537 1000000 >"$TMP/sizes" 2>"$TMP/sizes.err"
ok $? "python3 clients (a reader thread, a writer thread), 1 B to 1 MB: intact"
n=$(grep -c 'direct path' "$TMP/sizes.err")
is "$n" 4 "the preload took the direct path for each of the 4 connections"
pre timeout 60 python3 "$PY" concurrent "$PORT" 3 5 >"$TMP/conc" 2>&1
ok $? "3 concurrent connections of random sizes: intact"
pre timeout 60 "$GSOCK_BUILD/bench/rtt-client" 127.0.0.1 "$PORT" 64 20000 >"$TMP/rtt" 2>&1
ok $? "rtt-client (blocking send and recv): 20,000 round trips of 64 B"
sed 's/^/# /' "$TMP/rtt"
# lane_bytes FILE: what the preload's debug log says came by the lane.
lane_bytes() { sed -n 's/.*: \([0-9]*\) bytes came by its lane.*/\1/p' "$1" | head -1; }
pre env GSOCK_LOG=debug timeout 60 "$GSOCK_BUILD/bench/rtt-client" 127.0.0.1 "$PORT" 64 2000 >"$TMP/rl" 2>"$TMP/rl.err"
l=$(lane_bytes "$TMP/rl.err")
[ "${l:-0}" -gt 0 ]
ok $? "the server's 64 B answers come by the lane ($l bytes, warm-up rounds included; the rest by the ring)"
pre env GSOCK_LOG=debug GSOCK_DIRECT_LANE=off timeout 60 "$GSOCK_BUILD/bench/rtt-client" 127.0.0.1 "$PORT" 64 2000 >"$TMP/rl" 2>"$TMP/rl.err"
is "$(lane_bytes "$TMP/rl.err")" 0 "GSOCK_DIRECT_LANE=off in the client: no lane"
pre env GSOCK_DIRECT_LANE=off timeout 60 "$GSOCK_BUILD/bench/loadgen" -c 2 -s 64 -d 1 -w 0 127.0.0.1 "$PORT" >"$TMP/lo.lg" 2>&1
grep -q 'errors=0' "$TMP/lo.lg" && ! grep -q 'reqs=0 ' "$TMP/lo.lg"
ok $? "... and loadgen's round trips without it are intact"
pre timeout 60 "$GSOCK_BUILD/bench/loadgen" -c 2 -s 100 -d 1 -w 0 127.0.0.1 "$PORT" >"$TMP/lg" 2>&1
grep -q 'errors=0' "$TMP/lg" && ! grep -q 'reqs=0 ' "$TMP/lg"
ok $? "loadgen (epoll, every byte checked): no errors"
sed 's/^/# /' "$TMP/lg" | grep -v debug | tail -1

client et epoll-et "$PORT" 3000000
ok $? "edge-triggered epoll, 3,000,000 bytes through a 256 KiB ring: intact"
client oneshot oneshot "$PORT" 300 && grep -q 'direct path' "$TMP/oneshot.err"
ok $? "EPOLLONESHOT on the direct path, re-armed after each event: 300 round trips of 64 B intact"
client sel select "$PORT" 1000000
ok $? "select(2): intact"
client fork fork "$PORT"
ok $? "fork: child and parent use one direct descriptor in turn"
client nb nonblock "$PORT"
ok $? "O_NONBLOCK set and cleared by fcntl, by ioctl, and by a forked child: recv says EAGAIN or waits as the flag says"
client dup dup "$PORT"
ok $? "dup: the copy carries the connection; shutdown on it gives EOF"
client cr closerange "$PORT"
ok $? "close_range and closefrom close a direct descriptor: its number, taken again by a file, is the file's"
client shut shutdown "$PORT" 100000
ok $? "shutdown(SHUT_WR): the echo, then EOF"
client scopes scopes "$PORT"
ok $? "every wait sees an echo that landed while nothing looked: epoll sets per thread, a member under a dup, sets duplicated, dup2'd, nested (also beside a member always ready) and gaining a member mid-wait, poll"
is "$(grep -c 'direct path' "$TMP/scopes.err")" 7 "and its 7 connections took the direct path"
client names names "$PORT"
ok $? "getsockname, getpeername, SO_TYPE, SO_DOMAIN, TCP_NODELAY, SO_ERROR as over TCP"
client tmo timeout "$PORT"
ok $? "SO_RCVTIMEO: EAGAIN when it runs out"
client exec exec "$PORT"
ok $? "exec refused (EOPNOTSUPP) while a direct descriptor would cross it; fine with close-on-exec"
client rights rights "$PORT"
ok $? "SCM_RIGHTS of a direct descriptor refused (EOPNOTSUPP); the connection goes on"
client late late "$PORT"
ok $? "an echo that came while nobody looked: epoll_wait, epoll_pwait2, poll and select see it at once"
client raw raw "$PORT"
ok $? "bytes written around the preload (raw write(2)): ECONNRESET, not lost quietly"
grep -q 'around the preload' "$TMP/gsockd.log"
ok $? "... and gsockd's log says why"

# A client killed mid-stream: the server's end goes within a second.
bgpre "$TMP/st1" python3 "$DC" stream "$PORT" 60
sp=$!
PIDS="$PIDS $sp"
wait_connected "$TMP/st1"
sleep 0.5
"$STAT" -j >"$TMP/st1.json"
is "$(direct_socks "$TMP/st1.json")" 1 "gsock-stat: the server's end of a preloaded client's connection is direct"
kill -9 "$sp"
wait "$sp" 2>/dev/null
gone=no
for _ in $(seq 20); do
	"$STAT" -j >"$TMP/st2.json"
	[ "$(direct_socks "$TMP/st2.json")" = 0 ] && { gone=yes; break; }
	sleep 0.05
done
is "$gone" yes "client killed mid-stream: the server's end is gone within a second"

# How a direct client's end looks to the server, from a server of its own
# whose report at its end says how its one connection ended.
# end_seen NAME CLIENT-ARGS...: the server's stderr and stdout lines.
end_seen() {
	name=$1
	shift
	"$SERVER" -l 127.0.0.1:0 -b 1 >"$TMP/$name-srv.out" 2>"$TMP/$name-srv.err" &
	usp=$!
	PIDS="$PIDS $usp"
	for _ in $(seq 200); do grep -q 'listening on' "$TMP/$name-srv.out" && break; sleep 0.05; done
	uport=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/$name-srv.out")
	bgpre "$TMP/$name" python3 "$DC" "$1" "$uport" "$2" ${3:-}
	up=$!
	PIDS="$PIDS $up"
	wait_connected "$TMP/$name"
	case $name in
	killed) sleep 0.3; kill -9 "$up" ;;
	esac
	wait "$up" 2>/dev/null
	# until the server has let go of its end (up to 5 s: a loaded
	# machine took longer than the half second this once waited)
	for _ in $(seq 100); do
		"$STAT" -j >"$TMP/$name-st.json"
		[ "$(direct_socks "$TMP/$name-st.json")" = 0 ] && break
		sleep 0.05
	done
	sleep 0.1
	kill "$usp"
	wait "$usp" 2>/dev/null
	sed 's/^/# /' "$TMP/$name" "$TMP/$name-srv.err" "$TMP/$name-srv.out" | grep -v 'listening\|info:'
}

# Killed, or closed, with the echo unread: the server's end is reset, as
# the kernel resets a TCP connection closed over bytes never read.
end_seen killed unread 10000
grep -q 'direct path' "$TMP/killed" && grep -q 'ended with Connection reset by peer' "$TMP/killed-srv.err" &&
	grep -q '1 errors' "$TMP/killed-srv.out"
ok $? "a direct client killed with the echo unread: the server's end is reset"
end_seen closed unread 10000 close
grep -q 'direct path' "$TMP/closed" && grep -q 'ended with Connection reset by peer' "$TMP/closed-srv.err" &&
	grep -q '1 errors' "$TMP/closed-srv.out"
ok $? "... and one that closes with it unread"
# A forked child reads what its parent, closing its copy, left unread:
# no reset, the end is a clean one.
end_seen forked forkread 100000
grep -q 'ok forkread' "$TMP/forked" && grep -q '0 errors' "$TMP/forked-srv.out" &&
	! grep -q 'reset by peer' "$TMP/forked-srv.err"
ok $? "a child reads the echo its parent left, closing its copy: a clean end, no reset"

# Where gsockd said no GPU application listens, a connect does not ask
# again (an ask is a control connection) until gsockd's listeners move:
# a client retrying until a GPU server comes up takes the direct path.
nport=$(free_port)
pre env GSOCK_LOG=debug timeout 60 python3 "$DC" refused "$nport" 20 >"$TMP/nope" 2>"$TMP/nope.err"
ok $? "20 connects to a port nothing listens on: refused"
is "$(grep -c 'no direct path' "$TMP/nope.err")" 1 "... gsockd was asked once"
bgpre "$TMP/uu" env GSOCK_LOG=debug python3 "$DC" until-up "$nport"
uu=$!
PIDS="$PIDS $uu"
sleep 0.5
"$SERVER" -l "127.0.0.1:$nport" -b 1 >"$TMP/uu-srv.out" 2>"$TMP/uu-srv.err" &
uus=$!
PIDS="$PIDS $uus"
wait "$uu"
r=$?
sed 's/^/# /' "$TMP/uu" | grep -v debug
[ $r = 0 ] && grep -q 'direct path,' "$TMP/uu"
ok $? "a client retrying until a GPU server listens there: the direct path once it does"
n=$(grep -c 'no direct path' "$TMP/uu")
t=$(sed -n 's/^tries //p' "$TMP/uu")
[ "$n" -ge 1 ] && [ $((5 * n)) -lt "${t:-0}" ]
ok $? "... and it asked gsockd $n times in ${t:-?} tries"
kill "$uus" 2>/dev/null
wait "$uus" 2>/dev/null

# The pool is 3: three streams hold it; a fourth client takes the kernel.
for i in 1 2 3; do
	bgpre "$TMP/hold$i" python3 "$DC" stream "$PORT" 60
	PIDS="$PIDS $!"
	eval "hold$i=\$!"
done
for i in 1 2 3; do
	wait_connected "$TMP/hold$i"
done
pre timeout 60 python3 "$PY" sizes "$PORT" 500000 >"$TMP/full" 2>"$TMP/full.err"
ok $? "a client while the pool is used up: intact"
! grep -q 'direct path' "$TMP/full.err"
ok $? "... over the kernel's path"
kill "$hold1" "$hold2" "$hold3" 2>/dev/null
wait "$hold1" "$hold2" "$hold3" 2>/dev/null

# GSOCK_DIRECT=off, and a rule that says direct = off: the kernel's path.
pre env GSOCK_DIRECT=off timeout 60 python3 "$PY" sizes "$PORT" 300000 >"$TMP/off" 2>"$TMP/off.err"
r=$?
! grep -q 'direct path' "$TMP/off.err" && [ $r = 0 ]
ok $? "GSOCK_DIRECT=off: the kernel's path, intact"
printf 'preload {\n rule {\n  program = "python3*"\n  ports = "%s"\n  direct = "off"\n }\n}\n' "$PORT" >"$TMP/rule.conf"
pre env GSOCK_CONF="$TMP/rule.conf" GSOCK_LOG=debug timeout 60 python3 "$PY" sizes "$PORT" 300000 >"$TMP/rule" 2>"$TMP/rule.err"
r=$?
! grep -q 'direct path' "$TMP/rule.err" && grep -q 'direct off, by the rule' "$TMP/rule.err" && [ $r = 0 ]
ok $? "a preload rule with direct = off for python3 at this port: the kernel's path, intact"

# killed_end NAME PID: a client blocked in recv; kill -9 PID; its recv
# must end (EOF or reset) within a second.
killed_end() {
	who=$1
	bgpre "$TMP/end-$who" python3 "$DC" wait-end "$PORT"
	wp=$!
	PIDS="$PIDS $wp"
	wait_connected "$TMP/end-$who"
	k=$(now_ms)
	kill -9 "$2"
	wait "$wp"
	set -- $(sed -n 's/^end //p' "$TMP/end-$who")
	echo "# the client saw: $1, $(($2 - k)) ms after $who's kill"
	[ "$1" = EOF ] || [ "$1" = ECONNRESET ]
	ok $? "$who killed: the blocked client's recv ends (EOF or reset)"
	[ $(($2 - k)) -lt 1000 ]
	ok $? "... within a second ($(($2 - k)) ms)"
}

killed_end server "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
# gsockd killed: the same for a client of a new server, as over the bridge.
start_server -l 127.0.0.1:0 -b 2 || exit 1
killed_end gsockd "$GSOCKD_PID"
wait "$GSOCKD_PID" 2>/dev/null
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null

# direct = off in gsockd's conf: the preload asks, gsockd says no.
printf 'direct = "off"\n' >"$TMP/off.conf"
GSOCKD_CONF=$TMP/off.conf start_gsockd || exit 1
start_server -l 127.0.0.1:0 -b 2 || exit 1
pre env GSOCK_LOG=debug timeout 60 python3 "$PY" sizes "$PORT" 300000 >"$TMP/goff" 2>"$TMP/goff.err"
r=$?
! grep -q 'direct path,' "$TMP/goff.err" && [ $r = 0 ]
ok $? "gsockd's direct = off: the kernel's path, intact"
grep -q 'no direct' "$TMP/goff.err"
ok $? "... and the preload's log says gsockd offered none"

# The multiplexed server (-m: gpoll over a block's connections, the server
# layer's gsrv_done right after each answer) with preloaded loadgen.
kill "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
wait "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
GSOCKD_CONF=$TMP/gsock.conf
: >"$GSOCKD_CONF"
start_gsockd || exit 1
start_server -l 127.0.0.1:0 -b 4 -m 4 || exit 1
LOADGEN=$GSOCK_BUILD/bench/loadgen
# mplex NAME LOADGEN-ARGS...: loadgen on 12 connections under the preload
mplex() {
	name=$1
	shift
	pre timeout 60 "$LOADGEN" -c 12 -s 64 -d 0.5 -w 0.2 "$@" 127.0.0.1 "$PORT" \
		>"$TMP/$name" 2>"$TMP/$name.err"
	r=$?
	sed 's/^/# /' "$TMP/$name"
	[ $r = 0 ] && grep -q ' errors=0' "$TMP/$name" &&
		! grep -q ' reqs=0 ' "$TMP/$name" &&
		[ "$(grep -c 'direct path,' "$TMP/$name.err")" -eq 12 ]
}
mplex mpaced -r 1000
grep -q ' missing=0' "$TMP/mpaced"
ok $? "a multiplexed server (-b 4 -m 4) answers a paced epoll client, 12 direct connections, every request"
mplex mclosed
ok $? "... and a closed loop on 12 direct connections"
# An epoll wait reports a level-triggered member whose ring has bytes
# itself, with the program's data, no wake-up byte written and read; one
# the kernel reports too (watched for EPOLLOUT as well, or a byte from
# gsockd) comes once.
pre env GSOCK_LOG=debug timeout 60 python3 "$DC" epoll-many "$PORT" 12 100 \
	>"$TMP/many" 2>"$TMP/many.err"
r=$?
sed 's/^/# /' "$TMP/many"
quiet=$(sed -n 's/.* \([0-9]*\) epoll events reported without a wake-up byte.*/\1/p' "$TMP/many.err")
echo "# epoll events reported without a wake-up byte: ${quiet:-none said}"
[ $r = 0 ] && [ "${quiet:-0}" -gt 0 ]
ok $? "epoll: ready direct members reported by the wait itself, each once, with the program's data; every answer right"
client pe poll-epoll "$PORT" 20
ok $? "poll and select on an epoll set that holds a direct connection: the set's descriptor readable for every answer"
client starve starve "$PORT"
ok $? "a level-triggered epoll set with two connections full of bytes and a readable pipe, one event a wait: none starves"
client lm late-member "$PORT" poll
ok $? "a connection added to a set a thread sleeps on, then polled by another wait: its echo still wakes the sleeper"
client lm2 late-member "$PORT" mod
ok $? "... and one added without EPOLLIN, then changed to EPOLLIN: its echo wakes the sleeper"
# A client that polls with no timeout between sends (an open loop) never
# sleeps: its waits arm nothing, so the GPU side rings gsockd for none of
# its answers (they armed every connection, and a busy client's answers
# each cost a doorbell, a worker's wake-up byte and a read of it).
rung() { "$STAT" -j | python3 -c 'import json, sys; g = json.load(sys.stdin)["gsockd"]; print(g["direct_wakeups"], g["watch_finds"])'; }
w0=$(rung)
client p0 poll0 "$PORT" 8 200
r=$?
w1=$(rung)
set -- $w0 $w1
echo "# wake-up bytes and doorbells found: $1 $2 before, $3 $4 after"
[ $r = 0 ] && [ $# = 4 ] && [ $(($3 - $1)) -le 8 ]
ok $? "epoll_wait with no timeout: every answer right, $(($3 - $1)) wake-up bytes from gsockd for 1,600 answers (at most one a connection: its epoll_ctl ADD arms it)"
# A one-shot member is never looked at, only armed: a wait with no timeout
# still arms it, and so does a wait that another member's bytes end.
client os0 oneshot "$PORT" 200 poll0
ok $? "an EPOLLONESHOT member re-armed between waits with no timeout: every answer comes"
client osb oneshot "$PORT" 200 busy
ok $? "an EPOLLONESHOT member beside one that is always ready: every answer comes"

# Answers later than the nap window (a server that computes before it
# answers: the echo server's --delay): a wait that sleeps owing one looks
# at the ring itself now and then, where before it slept until gsockd's
# doorbell watch, whose period grows to 4 ms when gsockd is quiet, found
# the answer's doorbell. Here the watch looks every 50 ms at the soonest,
# so the looks are what find the answers: a blocking receive (python),
# poll (python: and a readiness it reports always has bytes behind it,
# though gsockd's doorbell for bytes a look took comes later), the
# blocking receive again beside a connection of the same process that
# only sends (each connection learns whether looks pay), and with
# SO_RCVTIMEO (its looks within the timeout), then epoll
# waits (a paced loadgen). Each says at exit how many sleeps looked and
# how many of those found the answer.
kill "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
wait "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
printf 'watch_min_us = 50000\nidle_sleep_us = 100000\n' >"$TMP/slowwatch.conf"
GSOCKD_CONF=$TMP/slowwatch.conf
start_gsockd || exit 1
GSOCKD_CONF=$TMP/gsock.conf
start_server -l 127.0.0.1:0 -b 2 -D 2000 || exit 1
found() { # FILE: the looks that found a slow answer, said at exit
	sed -n 's/.* sleeps looked for one, \([0-9]*\) found it;.*/\1/p' "$1"
}
slow_py() { # MODE (recv|poll|mixed|rcvtimeo) OUT: the client's status in r, its looks' finds in n
	slow_py_run "$@"
	r=$?
	grep 'echoes\|slow answers\|rror\|wrong\|end of' "$2" | sed 's/^/# /'
	n=$(found "$2")
}
slow_py_run() {
	env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug timeout 60 python3 - "$PORT" "$1" \
		>"$2" 2>&1 <<'PY'
import select, socket, struct, sys, threading, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
p = select.poll()
p.register(s.fileno(), select.POLLIN)
# mixed: beside it a connection that only sends, a thread sending 16 B
# every 0.5 ms (past the nap window each time; its echoes never read)
done = threading.Event()
def only_sends(a):
    while not done.is_set():
        a.sendall(b"x" * 16)
        time.sleep(0.0005)
if sys.argv[2] == "mixed":
    threading.Thread(target=only_sends, daemon=True, args=(
        socket.create_connection(("127.0.0.1", int(sys.argv[1]))),)).start()
    time.sleep(0.05)
empty = 0
for i in range(60):
    m = bytes((i + k) % 256 for k in range(64))
    # rcvtimeo: 50 ms after the first echo (which waits for the server's
    # accept, through this gsockd's slow watch); each receive looks within it
    if i == 1 and sys.argv[2] == "rcvtimeo":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 50000))
    s.sendall(m)
    got = b""
    while len(got) < 64:
        if sys.argv[2] == "poll":
            p.poll(-1)
            try:
                b = s.recv(64 - len(got), socket.MSG_DONTWAIT)
            except BlockingIOError:
                empty += 1
                continue
        else:
            b = s.recv(64 - len(got))
        if not b:
            sys.exit("end of stream at echo %d" % i)
        got += b
    if got != m:
        sys.exit("echo %d: wrong bytes" % i)
done.set()
print("60 echoes, 2 ms late each, right; %d readiness with nothing to read" % empty)
PY
}
slow_py recv "$TMP/slow-recv"
[ $r = 0 ] && grep -q 'direct path,' "$TMP/slow-recv" && [ "${n:-0}" -ge 30 ]
ok $? "a blocking receive owed a slow answer looks at the ring itself as it sleeps (${n:-no} of 60 answers found by its looks; every byte right)"
slow_py poll "$TMP/slow-poll"
[ $r = 0 ] && grep -q '; 0 readiness with nothing' "$TMP/slow-poll" && [ "${n:-0}" -ge 30 ]
ok $? "... and so does poll (${n:-no} of 60 found by its looks), and no readiness it reports lacks bytes"
slow_py mixed "$TMP/slow-mixed"
[ $r = 0 ] && [ "$(grep -c 'direct path,' "$TMP/slow-mixed")" -eq 2 ] && [ "${n:-0}" -ge 30 ]
ok $? "a connection of the process that only sends does not turn the other's looks off (${n:-no} of 60 found)"
slow_py rcvtimeo "$TMP/slow-rcvtimeo"
[ $r = 0 ] && grep -q 'direct path,' "$TMP/slow-rcvtimeo" && [ "${n:-0}" -ge 30 ]
ok $? "... and a receive with SO_RCVTIMEO (50 ms) looks within it (${n:-no} of 60 found)"
env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug timeout 60 "$LOADGEN" -c 2 -s 64 -r 100 \
	-d 1 -w 0.2 127.0.0.1 "$PORT" >"$TMP/slow-lg" 2>&1
r=$?
grep 'reqs=\|slow answers' "$TMP/slow-lg" | sed 's/^/# /'
n=$(found "$TMP/slow-lg")
[ $r = 0 ] && grep -q ' errors=0' "$TMP/slow-lg" && grep -q ' missing=0' "$TMP/slow-lg" &&
	! grep -q ' reqs=0 ' "$TMP/slow-lg" && [ "${n:-0}" -gt 0 ]
ok $? "... and epoll waits (${n:-no} answers found by looks; a paced loadgen, every request answered, every byte right)"

# A wait that owes an answer naps and looks at the rings itself, so the
# answers need no wake-up byte from gsockd (which logs how many it wrote
# as it stops). The window is far past the host backend's answer times;
# GSOCK_DIRECT_NAP_US=0 leaves every answer to gsockd.
wakes() { # NAP_US [THREADS]: $TMP/wakesNAP_US[-THREADS], the wake-up bytes of a paced loadgen on a gsockd of its own
	local k=$1${2:+-$2}
	# (in this shell, not a command substitution's: the waits must be for its own children)
	kill "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
	wait "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
	start_gsockd || exit 1
	start_server -l 127.0.0.1:0 -b 4 -m 4 || exit 1
	# GSOCK_TRANSPORT=os: no RDMA device's rsocket waits (they cannot nap)
	# the client's CPU seconds and wall seconds into $TMP/cpuNAP_US
	python3 -c 'import resource, subprocess, sys, time
t = time.monotonic(); r = subprocess.call(sys.argv[2:]); w = time.monotonic() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.3f %.3f\n" % (u.ru_utime + u.ru_stime, w)); sys.exit(r)' \
		"$TMP/cpu$k" env LD_PRELOAD="$PRELOAD" GSOCK_LOG=info \
		GSOCK_DIRECT_NAP_US="$1" GSOCK_TRANSPORT=os timeout 60 "$LOADGEN" \
		-c 12 -t "${2:-1}" -s 64 -r 500 -d 1 -w 0.2 127.0.0.1 "$PORT" \
		>"$TMP/nap$k" 2>"$TMP/nap$k.err"
	kill "$SERVER_PID" 2>/dev/null
	wait "$SERVER_PID" 2>/dev/null
	logged=$(grep -c 'wake-ups written' "$TMP/gsockd.log")
	"$STAT" -j >"$TMP/stat$k.json" 2>&1
	kill "$GSOCKD_PID"
	wait "$GSOCKD_PID" 2>/dev/null
	: >"$TMP/wakes$k"
	# this gsockd's own line, or none
	[ "$(grep -c 'wake-ups written' "$TMP/gsockd.log")" -gt "$logged" ] &&
		sed -n 's/.*direct: \([0-9]*\) wake-ups.*/\1/p' "$TMP/gsockd.log" |
		tail -1 >"$TMP/wakes$k"
}
# epoll waits nap through epoll_pwait2 (glibc 2.35, Linux 5.11); where
# it is missing they spin as before, and there is nothing to measure.
if python3 - <<'PY'
import ctypes, select, sys
f = getattr(ctypes.CDLL(None, use_errno=True), "epoll_pwait2", None)
class Ts(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
ep = select.epoll()
ok = f is not None and f(ep.fileno(), ctypes.create_string_buffer(64), 1,
                         ctypes.byref(Ts(0, 1000)), None) >= 0
sys.exit(0 if ok else 1)
PY
then
	wakes 20000
	wakes 0
	wakes 20000 3
	w_nap=$(cat "$TMP/wakes20000")
	w_off=$(cat "$TMP/wakes0")
	sed 's/^/# naps: /' "$TMP/nap20000"
	sed 's/^/# no naps: /' "$TMP/nap0"
	reqs=$(sed -n 's/.* reqs=\([0-9]*\) .*/\1/p' "$TMP/nap20000")
	echo "# wake-up bytes: $w_nap with naps, $w_off without; $reqs requests measured"
	grep -q ' errors=0' "$TMP/nap20000" && grep -q ' missing=0' "$TMP/nap20000" &&
		grep -q ' errors=0' "$TMP/nap0" && grep -q ' missing=0' "$TMP/nap0"
	ok $? "paced loadgen with and without naps: every request answered, every byte right"
	[ -n "$w_nap" ] && [ -n "$w_off" ] && [ -n "$reqs" ] && [ "$reqs" -gt 0 ] &&
		[ $((w_off * 2)) -ge "$reqs" ] && [ $((w_nap * 4)) -lt "$w_off" ]
	ok $? "naps took the answers themselves: $w_nap wake-up bytes from gsockd against $w_off without them ($reqs requests)"
	# naps, not a busy loop: the client at a quarter of a core at most
	read -r cpu wall <"$TMP/cpu20000"
	python3 -c "import sys; sys.exit(0 if $cpu < 0.25 * $wall else 1)"
	ok $? "... and the napping client used $cpu s of CPU in $wall s"
	# Three threads, an epoll set each: one asleep on its own set (its
	# connections owe nothing) arms only its own, and the others' naps
	# still take their answers themselves.
	w_thr=$(cat "$TMP/wakes20000-3")
	sed 's/^/# naps, 3 threads: /' "$TMP/nap20000-3"
	reqs=$(sed -n 's/.* reqs=\([0-9]*\) .*/\1/p' "$TMP/nap20000-3")
	[ -n "$w_thr" ] && [ -n "$reqs" ] && [ "$reqs" -gt 0 ] &&
		grep -q ' errors=0' "$TMP/nap20000-3" &&
		grep -q ' missing=0' "$TMP/nap20000-3" &&
		[ $((w_thr * 4)) -lt "$w_off" ]
	ok $? "3 threads, an epoll set each, naps: $w_thr wake-up bytes from gsockd against $w_off without naps ($reqs requests, every one answered)"
	python3 - "$TMP/stat0.json" "$w_off" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["gsockd"]
sys.exit(0 if g["direct_wakeups"] == int(sys.argv[2]) and g["watch_finds"] > 0 else 1)
PY
	ok $? "gsock-stat counted the same $w_off wake-ups as gsockd's closing line, and doorbells its watch found"
	# One-shot members are armed, not looked at: a wait owing an answer
	# on one takes no nap for it (no look would find it; before, each
	# answer waited out the nap and a spin: 239 naps in 300 round trips
	# on the development VM). The same client level-triggered, said for
	# comparison: it naps where an answer is not there at its first look
	# (a few to tens of times here, as python's own pace allows).
	os_naps() { # oneshot|lt: the naps the oneshot client took, said at its exit
		env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug GSOCK_TRANSPORT=os timeout 60 \
			python3 "$DC" oneshot "$PORT" 300 ${1#oneshot} >"$TMP/naps-$1" 2>&1 &&
			sed -n 's/.*; \([0-9]*\) naps taken;.*/\1/p' "$TMP/naps-$1"
	}
	start_gsockd || exit 1 # (wakes stopped the last ones)
	start_server -l 127.0.0.1:0 -b 1 || exit 1
	n_os=$(os_naps oneshot)
	n_lt=$(os_naps lt)
	grep -h 'answers came\|oneshot\|rror' "$TMP/naps-oneshot" "$TMP/naps-lt" | sed 's/^/# /'
	[ "$n_os" = 0 ]
	ok $? "a wait takes no nap for an EPOLLONESHOT member's answers (${n_os:-none said} naps in 300 round trips; level-triggered: ${n_lt:-none said})"
	# A wait that naps owing another member's answer arms the set's
	# one-shot members first: the nap's kernel part may end the wait
	# (here an eventfd always does), and no later wait of it arms them
	# (their answers waited out the nap window, here 20 ms, wait after wait).
	start_server -l 127.0.0.1:0 -b 1 -M sink || exit 1
	sink=$PORT
	start_server -l 127.0.0.1:0 -b 1 || exit 1
	pre env GSOCK_DIRECT_NAP_US=20000 timeout 60 python3 "$DC" oneshot-nap "$PORT" "$sink" 2 \
		>"$TMP/onap" 2>"$TMP/onap.err"
	r=$?
	sed 's/^/# /' "$TMP/onap"
	[ $r = 0 ]
	ok $? "an EPOLLONESHOT member of a set whose waits nap and end at once: its answers come"
else
	for d in "paced loadgen with and without naps" "naps took the answers themselves" "the napping client's CPU" "3 threads' naps" "gsock-stat's wake-ups" "no naps for one-shot members" "one-shot members beside naps"; do
		tap_n=$((tap_n + 1))
		echo "ok $tap_n - $d # SKIP no epoll_pwait2 here (C library or kernel): epoll waits do not nap"
	done
fi
finish
