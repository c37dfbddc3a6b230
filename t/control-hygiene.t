#!/bin/sh
# The control socket under abuse: connections that never say hello are
# dropped (the oldest first when max_apps of them wait, all of them after
# hello_timeout_ms) with a reply that says why, and never lock a real
# application out; a refusal reaches the application with its reason;
# limits on an arena's sockets and slots are named; gsockd's log holds
# back a flood of like lines and says how many it held; more clients than
# a GPU server holds wait their turn (-Q 0) without breaking the others.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
plan 27

ABUSE="python3 $GSOCK_SRC/t/ctl_abuse.py"
GSOCKD_CONF=$TMP/gsock.conf
cat >"$GSOCKD_CONF" <<EOF
max_apps = 4
hello_timeout_ms = 500
max_sockets = 4096
max_slots = 1024
EOF
start_gsockd

# 70 connections that never say hello, and a real application after them.
$ABUSE idle "$GSOCK_CONTROL" 70 6 >"$TMP/idle" 2>"$TMP/idle.err" &
IDLE=$!
sleep 0.3
start_server -l 127.0.0.1:0 -b 2
ok $? "a GPU server registers while 70 connections hold their hello back"
timeout 30 python3 "$PY" sizes "$PORT" 10 10000 >/dev/null 2>&1
ok $? "and serves its clients"
wait $IDLE
is "$(grep -c '^dropped' "$TMP/idle")" 70 "gsockd dropped all 70 silent connections"
is "$(grep -c '^dropped -' "$TMP/idle")" 70 "each with a refusal before the close"
n=$(grep -c '^dropped -110 .* no hello within 500 ms' "$TMP/idle")
[ "$n" -ge 1 ]
ok $? "the last ones after hello_timeout_ms, told so ($n)"
n=$(grep -c '^dropped -11 .*newer connections wait (max_apps 4)' "$TMP/idle")
[ "$n" -ge 1 ]
ok $? "the oldest ones when max_apps wait, told so ($n)"
late=$(awk '$1 == "dropped" && $3 > m { m = $3 } END { print m + 0 }' "$TMP/idle")
[ "$late" -lt 3000 ]
ok $? "none waited much past the timeout (last dropped after $late ms)"

# The log: at most BR_LOG_BURST (10) like lines a second, and the count.
sleep 1.2
n=$(grep -c 'dropping the control connection of pid' "$TMP/gsockd.log")
[ "$n" -ge 1 ] && [ "$n" -le 30 ]
ok $? "70 drops made $n log lines (at most 10 a second)"
grep -Eq 'not logged|more like it not logged' "$TMP/gsockd.log"
ok $? "and the log says how many lines it held back"

# max_apps: the echo server and 3 more fit; the next is refused with why.
$ABUSE hold "$GSOCK_CONTROL" 4 8 >"$TMP/hold" 2>&1 &
HOLD=$!
for _ in $(seq 200); do [ "$(wc -l <"$TMP/hold")" -ge 4 ] && break; sleep 0.05; done
is "$(grep -c '^registered' "$TMP/hold")" 3 "3 more applications register beside the server (max_apps 4)"
grep -q '^refused -87 too many applications: 4 are registered (max_apps in gsock.conf)' "$TMP/hold"
ok $? "the fifth is refused with the reason ($(grep refused "$TMP/hold" | head -1))"
timeout 10 "$SERVER" -l 127.0.0.1:0 -b 1 >"$TMP/s2.out" 2>"$TMP/s2.err" &
S2=$!
wait $S2
grep -q 'too many applications.*max_apps' "$TMP/s2.err"
ok $? "a GPU server refused for max_apps says so: $(head -1 "$TMP/s2.err")"
wait $HOLD

# Limits on one arena.
$ABUSE big "$GSOCK_CONTROL" 5000 4 >"$TMP/big" 2>&1
grep -q '^refused -7 the arena asks for 5000 sockets.*max_sockets' "$TMP/big"
ok $? "5000 sockets are refused naming max_sockets: $(cat "$TMP/big")"
$ABUSE big "$GSOCK_CONTROL" 4 2000 >"$TMP/big" 2>&1
grep -q '^refused -7 .*2000 command slots.*max_slots' "$TMP/big"
ok $? "2000 slots are refused naming max_slots: $(cat "$TMP/big")"
$ABUSE big "$GSOCK_CONTROL" 4096 1024 >"$TMP/big" 2>&1
is "$(cat "$TMP/big")" registered "the limits themselves are allowed"

# An application's own timer interrupts its registration's waits (a
# SIGALRM without SA_RESTART every 20 us): never taken for a refusal.
timeout 120 "$GSOCK_BUILD/t/register-signals" 1000 20 >"$TMP/sig" 2>&1
grep -q '^registered 1000 of 1000, [1-9][0-9]* signals$' "$TMP/sig"
ok $? "1000 registrations under a signal every 20 us: $(cat "$TMP/sig")"

