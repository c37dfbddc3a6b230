#!/bin/sh
# One process, several GPUs: gsock-echo-server --gpus serves from one
# libgsock context per GPU (each its own arena with gsockd) on one port.
# With the host backend the GPUs are labels; with cuda, GPU r % GPUS.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 180
plan 8

STAT=$GSOCK_BUILD/bridge/gsock-stat
NGPU=1024
if [ "$BACKEND" = cuda ]; then
	NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	[ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
fi
G1=$((1 % NGPU))

start_gsockd
"$SERVER" --gpus "0,$G1" -l 127.0.0.1:0 -b 4 >"$TMP/srv.out" 2>"$TMP/srv.err" &
SRV=$!
PIDS="$PIDS $SRV"
for _ in $(seq 400); do
	[ "$(grep -c 'listening on' "$TMP/srv.out")" = 2 ] && break
	sleep 0.05
done
ports=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$TMP/srv.out" | sort -u)
[ "$(grep -c 'listening on' "$TMP/srv.out")" = 2 ] && [ "$(echo "$ports" | wc -l)" = 1 ]
rc=$?
[ $rc = 0 ] || sed 's/^/#   /' "$TMP/srv.err"
ok $rc "--gpus 0,$G1: one listening line per GPU, one port ($ports)"
"$STAT" -j >"$TMP/stat.json" 2>&1
python3 - "$TMP/stat.json" "$SRV" "$BACKEND" "$G1" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
apps = [a for a in d["applications"] if a["pid"] == int(sys.argv[2])]
devs = sorted(a["device"].split(" ")[0] for a in apps)
want = sorted([sys.argv[3] + ":0", sys.argv[3] + ":" + sys.argv[4]])
print("# arenas", [(a["arena"], a["device"], a["open"]) for a in apps])
assert devs == want, devs
assert len({a["arena"] for a in apps}) == 2
assert all(a["open"] == 1 and a["socket_list"][0]["state"] == "listen" for a in apps)
PYEOF
ok $? "gsock-stat: the one process has two arenas, one per GPU, each with its own listener"
timeout 120 python3 "$PY" concurrent "$ports" 40 7 >"$TMP/conc" 2>&1
is "$(cut -d' ' -f1-4 "$TMP/conc")" "ok 40 of 40" "40 concurrent connections to the shared port echo intact"
kill -TERM "$SRV"
wait "$SRV"
ok $? "SIGTERM ends the kernels on both GPUs; exit 0"
grep -q "served [0-9]* requests on 40 connections" "$TMP/srv.out"
ok $? "40 connections served in all"
s0=$(sed -n 's/.*\(GPU \|host:\)0 served \([0-9]*\) connections/\2/p' "$TMP/srv.out" | head -1)
s1=$(sed -n "s/.*\(GPU \|host:\)$G1 served \([0-9]*\) connections/\2/p" "$TMP/srv.out" | tail -1)
[ "${s0:-0}" -gt 0 ] && [ "${s1:-0}" -gt 0 ]
ok $? "both GPUs served some ($s0 and $s1)"
"$SERVER" --gpus 0,x >/dev/null 2>"$TMP/bad.err"
rc=$?
[ $rc = 64 ] && grep -q "takes 1 to 16 GPU numbers" "$TMP/bad.err"
ok $? "--gpus 0,x: usage error, said"
if [ "$BACKEND" = cuda ]; then
	"$SERVER" --gpus "0,$NGPU" -l 127.0.0.1:0 >/dev/null 2>"$TMP/nogpu.err"
	rc=$?
	[ $rc != 0 ] && grep -q "there is no GPU $NGPU: this host has $NGPU" "$TMP/nogpu.err"
	ok $? "--gpus naming a GPU that does not exist: refused, said"
else
	echo "ok 8 # SKIP the host backend's devices are labels; a missing GPU is a cuda check"
	tap_n=8
fi
finish
