#!/bin/sh
# The server layer with every warp of a block but the first 20 us late
# into gsrv_next and gsrv_done (t/srv-probe-lag-cuda, GSRV_DEBUG_LAG_NS):
# each warp must still meet every barrier of its block. A warp that read
# the served connection's slot after thread 0 had cleared it left
# gsrv_done a barrier early and stayed behind its block (wrong answers, a
# hang, or "an illegal instruction"); so did one that read a block's
# state in gsrv_next that thread 0 rewrote waiting on a block's one
# connection, and one of a pipe block's warps that decided to hand
# replies out after thread 0 had set a too-large reply's rest to be
# dropped. Lines on connections that stay, connections that close and
# come back, blocks of one connection, values larger than a pipe's
# buffer, each server's report clean.
# The late warps are a GPU's: the cuda backend only.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
[ "$BACKEND" = cuda ] || skip_all "late warps are a GPU's: the cuda backend only"
need_backend
PROBE=$GSOCK_BUILD/t/srv-probe-lag-cuda
[ -x "$PROBE" ] || skip_all "t/srv-probe-lag-cuda is not built"
time_limit 120
plan 11

# probe ARGS...: start the probe, $P its port, $PPID_ its pid
probe() {
	"$PROBE" -l 127.0.0.1:0 -t 128 -T 2000 "$@" >"$TMP/probe.out" 2>"$TMP/probe.err" &
	PPID_=$!
	PIDS="$PIDS $PPID_"
	for _ in $(seq 400); do grep -q 'listening on' "$TMP/probe.out" && break; sleep 0.05; done
	P=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/probe.out")
	[ -n "$P" ]
}
# talk CONNS LINES PACED: CONNS connections at once, LINES lines each,
# every answer checked: "ok" or what went wrong. Each line is 60-70
# bytes, so the threads of the late warps find its newline. PACED 0:
# one line at a time; 1: a writer sends a line every 100 us or so
# without waiting, so bytes are there when a block turns to wait.
talk() {
	timeout 60 python3 -c "
import socket, threading, time
bad = []
def line(i, k): return b'c%d-%d-' % (i, k) + b'x' * 56
def one(i):
    try:
        s = socket.create_connection(('127.0.0.1', $P), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b'L')
        f = s.makefile('rb')
        def write():
            for k in range($2):
                s.sendall(line(i, k) + b'\n'); time.sleep(0.0001)
        w = threading.Thread(target=write) if $3 else None
        if w: w.start()
        for k in range($2):
            if not w: s.sendall(line(i, k) + b'\n')
            got = f.readline()
            if got != b'%d:%s\n' % (len(line(i, k)) + 1, line(i, k)):
                bad.append((i, k, got[:40])); break
        if w: w.join()
        s.close()
    except Exception as e:
        bad.append((i, repr(e)))
t = [threading.Thread(target=one, args=(i,)) for i in range($1)]
[x.start() for x in t]; [x.join() for x in t]
print('ok' if not bad else repr(bad[:3]))" 2>&1
}
# alive PID: running, not a zombie our wait has yet to reap
alive() {
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
	[ -n "$st" ] && [ "$st" != Z ]
}
# report CONNS: the probe's last line after SIGTERM, no kernel fault
# (a probe that does not end in 20 s is killed and fails)
report() {
	kill -TERM "$PPID_"
	for _ in $(seq 200); do alive "$PPID_" || break; sleep 0.1; done
	alive "$PPID_" && kill -9 "$PPID_" && echo "srv-probe-lag did not end in 20 s after SIGTERM" >>"$TMP/probe.err"
	wait "$PPID_" 2>/dev/null
	! grep -q 'did not end' "$TMP/probe.err" &&
	grep -q "^srv-probe: served [0-9]* requests on $1 connections, [0-9]* bytes, 0 errors$" "$TMP/probe.out" &&
		! grep -qi 'illegal\|kernel failed' "$TMP/probe.err"
	r=$?
	[ $r = 0 ] || sed 's/^/#   /' "$TMP/probe.out" "$TMP/probe.err"
	ok $r "its report: $1 connections, no error, no kernel fault: $(grep '^srv-probe: served' "$TMP/probe.out" | tail -1)"
}

start_gsockd || exit 1
probe -b 2 -m 4
ok $? "srv-probe-lag listens (2 blocks x 4 connections, 4 warps a block): $(head -1 "$TMP/probe.out")"
is "$(talk 8 150 0)" "ok" "8 connections x 150 lines of 60-70 bytes, each answered whole and in order"

# connections that end (gsrv_done closes them) and new ones in their place
got=$(timeout 60 python3 -c "
import socket
bad = 0
for k in range(60):
    s = socket.create_connection(('127.0.0.1', $P), timeout=10)
    s.sendall(b'Lround %d\n' % k)
    s.shutdown(socket.SHUT_WR)
    out = b''
    while True:
        d = s.recv(4096)
        if not d: break
        out += d
    bad += out != b'%d:round %d\n' % (len('round %d' % k) + 1, k)
    s.close()
print('ok' if bad == 0 else '%d wrong' % bad)" 2>&1)
is "$got" "ok" "60 connections that end after a line, one after another: answered, then closed"
alive "$PPID_"
ok $? "the server still runs"
report 68

# One connection a block: a block that holds it waits on its ring
# (gs_srv_wait_one), whose thread 0 rewrites the block's state.
probe -b 2 -m 1
is "$(talk 2 300 1)" "ok" "2 blocks of one connection each, 300 paced lines a connection: each answered whole and in order"
sleep 0.2
report 2

# A pipe block (gs_srv_pipe_recv) whose backend, t/fake_mc.py, answers
# values larger than the pipe's 4096-byte buffer: thread 0 sets such a
# reply's rest to be dropped in its scan, and every warp of the block
# must make the same choice of handing replies out or not.
MP=$(free_port)
python3 "$GSOCK_SRC/t/fake_mc.py" "$MP" "$TMP/mc.log" >"$TMP/mc.out" 2>&1 &
PIDS="$PIDS $!"
wait_listen "$MP"
probe -b 2 -m 4 -F 1 -M "127.0.0.1:$MP" -R 4096 -W 2000
ok $? "srv-probe-lag listens with one pipe to the fake memcached: $(head -1 "$TMP/probe.out")"
keys=$(for k in $(seq 20); do printf 'huge v%d ' "$k"; done)
want=$(python3 -c "
for k in range(1, 21):
    print('E90')
    print('%d:%s' % (k, ''.join(chr(97 + i % 26) for i in range(k))))")
# shellcheck disable=SC2086 # the keys are words
is "$(pipe_ask "$P" $keys)" "$want" \
	"20 values of 10000 bytes, each before a small one: EMSGSIZE, then the small value, in order"
report 1
grep -q ': the pipes to .* answered 40 asks (20 errors)' "$TMP/probe.out"
ok $? "the pipe answered 40 asks, the 20 large ones EMSGSIZE: $(grep 'the pipes to' "$TMP/probe.out")"
