#!/bin/sh
# The benchmark suite builds and runs (bench/run --tiny): every server
# (A gsock, B CPU epoll, C and Cb CPU-managed GPU) answers every kind of
# point with real numbers and the report is written. Speed is not judged
# here; bench/run on a GPU host is where it is measured. Then the
# same-host direct path, small (--tiny --only direct): bench/cpu2gpu and
# bench/gpu2gpu run, and their summary line has every figure.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 420
need_backend
plan 12

cd "$GSOCK_BUILD"
"$GSOCK_SRC/bench/run" --tiny --backend "$BACKEND" --out "$TMP/results" >"$TMP/run.out" 2>"$TMP/run.err"
ok $? "bench/run --tiny --backend $BACKEND completes"
sed 's/^/#   /' "$TMP/run.err" | grep -v '^#   # \[' | head -20
md=$(cat "$TMP/run.out")
csv=${md%.md}.csv
[ -s "$md" ] && [ -s "$csv" ]
ok $? "it writes the markdown report and its csv"
for s in A B C Cb; do
	# rtt rows of server s with a positive request rate
	n=$(awk -F, -v s=$s '$1 == "rtt" && $2 == s && $5 > 0' "$csv" | wc -l)
	[ "$n" -ge 2 ]
	ok $? "server $s: round trips measured at every size ($n rows)"
done
# full-duplex streams (loadgen -m duplex): every byte checked, some came back
n=$(awk -F, '$1 == "duplex" && ($2 == "A" || $2 == "B" || $2 == "C") && $6 > 0' "$csv" | wc -l)
[ "$n" -ge 6 ]
ok $? "full-duplex streams through A, B and C, 1 and 2 connections ($n rows)"
# one-way streams (loadgen -m up / -m down against sink and source servers)
for d in up down; do
	n=$(awk -F, -v d=$d '$1 == d && ($2 == "A" || $2 == "B" || $2 == "C") && $6 > 0' "$csv" | wc -l)
	[ "$n" -ge 6 ]
	ok $? "one-way streams $d through A, B and C, 1 and 2 connections ($n rows)"
done
# the scale section read the arena's size from gsockd's registration line
grep -q 'Arena (pinned, mapped): [0-9][0-9]* KiB for [0-9][0-9]* sockets' "$md"
ok $? "the report gives the scale test's arena size and sockets"

"$GSOCK_SRC/bench/run" --tiny --only direct --backend "$BACKEND" --out "$TMP/direct" >"$TMP/direct.out" 2>"$TMP/direct.err"
ok $? "bench/run --tiny --only direct --backend $BACKEND completes"
sed 's/^/#   /' "$TMP/direct.err" | grep -v '^#   # \[' | head -20
line=$(grep '^direct: ' "$TMP/direct/"*-direct.md)
n='[0-9][0-9.]*'
echo "$line" | grep -qx "direct: cpu-gpu rtt p50 $n us; gpu-gpu rtt p50 $n us; gpu-gpu stream $n GB/s; cpu-gpu stream $n GB/s up, $n down; gsockd $n cores"
ok $? "its summary line has every figure, the GPU-GPU ones from bench/gpu2gpu's table: $line"
