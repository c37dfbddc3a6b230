#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made (bench/results/20261124T1905Z-streams-h100.md);
# run from the build tree on a 16-core GPU host after scripts/gpu-check --build-only.
# Probe: the first 256-connection point after the A server starts vs later ones;
# which blocks hold the connections (gsock-stat), and the duplex streams.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
ulimit -n 20000
BK=${BK:-cuda}; S="" C=""; [ $(nproc) -ge 16 ] && S="taskset -c 8-15" C="taskset -c 0-7"
$S bridge/gsockd --conf $tmp/c.conf --workers 6 --io epoll 2>$out/gsockd.log & G=$!
sleep 1
start_a() { $S apps/echo/gsock-echo-server-$BK -l 127.0.0.1:0 "$@" > $tmp/a.out 2>&1 & A=$!
  for i in $(seq 200); do grep -q 'listening on' $tmp/a.out && break; sleep 0.1; done
  P=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/a.out); }
lgp() { echo "$* -> $($C bench/loadgen -t 8 -d 2 -w 0.5 "$@" 127.0.0.1 $P | grep -o 'rps=[0-9]* MBps=[0-9.]* p50_us=[0-9.a-z]*')"; }
blocks() { # during a run: distinct poll slots and per-slot max
  ( $C bench/loadgen -t 8 -c $1 -s 64 -d 3 -w 0.2 127.0.0.1 $P >/dev/null & sleep 1.5; bridge/gsock-stat -j > $tmp/st.json; wait )
  python3 - $tmp/st.json <<'PY'
import json,sys,collections
for line in open(sys.argv[1]):
    d=json.loads(line)
    for a in d.get("applications",d.get("apps",[])):
        sl=[s.get("poll_slot") for s in a.get("socket_list",[]) if s.get("state")=="connected"]
        c=collections.Counter(sl); w=collections.Counter(s.get("worker") for s in a.get("socket_list",[]) if s.get("state")=="connected")
        print(f"  connected {len(sl)} slots {len(c)} max/slot {max(c.values()) if c else 0} workers {dict(sorted(w.items()))}")
PY
}
echo "== A 128x16, first points after start"
start_a -b 128 -m 16
for i in 1 2 3; do lgp -c 256 -s 64; done
blocks 256
lgp -c 1024 -s 64
for i in 1 2; do lgp -c 256 -s 64; done
blocks 256
echo "== A fresh, conns sweep order like bench/run"
kill $A; wait $A 2>/dev/null
start_a -b 128 -m 16
for c in 1 16 64 256 1024 256 256; do lgp -c $c -s 64; done
blocks 256
kill $A; wait $A 2>/dev/null
echo "== streams: A (8x1, 1 MiB bufs, 4 MiB rings)"
start_a -b 8 -m 1 -B 1048576 -r 4194304
for c in 1 8; do for s in 65536 1048576; do lgp -m duplex -c $c -s $s; done; done
for c in 1 8; do lgp -c $c -s 1048576; done
kill $A; wait $A 2>/dev/null
echo "== streams: B (6 threads)"
$S apps/cpu-echo/cpu-echo-server -H 127.0.0.1 -p 31999 -t 6 >/dev/null 2>&1 & B=$!; P=31999; sleep 0.5
for c in 1 8; do for s in 65536 1048576; do lgp -m duplex -c $c -s $s; done; done
for c in 1 8; do lgp -c $c -s 1048576; done
for i in 1 2; do lgp -c 256 -s 64; done
kill $B
echo "== floors"; bench/floors-$BK 4096
kill $G; wait
