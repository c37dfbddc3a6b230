#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The rsocket route against the kernel route, inside the Soft-RoCE VM:
#   GSOCK_VM_GUEST=bench/rsocket-guest.sh scripts/rdma-vm
# sockperf 64 B ping-pong (a poll server and a blocking single-socket
# server) and 65000 B throughput, both ends preloaded, the route chosen by
# GSOCK_TRANSPORT; on the rsocket route once per rpoll spin budget
# (/etc/rdma/rsocket/polling_time, rsocket's own knob, in microseconds;
# librdmacm's default is 10). Also the server's CPU time during each
# ping-pong (clock ticks of 10 ms over the 3 s run). ROUNDS rounds.
. /gsock/setup.sh

ROUNDS=${ROUNDS:-2}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# ping-pong against server $3 (args) on port $2, route $1: one report line
pingpong() {
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$1 sockperf sr $3 >/dev/null 2>&1 &
	sp=$!
	sleep 1
	c0=$(ticks $sp)
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$1 timeout 60 sockperf pp --tcp -i $IP -p $2 -t 3 -m 64 >/tmp/pp 2>&1
	c1=$(ticks $sp)
	kill $sp; wait $sp 2>/dev/null
	echo "$(grep -o 'Latency is [0-9.]* usec' /tmp/pp | tr -dc '0-9.') $((c1 - c0))"
}
echo "T:$IP:7100" >/tmp/feed
mkdir -p /etc/rdma/rsocket
echo "# route polling_time_us round pp_poll_server_half_rtt_us server_ticks pp_blocking_server_half_rtt_us server_ticks tp_65000_MBps"
for round in $(seq "$ROUNDS"); do
	for cfg in os:10 rsocket:10 rsocket:100 rsocket:1000; do
		route=${cfg%:*} pt=${cfg#*:}
		echo "$pt" >/etc/rdma/rsocket/polling_time
		a=$(pingpong $route 7100 "-f /tmp/feed -F poll")
		b=$(pingpong $route 7110 "--tcp -i $IP -p 7110")
		env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route sockperf sr -f /tmp/feed -F poll >/dev/null 2>&1 &
		sp=$!
		sleep 1
		env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf tp --tcp -i $IP -p 7100 -t 3 -m 65000 >/tmp/tp 2>&1
		kill $sp; wait $sp 2>/dev/null
		echo "# $route $pt $round $a $b $(grep -o 'BandWidth is [0-9.]* MBps' /tmp/tp | tr -dc '0-9.')"
	done
done
echo "1..$n"
exit $fail
