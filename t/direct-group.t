#!/bin/sh
# The direct path to a port that several GPU listeners share with
# SO_REUSEPORT (a server on several GPUs, or several servers): a preloaded
# CPU client's connections, and a GPU client's, take it whichever listener
# the kernel picks, intact, while every listener of the port is a gsock
# application's. A CPU program that joins the port's group turns it off
# (the kernel could hand it a connection whose bytes it would never see):
# those connections take the kernel's path or the bridge, intact, and the
# direct path again once it left. A listener of the group that goes
# leaves the others serving direct connections, and gives back the
# segments of the connections still in its kernel queue. And (any
# listener) a connection its client resets while it waits in the kernel's
# queue gives its segment back at once.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
[ -f "$PRELOAD" ] || skip_all "libgsock-preload.so is not built"
time_limit 180
plan 20

# conc NAME COUNT: COUNT concurrent preloaded connections of random sizes
# to $PORT; says whether all came back intact; $TMP/NAME.err has the
# preload's lines.
conc() {
	env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug timeout 60 \
		python3 "$PY" concurrent "$PORT" "$2" 7 >"$TMP/$1" 2>"$TMP/$1.err"
	sed 's/^/# /' "$TMP/$1"
	[ "$(cut -d' ' -f1-4 "$TMP/$1")" = "ok $2 of $2" ]
}
directs() { grep -c 'direct path, segment' "$TMP/$1.err"; }
STAT=$GSOCK_BUILD/bridge/gsock-stat
# gpu NAME: a GPU client of 2 connections, 1000 round trips of 100 kB
# each, looked at by gsock-stat while it runs; prints its connected
# sockets' paths (direct, bridge) as gsock-stat names them, sorted.
gpu() {
	"$CLIENT" -n 100000 -i 1000000 -b 2 127.0.0.1:"$PORT" >"$TMP/$1" 2>&1 &
	cli=$!
	PIDS="$PIDS $cli"
	sleep 1
	"$STAT" -j >"$TMP/$1.json"
	kill "$cli"
	wait "$cli" 2>/dev/null
	python3 - "$TMP/$1.json" "$cli" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
a = [a for a in d["applications"] if a["pid"] == int(sys.argv[2])]
print(" ".join(sorted(s["path"] for x in a for s in x["socket_list"] if s["state"] == "connected")))
PY
}

# Two contexts: on two GPUs where there are, else both on GPU 0.
G1=1
if [ "$BACKEND" = cuda ]; then
	[ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ] || G1=0
fi
# both_listen: until the second context of the server says it listens too
both_listen() {
	for _ in $(seq 200); do
		[ "$(grep -c 'listening on' "$TMP/server.out")" -ge 2 ] && return 0
		sleep 0.05
	done
	return 1
}
start_gsockd || exit 1
start_server -l 127.0.0.1:0 -b 4 -g "0,$G1" || exit 1
PORT=$(echo "$PORT" | head -1) # one line per GPU's context
both_listen || exit 1

conc g1 24
ok $? "24 connections to a port two GPU contexts share: intact"
is "$(directs g1)" 24 "... each on the direct path"
is "$(gpu u1)" "direct direct" "a GPU client's 2 connections there: direct too"
timeout 60 "$CLIENT" -n 64 -i 2000 -b 2 127.0.0.1:"$PORT" >"$TMP/u1a" 2>&1 &&
	timeout 60 "$CLIENT" -n 1000000 -i 8 -b 2 127.0.0.1:"$PORT" >"$TMP/u1b" 2>&1
ok $? "... 2 x 2000 round trips of 64 B and 2 x 8 of 1,000,000 B: intact"
# The server counts a connection once it has seen its end: until then
for _ in $(seq 100); do
	"$STAT" -j | python3 -c 'import json, sys
d = json.load(sys.stdin)
sys.exit(any(s["state"] != "listen" for a in d["applications"] for s in a["socket_list"]))' && break
	sleep 0.05
done
kill "$SERVER_PID"
wait "$SERVER_PID"
s0=$(sed -n 's/.* served \([0-9]*\) connections$/\1/p' "$TMP/server.out" | head -1)
s1=$(sed -n 's/.* served \([0-9]*\) connections$/\1/p' "$TMP/server.out" | tail -1)
[ "${s0:-0}" -gt 0 ] && [ "${s1:-0}" -gt 0 ] && [ $((s0 + s1)) = 30 ]
ok $? "... the kernel handed the 30 to both contexts ($s0 and $s1)"

