#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside scripts/rdma-vm's guest for bench/scale-vm: N idle
# connections (default 65,536) to one GPU echo server (host backend)
# through gsockd, then one active connection among them. The guest is
# root with the capabilities the workplace's machines withhold, so the
# open-file limit can be raised past 20,000. Prints TAP and "# key=value"
# figures for bench/scale-vm to record.
N=${SCALE_N:-65536}
B=64
M=$(((N + 1 + B - 1) / B + 1)) # connections per block: all of them, and a spare
T=/tmp/scale
mkdir -p $T
export GSOCK_CONTROL=$T/gsockd.sock
ulimit -n 1048576 || { echo "not ok 1 - cannot raise the open-file limit"; exit 1; }
# Sockets enough for both ends of every connection, with room.
echo 1048576 >/proc/sys/net/core/somaxconn
echo "1024 65535" >/proc/sys/net/ipv4/ip_local_port_range
echo 4194304 >/proc/sys/fs/file-max
echo "1..3"
echo "# N=$N blocks=$B per_block=$M guest_mem_kb=$(awk '/MemTotal/ { print $2 }' /proc/meminfo) cpus=$(nproc)"
: >$T/gsock.conf
gsockd --conf $T/gsock.conf --workers 2 --io epoll 2>$T/gsockd.log &
G=$!
i=0
until [ -S $GSOCK_CONTROL ] || [ $i -gt 600 ]; do sleep 0.1; i=$((i + 1)); done
rss0=$(awk '/^VmRSS/ { print $2 }' /proc/$G/status)
gsock-echo-server-host -l 7000 -b $B -m $M -r 4096 -B 4096 -s $GSOCK_CONTROL >$T/server.log 2>&1 &
S=$!
i=0
until grep -q listening $T/server.log || [ $i -gt 1200 ]; do sleep 0.1; i=$((i + 1)); done
grep -q listening $T/server.log || {
	echo "not ok 1 - the server did not start: $(tail -3 $T/server.log $T/gsockd.log | tr '\n' ' ')"
	exit 1
}
echo "ok 1 - the server listens with room for $N connections ($(sed -n 's/.*registered: //p' $T/gsockd.log | tail -1))"
# The active phase lasts long enough to count gsockd's descriptors in it.
loadgen -c 1 -s 64 -d 20 -w 1 -i "$N" 127.0.0.1 7000 >$T/lg.out 2>$T/lg.err &
L=$!
fds=0 peak=0 i=0
while kill -0 $L 2>/dev/null; do
	fds=$(ls /proc/$G/fd | wc -l)
	[ "$fds" -gt "$peak" ] && peak=$fds
	rss=$(awk '/^VmRSS/ { print $2 }' /proc/$G/status)
	sleep 1
	i=$((i + 1))
	[ $((i % 30)) = 0 ] && echo "# t=${i}s gsockd descriptors=$fds rss_kb=$rss"
done
wait $L
rc=$?
out=$(cat $T/lg.out)
echo "# loadgen: $out $(head -c 300 $T/lg.err)"
echo "# gsockd_peak_descriptors=$peak gsockd_rss_kb_before=$rss0 gsockd_rss_kb_loaded=$rss"
echo "# gsockd_log: $(grep -c . $T/gsockd.log) lines; last: $(tail -1 $T/gsockd.log)"
sed -n 's/.*registered: [0-9]* slots, \([0-9]*\) sockets.*arena \([0-9]*\) KiB.*/# arena_sockets=\1 arena_kib=\2/p' $T/gsockd.log | tail -1
errors=$(echo "$out" | tr ' ' '\n' | sed -n 's/^errors=//p')
reqs=$(echo "$out" | tr ' ' '\n' | sed -n 's/^reqs=//p')
[ "$rc" = 0 ] && [ "${reqs:-0}" -gt 0 ] && [ "$errors" = 0 ]
echo "$([ $? = 0 ] && echo ok || echo not ok) 2 - $N idle connections open, the active one among them served (reqs=${reqs:-none} errors=${errors:-none})"
# gsockd holds one descriptor per connection, plus its own few.
[ "$peak" -gt "$N" ]
echo "$([ $? = 0 ] && echo ok || echo not ok) 3 - gsockd held $peak descriptors at once (> $N)"
kill $S 2>/dev/null
wait $S 2>/dev/null
kill $G 2>/dev/null
wait $G 2>/dev/null
