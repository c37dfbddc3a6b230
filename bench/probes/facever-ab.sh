#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made; run from the build tree on
# a 16-core GPU host after scripts/gpu-check --build-only, memcached on PATH.
# Probe: face verification G of this tree against an older G (OLD_G: its
# facever-gserver-cuda, built from an older tree) served by that tree's
# gsockd (OLD_GSOCKD: the control protocol changes between releases),
# alternating, ROUNDS rounds, at CONNS closed-loop connections; every
# answer checked.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock; : > $tmp/c.conf
ulimit -n 20000
FV=apps/facever D=${D:-3} ROUNDS=${ROUNDS:-3} CONNS=${CONNS:-"16 64"}
OLD_G=${OLD_G:?the older G to compare with}
OLD_GSOCKD=${OLD_GSOCKD:?the bridge/gsockd of the older tree}
S="taskset -c 8-15" C="taskset -c 0-5" M="taskset -c 6-7"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { for i in $(seq 300); do grep -q 'listening on' $1 && return; sleep 0.1; done; echo "did not start: $1"; cat $1; }
mp=$(port)
$M memcached -u "$(id -un)" -l 127.0.0.1 -p $mp -t 2 -c 8192 >/dev/null 2>&1 & MC=$!
sleep 0.5; $FV/facever-enrol -M 127.0.0.1:$mp -p 1000 >/dev/null
$S bridge/gsockd --conf $tmp/c.conf --workers 8 2>$tmp/gsockd.log & G=$!; up $tmp/gsockd.log
$S $OLD_GSOCKD --conf $tmp/c.conf --control $tmp/old.sock --workers 8 2>$tmp/old-gsockd.log & OG=$!; up $tmp/old-gsockd.log
one() { # NAME BINARY CONTROL
	GSOCK_CONTROL=$3 $S $2 -l 127.0.0.1:0 -M 127.0.0.1:$mp -b 256 > $tmp/g.out 2>&1 & A=$!; up $tmp/g.out
	p=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' $tmp/g.out)
	for c in $CONNS; do
		echo "$1 c=$c: $($C $FV/facever-client -s 127.0.0.1:$p -p 1000 -c $c -j 6 -d $D | grep -o 'rps=[0-9]* .*')"
	done
	kill $A; wait $A 2>/dev/null; grep -i "step\|pipe" $tmp/g.out | sed "s/^/  $1: /"
}
for r in $(seq $ROUNDS); do
	echo "== round $r"
	one old "$OLD_G" $tmp/old.sock; one new $FV/facever-gserver-cuda $tmp/g.sock
done
kill $G $OG $MC; wait