start_server -l "127.0.0.1:$PORT" -b 4 -g "0,$G1" || exit 1
both_listen || exit 1

start_helper reuseport-echo-server "127.0.0.1:$PORT" || exit 1
conc g2 24
ok $? "a CPU program joined the port's group: 24 connections intact"
is "$(directs g2)" 0 "... none on the direct path"
grep -q 'not a gsock application' "$TMP/g2.err"
ok $? "... gsockd said why: $(sed -n 's/.*no direct path: //p' "$TMP/g2.err" | head -1)"
n=$(grep -c accepted "$TMP/helper.out")
[ "$n" -gt 0 ] && [ "$n" -lt 24 ]
ok $? "... the kernel handed the CPU program some of them ($n), the GPU listeners the rest"
is "$(gpu u2)" "bridge bridge" "... and a GPU client's connections take the bridge"

kill "$HELPER_PID"
wait "$HELPER_PID" 2>/dev/null
sleep 1.1 # the preload remembers a refused address for a second
conc g3 24
ok $? "the CPU program gone: 24 connections intact"
is "$(directs g3)" 24 "... each on the direct path again"

# An IPv6 group, and a CPU program listening on ::ffff:0.0.0.0 (every IPv4
# address, from IPv6) joins it.
start_app v6 "$SERVER" -l "[::]:0" -b 2 -P || exit 1
V6PORT=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/v6.out" | head -1)
P0=$PORT PORT=$V6PORT
conc m0 8 && [ "$(directs m0)" = 8 ]
ok $? "a group on [::]: 8 IPv4 connections intact, each direct"
kill "$HELPER_PID" 2>/dev/null
start_helper reuseport-echo-server "[::ffff:0.0.0.0]:$V6PORT" || exit 1
conc m1 8
r=$?
PORT=$P0
[ $r = 0 ] && [ "$(directs m1)" = 0 ]
ok $? "... a CPU program on [::ffff:0.0.0.0] joined it: 8 connections intact, none direct"
kill "$HELPER_PID" "$v6_PID"
wait "$HELPER_PID" "$v6_PID" 2>/dev/null

# Two servers on one port (-P); one goes, the other serves on.
start_app a "$SERVER" -l 127.0.0.1:0 -b 4 -P || exit 1
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/a.out" | head -1)
start_app b "$SERVER" -l "127.0.0.1:$PORT" -b 4 -P || exit 1
conc p1 16
ok $? "two servers sharing a port (-P): 16 connections intact"
kill "$a_PID"
wait "$a_PID" 2>/dev/null
conc p2 16
ok $? "one of them gone: 16 connections intact"
is "$(directs p2)" 16 "... each on the direct path, to the one left"

