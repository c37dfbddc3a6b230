#!/bin/sh
# More clients than a g-call server has places for, and none leaving: on
# a 2x H100 host, facever-client -c 512 at 128 blocks printed nothing in
# 20 s (threads stuck in connect() to a full listen queue, the clients in
# the queue never served). Here at 2 blocks: the clients no place is
# freed for within -Q are refused (accepted and closed) and the server
# says how many; the client ends by its duration plus its 2 s grace and
# says what failed and why, also where the server lets them wait (-Q 0);
# a one-shot question is bounded by -W; the echo server refuses a crowd
# at -Q 300 and still serves the ones it holds and a new client after.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
need_facever
time_limit 60
plan 14

FV=$GSOCK_BUILD/apps/facever
G=$FV/facever-gserver-$BACKEND
MCPORT=$(free_port)
PEOPLE=20
# field FILE NAME: a number from a client's summary line, -1 if none.
field() { _v=$(sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$TMP/$1"); echo "${_v:--1}"; }
port_of() { sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/$1.out"; }

# crowd NAME PORT ARGS...: a 2 s load of 300 connections; its output in
# $TMP/NAME, its wall time in ms in CROWD_MS, its status in CROWD_ST.
crowd() {
	_name=$1 _port=$2; shift 2
	_t0=$(now_ms)
	timeout 10 "$FV/facever-client" -s "127.0.0.1:$_port" -p $PEOPLE \
		-c 300 -j 4 -d 2 "$@" >"$TMP/$_name" 2>&1
	CROWD_ST=$?
	CROWD_MS=$(($(now_ms) - _t0))
}

memcached -u "$(id -un)" -l 127.0.0.1 -p "$MCPORT" -c 4096 -t 2 >/dev/null 2>&1 &
PIDS="$PIDS $!"
wait_listen "$MCPORT"
"$FV/facever-enrol" -M "127.0.0.1:$MCPORT" -p $PEOPLE >/dev/null 2>&1
start_gsockd
start_app full "$G" -l 127.0.0.1:0 -M "127.0.0.1:$MCPORT" -b 2
ok $? "facever-gserver ($BACKEND) with 2 places listens (the default -Q)"
GP=$(port_of full)

# 2 s of load, 2 s of grace at most, and the pictures to draw: 5.5 s.
crowd refused "$GP"
ok $(( CROWD_ST != 0 || CROWD_MS > 5500 )) "300 connections at 2 places for 2 s: the client ends in time (status $CROWD_ST, $CROWD_MS ms)"
sed 's/^/#   /' "$TMP/refused"
ok $(( $(field refused ok) < 1 || $(field refused wrong) != 0 )) "the held ones were answered right ($(field refused ok) answers)"
broken=$(field refused conns_broken)
ok $(( broken < 100 )) "the others were closed by the server: $broken connections"
grep -q "requests failed: .* in flight on connections that broke" "$TMP/refused" &&
	grep -q "the server closed or reset $broken connections" "$TMP/refused"
ok $? "the client says which requests failed and why"

crowd after "$GP" -c 2
ok $(( CROWD_ST != 0 || $(field after ok) < 1 || $(field after failed) != 0 )) "then 2 connections are served, none failed"
kill -TERM "$full_PID"; wait "$full_PID"
refused=$(sed -n 's/.*: refused \([0-9]*\) clients: no place .*-Q 0 to let them wait$/\1/p' "$TMP/full.err")
sed 's/^/#   /' "$TMP/full.err"
ok $(( ${refused:--1} < 1 || ${refused:--1} < broken )) "the server says it refused them ($refused clients, -Q 1000)"

# -Q 0: clients wait in the queue as at any full server; the client
# still ends in time and counts what it never got an answer for.
start_app wait "$G" -l 127.0.0.1:0 -M "127.0.0.1:$MCPORT" -b 2 -Q 0
WP=$(port_of wait)
crowd waited "$WP"
ok $(( CROWD_ST != 0 || CROWD_MS > 5500 || $(field waited requests) < 1 )) "-Q 0: the client still ends in time (status $CROWD_ST, $CROWD_MS ms)"
sed 's/^/#   /' "$TMP/waited"
lost=$(( $(field waited requests) - $(field waited ok) ))
ok $(( lost < 1 || lost != $(field waited failed) )) "what it sent and got no answer for is failed ($lost)"
grep -q "unanswered 2 s after the last request" "$TMP/waited"
ok $? "and said: unanswered 2 s after the last request"

# One question while the one place is held by a load that never lets go.
kill -TERM "$wait_PID"; wait "$wait_PID"
start_app one "$G" -l 127.0.0.1:0 -M "127.0.0.1:$MCPORT" -b 1 -Q 0
OP=$(port_of one)
"$FV/facever-client" -s "127.0.0.1:$OP" -p $PEOPLE -c 1 -j 1 -d 5 >/dev/null 2>&1 &
HOLD=$!
PIDS="$PIDS $HOLD"
sleep 1
python3 "$GSOCK_SRC/t/apps_raw.py" pgm "$TMP/a.pgm" 1
t0=$(now_ms)
timeout 20 "$FV/facever-client" -s "127.0.0.1:$OP" -W 1 --id 1 --image "$TMP/a.pgm" >"$TMP/one" 2>&1
st=$?
t1=$(now_ms)
sed 's/^/#   /' "$TMP/one"
ok $(( st != 69 || t1 - t0 > 3000 )) "a one-shot question with no place for it: status 69 after -W 1 ($((t1 - t0)) ms)"
grep -q "no answer from 127.0.0.1:$OP: none within the wait" "$TMP/one"
ok $? "and it says there was no answer within the wait"
kill "$HOLD" 2>/dev/null

# The echo server: a crowd of 60 at 2 x 8 places, -Q 300.
start_app echo "$SERVER" -l 127.0.0.1:0 -b 2 -m 8 -Q 300
timeout 30 python3 "$GSOCK_SRC/t/ctl_abuse.py" crowd "$(port_of echo)" 60 >"$TMP/crowd" 2>&1
is "$(head -1 "$TMP/crowd")" "echoed 16 waiting 0 other 44" "echo, 60 clients at 2 x 8 places, -Q 300: 16 served, 44 refused"
is "$(sed -n 2,3p "$TMP/crowd" | tr '\n' ' ')" "again 16 after ok " "the 16 go on being served; once they leave, a new client is"
finish
