#!/bin/sh
# bench/loadgen -r, the open loop the CPU benchmarks use, keeps its
# schedule against a server that stalls: the CPU echo server stopped
# (SIGSTOP) for 300 ms in the middle of a 2 s run at 1000 requests/s.
# The requests still go out on time (offered rate as asked), every one is
# answered after the stall, and the latencies hold the stall (p99.9 over
# 250 ms: counted from when each request was due, not from when the
# stopped server let it be sent). Against a server that never answers,
# the missing requests fail the run and are counted.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 120
LOADGEN=$GSOCK_BUILD/bench/loadgen
CPU_ECHO=$GSOCK_BUILD/apps/cpu-echo/cpu-echo-server
plan 5
val() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

BPORT=$(free_port)
"$CPU_ECHO" -H 127.0.0.1 -p "$BPORT" -t 1 >"$TMP/b.out" 2>&1 &
BPID=$!
PIDS="$PIDS $BPID"
wait_listen "$BPORT"
(sleep 1.2; kill -STOP "$BPID"; sleep 0.3; kill -CONT "$BPID") &
line=$("$LOADGEN" -c 4 -t 1 -r 1000 -d 2 -w 0.2 127.0.0.1 "$BPORT" 2>"$TMP/lg.err")
st=$?
echo "# $line"
ok $st "the run succeeds: every request answered, every byte checked"
awk -v r="$(val "$line" offered_rps)" 'BEGIN { exit !(r >= 990 && r <= 1010) }'
ok $? "requests went out at the rate asked through the stall (offered $(val "$line" offered_rps)/s)"
awk -v r="$(val "$line" rps)" 'BEGIN { exit !(r >= 990 && r <= 1010) }'
ok $? "and all of them came back ($(val "$line" rps)/s of the measured seconds)"
awk -v p="$(val "$line" p999_us)" 'BEGIN { exit !(p > 250000) }'
ok $? "the stall is in the latencies: p99.9 $(val "$line" p999_us) us"

# A server that takes connections and never answers.
SPORT=$(free_port)
python3 -c '
import socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(8)
c = [l.accept() for _ in range(2)]
time.sleep(60)' "$SPORT" &
PIDS="$PIDS $!"
wait_listen "$SPORT"
line=$(timeout 30 "$LOADGEN" -c 2 -t 1 -r 100 -d 0.5 -w 0 127.0.0.1 "$SPORT" 2>"$TMP/lg2.err")
st=$?
echo "# $line"; sed 's/^/# /' "$TMP/lg2.err"
[ $st -ne 0 ] && [ "$(val "$line" missing)" = 50 ] && grep -q "got no answer within 10 s" "$TMP/lg2.err"
ok $? "a server that never answers fails the run, its 50 requests counted missing"
finish