# Another user's process listening where gsockd would (anyone can bind a
# path in /tmp first) is never handed an arena: libgsock and gsock-stat
# ask the kernel who listens (SO_PEERCRED). Needs root, to listen as nobody.
if [ "$(id -u)" = 0 ]; then
	SQ=$TMP/squat.sock
	timeout 120 $ABUSE squat "$SQ" 65534 100 >"$TMP/squat" 2>"$TMP/squat.err" &
	SQP=$!
	PIDS="$PIDS $SQP"
	for _ in $(seq 100); do grep -q listening "$TMP/squat" && break; sleep 0.05; done
	GSOCK_CONTROL=$SQ timeout 30 "$SERVER" -l 127.0.0.1:0 -b 1 >/dev/null 2>"$TMP/squat-app.err"
	st=$?
	# gsock-stat as a third user (root may read any user's gsockd, at a
	# path it names)
	chmod 711 "$TMP"
	cp "$GSOCK_BUILD/bridge/gsock-stat" "$TMP/gsock-stat" && chmod 755 "$TMP/gsock-stat"
	python3 -c 'import os, sys; os.setgroups([]); os.setgid(1); os.setuid(1); os.execv(sys.argv[1], sys.argv[1:])' \
		"$TMP/gsock-stat" -s "$SQ" >/dev/null 2>"$TMP/squat-stat.err"
	st2=$?
	timeout 10 "$GSOCKD" --control "$SQ" >/dev/null 2>"$TMP/squat-gsockd.err"
	st3=$?
	[ $st != 0 ] && [ $st != 124 ] && grep -q "held by uid 65534 .*not this user's gsockd" "$TMP/squat-app.err" &&
		[ $st2 != 0 ] && grep -q "held by uid 65534" "$TMP/squat-stat.err"
	ok $? "an application, and gsock-stat of a third user, refuse a control socket held by another user: $(head -1 "$TMP/squat-app.err")"
	[ $st3 = 69 ] && grep -q "cannot take the control socket: .*held by uid 65534" "$TMP/squat-gsockd.err"
	ok $? "gsockd does not start there, and says why: $(head -1 "$TMP/squat-gsockd.err")"
	kill $SQP
	wait $SQP
	is "$(grep -c '^arena' "$TMP/squat")" 0 "and the impostor got no arena"
	[ -s "$TMP/squat.err" ] && sed 's/^/#   /' "$TMP/squat.err"
else
	for w in "an application refuses another user's control socket" "gsockd does not start there" "and hands it no arena"; do
		tap_n=$((tap_n + 1))
		echo "ok $tap_n # SKIP $w: needs root, to listen as another user"
	done
fi

# A stuck gsockd (stopped, or not gsockd at all) holds a registration for
# 10 s at most, signals or not: 10 s to connect past a full listen queue,
# 10 s for the welcome, 10 s for the verdict on the arena. All at once.
ME=$(id -u)
M=""
for how in full silent greet; do
	timeout 120 $ABUSE squat "$TMP/$how.sock" "$ME" 100 $how >"$TMP/$how" 2>&1 &
	M="$M $!"
done
PIDS="$PIDS $M"
for how in full silent greet; do
	for _ in $(seq 100); do grep -q listening "$TMP/$how" && break; sleep 0.05; done
done
A=""
for how in full silent greet; do
	GSOCK_CONTROL=$TMP/$how.sock timeout 60 "$GSOCK_BUILD/t/register-signals" 1 50 >"$TMP/$how.app" 2>&1 &
	A="$A $!"
done
set -- $A
wait $1
s1=$?
wait $2
s2=$?
wait $3
s3=$?
kill $M
[ $s1 = 1 ] && grep -q "its listen queue stayed full for 10 s" "$TMP/full.app"
ok $? "a control socket whose listen queue stays full: gsock_init gives up after 10 s, under signals: $(cat "$TMP/full.app")"
[ $s2 = 1 ] && grep -q "did not greet within 10 s" "$TMP/silent.app"
ok $? "one that never greets: likewise: $(cat "$TMP/silent.app")"
[ $s3 = 1 ] && grep -q "did not answer the arena within 10 s" "$TMP/greet.app" && grep -q "^arena" "$TMP/greet"
ok $? "one that takes the arena and never answers: likewise: $(cat "$TMP/greet.app")"

# More clients than a GPU server holds, with -Q 0: the ones it holds are
# served, the rest wait in the listen queue (as at any full server),
# nothing breaks. (By default they are refused: t/crowded-server.t.)
"$SERVER" -l 127.0.0.1:0 -b 2 -m 8 -Q 0 >"$TMP/crowd-server.out" 2>&1 &
CS=$!
PIDS="$PIDS $CS"
for _ in $(seq 100); do grep -q 'listening on' "$TMP/crowd-server.out" && break; sleep 0.05; done
CPORT=$(sed -n 's/.*listening on .*:\([0-9]*\) (.*/\1/p' "$TMP/crowd-server.out")
timeout 60 $ABUSE crowd "$CPORT" 60 >"$TMP/crowd" 2>&1
is "$(head -1 "$TMP/crowd")" "echoed 16 waiting 44 other 0" "60 clients at a server of 2 x 8 connections, -Q 0: 16 served, 44 wait, none broken"
is "$(sed -n 2p "$TMP/crowd")" "again 16" "the 16 go on being served"
is "$(sed -n 3p "$TMP/crowd")" "after ok" "once they leave, a new client is served"
kill "$CS"
kill -0 "$GSOCKD_PID"
ok $? "gsockd still runs"
timeout 30 python3 "$PY" sizes "$PORT" 10 100000 >/dev/null 2>&1
ok $? "and the GPU server still serves"
finish
