#!/bin/sh
# gsockd under libFuzzer, two targets: t/fuzz_ctl.c (the control protocol
# and registration: a hello and an arena's raw bytes) and t/fuzz_arena.c
# (a registered arena served while a hostile application runs a program
# of operations on it: commands, doorbells, ring counters, the socket
# table, raw bytes, a CPU peer). For each, every seed of t/fuzz/NAME/ (the
# crashes found so far stay there), then GSOCK_FUZZ_SECONDS (default 15)
# of new inputs. A crash, a leak or a sanitizer report fails it.
# A long run by hand: t/fuzz-ctl -max_len=131072 CORPUS t/fuzz/ctl
#                  or t/fuzz-arena CORPUS t/fuzz/arena
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
for t in ctl arena; do
	[ -x "$GSOCK_BUILD/t/fuzz-$t" ] || skip_all "t/fuzz-$t is not built: configure found no clang with libFuzzer (scripts/setup installs clang)"
done
SECS=${GSOCK_FUZZ_SECONDS:-15}
time_limit $((2 * SECS + 180))
plan 6

# Three checks for target NAME: its seeds, SECS of fuzzing, that it ran.
fuzz() { # NAME MAX_LEN MIN_RUNS
	_fuzz=$GSOCK_BUILD/t/fuzz-$1
	_seeds=$GSOCK_SRC/t/fuzz/$1
	# -timeout: an input that hangs for 30 s is a crash, with its artifact
	"$_fuzz" -runs=0 -timeout=30 -artifact_prefix="$TMP/$1-" "$_seeds" >"$TMP/$1.replay" 2>&1
	_st=$?
	ok $_st "the $(ls "$_seeds" | wc -l) seeds of t/fuzz/$1 run clean"
	[ $_st -ne 0 ] && grep -E 'ERROR|SUMMARY|fuzz-arena:|deadly' "$TMP/$1.replay" | sed 's/^/#   /'
	mkdir "$TMP/$1"
	"$_fuzz" -max_total_time="$SECS" -max_len="$2" -timeout=30 -artifact_prefix="$TMP/$1-" \
		-print_final_stats=1 "$TMP/$1" "$_seeds" >"$TMP/$1.fuzz" 2>&1
	_st=$?
	_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$TMP/$1.fuzz")
	_cov=$(sed -n 's/^#[0-9]*[[:space:]]*DONE[[:space:]]*cov: \([0-9]*\).*/\1/p' "$TMP/$1.fuzz")
	echo "# fuzz-$1: $_runs inputs in $SECS s, $_cov edges covered, corpus $(ls "$TMP/$1" | wc -l) new inputs"
	_why=
	if [ $_st -ne 0 ]; then
		grep -E 'ERROR|SUMMARY|Test unit written|fuzz-arena:|deadly|^Base64' "$TMP/$1.fuzz" | sed 's/^/#   /'
		# the reason on the result line too: CI's summary shows only those
		_why=": $(grep -m1 -E '^fuzz-arena:|^==[0-9]*==ERROR|^SUMMARY' "$TMP/$1.fuzz")"
		_b64=$(sed -n 's/^Base64: //p' "$TMP/$1.fuzz" | head -1)
		[ ${#_b64} -gt 0 ] && [ ${#_b64} -le 600 ] && _why="$_why; the input, base64: $_b64"
	fi
	ok $_st "fuzz-$1: $SECS s of fuzzing, no crash, leak or sanitizer report$_why"
	[ "${_runs:-0}" -gt "$3" ]
	ok $? "and it ran ($_runs inputs)"
}

fuzz ctl 131072 1000
fuzz arena 4096 100 # each input runs a served arena: a loaded 2-core machine did under 500 in 15 s
finish
