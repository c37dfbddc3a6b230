#!/bin/sh
# gsockd's two data paths. gsockd's default is epoll; the rest of the
# suite runs it with io = auto, which is io_uring where the kernel allows
# it (said in check 1), so that both paths see every test;
# here: (1) the bridge tests again with io = epoll, each file's verdict as
# one line; (2) where io_uring_setup is refused (a seccomp filter, as in a
# container), auto falls back to epoll and says why, and io = io_uring
# stops gsockd with the reason; (3) with io_uring, connections whose
# receives and sends are in flight (a peer that does not read) when their
# application is killed: gsockd cancels them, returns to the descriptors
# it started with and unmaps the arena.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 600
EPOLL_TESTS="echo-integrity peer-close-eof gpu-client app-killed bridge-death bad-input block-copy"
NO_URING=$GSOCK_BUILD/t/no-uring
plan $(( $(echo $EPOLL_TESTS | wc -w) + 9 ))

start_gsockd --io auto
# The log line may trail the control socket by a moment: wait for it.
for _ in $(seq 100); do
	mode=$(sed -n 's/.*info: io: //p' "$TMP/gsockd.log" | head -1)
	[ -n "$mode" ] && break
	sleep 0.05
done
case $mode in
io_uring*) ok 0 "io = auto: the suite's gsockd moves bytes with $mode" ;;
epoll*) tap_n=$((tap_n + 1))
	echo "ok $tap_n - io = auto takes io_uring # SKIP this kernel gives $mode" ;;
*) ok 1 "io = auto: gsockd logs which data path it took (got '$mode')" ;;
esac
URING=${mode%% *}

rerun_tests GSOCK_TEST_IO=epoll "with io = epoll" $EPOLL_TESTS

# (2) io_uring refused.
kill "$GSOCKD_PID"; wait "$GSOCKD_PID" 2>/dev/null
: >"$TMP/gsockd.log"
if "$NO_URING" true 2>"$TMP/nu.err"; then
	GSOCKD_WRAPPER=$NO_URING start_gsockd --io auto
	# as above: the line may trail the socket (seen on a loaded machine)
	for _ in $(seq 100); do
		grep -q "info: io: " "$TMP/gsockd.log" && break
		sleep 0.05
	done
	grep -q "info: io: epoll (io = auto: the kernel refuses io_uring: Operation not permitted)" "$TMP/gsockd.log"
	ok $? "io_uring_setup refused: io = auto takes epoll and says why"
	start_server -l 127.0.0.1:0 -b 2 -m 4 &&
		timeout 60 python3 "$PY" sizes "$PORT" 1 4096 65537 1000000 >/dev/null 2>&1
	ok $? "and serves a GPU echo server byte for byte"
	kill -9 "$SERVER_PID" "$GSOCKD_PID"; wait "$GSOCKD_PID" 2>/dev/null
	"$NO_URING" "$GSOCKD" --conf /dev/null --control "$TMP/nu.sock" \
		--io io_uring >"$TMP/nu.out" 2>&1
	is "$?" 78 "io = io_uring where it is refused: gsockd exits with EX_CONFIG"
	grep -q "error: io = io_uring cannot be had: the kernel refuses io_uring" "$TMP/nu.out"
	ok $? "naming the reason"
	[ ! -e "$TMP/nu.sock" ]
	ok $? "and leaves no control socket behind"
else
	for d in "auto falls back" "it serves" "io_uring refused: exit" "the reason" "no socket left"; do
		tap_n=$((tap_n + 1))
		echo "ok $tap_n - $d # SKIP t/no-uring cannot run here: $(cat "$TMP/nu.err")"
	done
fi

# (3) Requests in flight when their application dies.
if [ "$URING" != io_uring ]; then
	for d in "peers that do not read" "killed: descriptors" "no arena"; do
		tap_n=$((tap_n + 1))
		echo "ok $tap_n - $d # SKIP io_uring: this kernel gives $mode"
	done
	finish
fi
: >"$TMP/gsockd.log"
start_gsockd --io io_uring
sleep 0.2
fds_before=$(ls /proc/"$GSOCKD_PID"/fd | wc -l)
start_server -l 127.0.0.1:0 -b 4 -m 8
python3 - "$PORT" "$TMP/stuck" <<'PY' &
import socket, sys, time
# 16 peers send 4 MiB each and never read: the echo fills their receive
# buffers, so gsockd's sends wait in the kernel while its receives wait
# for the rest.
socks = []
for _ in range(16):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.setblocking(False)
    socks.append(s)
sent = [0] * len(socks)
deadline = time.time() + 20
while time.time() < deadline and min(sent) < 4 << 20:
    for i, s in enumerate(socks):
        try:
            sent[i] += s.send(b"x" * 65536)
        except BlockingIOError:
            pass
    time.sleep(0.001)
open(sys.argv[2], "w").write("%d\n" % sum(sent))
time.sleep(30)
PY
STUCK=$!
PIDS="$PIDS $STUCK"
for _ in $(seq 200); do [ -s "$TMP/stuck" ] && break; sleep 0.1; done
busy=$(ls /proc/"$GSOCKD_PID"/fd | wc -l)
[ -s "$TMP/stuck" ] && [ "$busy" -gt "$fds_before" ]
ok $? "16 peers that do not read: $(cat "$TMP/stuck" 2>/dev/null) bytes sent, gsockd holds $busy descriptors (from $fds_before)"
kill -9 "$SERVER_PID"
is "$(fds_settle "$GSOCKD_PID" "$fds_before")" "$fds_before" "application killed with sends and receives in flight: gsockd holds the descriptors it started with"
grep -q '/memfd:gsock-arena' /proc/"$GSOCKD_PID"/maps
ok $((! $?)) "and maps no arena"
kill "$STUCK" 2>/dev/null
finish
