#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the Soft-RoCE VM (scripts/rdma-vm) as part of its init:
# brings up rxe on a dummy device and tests gsock over it, printing TAP.
# RDMA use is proven from rxe's packet counters, kernel TCP use from
# /proc/net/snmp, read before and after each transfer.
IP=192.0.2.1
PRELOAD=/gsock/libgsock-preload.so
n=0
fail=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
todo() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2 # TODO $3"; else echo "not ok $n - $2 # TODO $3"; fi; }
rxe_pkts() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts 2>/dev/null || echo 0; }
tcp_segs() { awk '/^Tcp:/ { n++; if (n == 2) print $12 }' /proc/net/snmp; }

# One 1 MB transfer from nc to nc -l with env $1 on the ends named by $2
# (both, client or server; the other end runs plain). Sets RXE (rxe
# packets sent) and TCP (TCP segments sent) during it.
transfer() {
	cenv="env" senv="env"
	[ "$2" != server ] && cenv="env LD_PRELOAD=$PRELOAD GSOCK_LOG=info $1"
	[ "$2" != client ] && senv="env LD_PRELOAD=$PRELOAD GSOCK_LOG=info $1"
	head -c 1000000 /dev/urandom >/tmp/in
	r0=$(rxe_pkts) t0=$(tcp_segs)
	$senv timeout 60 nc -l $IP 7000 >/tmp/out 2>/tmp/srv.err &
	sleep 1
	$cenv timeout 60 nc -N $IP 7000 </tmp/in 2>/tmp/cli.err
	wait
	RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
	echo "# rxe packets sent +$RXE, TCP segments sent +$TCP"
	cmp -s /tmp/in /tmp/out
}

echo "1..14"
modprobe rdma_rxe && modprobe rdma_ucm && modprobe ib_uverbs && modprobe dummy
ip link add dummy0 type dummy 2>/dev/null
ip addr add $IP/24 dev dummy0 && ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0
ok $? "Soft-RoCE device rxe0 on dummy0"

timeout 60 rping -s -a $IP -C 5 >/dev/null 2>&1 &
sleep 1
timeout 60 rping -c -a $IP -C 5 >/dev/null 2>&1
ok $? "rping: RDMA works in the guest"
wait

transfer "GSOCK_TRANSPORT=auto" both
ok $? "preloaded nc -> nc -l, default route: 1 MB intact"
[ "$RXE" -lt 100 ] && [ "$TCP" -gt 10 ]
ok $? "the default route is the kernel: TCP carried it, rxe stayed idle"

transfer "GSOCK_TRANSPORT=rsocket" both
ok $? "netcat-openbsd (sets SO_REUSEPORT) on the rsocket route: 1 MB intact"
sed 's/^/# client: /' /tmp/cli.err; sed 's/^/# server: /' /tmp/srv.err
[ "$RXE" -gt 500 ] && [ "$TCP" -lt 10 ]
ok $? "rxe carried it, not TCP"

transfer "GSOCK_TRANSPORT=rsocket" client
ok $? "preloaded client -> plain server: 1 MB intact (rsocket refused, the kernel took over)"
[ "$TCP" -gt 10 ]
ok $? "and TCP carried it"

transfer "GSOCK_TRANSPORT=rsocket" server
ok $? "plain client -> preloaded rsocket server: 1 MB intact (the server listens on the kernel too)"

# sockperf ping-pong and throughput, rsocket against the kernel. The
# server polls (-F poll); its single-socket default (a blocking accept,
# then recvfrom) stalls on the rsocket route after two messages (not yet
# understood; the next step of the rsocket work).
echo "T:$IP:7100" >/tmp/feed
for route in os rsocket; do
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf sr -f /tmp/feed -F poll >/dev/null 2>&1 &
	sp=$!
	sleep 1
	r0=$(rxe_pkts)
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf pp --tcp -i $IP -p 7100 -t 3 -m 64 >/tmp/pp.$route 2>&1
	echo "# sockperf ping-pong 64 B, $route route: $(grep -o 'Latency is [0-9.]* usec' /tmp/pp.$route) (rxe +$(($(rxe_pkts) - r0)) packets)"
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf tp --tcp -i $IP -p 7100 -t 3 -m 65000 >/tmp/tp.$route 2>&1
	echo "# sockperf throughput 65000 B, $route route: $(grep -o 'BandWidth is [0-9.]* MBps' /tmp/tp.$route)"
	kill $sp 2>/dev/null; wait $sp
done
grep -q "Latency is" /tmp/pp.rsocket
ok $? "sockperf ping-pong over the rsocket route"
grep -q "Latency is" /tmp/pp.rsocket || sed 's/^/# /' /tmp/pp.rsocket | tail -15
grep -q "BandWidth is" /tmp/tp.rsocket
ok $? "sockperf throughput over the rsocket route"

# iperf3 (select) over rsocket
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 iperf3 -s -B $IP -p 7200 -1 >/dev/null 2>&1 &
sleep 1
r0=$(rxe_pkts)
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 iperf3 -c $IP -p 7200 -t 2 >/tmp/ip.out 2>&1
rc=$?
wait
echo "# iperf3: $(grep receiver /tmp/ip.out) (rxe +$(($(rxe_pkts) - r0)) packets)"
[ $rc -eq 0 ] && [ $(($(rxe_pkts) - r0)) -gt 1000 ]
ok $? "iperf3 over the rsocket route"

# A server killed mid-stream: the client gets an error, no hang.
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 nc -l $IP 7300 >/dev/null 2>&1 &
srv=$!
sleep 1
( sleep 2; kill -9 $srv ) &
head -c 2000000000 /dev/zero | env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 10 nc -N $IP 7300 >/dev/null 2>&1
rc=$?
wait
[ $rc -ne 124 ]
todo $? "server killed mid-stream: the rsocket client ends (status $rc), no hang" \
	"rsocket misses the peer's death while it waits to write: the disconnect comes on the CM channel, which rwrite and rpoll do not watch"

export GSOCK_CONTROL=/tmp/gsockd.sock
gsockd --conf /dev/null 2>/tmp/gsockd.log &
sleep 1
gsock-echo-server-host -l $IP:7001 -b 2 >/tmp/echo.out 2>&1 &
sleep 1
[ "$(echo hello-gsockd | timeout 10 nc -N $IP 7001)" = hello-gsockd ]
ok $? "gsockd and the GPU echo server (host backend) run in the guest"
exit $fail
