#!/bin/sh
# gsockd under valgrind memcheck: echo traffic, a GPU client, hostile
# applications, an application killed, then SIGTERM: no memory errors,
# no definite leaks, exit status 0. The epoll data path: valgrind (3.19)
# does not treat a wait in io_uring_enter as blocking, so one sleeping
# worker holds every other thread; ThreadSanitizer (t/tsan-bridge.t) and
# the rest of the suite run the io_uring path.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
command -v valgrind >/dev/null || skip_all "valgrind is not installed"
time_limit 300
plan 6

GSOCKD_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --log-file=$TMP/vg.log"
start_gsockd --io epoll
start_server -l 127.0.0.1:0 -b 8
ok $? "GPU echo server runs on gsockd under valgrind"
timeout 120 python3 "$PY" sizes "$PORT" 1 5000 300000 >/dev/null 2>&1
ok $? "python3 clients get their bytes back"
timeout 120 "$CLIENT" -b 2 -n 2000 -i 20 "127.0.0.1:$PORT" >/dev/null 2>&1
ok $? "the GPU client gets its bytes back"
timeout 120 python3 "$GSOCK_SRC/t/bad_arena.py" "$GSOCK_CONTROL" "$PORT" >"$TMP/bad" 2>&1
ok $? "hostile applications are all refused"
kill -9 "$SERVER_PID"
sleep 1
kill -TERM "$GSOCKD_PID"
wait "$GSOCKD_PID"
is $? 0 "gsockd exits 0: valgrind found no errors and no definite leaks"
[ ! -s "$TMP/vg.log" ]
ok $? "valgrind's log is empty"
sed 's/^/# /' "$TMP/vg.log" | head -40
finish
