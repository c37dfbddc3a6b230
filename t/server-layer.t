#!/bin/sh
# The server layer (gsock-server(3)) through t/srv-probe.c, one server on
# it whose connections pick lines, frames or header-and-body with their
# first byte: whole messages out of pieces and out of pipelined sends, a
# last line without its newline, a peer that stalls mid-message (closed
# at its deadline), messages too large and headers that are wrong
# (closed, counted), many clients on blocks that hold several each, how
# clients spread over the blocks, and the report after SIGTERM.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
PROBE=$GSOCK_BUILD/t/srv-probe-$BACKEND
[ -x "$PROBE" ] || skip_all "t/srv-probe-$BACKEND is not built"
time_limit 120
plan 16

start_gsockd || exit 1
"$PROBE" -l 127.0.0.1:0 -b 2 -m 4 -t 64 -T 300 >"$TMP/probe.out" 2>"$TMP/probe.err" &
PPID_=$!
PIDS="$PIDS $PPID_"
for _ in $(seq 400); do grep -q 'listening on' "$TMP/probe.out" && break; sleep 0.05; done
P=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/probe.out")
[ -n "$P" ]
ok $? "srv-probe listens (2 blocks x 4 connections): $(head -1 "$TMP/probe.out")"

# client SCRIPT: python with c() (a connection), rd() (to the end), sl() (sleep)
client() {
	timeout 30 python3 -c "
import socket, struct, sys, time
def c():
    s = socket.create_connection(('127.0.0.1', $P))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
def rd(s, n=1 << 20):
    out = b''
    while len(out) < n:
        try:
            d = s.recv(65536)
        except ConnectionResetError: # closed with bytes unread: a reset
            d = b''
        if not d:
            break
        out += d
    return out
def sl(ms): time.sleep(ms / 1000)
def fr(p): return struct.pack('>I', len(p)) + p
$1" 2>&1
}

