#!/bin/sh
# The GPU echo client against an unmodified CPU echo server (python3) over
# tcp IPv4, IPv6 and unix, and against the GPU echo server over tcp and
# unix: every byte checked on the device.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 300
plan 7

start_gsockd
start_helper echo-server 127.0.0.1:0
timeout 60 "$CLIENT" -b 4 -n 1000 -i 50 "127.0.0.1:$HELPER_PORT" >"$TMP/c1" 2>&1
ok $? "GPU client -> python3 echo server, tcp IPv4, 4 connections" || sed 's/^/# /' "$TMP/c1"
sed 's/^/# /' "$TMP/c1"
timeout 60 "$CLIENT" -b 2 -n 3000000 -i 2 "127.0.0.1:$HELPER_PORT" >"$TMP/c2" 2>&1
ok $? "GPU client -> python3, 3 MB round trips (larger than the rings)" || sed 's/^/# /' "$TMP/c2"
kill "$HELPER_PID"

if python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
	start_helper echo-server '[::1]:0'
	timeout 60 "$CLIENT" -b 2 -n 512 -i 20 "[::1]:$HELPER_PORT" >"$TMP/c3" 2>&1
	ok $? "GPU client -> python3 echo server, tcp IPv6" || sed 's/^/# /' "$TMP/c3"
	kill "$HELPER_PID"
else
	echo "ok 3 # SKIP no IPv6 loopback"; tap_n=3
fi

start_helper echo-server "$TMP/py.sock"
timeout 60 "$CLIENT" -b 2 -n 777 -i 20 "$TMP/py.sock" >"$TMP/c4" 2>&1
ok $? "GPU client -> python3 echo server, unix" || sed 's/^/# /' "$TMP/c4"

start_server -l 127.0.0.1:0 -b 8
timeout 60 "$CLIENT" -b 6 -n 64 -i 200 "127.0.0.1:$PORT" >"$TMP/c5" 2>&1
ok $? "GPU client -> GPU server, tcp, 6 connections" || sed 's/^/# /' "$TMP/c5"
sed 's/^/# /' "$TMP/c5"
timeout 60 "$CLIENT" -b 2 -n 200000 -i 5 "127.0.0.1:$PORT" >"$TMP/c6" 2>&1
ok $? "GPU client -> GPU server, tcp, 200 kB round trips" || sed 's/^/# /' "$TMP/c6"
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null

start_server -l "$TMP/gpu.sock" -b 4
timeout 60 "$CLIENT" -b 3 -n 4096 -i 50 "$TMP/gpu.sock" >"$TMP/c7" 2>&1
ok $? "GPU client -> GPU server, unix" || sed 's/^/# /' "$TMP/c7"
finish
