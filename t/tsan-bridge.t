#!/bin/sh
# gsockd built with ThreadSanitizer (t/gsockd-tsan), four workers, under
# the traffic that crosses threads: connections dealt round the workers,
# commands forwarded to a socket's owner, concurrent clients, the GPU
# client, hostile applications (double doorbells on two queues), gsock-stat
# asking while traffic flows, an application killed under load, then
# SIGTERM. TSan must report nothing.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
[ -x "$GSOCK_BUILD/t/gsockd-tsan" ] || skip_all "no ThreadSanitizer build (the compiler cannot link -fsanitize=thread, or --enable-asan/--enable-tsan)"
time_limit 300
plan 8

GSOCKD=$GSOCK_BUILD/t/gsockd-tsan
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$TMP/tsan second_deadlock_stack=1"
WORKERS=4
start_gsockd
start_server -l 127.0.0.1:0 -b 8 -m 8
ok $? "GPU echo server (multiplexing) runs on gsockd-tsan with 4 workers"
timeout 120 python3 "$PY" concurrent "$PORT" 48 11 >/dev/null 2>&1 &
LOAD=$!
n=0
while kill -0 $LOAD 2>/dev/null; do "$GSOCK_BUILD/bridge/gsock-stat" -j >/dev/null && n=$((n + 1)); done
wait $LOAD
ok $? "48 concurrent python3 clients get their bytes back"
[ $n -gt 0 ]
ok $? "gsock-stat answered $n times meanwhile"
timeout 120 "$CLIENT" -b 4 -n 1000 -i 20 "127.0.0.1:$PORT" >/dev/null 2>&1
ok $? "the GPU client (4 blocks) gets its bytes back"
timeout 120 python3 "$GSOCK_SRC/t/bad_arena.py" "$GSOCK_CONTROL" "$PORT" >"$TMP/bad" 2>&1
ok $? "hostile applications are all refused"
timeout 60 python3 "$PY" concurrent "$PORT" 32 12 >/dev/null 2>&1 &
LOAD=$!
sleep 0.3
kill -9 "$SERVER_PID"
wait "$LOAD" 2>/dev/null
sleep 0.5
kill -TERM "$GSOCKD_PID"
wait "$GSOCKD_PID"
is $? 0 "gsockd-tsan exits 0 after an application killed under load and SIGTERM"
set -- "$TMP"/tsan.*
[ ! -e "$1" ]
ok $? "ThreadSanitizer reported nothing"
for f in "$TMP"/tsan.*; do [ -e "$f" ] && grep SUMMARY "$f" | sort | uniq -c | sed 's/^/# /' && sed 's/^/# /' "$f" | head -80; done
grep -q "4 workers" "$TMP/gsockd.log"
ok $? "gsockd said it runs 4 workers"
finish
