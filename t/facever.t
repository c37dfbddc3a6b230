#!/bin/sh
# Face verification end to end with a real memcached: the g-call server G
# (the backend under test) and the CPU server P give every verdict right;
# malformed requests get an error answer or a closed connection and the
# servers go on; memcached killed, restarted or stopped costs error
# answers, never a hang; G and P share one port, and killing P leaves G
# serving with no failed request beyond those P had in flight.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
need_facever
time_limit 240
plan 30

FV=$GSOCK_BUILD/apps/facever
G=$FV/facever-gserver-$BACKEND
RAW="python3 $GSOCK_SRC/t/apps_raw.py"
MCPORT=$(free_port)
MC=127.0.0.1:$MCPORT
PEOPLE=40

start_memcached() {
	memcached -u "$(id -un)" -l 127.0.0.1 -p "$MCPORT" -c 4096 -t 2 >/dev/null 2>&1 &
	MC_PID=$!
	PIDS="$PIDS $MC_PID"
	wait_listen "$MCPORT"
}

# client NAME PORT ARGS...: a load run; its summary line goes to $TMP/NAME.
client() {
	_name=$1 _port=$2; shift 2
	timeout 60 "$FV/facever-client" -s "127.0.0.1:$_port" -p $PEOPLE "$@" >"$TMP/$_name" 2>&1
}
field() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$TMP/$1"; }

start_memcached
"$FV/facever-enrol" -M "$MC" -p $PEOPLE >"$TMP/enrol" 2>&1
ok $? "facever-enrol stores $PEOPLE people in memcached"
start_gsockd
GPORT=$(free_port)
start_app gsrv "$G" -l "127.0.0.1:$GPORT" -M "$MC" -b 8 -w 500
ok $? "facever-gserver ($BACKEND) listens"
PPORT=$(free_port)
start_app psrv "$FV/facever-pserver" -l "127.0.0.1:$PPORT" -M "$MC" -t 2
ok $? "facever-pserver listens"

# Right verdicts: genuine, impostors, unknown ids, two picture sizes.
client g1 "$GPORT" -c 8 -n 600 -i 0.3 -u 0.1
ok $? "G: 600 requests, every answer as expected"
is "$(field g1 ok)" 600 "G: 600 answers checked right"
client p1 "$PPORT" -c 8 -n 600 -i 0.3 -u 0.1
ok $? "P: 600 requests, every answer as expected"
is "$(field p1 ok)" 600 "P: 600 answers checked right"
"$FV/facever-enrol" -M "$MC" -p 10 -S 256 -e 5 >/dev/null 2>&1 &&
	client g256 "$GPORT" -c 4 -n 100 -S 256 -e 5 -p 10
ok $? "G: 256x256 pictures judged right"
"$FV/facever-enrol" -M "$MC" -p $PEOPLE >/dev/null 2>&1 # ids 0..9 again

# A picture from a PGM file: itself matches, another does not.
$RAW pgm "$TMP/a.pgm" 1 && $RAW pgm "$TMP/b.pgm" 2
"$FV/facever-enrol" -M "$MC" --id 777 --image "$TMP/a.pgm" >/dev/null 2>&1
ok $? "a PGM picture is enrolled as id 777"
is "$("$FV/facever-client" -s "127.0.0.1:$GPORT" --id 777 --image "$TMP/a.pgm" | cut -d' ' -f1,2)" "match 0.0000" "G: the same PGM picture matches at distance 0"
is "$("$FV/facever-client" -s "127.0.0.1:$PPORT" --id 777 --image "$TMP/b.pgm" | cut -d' ' -f1)" "no-match" "P: another PGM picture does not match"

