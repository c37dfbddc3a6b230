#!/bin/sh
# gsockd's CPU follows its traffic, and no request waits on a sleeping
# bridge. With workers = 1 and 4, on epoll and on io_uring: (1) a trickle
# (one request every 10 ms, paced by bench/loadgen -r) is served with no
# round trip over 50 ms: a worker asleep in epoll or io_uring is woken by
# its socket, and the answer is found by its spin or by the doorbell
# watch; (2) after a second of quiet, when the watch looks least often, a
# GPU client's connect and first round trips (doorbells no socket event
# precedes: only the watch finds them) finish with no round trip over
# 50 ms. (3) An application registered with idle connections costs
# gsockd under 5 % of a core over 2 s.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 300
LOADGEN=$GSOCK_BUILD/bench/loadgen
CPU_ECHO=$GSOCK_BUILD/apps/cpu-echo/cpu-echo-server
plan 11

# io_uring where the kernel gives it: gsockd says which path it took.
start_gsockd --io auto
# gsockd writes its log from its loop: wait for the line after the path's.
for _ in $(seq 100); do
	grep -q 'listening on' "$TMP/gsockd.log" && break
	sleep 0.05
done
URING=$(sed -n 's/.*info: io: \(io_uring\).*/\1/p' "$TMP/gsockd.log" | head -1)
why=$(sed -n 's/.*info: io: epoll (\(.*\))/\1/p' "$TMP/gsockd.log" | head -1)
kill "$GSOCKD_PID"; wait "$GSOCKD_PID" 2>/dev/null

# B: a CPU echo server for the GPU client to reach.
BPORT=$(free_port)
"$CPU_ECHO" -H 127.0.0.1 -p "$BPORT" -t 1 >"$TMP/b.out" 2>&1 &
PIDS="$PIDS $!"
wait_listen "$BPORT"

for io in epoll io_uring; do
	for w in 1 4; do
		what="workers = $w, io = $io"
		if [ $io = io_uring ] && [ -z "$URING" ]; then
			tap_n=$((tap_n + 1)); echo "ok $tap_n - $what: a trickle # SKIP no io_uring here: ${why:-gsockd did not say}"
			tap_n=$((tap_n + 1)); echo "ok $tap_n - $what: after a quiet second # SKIP no io_uring here"
			continue
		fi
		: >"$TMP/gsockd.log"
		WORKERS=$w start_gsockd --io "$io" || break
		start_server -l 127.0.0.1:0 -b 2 -m 4 || break
		line=$("$LOADGEN" -c 2 -t 1 -r 100 -d 1.5 -w 0.2 127.0.0.1 "$PORT" 2>"$TMP/lg.err")
		max=$(echo "$line" | tr ' ' '\n' | sed -n 's/^max_us=//p')
		echo "# $what, trickle: $line"
		[ -n "$max" ] && echo "$line" | grep -q ' missing=0 ' &&
			awk -v m="$max" 'BEGIN { exit !(m < 50000) }'
		ok $? "$what: a trickle of 100 requests a second, each answered within 50 ms (slowest ${max:-none} us)"
		sleep 1.2 # the watch at its slowest
		out=$(timeout 20 "$CLIENT" -i 20 127.0.0.1:"$BPORT" 2>&1)
		cmax=$(echo "$out" | sed -n 's/.* max \([0-9.]*\)$/\1/p')
		echo "# $what, after a quiet second: $out"
		[ -n "$cmax" ] && awk -v m="$cmax" 'BEGIN { exit !(m < 50000) }'
		ok $? "$what: after a quiet second a GPU client connects and its round trips take under 50 ms (slowest ${cmax:-none} us)"
		kill "$SERVER_PID" "$GSOCKD_PID"; wait "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
	done
done

# The same trickle with answer_nap off (a spin from each debt on), and
# with the learnt nap each worker says what it learnt as it stops.
for nap in off learn; do
	: >"$TMP/gsockd.log"
	printf 'answer_nap = "%s"\n' "$nap" >"$TMP/nap.conf"
	GSOCKD_CONF=$TMP/nap.conf WORKERS=2 start_gsockd --io epoll || break
	start_server -l 127.0.0.1:0 -b 2 -m 4 || break
	line=$("$LOADGEN" -c 2 -t 1 -r 100 -d 1.5 -w 0.2 127.0.0.1 "$PORT" 2>"$TMP/lg.err")
	max=$(echo "$line" | tr ' ' '\n' | sed -n 's/^max_us=//p')
	echo "# answer_nap = $nap, trickle: $line"
	kill "$SERVER_PID" "$GSOCKD_PID"; wait "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
	grep "before a spin" "$TMP/gsockd.log" | sed 's/^/# /'
	[ -n "$max" ] && echo "$line" | grep -q ' missing=0 ' &&
		awk -v m="$max" 'BEGIN { exit !(m < 50000) }' &&
		[ "$(grep -c "before a spin.*answer_nap $nap)" "$TMP/gsockd.log")" = 2 ]
	ok $? "answer_nap = $nap: the trickle answered within 50 ms (slowest ${max:-none} us), and both workers' stop lines say $nap"
done
GSOCKD_CONF=

# (3) Idle: an application with idle connections.
: >"$TMP/gsockd.log"
start_gsockd
start_server -l 127.0.0.1:0 -b 2 -m 4
python3 -c '
import socket, sys, time
s = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(6)]
time.sleep(60)' "$PORT" &
IDLE_PID=$!
PIDS="$PIDS $IDLE_PID"
sleep 1.5 # connected, accepted, and quiet
t0=$(awk '{ print $14 + $15 }' "/proc/$GSOCKD_PID/stat")
sleep 2
t1=$(awk '{ print $14 + $15 }' "/proc/$GSOCKD_PID/stat")
hz=$(getconf CLK_TCK)
pct=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" 'BEGIN { printf "%.1f", 100 * (b - a) / hz / 2 }')
awk -v p="$pct" 'BEGIN { exit !(p < 5) }'
ok $? "an application with 6 idle connections costs gsockd $pct % of a core over 2 s (under 5)"
finish
