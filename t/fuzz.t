#!/bin/sh
# gsockd's control protocol and arena handling under libFuzzer
# (t/fuzz_ctl.c: registration, then a worker serving the arena's
# doorbells and commands): every seed of t/fuzz/ctl/ (the crashes found
# so far stay there), then GSOCK_FUZZ_SECONDS (default 15) of new inputs.
# A crash, a leak or a sanitizer report fails it, and the input is kept.
# A long run by hand: t/fuzz-ctl -max_len=131072 CORPUS t/fuzz/ctl
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
FUZZ=$GSOCK_BUILD/t/fuzz-ctl
[ -x "$FUZZ" ] || skip_all "t/fuzz-ctl is not built: configure found no clang with libFuzzer (scripts/setup installs clang)"
SECS=${GSOCK_FUZZ_SECONDS:-15}
time_limit $((SECS + 120))
plan 3

seeds=$(ls "$GSOCK_SRC/t/fuzz/ctl" | wc -l)
"$FUZZ" -runs=0 -artifact_prefix="$TMP/" "$GSOCK_SRC/t/fuzz/ctl" >"$TMP/replay" 2>&1
ok $? "the $seeds seeds of t/fuzz/ctl run clean"
mkdir "$TMP/corpus"
"$FUZZ" -max_total_time="$SECS" -max_len=131072 -artifact_prefix="$TMP/" \
	-print_final_stats=1 "$TMP/corpus" "$GSOCK_SRC/t/fuzz/ctl" >"$TMP/fuzz" 2>&1
st=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$TMP/fuzz")
cov=$(sed -n 's/^#[0-9]*[[:space:]]*DONE[[:space:]]*cov: \([0-9]*\).*/\1/p' "$TMP/fuzz")
echo "# $runs inputs in $SECS s, $cov edges covered, corpus $(ls "$TMP/corpus" | wc -l) new inputs"
[ $st -ne 0 ] && { grep -E 'ERROR|SUMMARY|Test unit written|deadly' "$TMP/fuzz" | sed 's/^/#   /'; }
ok $st "$SECS s of fuzzing: no crash, leak or sanitizer report"
[ "${runs:-0}" -gt 1000 ]
ok $? "and it ran ($runs inputs)"
finish
