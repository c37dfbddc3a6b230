#!/bin/sh
# One-way streams (bench/loadgen -m up / -m down): the GPU echo server's
# sink checks every byte it reads against the stream pattern and answers
# with the count and the wrong bytes; its source sends the pattern. Wrong
# bytes are counted, not missed; a short stream and an empty one are
# answered exactly; loadgen's checks fail where they should. The GPU echo
# client streams one way too (-m up, -m down), alone and as a group of
# blocks that check a received chunk side by side: its counts and its
# complaints are checked the same way; so is a sink whose group checks.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
plan 24
LOADGEN=$GSOCK_BUILD/bench/loadgen

start_gsockd
start_server -l 127.0.0.1:0 -b 2 -M sink -B 65536 || exit 1
SINK=$PORT
# sink_ask SIZE FLIP...: send SIZE pattern bytes with the bytes at FLIP
# offsets changed, end the stream, print the answer "COUNT WRONG"
sink_ask() {
	python3 - "$SINK" "$@" <<'PY'
import socket, struct, sys
port, size, flips = int(sys.argv[1]), int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
data = bytearray(((i * 131 + (i >> 8) * 7 + 1) & 0xff) for i in range(size))
for f in flips:
    data[f] ^= 0x5a
s = socket.create_connection(("127.0.0.1", port), timeout=20)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
a = b""
while len(a) < 16:
    b = s.recv(16 - len(a))
    if not b:
        break
    a += b
print(*struct.unpack("<QQ", a) if len(a) == 16 else ("short", len(a)))
PY
}
is "$(sink_ask 1000000)" "1000000 0" "the sink counts 1,000,000 pattern bytes, none wrong"
is "$(sink_ask 300001 0 65535 65536 300000)" "300001 4" "four changed bytes (first, either side of the period, last) are four wrong"
is "$(sink_ask 0)" "0 0" "an empty stream is answered 0 0"
is "$(sink_ask 1)" "1 0" "a one-byte stream is answered 1 0"

timeout 30 "$LOADGEN" -m up -c 2 -s 65536 -d 0.5 -w 0.1 127.0.0.1 "$SINK" >"$TMP/up" 2>&1
ok $? "loadgen -m up: 2 streams, the sink's answers match what was sent"
grep -q 'MBps=[1-9]' "$TMP/up"
ok $? "and it reports a rate ($(grep -o 'MBps=[0-9.]*' "$TMP/up"))"

SINK_PID=$SERVER_PID
start_server -l 127.0.0.1:0 -b 2 -M source -B 100000 || exit 1
SOURCE=$PORT
python3 - "$SOURCE" <<'PY' >"$TMP/src" 2>&1
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
want, got = 3_000_000, bytearray()
while len(got) < want:
    b = s.recv(want - len(got))
    if not b:
        break
    got += b
bad = sum(1 for i, x in enumerate(got) if x != ((i * 131 + (i >> 8) * 7 + 1) & 0xff))
print(len(got), bad)
PY
is "$(cat "$TMP/src")" "3000000 0" "the source's first 3,000,000 bytes are the pattern (100,000-byte sends)"
timeout 30 "$LOADGEN" -m down -c 2 -s 65536 -d 0.5 -w 0.1 127.0.0.1 "$SOURCE" >"$TMP/down" 2>&1
ok $? "loadgen -m down: 2 streams, every byte checked"

timeout 30 "$LOADGEN" -m up -c 1 -s 65536 -d 0.3 -w 0.1 127.0.0.1 "$SOURCE" >"$TMP/bad-up" 2>&1
[ $? -ne 0 ] && grep -q "the sink got" "$TMP/bad-up"
ok $? "loadgen -m up against a source fails: $(grep -o 'sent.*wrong' "$TMP/bad-up" | cut -c1-40)..."
timeout 30 "$LOADGEN" -m down -c 1 -d 0.3 -w 0.1 127.0.0.1 "$SINK" >"$TMP/bad-down" 2>&1
[ $? -ne 0 ] && grep -q "no byte moved" "$TMP/bad-down"
ok $? "loadgen -m down against a sink fails: no byte moved"

