#!/bin/sh
# gsockd's workers. The rest of the suite runs gsockd with 4 workers
# (lib.sh); here: (1) the bridge tests again with one worker, each file's
# verdict as one line; (2) three GPU applications with many sockets each,
# spread over 4 workers, under concurrent clients of random sizes, every
# byte checked; one application killed while all workers are busy with
# its sockets and the others': its sockets are freed, its port can be
# bound again, the others' clients are unharmed; gsockd's descriptors
# return to where they were.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 600
ONE_WORKER="echo-integrity peer-close-eof gpu-client app-killed bridge-death bad-input block-copy"
plan $(( $(echo $ONE_WORKER | wc -w) + 8 ))

rerun_tests GSOCK_TEST_WORKERS=1 "with one worker" $ONE_WORKER

start_gsockd
sleep 0.2
fds_before=$(ls /proc/"$GSOCKD_PID"/fd | wc -l)
for k in 1 2 3; do
	start_server -l 127.0.0.1:0 -b 6 -m 12 || break
	eval "PORT$k=$PORT SPID$k=$SERVER_PID"
	cp "$TMP/server.out" "$TMP/server$k.out"
done
[ -n "${PORT3:-}" ]
ok $? "three GPU echo servers (6 blocks x 12 connections each) registered"
for k in 1 2 3; do
	eval "port=\$PORT$k"
	timeout 120 python3 "$PY" concurrent "$port" 60 "2$k" >"$TMP/load$k" 2>&1 &
	eval "LOAD$k=$!"
done
fail=0
for k in 1 2 3; do eval "wait \$LOAD$k" || fail=1; done
ok $fail "180 concurrent clients of random sizes (1 B to 1 MiB) over 3 applications: every byte back"
cat "$TMP"/load? | sed 's/^/#   /'

# Every worker busy with every application's sockets; kill the second.
for k in 1 2 3; do
	eval "port=\$PORT$k"
	timeout 120 python3 "$PY" concurrent "$port" 48 "3$k" >"$TMP/kill$k" 2>&1 &
	eval "LOAD$k=$!"
done
sleep 0.4
kill -9 "$SPID2"
wait "$LOAD1"; st1=$?
wait "$LOAD3"; st3=$?
wait "$LOAD2"
[ $st1 -eq 0 ] && [ $st3 -eq 0 ]
ok $? "an application killed under load: the other two applications' clients get every byte"
for _ in $(seq 100); do grep -q "application pid $SPID2 is gone" "$TMP/gsockd.log" && break; sleep 0.05; done
grep -q "application pid $SPID2 is gone" "$TMP/gsockd.log"
ok $? "gsockd logs that it is gone"
python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()' "$PORT2"
ok $? "its port can be bound again at once"
timeout 60 python3 "$PY" sizes "$PORT1" 1 70000 >/dev/null 2>&1 &&
	timeout 60 python3 "$PY" sizes "$PORT3" 1 70000 >/dev/null 2>&1
ok $? "the survivors still serve"
kill -9 "$SPID1" "$SPID3"
is "$(fds_settle "$GSOCKD_PID" "$fds_before")" "$fds_before" "with every application gone, gsockd holds the descriptors it started with"
grep -q '/memfd:gsock-arena' /proc/"$GSOCKD_PID"/maps
ok $((! $?)) "and maps no arena"
finish
