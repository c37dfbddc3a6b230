#!/bin/sh
# gsock-stat: the live view matches a known set of sockets with known byte
# counts (addresses, states, bytes each way, empty rings, owner worker,
# polling block); watch mode prints samples with rates; closed sockets
# and a dead application leave the view; asking while traffic flows
# changes no byte of it; mistakes get a sentence and an EX_* status.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 120
plan 16
STAT=$GSOCK_BUILD/bridge/gsock-stat
start_gsockd
"$STAT" -j >"$TMP/s0.json" 2>"$TMP/err"
ok $? "gsock-stat answers with no application registered"
python3 - "$TMP/s0.json" "$GSOCKD_PID" "$WORKERS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = d["gsockd"]
assert g["pid"] == int(sys.argv[2]) and g["workers"] == int(sys.argv[3]), g
assert g["applications"] == 0 and d["applications"] == [], d
assert g["direct_wakeups"] == 0 and g["watch_finds"] == 0, g
assert g["watch_looks"] >= g["watch_finds"], g
PY
ok $? "gsockd's pid and $WORKERS workers, no application"

start_server -b 2 -m 4 || exit 1
# Three connections with known byte counts, echoed whole, then held open.
mkfifo "$TMP/hold"
python3 - "$PORT" "$TMP/hold" >"$TMP/cli.out" 2>"$TMP/cli.err" <<'PY' &
import socket, sys
port, hold = int(sys.argv[1]), sys.argv[2]
socks = []
for n in (1000, 20000, 300000):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(bytes(i % 251 for i in range(n)))
    got = b""
    while len(got) < n:
        got += s.recv(1 << 20)
    assert got == bytes(i % 251 for i in range(n))
    socks.append(s)
print(" ".join("%d:%d" % (s.getsockname()[1], n) for s, n in zip(socks, (1000, 20000, 300000))), flush=True)
open(hold).read()  # until the test lets go
PY
CLI=$!
PIDS="$PIDS $CLI"
for _ in $(seq 200); do [ -s "$TMP/cli.out" ] && break; sleep 0.05; done
[ -s "$TMP/cli.out" ]
ok $? "three connections echoed 1000, 20000 and 300000 bytes: $(cat "$TMP/cli.out" "$TMP/cli.err")"
"$STAT" -j >"$TMP/s1.json"
python3 - "$TMP/s1.json" "$SERVER_PID" "$PORT" "$WORKERS" "$(cat "$TMP/cli.out")" >"$TMP/check" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
pid, port, workers = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
want = dict((int(p), int(n)) for p, n in (x.split(":") for x in sys.argv[5].split()))
apps = [a for a in d["applications"] if a["pid"] == pid]
assert len(apps) == 1, d["applications"]
a = apps[0]
print("app", a["command"], a["slots"], a["open"])
assert a["command"].startswith("gsock-echo-ser") and a["slots"] == 2, a
socks = a["socket_list"]
lis = [s for s in socks if s["state"] == "listen"]
assert len(lis) == 1 and lis[0]["local"].endswith(":%d" % port) and lis[0]["peer"] == "-", lis
con = [s for s in socks if s["state"] == "connected"]
assert a["open"] == len(socks) == 4 and len(con) == 3, socks
for s in con:
    peer = int(s["peer"].rsplit(":", 1)[1])
    n = want.pop(peer)
    assert s["local"] == "127.0.0.1:%d" % port, s  # the client dialled 127.0.0.1
    assert s["rx_bytes"] == n and s["tx_bytes"] == n, (s, n)
    assert s["rx_queued"] == 0 and s["tx_queued"] == 0, s
    assert 0 <= s["worker"] < workers and s["poll_slot"] in (1, 2), s
    assert s["error"] == 0 and not s["eof"] and s["idle_ms"] < 60000, s
assert not want, want
print("ok")
PY
ok $? "the view has the server, its listener and each connection with its peer, bytes each way, empty rings, worker and block: $(tr '\n' ' ' <"$TMP/check")"

"$STAT" >"$TMP/table"
grep -q "^pid $SERVER_PID (gsock-echo-ser.*2 slots.*4 open" "$TMP/table" &&
	[ "$(grep -c ' connected ' "$TMP/table")" = 3 ] && grep -q ' 300K *300K ' "$TMP/table"
r=$?
ok $r "the table shows the same: 4 open, 3 connected, 300000 bytes each way as 300K"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/table"
"$STAT" -w 0.2 -n 3 >"$TMP/watch"
[ "$(grep -c '^gsockd pid' "$TMP/watch")" = 3 ] && grep -q 'RECV/s' "$TMP/watch"
ok $? "-w 0.2 -n 3 prints three samples with rate columns"
"$STAT" -j -w 0.2 -n 2 >"$TMP/wj"
python3 - "$TMP/wj" <<'PY'
import json, sys
a, b = [json.loads(l) for l in open(sys.argv[1])]
s1 = [s for x in a["applications"] for s in x["socket_list"]]
s2 = [s for x in b["applications"] for s in x["socket_list"]]
assert all("rx_rate" in s and s["rx_rate"] is None for s in s1), s1
assert all(s["rx_rate"] == 0 and s["tx_rate"] == 0 for s in s2), s2
PY
ok $? "-j -w: JSON lines; rates null in the first sample, 0 for idle sockets in the next"

# Traffic while the view is asked for again and again: no byte changes.
python3 "$PY" concurrent "$PORT" 3 7 >"$TMP/conc" 2>&1 &
C=$!
i=0
while kill -0 $C 2>/dev/null && [ $i -lt 200 ]; do "$STAT" -j >/dev/null || break; i=$((i + 1)); done
wait $C
is "$(cut -d' ' -f1-4 "$TMP/conc")" "ok 3 of 3" "3 connections of random sizes stay intact while gsock-stat asks $i times"

echo go >"$TMP/hold"
wait $CLI
for _ in $(seq 100); do
	"$STAT" -j >"$TMP/s2.json"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["applications"][0]["open"] == 1 else 1)' "$TMP/s2.json" && break
	sleep 0.1
done
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["applications"][0]["open"] == 1 else 1)' "$TMP/s2.json"
ok $? "closed connections leave the view (the listener stays)"
kill -9 "$SERVER_PID"
for _ in $(seq 100); do
	"$STAT" | grep -q "0 applications" && break
	sleep 0.1
done
"$STAT" >"$TMP/t3"
grep -q "0 applications" "$TMP/t3"
ok $? "a killed application leaves the view"

"$STAT" -s "$TMP/none.sock" 2>"$TMP/err"
is $? 69 "no gsockd at the path: exit 69"
grep -q "cannot reach gsockd at $TMP/none.sock" "$TMP/err"
ok $? "saying so: $(cat "$TMP/err")"
"$STAT" -w 0 2>"$TMP/err"
is $? 64 "-w 0 is a usage error: $(cat "$TMP/err")"
"$STAT" -n 2 2>"$TMP/err"
is $? 64 "-n without -w is a usage error: $(cat "$TMP/err")"
# Something that is not gsockd on the path.
python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(sys.argv[1]); s.listen()
c, _ = s.accept(); c.send(b"hello"); time.sleep(1)' "$TMP/fake.sock" &
PIDS="$PIDS $!"
for _ in $(seq 100); do [ -S "$TMP/fake.sock" ] && break; sleep 0.05; done
"$STAT" -s "$TMP/fake.sock" 2>"$TMP/err"
is $? 76 "a peer that does not greet like gsockd: exit 76"
grep -q "did not greet like gsockd" "$TMP/err"
ok $? "saying so: $(cat "$TMP/err")"
finish
