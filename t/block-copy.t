#!/bin/sh
# The block copies that move every byte between a ring and a kernel's
# buffer (gs_copy, and gs_copy_far out of host memory): every pair of
# source and destination alignments (0..15) at lengths around the 16-byte
# word and over several rounds of their loads (up to 128 threads; one
# partial round at the largest block), with whole and partial warps, is
# exact and writes nothing outside the destination. On the host
# backend both are memcpy; the test is for the cuda backend's rounds of
# 16-byte loads and its shifted copy.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
threads="128 100 32 max 1" # max: the most the probe's registers allow (384 at 158 a thread)
[ "$BACKEND" = host ] && threads=1
plan $(($(echo $threads | wc -w) * 2))

start_gsockd
for t in $threads; do
	timeout 60 "$PROBE" copy "$t" >"$TMP/copy" 2>&1
	ok $? "copy probe ran, 1 block x $t threads" || sed 's/^/# /' "$TMP/copy"
	is "$(probe_value "$TMP/copy" copy-errors)/$(probe_value "$TMP/copy" copy-cases)" "0/7680" \
		"no wrong or stray byte in 7680 copies ($t threads)"
done
finish
