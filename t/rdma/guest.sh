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

# One 1 MB transfer from a preloaded nc to a preloaded nc -l, with env $1.
# Sets RXE (rxe packets sent) and TCP (TCP segments sent) during it.
transfer() {
	head -c 1000000 /dev/urandom >/tmp/in
	r0=$(rxe_pkts) t0=$(tcp_segs)
	env LD_PRELOAD=$PRELOAD GSOCK_LOG=info $1 timeout 60 nc -l $IP 7000 >/tmp/out 2>/tmp/srv.err &
	sleep 1
	env LD_PRELOAD=$PRELOAD GSOCK_LOG=info $1 timeout 60 nc -N $IP 7000 </tmp/in 2>/tmp/cli.err
	wait
	RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
	echo "# rxe packets sent +$RXE, TCP segments sent +$TCP"
	cmp -s /tmp/in /tmp/out
}

echo "1..7"
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

transfer "GSOCK_TRANSPORT=auto"
ok $? "preloaded nc -> nc -l, default route: 1 MB intact"
[ "$RXE" -lt 100 ] && [ "$TCP" -gt 10 ]
ok $? "the default route is the kernel: TCP carried it, rxe stayed idle"

transfer "GSOCK_TRANSPORT=rsocket"
ok $? "GSOCK_TRANSPORT=rsocket: 1 MB intact"
sed 's/^/# /' /tmp/cli.err
[ "$RXE" -gt 500 ] && [ "$TCP" -lt 10 ]
todo $? "GSOCK_TRANSPORT=rsocket: rxe carried it, not TCP" "the rsocket route (issue 4)"

export GSOCK_CONTROL=/tmp/gsockd.sock
gsockd --conf /dev/null 2>/tmp/gsockd.log &
sleep 1
gsock-echo-server-host -l $IP:7001 -b 2 >/tmp/echo.out 2>&1 &
sleep 1
[ "$(echo hello-gsockd | timeout 10 nc -N $IP 7001)" = hello-gsockd ]
ok $? "gsockd and the GPU echo server (host backend) run in the guest"
exit $fail
