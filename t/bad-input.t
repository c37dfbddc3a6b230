#!/bin/sh
# Malformed control messages and arenas that go bad after registration:
# gsockd refuses or drops the offending application with a log line that
# says why, and goes on serving the others.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
plan 36

start_gsockd
start_server -l 127.0.0.1:0 -b 4
timeout 60 python3 "$GSOCK_SRC/t/bad_arena.py" "$GSOCK_CONTROL" "$PORT" >"$TMP/bad" 2>&1
while read -r verdict name rest; do
	case $verdict in
	ok) ok 0 "hostile app: $name" ;;
	bad) ok 1 "hostile app: $name $rest" ;;
	skip) tap_n=$((tap_n + 1)); echo "ok $tap_n - hostile app: $name # SKIP $rest" ;;
	*) echo "# $verdict $name $rest" ;;
	esac
done <"$TMP/bad"
for why in "malformed hello" "magic" "carries 0 descriptors" "not a" "not sealed" \
	"bad magic, version or size" "geometry is inconsistent" "doorbell names slot 999" \
	"unknown opcode 77" "5000-byte address" "tx ring counters are corrupt"; do
	grep -q "rejecting application pid [0-9]*: .*$why" "$TMP/gsockd.log"
	ok $? "gsockd logs why: $why"
done
if [ "$WORKERS" -ge 2 ]; then
	grep -q "rejecting application pid [0-9]*: socket 1 tx ring counters are corrupt" "$TMP/gsockd.log"
	ok $? "gsockd logs why: a corrupt socket of the second worker"
else
	tap_n=$((tap_n + 1)); echo "ok $tap_n - gsockd logs why: second worker # SKIP one worker"
fi
kill -0 "$GSOCKD_PID"
ok $? "gsockd still runs"
timeout 30 python3 "$PY" sizes "$PORT" 100 100000 >/dev/null 2>&1
ok $? "and still serves the GPU echo server's clients"
finish
