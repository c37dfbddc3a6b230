#!/bin/sh
# gsend_group and grecv_group: groups of 2, 3 and 4 blocks share the
# copying of one connection (the echo client's -k, the echo server's
# --group-blocks). Bytes come back exact from 1 B to 16 MiB both ways,
# through the same-host direct path and through gsockd (direct = off), and
# the large ones are really shared; a non-blocking multiplexed server
# (MSG_DONTWAIT, -EAGAIN to every rank) serves groups too; a server that
# dies mid-transfer ends the client's group with an error, not a hang; a
# client that goes mid-transfer leaves the group server serving.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 280
plan 18

# sizes K FILE SIZE...: the client with groups of K, each size 3 round
# trips on 2 connections ($RING: its rings' bytes through gsockd); 0 only
# if all are intact. Output in FILE.
sizes() {
	k=$1 out=$2
	shift 2
	: >"$out"
	for n in "$@"; do
		timeout 60 "$CLIENT" -k "$k" -n "$n" -i 3 -b 2 ${RING:+-r $RING} \
			127.0.0.1:"$PORT" >>"$out" 2>&1 ||
			{ echo "# size $n failed:"; tail -5 "$out" | sed 's/^/#   /'
			  echo "# the server said:"; tail -5 "$TMP/server.out" 2>/dev/null | sed 's/^/#   /'
			  return 1; }
	done
}
# shared FILE: chunks shared in the file's last client run (0 if none)
shared() { sed -n 's/.*: \([0-9]*\) chunks shared/\1/p' "$1" | tail -1 | grep . || echo 0; }

start_gsockd
start_server -l 127.0.0.1:0 -b 2 -k 3 -B 1048576
ok $? "group echo server listens (2 groups of 3 blocks, 1 MiB buffers)"

for k in 1 2 3 4; do
	sizes $k "$TMP/d$k" 1 4095 65537 1000000 16777216
	ok $? "direct path, client groups of $k: 1 B .. 16 MiB intact both ways"
done
n=$(shared "$TMP/d4")
[ "$n" -gt 0 ]
ok $? "groups of 4 shared the 16 MiB round trips' chunks ($n)"

head -c 4194304 /dev/urandom >"$TMP/in"
timeout 60 nc -N 127.0.0.1 "$PORT" <"$TMP/in" >"$TMP/out"
cmp -s "$TMP/in" "$TMP/out"
ok $? "nc (through gsockd) against the group server: 4 MiB intact"

# A server that dies in the middle of a 16 MiB stream: the client's
# groups see the error and the kernel ends.
# (no timeout(1) in between: the kill must reach the client itself)
"$CLIENT" -k 4 -n 16777216 -i 100000 -b 1 127.0.0.1:"$PORT" >"$TMP/kill" 2>&1 &
cli=$!
PIDS="$PIDS $cli"
sleep 1.5
kill -9 "$SERVER_PID"
wait "$cli"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -lt 128 ]
ok $? "server killed mid-transfer: the client's group returns an error and ends (exit $rc)"
grep -q "connection 0: " "$TMP/kill"
ok $? "the client says which connection failed and why"
sed 's/^/# /' "$TMP/kill"

# A client that goes mid-transfer: the group server serves the next one.
start_server -l 127.0.0.1:0 -b 1 -k 4 -B 1048576
"$CLIENT" -k 2 -n 16777216 -i 100000 -b 1 127.0.0.1:"$PORT" >/dev/null 2>&1 &
cli=$!
PIDS="$PIDS $cli"
sleep 1.5
kill -9 "$cli"
wait "$cli" 2>/dev/null
sizes 3 "$TMP/after" 1 1000000 16777216
ok $? "client killed mid-transfer: the 1-group server (4 blocks) serves the next client intact"

# Non-blocking: 2 connections a group, MSG_DONTWAIT receives.
start_server -l 127.0.0.1:0 -b 1 -m 2 -k 2 -B 1048576
sizes 2 "$TMP/mux" 1 65537 1000000 16777216
ok $? "multiplexing group server (-m 2 -k 2, MSG_DONTWAIT): intact"

kill -0 "$SERVER_PID" && kill -0 "$GSOCKD_PID"
ok $? "server and gsockd still run"

# Through gsockd: no direct path.
kill "$SERVER_PID" 2>/dev/null
kill "$GSOCKD_PID" 2>/dev/null
wait "$SERVER_PID" "$GSOCKD_PID" 2>/dev/null
printf 'direct = "off"\n' >"$TMP/bridged.conf"
GSOCKD_CONF=$TMP/bridged.conf start_gsockd
# 1 MiB rings on both sides, so that chunks reach a group's 64 KiB a block.
RING=1048576
start_server -l 127.0.0.1:0 -b 2 -k 2 -B 1048576 -r $RING
ok $? "group echo server on a gsockd with direct = off (1 MiB rings)"
for k in 1 2 3 4; do
	sizes $k "$TMP/b$k" 1 65537 1000000 16777216
	ok $? "through gsockd, client groups of $k: 1 B .. 16 MiB intact"
done
n=$(shared "$TMP/b3")
[ "$n" -gt 0 ]
ok $? "through gsockd, groups of 3 shared chunks ($n)"
finish
