#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made; run from the build tree on
# the two-GPU host after scripts/gpu-check --build-only, memcached on PATH.
# Probe: do two face verification G servers (one per GPU) behind one gsockd
# add up, with enough connections each (no P taking most of them)? Knobs:
# W gsockd workers, SCORES its and the servers' cores, CCORES and CJ the
# client's cores and threads, MCORES and MT memcached's, CONNS the points alone.
set -u
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
ulimit -n 20000
FV=apps/facever C="taskset -c ${CCORES:-0-5}" M="taskset -c ${MCORES:-6-7}" S="taskset -c ${SCORES:-8-15}"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { for i in $(seq 300); do grep -q 'listening on' $1 && return; sleep 0.1; done; echo "did not start: $1"; cat $1; }
mp=$(port)
$M memcached -u "$(id -un)" -l 127.0.0.1 -p $mp -t ${MT:-2} -c 8192 >/dev/null 2>&1 & MC=$!
sleep 0.5; $FV/facever-enrol -M 127.0.0.1:$mp -p 200 >/dev/null
$S bridge/gsockd --conf $tmp/c.conf --workers ${W:-8} 2>$tmp/gsockd.log & G=$!; up $tmp/gsockd.log
p=$(port)
g() { $S env CUDA_VISIBLE_DEVICES=$1 $FV/facever-gserver-cuda -l 127.0.0.1:$p -M 127.0.0.1:$mp -b 256 -P > $tmp/g$1.out 2>&1 & eval A$1=\$!; up $tmp/g$1.out; }
cl() { $C $FV/facever-client -s 127.0.0.1:$p -p 200 -c $1 -j ${CJ:-6} -d 4 | grep -o 'rps=[0-9]* p50_us=[0-9.]* p99_us=[0-9.]*'; }
served() { sed -n 's/.*served \([0-9]*\) requests on \([0-9]*\) connections.*/\1 requests on \2 connections/p' $1; }
for c in ${CONNS:-128 256}; do
  g 0; echo "GPU 0 alone, $c conns: $(cl $c)"; kill $A0; wait $A0 2>/dev/null
  g 1; echo "GPU 1 alone, $c conns: $(cl $c)"; kill $A1; wait $A1 2>/dev/null
done
g 0; g 1; echo "GPU 0 + GPU 1, one port, 256 conns: $(cl 256)"; kill $A0 $A1; wait $A0 $A1 2>/dev/null
echo "  GPU 0 served $(served $tmp/g0.out); GPU 1 served $(served $tmp/g1.out)"
g 0; g 1; echo "GPU 0 + GPU 1, one port, 448 conns: $(cl 448)"; kill $A0 $A1; wait $A0 $A1 2>/dev/null
echo "  GPU 0 served $(served $tmp/g0.out); GPU 1 served $(served $tmp/g1.out)"
kill $G $MC; wait
