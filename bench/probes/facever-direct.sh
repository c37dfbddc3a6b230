#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A one-off probe kept with the results it made; run from the build tree on
# a GPU host after scripts/gpu-check --build-only, memcached on PATH.
# Probe: face verification with one G and with one G per GPU on one port
# (facever-gserver --gpus, SO_REUSEPORT), its client through gsockd (tcp)
# and preloaded on the direct path (direct), in alternating rounds: the
# requests/s, latency, and every process's CPU over the client's run.
# Knobs: GPUS ("0" and "0,1" by default), CONNS, ROUNDS, SECS, W gsockd
# workers, SCORES/CCORES/MCORES the servers', client's and memcached's
# cores, CJ client threads, MT memcached threads, B and M_ the server's
# blocks and connections a block, F its pipes to memcached, PATHS
# which paths (default "tcp direct"), CLIENTS clients side by side
# (connections, threads and rate split among them; requests/s, failures
# and cores summed, percentiles the first client's), RATES open-loop request rates in
# all (facever-client -r; "closed", the default, is the closed loop). Cores are CPU time over the client's
# whole run (its connects and end too), by wall time. STATS=1 adds gsockd's
# counters (gsock-stat), its busiest threads' cores and the preloaded
# clients' own account (GSOCK_LOG=debug) under each row, and gsockd's
# workers' account at the end; CONF, lines added to gsockd's gsock.conf;
# GSOCKD, another gsockd binary; PRE, another preload. MCPRE=1 runs
# memcached under the preload (started after gsockd), so that the Gs'
# pipes to it take the direct path (a gconnect to a preloaded listener);
# its direct accepts are counted at the end. SPLIT=1 serves GPUS "0,1"
# from one G process per GPU on the port (SO_REUSEPORT) instead of one
# process with both.
set -u
tmp=$(mktemp -d); export GSOCK_CONTROL=$tmp/g.sock
printf 'direct_conns = 1024\n%s\n' "${CONF:-}" > $tmp/c.conf
ulimit -n 20000
FV=apps/facever PRE=${PRE:-$PWD/preload/libgsock-preload.so}
C="taskset -c ${CCORES:-0-11}" M="taskset -c ${MCORES:-12-15}" S="taskset -c ${SCORES:-16-31}"
hz=$(getconf CLK_TCK)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { for i in $(seq 300); do [ "$(grep -c 'listening on' $1)" -ge "$2" ] && return; sleep 0.1; done; echo "did not start: $1"; cat $1; }
ticks() { for q in "$@"; do awk '{ print $14 + $15 }' /proc/$q/stat 2>/dev/null || echo 0; done | awk '{ t += $1 } END { print t + 0 }'; }
# gsockd's threads: "ticks tid/name", one a line
thr() { for t in /proc/$G/task/*; do echo "$(awk '{ print $14 + $15 }' $t/stat) ${t##*/}/$(cat $t/comm)"; done 2>/dev/null; }
mp=$(port)
$S ${GSOCKD:-bridge/gsockd} --conf $tmp/c.conf --workers ${W:-12} 2>$tmp/gsockd.log & G=$!
for i in $(seq 100); do [ -S $GSOCK_CONTROL ] && break; sleep 0.05; done
mpre=""; [ -n "${MCPRE:-}" ] && mpre="env LD_PRELOAD=$PRE GSOCK_LOG=info"
$M $mpre memcached -u "$(id -un)" -l 127.0.0.1 -p $mp -t ${MT:-4} -c 8192 >/dev/null 2>$tmp/mc.err & MC=$!
sleep 0.5; $FV/facever-enrol -M 127.0.0.1:$mp -p 200 >/dev/null
echo "| round | path | GPUs | conns | offered/s | requests/s | p50 / p99 us | failed | direct conns | client cores | gsockd cores | memcached cores | G host cores |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for r in $(seq ${ROUNDS:-2}); do
  for path in ${PATHS:-tcp direct}; do
    for gpus in ${GPUS:-0 0,1}; do
      for c in ${CONNS:-256}; do
      for rate in ${RATES:-closed}; do
        p=$(port); n=$(echo $gpus | tr ',' ' ' | wc -w)
        if [ -n "${SPLIT:-}" ]; then
          A=""
          for gg in $(echo $gpus | tr ',' ' '); do
            $S ${FVG:-$FV/facever-gserver-cuda} -l 127.0.0.1:$p -M 127.0.0.1:$mp -b ${B:-128} -m ${M_:-2} ${F:+-F $F} -g $gg -P > $tmp/g.out.$gg 2>&1 & A="$A $!"
            up $tmp/g.out.$gg 1
          done
        else
          $S ${FVG:-$FV/facever-gserver-cuda} -l 127.0.0.1:$p -M 127.0.0.1:$mp -b ${B:-128} -m ${M_:-2} ${F:+-F $F} -g $gpus -P > $tmp/g.out 2>&1 & A=$!
          up $tmp/g.out $n
        fi
        pre=""; [ $path = direct ] && pre="env LD_PRELOAD=$PRE GSOCK_LOG=$([ -n "${STATS:-}" ] && echo debug || echo info)"
        [ -n "${STATS:-}" ] && { bridge/gsock-stat -j > $tmp/s0.json; thr > $tmp/th0; }
        g0=$(ticks $G); m0=$(ticks $MC); a0=$(ticks $A); t0=$(date +%s.%N)
        nc=${CLIENTS:-1}
        for i in $(seq $nc); do
          $C sh -c "$pre $FV/facever-client -s 127.0.0.1:$p -p 200 -c $((c / nc)) -j $((${CJ:-12} / nc)) -d ${SECS:-4} $([ $rate = closed ] || echo -r $((rate / nc))) > $tmp/cl$i.out 2>$tmp/cl$i.err; cat /proc/\$\$/stat > $tmp/cl$i.stat" &
        done
        wait $(jobs -p | grep -vwF -f <(printf '%s\n' $A $G $MC))
        cat $tmp/cl?.out > $tmp/cl.out; cat $tmp/cl?.err > $tmp/cl.err; cat $tmp/cl?.stat > $tmp/cl.stat
        g1=$(ticks $G); m1=$(ticks $MC); a1=$(ticks $A); t1=$(date +%s.%N)
        [ -n "${STATS:-}" ] && { bridge/gsock-stat -j > $tmp/s1.json; thr > $tmp/th1; }
        secs=$(echo "$t1 - $t0" | python3 -c 'print(eval(input()))')
        cl=$(awk '{ t += $16 + $17 } END { print t }' $tmp/cl.stat)
        rps=$(grep -o 'rps=[0-9]*' $tmp/cl.out | cut -d= -f2 | awk '{ t += $1 } END { print t }')
        lat="$(grep -o 'p50_us=[0-9.]*' $tmp/cl.out | head -1 | cut -d= -f2) / $(grep -o 'p99_us=[0-9.]*' $tmp/cl.out | head -1 | cut -d= -f2)"
        fail=$(grep -o 'failed=[0-9]*' $tmp/cl.out | cut -d= -f2 | awk '{ t += $1 } END { print t }')
        dc=$(grep -c 'direct path, segment' $tmp/cl.err)
        awk -v r=$r -v rate=$rate -v path=$path -v gpus=$gpus -v c=$c -v rps=$rps -v lat="$lat" -v fail=${fail:-?} -v dc=$dc \
            -v cl=$cl -v g=$((g1 - g0)) -v m=$((m1 - m0)) -v a=$((a1 - a0)) -v hz=$hz -v s=$secs \
            'BEGIN { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f |\n", r, path, gpus, c, rate, rps, lat, fail, dc, cl / hz / s, g / hz / s, m / hz / s, a / hz / s }'
        # a G that is gone before the row's end says why
        if kill $A 2>/dev/null; then wait $A 2>/dev/null; else
          wait $A 2>/dev/null; echo "    G exited during the row (status $?):"; tail -q -n 5 $tmp/g.out* | sed 's/^/    /'; fi
        cat $tmp/g.out* 2>/dev/null | grep -h 'pipes\|steps\|served\|held a request\|held at once' | sed 's/^/    /'; rm -f $tmp/g.out*
        grep -v 'direct path, segment\|direct: answers came\|: debug: ' $tmp/cl.err | head -3 | sed 's/^/    client: /'
        [ -n "${STATS:-}" ] && python3 - $tmp $secs $hz <<'PY'
