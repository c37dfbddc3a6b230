#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made (bench/results/20261124T1905Z-streams-h100.md);
# run from the build tree on a 16-core GPU host after scripts/gpu-check --build-only.
set -u
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
S="taskset -c 8-15" C="taskset -c 0-7"
$S bridge/gsockd --conf $tmp/c.conf --workers 6 --io epoll 2>/dev/null & G=$!
sleep 1
start_a() { $S apps/echo/gsock-echo-server-cuda -l 127.0.0.1:0 "$@" > $tmp/a.out 2>&1 & A=$!
  for i in $(seq 200); do grep -q 'listening on' $tmp/a.out && break; sleep 0.1; done
  P=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/a.out); }
fill() { # one up stream; rx ring fill sampled 10 times during it
  ( $C bench/loadgen -d 3 -w 0.3 "$@" 127.0.0.1 $P > $tmp/lg.out 2>&1 & 
    sleep 1; for i in $(seq 10); do bridge/gsock-stat -j | python3 -c '
import json,sys
d=json.loads(sys.stdin.readline())
for a in d["applications"]:
    for s in a["socket_list"]:
        if s["state"]=="connected": print(s["rx_queued"], s["tx_queued"], end="; ")' ; sleep 0.1; done; echo; wait )
  echo "$* -> $(grep -o 'MBps=[0-9.]*\|loadgen:.*' $tmp/lg.out)"; }
for t in 256 1024; do
  echo "== sink, $t threads, 4 MiB ring, 1 MiB buffer; rx_queued tx_queued samples"
  start_a -b 4 -t $t -M sink -B 1048576 -r 4194304
  fill -m up -c 1 -s 1048576
  kill $A; wait $A 2>/dev/null
done
echo "== source, 256 threads"
start_a -b 4 -M source -B 1048576 -r 4194304
fill -m down -c 1 -s 1048576
kill $A; wait $A 2>/dev/null
bench/floors-cuda 4096
kill $G; wait
