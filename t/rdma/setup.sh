#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts that run inside the Soft-RoCE VM (t/rdma/guest.sh,
# bench/rsocket-guest.sh): TAP helpers, counters that prove which path
# carried the bytes, and rxe brought up on a dummy device (two tests).
IP=192.0.2.1
PRELOAD=/gsock/libgsock-preload.so
n=0
fail=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
rxe_pkts() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts 2>/dev/null || echo 0; }
tcp_segs() { awk '/^Tcp:/ { n++; if (n == 2) print $12 }' /proc/net/snmp; }
# Wait up to $2 seconds for process $1 to end; 0 if it did, else say what it is doing.
reap() {
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
	if kill -0 "$1" 2>/dev/null; then
		ps -o pid,stat,wchan:32,args -p "$1" | sed 's/^/# still there: /'
		return 1
	fi
	wait "$1" 2>/dev/null
	return 0
}

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