# The GPU echo client's streams: to the sink, from the source, in groups.
timeout 60 "$CLIENT" -m up -b 2 -n 100000 -i 7 127.0.0.1:"$SINK" >"$TMP/gup" 2>&1
ok $? "gsock-echo-client -m up: 2 streams of 700,000 bytes, the sink's answers match: $(grep -o 'GB/s.*' "$TMP/gup")"
timeout 60 "$CLIENT" -m down -b 2 -n 100000 -i 7 127.0.0.1:"$SOURCE" >"$TMP/gdown" 2>&1
ok $? "gsock-echo-client -m down: 2 streams of 700,000 bytes, every byte checked"
start_server -l 127.0.0.1:0 -b 1 -k 3 -M source -B 300000 || exit 1
timeout 60 "$CLIENT" -m down -k 3 -n 1000000 -i 3 127.0.0.1:"$PORT" >"$TMP/gdown3" 2>&1
ok $? "the same by a group of 3 blocks from a group of 3: $(grep -o 'GB/s [0-9.]*' "$TMP/gdown3")"
timeout 60 "$CLIENT" -m down -k 2 -n 50000 -i 40 127.0.0.1:"$PORT" >"$TMP/godd" 2>&1
ok $? "a group of 2, 50,000-byte messages (small chunks rank 0 copies alone, beside the other's check)"
timeout 60 "$CLIENT" -m up -n 64 -i 2 127.0.0.1:"$PORT" >"$TMP/gbad-up" 2>&1
[ $? -eq 1 ] && grep -q "the sink counted .* bytes of 128 sent" "$TMP/gbad-up"
ok $? "-m up against a source fails: $(grep -o 'the sink counted.*' "$TMP/gbad-up")"

# A source with wrong bytes: in the first word, in the middle (in parts
# other than a group's first, where the reads' sizes put them), before a
# read's end and in the last byte.
WRONG=$(free_port)
python3 - "$WRONG" >"$TMP/wrongsrc" 2>&1 <<'PY' &
import socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(4)
size = 3 * 1000000
data = bytearray(((i * 131 + (i >> 8) * 7 + 1) & 0xff) for i in range(size))
for f in (3, 1500000, 2100000, 999999, size - 1):
    data[f] ^= 0x21
for n in (size, size, 1000):
    c, _ = ls.accept()
    c.sendall(data[:n])
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()
PY
WPID=$!
wait_listen "$WRONG"
timeout 60 "$CLIENT" -m down -n 1000000 -i 3 127.0.0.1:"$WRONG" >"$TMP/gwrong1" 2>&1
[ $? -eq 1 ] && grep -q "connection 0: 5 wrong bytes" "$TMP/gwrong1"
ok $? "-m down counts 5 wrong bytes that a source planted"
timeout 60 "$CLIENT" -m down -k 3 -n 1000000 -i 3 127.0.0.1:"$WRONG" >"$TMP/gwrong3" 2>&1
[ $? -eq 1 ] && grep -q "connection 0: 5 wrong bytes" "$TMP/gwrong3"
ok $? "and so does a group of 3, whose blocks check parts of each chunk"
timeout 60 "$CLIENT" -m down -n 1000000 -i 3 127.0.0.1:"$WRONG" >"$TMP/gshort" 2>&1
[ $? -eq 1 ] && grep -q "connection 0: the stream ended after 1000 bytes of 3000000" "$TMP/gshort"
ok $? "-m down from a source that ends early fails: $(grep -o 'connection 0:.*' "$TMP/gshort")"
wait "$WPID"

# A sink whose connection is a group of 3 blocks: each checks its part of
# every chunk and their counts add up, whichever part a wrong byte is in;
# the count starts again at 0 for the next connection.
start_server -l 127.0.0.1:0 -b 1 -k 3 -M sink -B 300000 || exit 1
SINK=$PORT
is "$(sink_ask 1000000)" "1000000 0" "a sink of a group of 3 counts 1,000,000 pattern bytes, none wrong"
# one byte in every 997: every rank's part of every chunk holds some
is "$(sink_ask 900001 $(seq 3 997 900000))" "900001 903" "903 changed bytes, one in every 997, in every rank's part, are 903 wrong"
is "$(sink_ask 700000)" "700000 0" "and the next connection's count starts at 0"
timeout 60 "$CLIENT" -m up -k 3 -n 1000000 -i 3 127.0.0.1:"$SINK" >"$TMP/gup3" 2>&1
ok $? "gsock-echo-client -m up by a group of 3 into it: the sink's answer matches: $(grep -o 'GB/s [0-9.]*' "$TMP/gup3")"

"$SERVER" -M sink -m 4 >/dev/null 2>"$TMP/usage"
[ $? -eq 64 ] && grep -q "leave out --multiplex" "$TMP/usage"
ok $? "--mode sink with --multiplex is refused with a reason"
"$SERVER" -M upward >/dev/null 2>"$TMP/usage2"
[ $? -eq 64 ] && grep -q "echo, sink or source" "$TMP/usage2"
ok $? "an unknown --mode is refused with the choices"
finish