# A listener of a group that goes with connections still in its kernel
# queue: those are reset, and their segments come back (no other listener
# will take them): at its close (gsockd takes and resets its queue), or at
# the latest once their client's end is gone too (the check of test 19). accept_queue = 1: a server of one block holds one
# connection, gsockd's queue one, the kernel's two; four connections
# fill A alone, then B joins A's port and A is killed.
kill "$a_PID" "$b_PID" 2>/dev/null
wait "$a_PID" "$b_PID" 2>/dev/null
kill "$GSOCKD_PID"
wait "$GSOCKD_PID" 2>/dev/null
printf 'accept_queue = 1\n' >"$TMP/q1.conf"
GSOCKD_CONF=$TMP/q1.conf start_gsockd || exit 1
start_app qa "$SERVER" -l 127.0.0.1:0 -b 1 -P || exit 1
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/qa.out" | head -1)
held() {
	"$STAT" -j | python3 -c 'import json, sys; print(json.load(sys.stdin)["gsockd"]["direct_held"])'
}
# hold NAME: a preloaded client in the background ($hold) that makes four
# connections to $PORT, says "held 4" in $TMP/NAME.out, and holds them
# until $TMP/NAME.end exists (30 s at most); once $TMP/NAME.rst exists it
# resets the fourth and says "reset", once $TMP/NAME.fin exists it sends
# 100 bytes on the fourth, closes it (FIN) and says "fin". Returns once
# they are made.
hold() {
	rm -f "$TMP/$1.end" "$TMP/$1.rst" "$TMP/$1.fin"
	env LD_PRELOAD="$PRELOAD" GSOCK_LOG=info python3 - "$PORT" "$TMP/$1" \
		>"$TMP/$1.out" 2>"$TMP/$1.err" <<'PY' &
import os, socket, struct, sys, time
cs = []
for _ in range(4):
    s = socket.socket()
    s.settimeout(2)
    s.connect(("127.0.0.1", int(sys.argv[1])))
    cs.append(s)
print("held", len(cs), flush=True)
f = sys.argv[2]
for _ in range(300):
    if os.path.exists(f + ".end"):
        break
    if os.path.exists(f + ".rst") and cs[3]:
        cs[3].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        cs[3].close()
        cs[3] = None
        print("reset", flush=True)
    if os.path.exists(f + ".fin") and cs[3]:
        cs[3].sendall(b"x" * 100)
        cs[3].close()
        cs[3] = None
        print("fin", flush=True)
    time.sleep(0.1)
PY
	hold=$!
	PIDS="$PIDS $hold"
	for _ in $(seq 60); do grep -q held "$TMP/$1.out" && break; sleep 0.1; done
}
# kqueue: connections in the kernel's queues of the listeners at $PORT
kqueue() {
	python3 - "$PORT" <<'PY'
import sys
p = ":%04X" % int(sys.argv[1])
print(sum(int(f[4].split(":")[1], 16) for f in (l.split() for l in open("/proc/net/tcp").readlines()[1:])
          if f[3] == "0A" and f[1].endswith(p)))
PY
}
hold hold
start_app qb "$SERVER" -l "127.0.0.1:$PORT" -b 1 -P || exit 1
q=$(kqueue)
h0=$(held)
kill "$qa_PID"
wait "$qa_PID" 2>/dev/null
: >"$TMP/hold.end"
wait "$hold"
h=$h0
for _ in $(seq 60); do h=$(held); [ "$h" = 0 ] && break; sleep 0.1; done
echo "# $(cat "$TMP/hold.out") direct connections, $h0 segments held, $q in the kernel's queue; A killed, then the client's end"
[ "$q" -gt 0 ] && [ "$h0" -ge 4 ] && [ "$h" = 0 ]
ok $? "a group's listener killed with connections in its kernel queue ($q): every segment back once the client ended (held: $h)"

# One server of one block (gsockd still at accept_queue = 1): four
# connections fill it, and the client resets the fourth, which waits in
# the kernel's queue.
kill "$qb_PID"
wait "$qb_PID" 2>/dev/null
start_app qc "$SERVER" -l 127.0.0.1:0 -b 1 || exit 1
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/qc.out" | head -1)
qfull() { # until the kernel's queue holds the third and fourth connection
	for _ in $(seq 60); do [ "$(kqueue)" = 2 ] && return 0; sleep 0.1; done
	return 1
}
hold rst
qfull || exit 1
h0=$(held)
: >"$TMP/rst.rst"
for _ in $(seq 60); do grep -q reset "$TMP/rst.out" && break; sleep 0.1; done
h=$h0
for _ in $(seq 30); do h=$(held); [ "$h" -le 3 ] && break; sleep 0.1; done
[ "$h0" = 4 ] && [ "$h" = 3 ]
ok $? "a direct connection reset by its client in the kernel's queue: its segment back at once ($h0 -> $h held)"
: >"$TMP/rst.end"
wait "$hold"
# The same, the fourth closed with a FIN after 100 bytes: the listener
# will still take it, so its segment (the bytes) stays.
for _ in $(seq 60); do [ "$(held)" = 0 ] && break; sleep 0.1; done
hold fin
qfull || exit 1
: >"$TMP/fin.fin"
for _ in $(seq 60); do grep -q fin "$TMP/fin.out" && break; sleep 0.1; done
sleep 1
h=$(held)
: >"$TMP/fin.end"
wait "$hold"
is "$h" 4 "... one closed with a FIN after its bytes: its segment kept for the accept"
finish
