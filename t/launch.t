#!/bin/sh
# A launch that fails part way (host backend: a block's thread cannot be
# made, here for thread stacks past an address-space cap): gsock_launch
# says how many blocks started and returns -EAGAIN; the program ends
# them with gsock_stop and gsock_wait instead of waiting for them for
# ever (which it did before). The cuda backend launches all blocks or
# none.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
[ "$BACKEND" = host ] || skip_all "a partial launch is a host backend matter (cuda launches all blocks or none)"
time_limit 120
plan 4
# The cap below is for the blocks' threads: a small direct pool (every
# application maps the whole pool: 129 MiB at the default 256 connections).
printf 'direct_conns = 4\n' >"$TMP/small-pool.conf"
GSOCKD_CONF=$TMP/small-pool.conf start_gsockd
start=$(now_ms)
(ulimit -v 150000 && exec timeout 60 "$SERVER" -l 127.0.0.1:0 -b 1000 -m 1 -r 4096 -B 4096) >/dev/null 2>"$TMP/partial"
r=$?
took=$(($(now_ms) - start))
grep -q "cannot launch 1000 blocks: Resource temporarily unavailable" "$TMP/partial"
ok $? "1000 blocks under a 150 MB address-space cap: the launch fails with EAGAIN"
n=$(sed -n 's/^gsock: block \([0-9]*\) of 1000 could not start.*/\1/p' "$TMP/partial")
[ "${n:-0}" -gt 0 ] && [ "$n" -lt 1000 ]
ok $? "libgsock says how many started: ${n:-none} ($(head -1 "$TMP/partial"))"
[ $r != 124 ] && [ $took -lt 30000 ]
ok $? "the program ends (status $r, $took ms) instead of waiting for the blocks that started"
start_server -l 127.0.0.1:0 -b 2
ok $? "gsockd serves the next application"
finish
