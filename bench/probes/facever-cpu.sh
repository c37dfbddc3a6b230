#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made; run from the build tree on
# a 16-core GPU host after scripts/gpu-check --build-only, memcached on PATH.
# Probe: is gsockd what bounds face verification G at 256 connections?
# Its user time (polling included) and system time (the socket work) against
# C's, per request, at 64 and 256 connections; and G with more workers.
set -u
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
ulimit -n 20000
FV=apps/facever BK=${BK:-cuda} D=${D:-4}
C="taskset -c 0-5" M="taskset -c 6-7"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { for i in $(seq 300); do grep -q 'listening on' $1 && return; sleep 0.1; done; echo "did not start: $1"; cat $1; }
ut() { awk '{ print $14, $15 }' /proc/$1/stat; }
mp=$(port)
$M memcached -u "$(id -un)" -l 127.0.0.1 -p $mp -t 2 -c 8192 >/dev/null 2>&1 & MC=$!
sleep 0.5; $FV/facever-enrol -M 127.0.0.1:$mp -p 200 >/dev/null
hz=$(getconf CLK_TCK)
# load PID PORT CONNS LABEL: one point, with PID's user and system cores
load() {
  read u0 s0 < <(ut $1); t0=$(date +%s.%N)
  TIMEFORMAT='%U %S %R'
  { time $C $FV/facever-client -s 127.0.0.1:$2 -p 200 -c $3 -j ${J:-6} -d $D > $tmp/cl.out 2>/dev/null; } 2> $tmp/cl.time
  r=$(grep -o 'rps=[0-9]*' $tmp/cl.out | cut -d= -f2)
  read u1 s1 < <(ut $1); t1=$(date +%s.%N)
  read cu cs cr < $tmp/cl.time
  awk -v r=$r -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz=$hz -v t0=$t0 -v t1=$t1 -v l="$4" -v cu=$cu -v cs=$cs -v cr=$cr 'BEGIN {
    w = t1 - t0; printf "%s: %d req/s; user %.2f cores, system %.2f cores; system %.2f us a request; the client %.2f cores (user %.2f, system %.2f)\n", l, r, u / hz / w, s / hz / w, r ? s / hz / w / r * 1e6 : 0, (cu + cs) / cr, cu / cr, cs / cr }'
}
[ "${1:-}" = client ] && { C="taskset -c 0-7"; J=8; }
for w in ${W:-8 12}; do
  S="taskset -c 8-15"; [ $w = 12 ] && S="taskset -c 4-15"
  rm -f $GSOCK_CONTROL; $S bridge/gsockd --conf $tmp/c.conf --workers $w 2>$tmp/gsockd.log & G=$!; up $tmp/gsockd.log
  for c in 16 64 256; do
    taskset -c 8-15 $FV/facever-gserver-$BK -l 127.0.0.1:0 -M 127.0.0.1:$mp -b 256 > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
    p=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/g.out)
    load $G $p $c "G gsockd --workers $w on ${S#taskset -c }, $c conns (gsockd's time)"
    kill $A; wait $A 2>/dev/null; grep "pipes' time\|pipes to" $tmp/g.out
  done
  kill $G; wait $G 2>/dev/null
done
p=$(port); taskset -c 8-15 $FV/facever-cserver-cuda -l 127.0.0.1:$p -M 127.0.0.1:$mp -t 8 > $tmp/c.out 2>&1 & A=$!; up $tmp/c.out
for c in 64 256; do load $A $p $c "C 8 threads on 8-15, $c conns (C's time)"; done
kill $A; wait $A 2>/dev/null
kill $MC; wait
