#!/bin/sh
# The direct path's lanes: a small send's copy in the receiver's GPU
# memory that the receiver takes instead of reading the tail and then the
# ring. gcall-probe's lane mode makes a connection up in device memory
# whose ring holds zeros, so the pattern that arrives came from a lane
# (also where the tail already shows the bytes): copies of every length
# at odd buffer offsets arrive whole, and a copy at another position, a
# torn copy, one past its bound, one of length 0, a short buffer, the
# tag's wrap and every 65536th copy, a tail that goes back and EOF each
# go the way gsock_arena.h says. On the cuda backend over several block
# sizes (a block under 32 threads leaves the lane alone).
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
threads="128 100 64 32 16"
[ "$BACKEND" = host ] && threads=1
plan $(($(echo $threads | wc -w) * 2))

start_gsockd
for t in $threads; do
	timeout 60 "$PROBE" lane "$t" >"$TMP/lane" 2>&1
	ok $? "lane probe ran, 1 block x $t threads" || sed 's/^/# /' "$TMP/lane"
	if [ "$BACKEND" = cuda ] && [ "$t" -lt 32 ]; then
		is "$(probe_value "$TMP/lane" lane-rx)" 0 "a block of $t threads leaves the lane alone"
	else
		is "$(probe_value "$TMP/lane" lane-errors)/$(probe_value "$TMP/lane" lane-cases)" "0/50" \
			"every lane case as specified ($t threads)"
	fi
done
finish