got=$(client "
s = c()
s.sendall(b'Lhello\nworld\r\npar'); sl(50); s.sendall(b'tial\nlast')
s.shutdown(socket.SHUT_WR)
out = rd(s)
print('ok' if out == b'6:hello\n7:world\r\n8:partial\n4:last\n' else repr(out))")
is "$got" "ok" "lines: two in one send, one in two pieces, a last one without its newline"

got=$(client "
s = c()
s.sendall(b'L' + b'x' * 300 + b'\n')
print('closed' if rd(s) == b'' else 'answered')")
is "$got" "closed" "lines: a line longer than the 256-byte buffer closes the connection"

got=$(client "
s = c()
s.sendall(b'F' + fr(b'abc') + fr(b'') + fr(b'xyz')[:5]); sl(80); s.sendall(fr(b'xyz')[5:])
want = fr(b'bcd') + fr(b'') + fr(b'yz{')
out = rd(s, len(want))
print('ok' if out == want else repr(out))")
is "$got" "ok" "frames: three pipelined, the last in two pieces, each answered whole"

t0=$(now_ms)
got=$(client "
s = c()
s.sendall(b'F' + fr(b'0123456789')[:6])
b = c()
b.sendall(b'Lstill here\n')
one, two = rd(b, 14), rd(s)
print('ok' if (one, two) == (b'11:still here\n', b'') else repr((one, two)))")
t1=$(now_ms)
is "$got" "ok" "frames: half a frame, then silence: closed; another connection is served too"
ok $(( t1 - t0 < 300 || t1 - t0 > 5000 )) "the stalled one was closed at its deadline (300 ms): $((t1 - t0)) ms in all"

got=$(client "
s = c()
s.sendall(b'F' + struct.pack('>I', 1000) + b'x' * 100)
print('closed' if rd(s) == b'' else 'answered')")
is "$got" "closed" "frames: a frame over the 64-byte cap closes the connection"

got=$(client "
s = c()
s.sendall(b'MH' + bytes([7]) + struct.pack('<H', 3) + bytes([1, 2]))
sl(50); s.sendall(bytes([3]) + b'H' + bytes([1]) + struct.pack('<H', 0))
out = rd(s, 10)
t = c()
t.sendall(b'MXY\0\0')
end = rd(t)
print('ok' if (out, end) == (b'H\x08\x01\x00\x06H\x02\x01\x00\x00', b'') else repr((out, end)))")
is "$got" "ok" "header and body: split, pipelined, an empty body; a wrong header closes"

got=$(client "
import threading
res = []
def one(i):
    s = c()
    s.sendall(b'L')
    for k in range(20):
        line = b'client %d line %d\n' % (i, k)
        s.sendall(line)
        want = b'%d:' % len(line) + line
        res.append(rd(s, len(want)) == want)
    s.close()
ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(res), 'of', len(res))")
is "$got" "160 of 160" "8 clients at once on 2 blocks x 4: 20 lines each, each answered"

# -I: connections quiet for 300 ms are closed, so idle clients cannot
# hold every place (1 block x 2 here): a third client is served after.
"$PROBE" -l 127.0.0.1:0 -b 1 -m 2 -t 64 -I 300 >"$TMP/idle.out" 2>"$TMP/idle.err" &
IPID=$!
PIDS="$PIDS $IPID"
for _ in $(seq 400); do grep -q 'listening on' "$TMP/idle.out" && break; sleep 0.05; done
IP=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/idle.out")
got=$(P=$IP client "
t0 = time.time()
a, b = c(), c()
a.sendall(b'Lhalf a line')
sl(100)
x = c()
x.sendall(b'Lserved\n')
got = rd(x, 9)
ea, eb = rd(a), rd(b)
print('ok' if (got, ea, eb) == (b'7:served\n', b'', b'') and time.time() - t0 < 5 else repr((got, ea, eb)))")
is "$got" "ok" "-I 300: two idle clients holding a block's two places are closed; a third is served"
kill -TERM "$IPID"
wait "$IPID"
grep -q "^srv-probe: served [0-9]* requests on 3 connections, [0-9]* bytes, 2 errors$" "$TMP/idle.out" &&
	grep -q "a connection ended with Connection timed out" "$TMP/idle.err"
r=$?
[ $r = 0 ] || sed 's/^/#   /' "$TMP/idle.out" "$TMP/idle.err"
ok $r "the two are counted as errors (ETIMEDOUT): $(tail -1 "$TMP/idle.out")"

# Clients spread over the blocks: a block serves its connections one
# after another, so a block that holds some leaves a new client to the
# blocks that hold fewer. 8 clients one after another, each answered and
# kept open, on 4 blocks x 4: two each (at random, two each is rare).
"$PROBE" -l 127.0.0.1:0 -b 4 -m 4 -t 64 >"$TMP/spread.out" 2>"$TMP/spread.err" &
SPID=$!
PIDS="$PIDS $SPID"
for _ in $(seq 400); do grep -q 'listening on' "$TMP/spread.out" && break; sleep 0.05; done
SP=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/spread.out")
got=$(P=$SP client "
ss, res = [], []
for i in range(8):
    s = c()
    s.sendall(b'Lclient %d\n' % i)
    res.append(rd(s, 11) == b'9:client %d\n' % i)
    ss.append(s)
    sl(30)
print(sum(res), 'of', len(res))")
kill -TERM "$SPID"
wait "$SPID"
grep -q "^srv-probe: blocks by the most connections each held at once: 2: 4$" "$TMP/spread.out"
r=$?
[ $r = 0 ] || sed 's/^/#   /' "$TMP/spread.out" "$TMP/spread.err"
ok $r "8 clients one after another on 4 blocks x 4 ($got answered): two on each block"

# Bad addresses: a port past 65535 is refused (not wrapped); a port
# taken says so, with no report of a server that never served.
"$PROBE" -l 127.0.0.1:70000 -b 1 >"$TMP/bad.out" 2>"$TMP/bad.err"
r=$?
is "$r $(grep -c 'cannot use listen address 127.0.0.1:70000' "$TMP/bad.err")" "64 1" "-l 127.0.0.1:70000: refused, status 64 (EX_USAGE)"
"$PROBE" -l "127.0.0.1:$P" -b 1 >"$TMP/taken.out" 2>"$TMP/taken.err"
r=$?
is "$r $(grep -c 'Address already in use' "$TMP/taken.err") $(grep -c served "$TMP/taken.out")" "69 1 0" \
	"a port already taken: 'Address already in use', status 69, no report"

kill -TERM "$PPID_"
wait "$PPID_"
r=$?
is "$r" 0 "SIGTERM ends it: status 0"
# 16 connections in all; closed with errors: the long line, the stalled
# frame, the large frame, the wrong header
grep -q "^srv-probe: served [0-9]* requests on 16 connections, [0-9]* bytes, 4 errors$" "$TMP/probe.out"
r=$?
[ $r = 0 ] || sed 's/^/#   /' "$TMP/probe.out" "$TMP/probe.err"
ok $r "it reports 16 connections and 4 errors: $(tail -1 "$TMP/probe.out")"
finish
