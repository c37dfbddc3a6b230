#!/bin/sh
# A GPU application killed with SIGKILL: gsockd notices, closes its
# sockets (clients see the connection end), unmaps its arena, frees its
# descriptors, and the port can be bound again at once.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 60
plan 7

start_gsockd
sleep 0.2
fds_before=$(ls /proc/"$GSOCKD_PID"/fd | wc -l)
start_server -l 127.0.0.1:0 -b 4
python3 - "$PORT" >"$TMP/held" 2>&1 <<'PY' &
import socket, sys, time
conns = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(3)]
for c in conns:
    c.sendall(b"x"); c.recv(1)
print("held", flush=True)
t0 = time.time()
for c in conns:
    c.settimeout(10)
    try:
        d = c.recv(1)
    except OSError:
        d = b""
print("ended" if d == b"" else "data", round(time.time() - t0, 2), flush=True)
PY
HELD=$!
PIDS="$PIDS $HELD"
for _ in $(seq 100); do grep -q held "$TMP/held" && break; sleep 0.05; done
grep -q '/memfd:gsock-arena' /proc/"$GSOCKD_PID"/maps
ok $? "gsockd maps the application's arena"

kill -9 "$SERVER_PID"
for _ in $(seq 100); do grep -q "is gone" "$TMP/gsockd.log" && break; sleep 0.05; done
grep -q "application pid $SERVER_PID is gone" "$TMP/gsockd.log"
ok $? "gsockd logs that the application is gone"
wait "$HELD"
grep -q '^ended' "$TMP/held"
ok $? "its clients see their connections end"
sleep 0.2
is "$(ls /proc/"$GSOCKD_PID"/fd | wc -l)" "$fds_before" "gsockd holds no descriptor of it"
grep -q '/memfd:gsock-arena' /proc/"$GSOCKD_PID"/maps
ok $((! $?)) "the arena is unmapped"

python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()' "$PORT"
ok $? "a CPU server binds the port again at once"
start_server -l "127.0.0.1:$PORT" -b 2
ok $? "and so does a new GPU server"
finish
