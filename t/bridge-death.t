#!/bin/sh
# gsockd killed with SIGKILL: every g-call in flight (gaccept and grecv in
# the server, grecv in a client) returns an error within 1 s and the
# applications exit cleanly with a message.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 60
plan 9

start_gsockd
start_server -l 127.0.0.1:0 -b 4
start_helper silent-server
# A client connection the server's block waits on in grecv.
python3 -c 'import socket,sys,time; s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); time.sleep(60)' "$PORT" &
PIDS="$PIDS $!"
"$PROBE" recv "127.0.0.1:$HELPER_PORT" >"$TMP/probe" 2>"$TMP/probe.err" &
PROBE_PID=$!
PIDS="$PIDS $PROBE_PID"
for _ in $(seq 100); do grep -q '^connect 0' "$TMP/probe" 2>/dev/null && break; sleep 0.05; done
# The probe prints connect only when it ends; wait for its connection instead.
sleep 1
kill -0 "$PROBE_PID"
ok $? "a GPU client is blocked in grecv on a silent peer"

t0=$(now_ms)
kill -9 "$GSOCKD_PID"
server_done="" probe_done=""
while [ $(( $(now_ms) - t0 )) -lt 5000 ]; do
	[ -z "$server_done" ] && ! kill -0 "$SERVER_PID" 2>/dev/null && server_done=$(( $(now_ms) - t0 ))
	[ -z "$probe_done" ] && ! kill -0 "$PROBE_PID" 2>/dev/null && probe_done=$(( $(now_ms) - t0 ))
	[ -n "$server_done" ] && [ -n "$probe_done" ] && break
	sleep 0.02
done
echo "# server exited after ${server_done:-?} ms, client after ${probe_done:-?} ms"
[ -n "$server_done" ] && [ "$server_done" -le 1000 ]
ok $? "the server's kernel ended within 1 s"
[ -n "$probe_done" ] && [ "$probe_done" -le 1000 ]
ok $? "the client's kernel ended within 1 s"
wait "$SERVER_PID"; st=$?
is "$st" 69 "the server exits with EX_UNAVAILABLE"
grep -q "gsockd went away" "$TMP/server.err"
ok $? "and says gsockd went away"
wait "$PROBE_PID"
is "$(probe_value "$TMP/probe" end)" -103 "the client's grecv returned -ECONNABORTED"
is "$(probe_value "$TMP/probe" send)" -103 "and its next gsend too"

# gsockd stopped with SIGTERM closes its sockets before the applications
# learn it is gone: a gaccept waiting on a listener it closed says
# -ECONNABORTED at once (it said -EBADF, and only the next call
# -ECONNABORTED).
start_gsockd || exit 1
P=$(free_port)
"$PROBE" send "127.0.0.1:$P" >"$TMP/acc" 2>"$TMP/acc.err" &
ACC_PID=$!
PIDS="$PIDS $ACC_PID"
wait_listen "$P"
kill -TERM "$GSOCKD_PID"
t0=$(now_ms)
while kill -0 "$ACC_PID" 2>/dev/null && [ $(( $(now_ms) - t0 )) -lt 5000 ]; do sleep 0.02; done
dt=$(( $(now_ms) - t0 ))
! kill -0 "$ACC_PID" 2>/dev/null && [ "$dt" -le 1000 ]
ok $? "gsockd stopped: the GPU server blocked in gaccept ends within 1 s ($dt ms)"
is "$(probe_value "$TMP/acc" accept)" -103 "its gaccept returned -ECONNABORTED"
finish
