#!/bin/sh
# The server layer's pipes (gsock_pipe.cuh) through t/srv-probe.c's 'K'
# connections (each line a key, looked up with gsrv_mc_get) against
# t/fake_mc.py, a memcached meta-protocol server whose keys pick its
# answer: hits of any size, misses, values larger than the asker's room
# and than the pipe's buffer, server errors, bytes that are no reply (once
# per connection, then always), silence, and no backend at all. Every
# answer is checked to the byte, and the pipe goes on serving after each.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
PROBE=$GSOCK_BUILD/t/srv-probe-$BACKEND
[ -x "$PROBE" ] || skip_all "t/srv-probe-$BACKEND is not built"
time_limit 120
plan 16

MP=$(free_port)
python3 "$GSOCK_SRC/t/fake_mc.py" "$MP" "$TMP/mc.log" >"$TMP/mc.out" 2>&1 &
PIDS="$PIDS $!"
wait_listen "$MP"
start_gsockd || exit 1

probe() { srv_probe "$@"; }
ask() { pipe_ask "$P" "$@"; }

# v N: what the fake answers for key vN: N bytes of a pattern
v() { python3 -c "import sys; n = int(sys.argv[1]); sys.stdout.write('%d:%s' % (n, ''.join(chr(97 + i % 26) for i in range(n))))" "$1"; }

probe p -b 2 -m 4 -F 1 -M "127.0.0.1:$MP" -R 4096 -W 300
[ -n "$P" ]
ok $? "srv-probe listens with one pipe to the fake memcached: $(head -1 "$TMP/p.out")"

is "$(ask v5 v0 v1000 v77)" "$(v 5; echo; v 0; echo; v 1000; echo; v 77)" \
	"hits of 5, 0, 1000 and 77 bytes, pipelined, each whole and in order"
is "$(ask miss v3)" "$(echo E2; v 3)" "a miss is ENOENT; the next key is served"
is "$(ask 'a b' '' v4)" "$(echo E22; echo E22; v 4)" \
	"a key with a space and an empty key are EINVAL, never sent; the next is served"
is "$(ask v2000 v6)" "$(echo E90; v 6)" "a value larger than the asker's 1024 bytes is EMSGSIZE; the next is served"
is "$(ask huge v7 v8)" "$(echo E90; v 7; echo; v 8)" \
	"a 10000-byte value larger than the pipe's 4096-byte buffer is EMSGSIZE, dropped as it comes; the next are served"
is "$(ask srverr v9)" "$(echo E5; v 9)" "SERVER_ERROR is EIO; the next key is served"

c0=$(grep -c '^connection' "$TMP/mc.log")
is "$(ask junk v10)" "$(echo 2:ok; v 10)" \
	"no reply (the first time): the ask is written again on a fresh connection and answered"
c1=$(grep -c '^connection' "$TMP/mc.log")
ok $(( c1 <= c0 )) "the pipe opened a new connection for that ($c0 before, $c1 after)"
is "$(ask alwaysjunk v11)" "$(echo E71; v 11)" "no reply on the fresh connection either: EPROTO; the next key is served"

t0=$(now_ms)
got=$(ask sleep)
t1=$(now_ms)
is "$got" "E110" "a backend silent past -W 300 (twice: the ask is written again) is ETIMEDOUT"
ok $(( t1 - t0 < 500 || t1 - t0 > 5000 )) "within bounds: $((t1 - t0)) ms (two silences of 300 ms)"

got=$(timeout 60 python3 -c "
import socket, threading
res = []
def one(i):
    s = socket.create_connection(('127.0.0.1', $P))
    s.sendall(b'K')
    for k in range(25):
        n = (i * 37 + k * 11) % 300
        s.sendall(b'v%d\n' % n)
        want = b'%d:' % n + bytes(97 + j % 26 for j in range(n)) + b'\n'
        got = b''
        while len(got) < len(want):
            d = s.recv(65536)
            if not d:
                break
            got += d
        res.append(got == want)
ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(res), 'of', len(res))")
is "$got" "200 of 200" "8 clients on 2 blocks x 4 through one pipe: 25 keys each, every value right"

# More asks in flight than one write holds (GSRV_PIPE_BATCH, 64), and
# the backend silent: all are written again on a fresh connection, in
# writes of 64, and all get ETIMEDOUT; then the pipe serves again.
kill -TERM "$p_PID"; wait "$p_PID" 2>/dev/null
probe m -b 80 -m 1 -F 1 -M "127.0.0.1:$MP" -W 300
got=$(timeout 60 python3 -c "
import socket, threading
res = []
def one(i):
    s = socket.create_connection(('127.0.0.1', $P))
    s.sendall(b'Ksleep\n')
    got = b''
    while not got.endswith(b'\n'):
        d = s.recv(100)
        if not d:
            break
        got += d
    res.append(got)
ts = [threading.Thread(target=one, args=(i,)) for i in range(80)]
[t.start() for t in ts]; [t.join() for t in ts]
print(res.count(b'E110\n'), 'of', len(res))")
is "$got $(ask v12)" "80 of 80 $(v 12)" "80 asks in flight on a silent backend: all ETIMEDOUT, then the pipe serves again"
kill -TERM "$m_PID"; wait "$m_PID" 2>/dev/null

# No backend: connect refused, reported to each ask; no pipes: ENOTCONN.
probe q -b 1 -m 2 -F 1 -M "127.0.0.1:$(free_port)" -W 300
a1=$(ask v1)
kill -TERM "$q_PID"; wait "$q_PID" 2>/dev/null
probe r -b 1 -m 2
a2=$(ask v1)
kill -TERM "$r_PID"; wait "$r_PID" 2>/dev/null
is "$a1 $a2" "E111 E107" "no memcached listening: ECONNREFUSED; a server without pipes: ENOTCONN"
grep -q "^srv-probe: the pipes to 127.0.0.1:[0-9]* answered [0-9]* asks ([0-9]* errors) in [0-9]* writes" "$TMP/p.out"
r=$?
[ $r = 0 ] || sed 's/^/#   /' "$TMP/p.out" "$TMP/p.err"
ok $r "the report counts the pipes' asks and writes: $(sed -n 's/.*pipes to [^ ]* //p' "$TMP/p.out")"