# Malformed requests: an error answer and a closed connection, or a cut.
for srv in G:$GPORT P:$PPORT; do
	name=${srv%%:*} port=${srv#*:}
	is "$($RAW badmagic "$port")" "status -4 eof" "$name: a wrong magic gets FV_E_PROTO and the connection closes"
	is "$($RAW badsize "$port")" "status -2 eof" "$name: a 5000-pixel side gets FV_E_SIZE and the connection closes"
	is "$($RAW pipelined "$port")" "1:-1 2:-1 3:-4 eof" "$name: pipelined requests before a bad one are answered first, in order"
	$RAW truncated "$port" >/dev/null
done
cut=$($RAW stall "$GPORT" 10)
ms=$(echo "$cut" | awk '/^closed after/ { printf "%d", $3 * 1000 }')
ok $(( ${ms:-0} < 400 || ${ms:-0} > 4000 )) "G: a picture that stops coming is cut by the 0.5 s timeout ($cut)"
client g2 "$GPORT" -c 8 -n 200 && client p2 "$PPORT" -c 8 -n 200
ok $? "after the malformed requests both servers still answer right"

# memcached stopped: error answers within the timeout, no hang.
kill -STOP "$MC_PID"
t0=$(now_ms)
client gstop "$GPORT" -c 2 -n 4 -i 0
t1=$(now_ms)
# Seen once in CI (the client waited its 60 s); what gsockd held then:
[ "$(field gstop store_errors)" = 4 ] || {
	sed 's/^/#   client: /' "$TMP/gstop" | tail -5
	"$GSOCK_BUILD/bridge/gsock-stat" 2>&1 | sed 's/^/#   /'
}
kill -CONT "$MC_PID"
is "$(field gstop store_errors)" 4 "G: with memcached stopped, 4 requests get FV_E_STORE"
ok $(( t1 - t0 > 8000 )) "and all came back within 8 s ($((t1 - t0)) ms)"

# memcached killed and restarted under load (until the population is
# stored again, genuine claims get FV_E_UNKNOWN: allowed here).
client gkill "$GPORT" -c 8 -d 4 -i 0.3 & CK=$!
client pkill "$PPORT" -c 8 -d 4 -i 0.3 & CP=$!
sleep 1
kill -9 "$MC_PID"; wait "$MC_PID" 2>/dev/null
sleep 1
start_memcached && "$FV/facever-enrol" -M "$MC" -p $PEOPLE >/dev/null 2>&1
wait $CK; wait $CP
for n in G:gkill P:pkill; do
	f=${n#*:}
	ok $(( $(field $f store_errors) == 0 || $(field $f wrong) != 0 ||
		$(field $f failed) != 0 || $(field $f requests) == 0 )) \
		"${n%%:*}: memcached gone gives FV_E_STORE answers ($(field $f store_errors)), no wrong verdict, no lost request"
done
client g3 "$GPORT" -c 8 -n 300 && client p3 "$PPORT" -c 8 -n 300
ok $? "with memcached back, G and P answer every request right again"

# All processors on one port: G and P share it (SO_REUSEPORT).
SPORT=$(free_port)
start_app gshare "$G" -l "127.0.0.1:$SPORT" -M "$MC" -b 32 -P
start_app pshare "$FV/facever-pserver" -l "127.0.0.1:$SPORT" -M "$MC" -t 2
ok $? "G and P listen on the same port $SPORT"
client share "$SPORT" -c 32 -n 2000
ok $(( $? != 0 || $(field share failed) != 0 || $(field share ok) != 2000 )) "2000 requests over 32 connections to the shared port, every answer right, none lost"
client sharekill "$SPORT" -c 16 -d 4 -R & CS=$!
sleep 1.5
kill -9 "$pshare_PID"; wait "$pshare_PID" 2>/dev/null
wait $CS
st=$?
ok $st "P killed under load: the client goes on against G, no wrong answer"
failed=$(field sharekill failed)
# G has a block for each of the 16 connections. Each may lose what it had
# in flight on P, and a connection remade while P's sockets were being
# torn down may land in P's backlog and be reset once more.
ok $(( failed > 32 )) "only requests P had in flight failed ($failed, at most 2 x 16)"
ok $(( $(field sharekill ok) < 100 )) "and G went on serving ($(field sharekill ok) right answers)"
kill -TERM "$gshare_PID"; wait "$gshare_PID" 2>/dev/null
g_served=$(sed -n 's/.*served \([0-9]*\) requests.*/\1/p' "$TMP/gshare.out")
ok $(( ${g_served:-0} < 1 )) "G served its share of the port (${g_served:-0} requests)"
finish
