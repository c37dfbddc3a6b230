#!/bin/sh
# Unmodified CPU clients (nc, python3) against the GPU echo server: payloads
# from 1 B to 16 MiB and 64 concurrent connections come back byte-exact.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
command -v nc >/dev/null || skip_all "nc (netcat-openbsd) is not installed"
time_limit 300
plan 8

start_gsockd
start_server -l 127.0.0.1:0 -b 72
ok $? "GPU echo server listens ($BACKEND backend, 72 blocks)"

got=$(printf 'hello gsock\n' | timeout 10 nc -N 127.0.0.1 "$PORT")
is "$got" "hello gsock" "nc: a line comes back"

head -c 4194304 /dev/urandom >"$TMP/in"
timeout 60 nc -N 127.0.0.1 "$PORT" <"$TMP/in" >"$TMP/out"
cmp -s "$TMP/in" "$TMP/out"
ok $? "nc: 4 MiB of random bytes come back intact"

timeout 120 python3 "$PY" sizes "$PORT" 1 2 100 4095 4096 65535 65536 65537 1000000 >"$TMP/sizes" 2>&1
ok $? "python3: 1 B .. 1 MB, each intact"
sed 's/^/# /' "$TMP/sizes"

timeout 120 python3 "$PY" sizes "$PORT" 16777216 >"$TMP/big" 2>&1
ok $? "python3: 16 MiB intact"

timeout 200 python3 "$PY" concurrent "$PORT" 64 "$$" >"$TMP/conc" 2>&1
ok $? "python3: 64 concurrent connections, random sizes, all intact"
sed 's/^/# /' "$TMP/conc"

kill -0 "$SERVER_PID" && kill -0 "$GSOCKD_PID"
ok $? "server and gsockd still run"

# Fewer blocks than clients: socket ids freed by one block's gclose are
# reused by another block's gaccept at once (a race seen on 2026-11-22).
start_server -l 127.0.0.1:0 -b 4
bad=0
for round in 1 2 3 4; do
	timeout 60 python3 "$PY" sizes "$PORT" 1 100 4096 65537 300000 >"$TMP/s$round" 2>&1 &
	p1=$!
	timeout 60 python3 "$PY" concurrent "$PORT" 6 "$round" >"$TMP/c$round" 2>&1 || bad=1
	wait $p1 || bad=1
done
ok $bad "4-block server, 4 rounds of sequential and 6 concurrent clients: all intact"
finish
