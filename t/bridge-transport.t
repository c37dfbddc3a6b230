#!/bin/sh
# gsockd's transport = "rsocket" on a machine without an RDMA device:
# gsockd runs itself again under the preload (which then gives every
# socket the kernel), and a GPU server behind it serves TCP clients as
# usual. Over a real RDMA device the same is tested in t/rdma-vm.t.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 60
need_backend
plan 4

GSOCKD_CONF=$TMP/r.conf
printf 'transport = "rsocket"\npreload_library = "%s"\n' "$PRELOAD" >"$GSOCKD_CONF"
start_gsockd && grep -q "transport rsocket" "$TMP/gsockd.log"
ok $? "gsockd with transport rsocket starts and says so"
grep -q "libgsock-preload.so" "/proc/$GSOCKD_PID/maps"
ok $? "it runs under the preload"
start_server -l 127.0.0.1:0 -b 2
ok $? "the GPU echo server registers with it"
[ "$(echo over-the-kernel | timeout 10 nc -N 127.0.0.1 "$PORT")" = over-the-kernel ]
ok $? "a TCP client gets its echo (no RDMA device: the preload took the kernel)"
finish
