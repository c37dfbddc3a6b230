#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made; run from the build tree on
# a 16-core GPU host after scripts/gpu-check --build-only.
# Probe: where infer-gserver-graph's turns go (its clock line) at a
# picture size, against the receive node's blocks and the number of
# graph sizes (-G), beside C.
# usage: SIZE=64x64 CONNS="1 64 256" CONFIGS="8:5 8:17 32:17" bench/probes/infer-turns.sh
#   (CONFIGS: BLOCKS:GRAPHS pairs, -b and -G of each G)
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
ulimit -n 20000
IN=apps/infer D=${D:-3} SIZE=${SIZE:-64x64} CONNS=${CONNS:-"1 64 256"} CONFIGS=${CONFIGS:-"8:5 8:17"}
S="taskset -c 8-15" C="taskset -c 0-5"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { for i in $(seq 300); do grep -q 'listening on' "$1" && return; sleep 0.1; done; echo "did not start: $1"; cat "$1"; }
$IN/infer-ref weights -o $tmp/w >/dev/null
$S bridge/gsockd --conf $tmp/c.conf --workers 8 2>$tmp/gsockd.log & G=$!; sleep 1
cl() { $C $IN/infer-client -w $tmp/w -S $SIZE -s 127.0.0.1:$1 -c $2 -d $D ${3:-} 2>&1 | tail -2 | tr '\n' ' '; }
for cf in $CONFIGS; do
  b=${cf%:*} gn=${cf#*:}
  for c in $CONNS; do
    m=$(((c + b - 1) / b)); [ $m -ge 1 ] || m=1
    $S $IN/infer-gserver-graph -l 127.0.0.1:0 -w $tmp/w -b $b -m $m -G $gn -T 60000 > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
    p=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/g.out)
    echo "G $SIZE b=$b m=$m G=$gn c=$c: $(cl $p $c)"
    kill -INT $A; wait $A 2>/dev/null; grep "turn's mean\|turns$\|cannot\|fail" $tmp/g.out
  done
done
if [ -x $IN/infer-cserver-cuda ]; then
  p=$(port); $S $IN/infer-cserver-cuda -l 127.0.0.1:$p -w $tmp/w -t 8 -T 60000 > $tmp/c.out 2>&1 & A=$!; up $tmp/c.out
  for c in $CONNS; do echo "C $SIZE c=$c: $(cl $p $c)"; done
  kill $A; wait $A 2>/dev/null
fi
kill $G; wait
