#!/bin/sh
# The block copy that moves every byte between a ring and a kernel's
# buffer: every pair of source and destination alignments (0..15) at
# lengths around the 16-byte word, with whole and partial warps, is exact
# and writes nothing outside the destination. On the host backend it is
# memcpy; the test is for the cuda backend's shifted 16-byte copy.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
threads="128 100 32 512 1" # 1024 x the probe's 93 registers exceeds a block's 64 Ki
[ "$BACKEND" = host ] && threads=1
plan $(($(echo $threads | wc -w) * 2))

start_gsockd
for t in $threads; do
	timeout 60 "$PROBE" copy "$t" >"$TMP/copy" 2>&1
	ok $? "copy probe ran, 1 block x $t threads" || sed 's/^/# /' "$TMP/copy"
	is "$(probe_value "$TMP/copy" copy-errors)/$(probe_value "$TMP/copy" copy-cases)" "0/3072" \
		"no wrong or stray byte in 3072 copies ($t threads)"
done
finish
