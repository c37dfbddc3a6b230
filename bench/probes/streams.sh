#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made (bench/results/20261124T1905Z-streams-h100.md);
# run from the build tree on a 16-core GPU host after scripts/gpu-check --build-only.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
S="taskset -c 8-15" C="taskset -c 0-7"
$S bridge/gsockd --conf $tmp/c.conf --workers 6 --io epoll 2>$out/gsockd.log & G=$!
sleep 1
start_a() { $S apps/echo/gsock-echo-server-cuda -l 127.0.0.1:0 "$@" > $tmp/a.out 2>&1 & A=$!
  for i in $(seq 200); do grep -q 'listening on' $tmp/a.out && break; sleep 0.1; done
  P=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/a.out); }
lgp() { echo "$* -> $($C bench/loadgen -t 8 -d 2 -w 0.5 "$@" 127.0.0.1 $P 2>&1 | grep -o 'MBps=[0-9.]*\|loadgen:.*')"; }
for r in 4194304 16777216; do for B in 1048576 4194304; do
echo "== A sink, ring $r, buffer $B"
start_a -b 8 -M sink -B $B -r $r
for c in 1 8; do for s in 65536 1048576; do lgp -m up -c $c -s $s; done; done
kill -INT $A; wait $A 2>/dev/null; cat $tmp/a.out | tail -1
done; done
echo "== A source"
start_a -b 8 -M source -B 1048576 -r 4194304
for c in 1 8; do lgp -m down -c $c -s 65536; done
kill $A; wait $A 2>/dev/null
echo "== A echo, duplex"
start_a -b 8 -B 1048576 -r 4194304
for c in 1 8; do lgp -m duplex -c $c -s 1048576; done
kill $A; wait $A 2>/dev/null
for i in $(ls /proc/$G/task); do echo "task $i $(cat /proc/$G/task/$i/comm) $(awk '{print $14+$15}' /proc/$G/task/$i/stat)"; done
kill $G; wait
