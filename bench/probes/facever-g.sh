#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made; run from the build tree on
# a 16-core GPU host after scripts/gpu-check --build-only, memcached on PATH.
# Probe: what limits face verification G at 256 connections: the number of
# fetcher blocks (keys per memcached batch), gsockd's workers, and the
# one-port mix G+P against its parts, several times over (its spread).
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
ulimit -n 20000
FV=apps/facever BK=${BK:-cuda} D=${D:-4}
S="taskset -c 8-15" C="taskset -c 0-5" M="taskset -c 6-7"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { for i in $(seq 300); do grep -q 'listening on' $1 && return; sleep 0.1; done; echo "did not start: $1"; cat $1; }
mp=$(port)
$M memcached -u "$(id -un)" -l 127.0.0.1 -p $mp -t 2 -c 8192 >/dev/null 2>&1 & MC=$!
sleep 0.5; $FV/facever-enrol -M 127.0.0.1:$mp -p 200 >/dev/null
gsd() { rm -f $GSOCK_CONTROL; ${2:-$S} bridge/gsockd --conf $tmp/c.conf --workers $1 2>$tmp/gsockd.log & G=$!; up $tmp/gsockd.log; }
cl() { $C $FV/facever-client -s 127.0.0.1:$1 -p 200 -c $2 -j 6 -d $D | grep -o 'rps=[0-9]* p50_us=[0-9.]* p99_us=[0-9.]*'; }
g() { # WORKERS BLOCKS FETCHERS CONNS...
  w=$1 b=$2 f=$3; shift 3; gsd $w
  $S $FV/facever-gserver-$BK -l 127.0.0.1:0 -M 127.0.0.1:$mp -b $b -F $f > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
  p=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/g.out)
  for c in "$@"; do echo "G workers=$w b=$b F=$f c=$c: $(cl $p $c)"; done
  ( $C $FV/facever-client -s 127.0.0.1:$p -p 200 -c 256 -j 6 -d 3 >/dev/null & sleep 1.5; bridge/gsock-stat > $tmp/st.txt 2>&1; wait )
  kill $A; wait $A 2>/dev/null; grep -i "pipes to\|pipes' time" $tmp/g.out
  kill $G; wait $G 2>/dev/null
}
lscpu -e 2>/dev/null | head -20
echo "== fetchers (256 server blocks; 8 gsockd workers on 8-15)"
for f in 8 4 2 1; do g 8 256 $f 64 256; done
sed -n 1,40p $tmp/st.txt
echo "== C at 256, 8 threads"
p=$(port); $S $FV/facever-cserver-cuda -l 127.0.0.1:$p -M 127.0.0.1:$mp -t 8 > $tmp/c.out 2>&1 & A=$!; up $tmp/c.out
for i in 1 2; do echo "C c=256: $(cl $p 256)"; done; kill $A; wait $A 2>/dev/null
echo "== one port, 3 rounds: G half (gsockd 4 workers on 8-11) + P half (4 threads on 12-15)"
GC="taskset -c 8-11" PC="taskset -c 12-15"
for r in 1 2 3; do
  p=$(port)
  gsd 4 "$GC"; $GC $FV/facever-gserver-$BK -l 127.0.0.1:$p -M 127.0.0.1:$mp -b 256 -P > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
  ga=$(cl $p 128); kill $A; wait $A 2>/dev/null; kill $G; wait $G 2>/dev/null
  $PC $FV/facever-pserver -l 127.0.0.1:$p -M 127.0.0.1:$mp -t 4 > $tmp/p.out 2>&1 & B=$!; up $tmp/p.out
  pa=$(cl $p 128); kill $B; wait $B 2>/dev/null
  gsd 4 "$GC"; $GC $FV/facever-gserver-$BK -l 127.0.0.1:$p -M 127.0.0.1:$mp -b 256 -P > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
  $PC $FV/facever-pserver -l 127.0.0.1:$p -M 127.0.0.1:$mp -t 4 > $tmp/p.out 2>&1 & B=$!; up $tmp/p.out
  both=$(cl $p 256); kill $A $B; wait $A $B 2>/dev/null; kill $G; wait $G 2>/dev/null
  gs=$(sed -n 's/.*served \([0-9]*\) requests.*/\1/p' $tmp/g.out); ps_=$(sed -n 's/.*served \([0-9]*\) requests.*/\1/p' $tmp/p.out)
  # G alone on its port while P, on another port, serves its own 128 connections
  q=$(port); gsd 4 "$GC"; $GC $FV/facever-gserver-$BK -l 127.0.0.1:$p -M 127.0.0.1:$mp -b 256 -P > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
  $PC $FV/facever-pserver -l 127.0.0.1:$q -M 127.0.0.1:$mp -t 4 > $tmp/p.out 2>&1 & B=$!; up $tmp/p.out
  $C $FV/facever-client -s 127.0.0.1:$q -p 200 -c 128 -j 6 -d $((D + 2)) > $tmp/pb.txt 2>&1 & PB=$!; sleep 1
  gb=$(cl $p 128); wait $PB; pb=$(grep -o 'rps=[0-9]*' $tmp/pb.txt)
  kill $A $B; wait $A $B 2>/dev/null; kill $G; wait $G 2>/dev/null
  echo "round $r: G half $ga | P half $pa | G+P $both | served G $gs P $ps_ | G half beside a busy P on another port $gb (P $pb)"
done
kill $MC; wait