import json, sys
tmp, secs, hz = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
a, b = (json.load(open('%s/s%d.json' % (tmp, i)))['gsockd'] for i in (0, 1))
print('    gsockd: ' + ', '.join('%s %d' % (k, b[k] - a[k]) for k in ('direct_wakeups', 'watch_looks', 'watch_finds')))
t0 = dict(l.split(None, 1)[::-1] for l in open(tmp + '/th0') if l.strip())
th = sorted(((int(l.split()[0]) - int(t0.get(l.split(None, 1)[1], 0))) / hz / secs, l.split(None, 1)[1].strip())
            for l in open(tmp + '/th1') if l.strip())[::-1][:6]
print('    gsockd threads, cores: ' + ', '.join('%s %.2f' % (n, c) for c, n in th))
PY
        [ -n "${STATS:-}" ] && sed 's/^/    /' $tmp/cl.out
        [ -n "${STATS:-}" ] && grep -h 'direct: answers came' $tmp/cl.err | sed 's/.*direct: /    client: /' | head -2
      done
      done
    done
  done
done
echo "memcached: $(grep -c 'listener named to gsockd.*: ok' $tmp/mc.err) listeners named to gsockd, $(grep -c '(accepted end)' $tmp/mc.err) connections accepted on the direct path"
kill $G $MC; wait 2>/dev/null
grep -i 'warn\|error' $tmp/gsockd.log | head -5
[ -n "${STATS:-}" ] && grep 'doorbell watch:\|slept\|napped' $tmp/gsockd.log | sed 's/^/gsockd: /'
