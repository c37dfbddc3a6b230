#!/bin/sh
# MapReduce held in GPU memory (apps/mapreduce): word count and k-means
# on one worker and on several, the shuffle through g-calls between
# workers that are separate applications of gsockd (with the host backend,
# two "devices" in CI), checked against the CPU reference: exact counts,
# centroids within a tolerance. A worker killed mid-shuffle, or one that
# never comes, fails the job with a sentence; nothing hangs.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 300
plan 19

MR=$GSOCK_BUILD/apps/mapreduce
W=$MR/mr-worker-$BACKEND
STAT=$GSOCK_BUILD/bridge/gsock-stat
BLK="-b 4"
# worker r runs on "device" r: a label on the host backend, GPU r % NGPU on cuda
NGPU=1024
if [ "$BACKEND" = cuda ]; then
	BLK="-b 16"
	NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	[ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
fi

"$MR/mr-gen" words --bytes 3000000 --vocab 20000 --seed 7 -o "$TMP/corpus" &&
	"$MR/mr-ref" wordcount "$TMP/corpus" >"$TMP/ref" 2>/dev/null &&
	grep -q '^naïve	' "$TMP/ref" && grep -q '^pneumonoultramicroscopicsilicov	' "$TMP/ref"
ok $? "mr-gen makes a corpus; mr-ref counts it (UTF-8 kept whole, long words cut at 31 bytes)"

start_gsockd

# job NAME WORKERS EXTRA...: run every worker of a job, each to $TMP/NAME.R
# (result) and $TMP/NAME.R.err; the number of workers that failed.
job() {
	_n=$1 _w=$2; shift 2
	_peers=""
	for _r in $(seq 0 $((_w - 1))); do
		_peers="$_peers${_peers:+,}127.0.0.1:$(free_port)"
	done
	[ "$_w" = 1 ] && _peers=""
	_jp=""
	for _r in $(seq 0 $((_w - 1))); do
		timeout 120 "$W" $BLK ${_peers:+-p "$_peers"} -r "$_r" -d $((_r % NGPU)) \
			-o "$TMP/$_n.$_r" "$@" 2>"$TMP/$_n.$_r.err" &
		_jp="$_jp $!"
	done
	_bad=0
	for _p in $_jp; do wait "$_p" || _bad=$((_bad + 1)); done
	[ "$_bad" = 0 ] || for _r in $(seq 0 $((_w - 1))); do sed 's/^/#   /' "$TMP/$_n.$_r.err"; done
	return "$_bad"
}
merged() { cat "$TMP/$1".[0-9] | LC_ALL=C sort; }
stat_of() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$TMP/$1.err"; }

job wc1 1 --job wordcount -i "$TMP/corpus" -T 65536
ok $? "word count, one worker ($BACKEND): the job ends"
LC_ALL=C sort "$TMP/ref" >"$TMP/ref.sorted"
cmp -s "$TMP/wc1.0" "$TMP/ref"
ok $? "word count, one worker: every count equals the CPU reference's"

job wc2 2 --job wordcount -i "$TMP/corpus" -T 65536
ok $? "word count, two workers through gsock: the job ends"
merged wc2 | cmp -s - "$TMP/ref.sorted"
ok $? "word count, two workers: their parts together equal the reference, no word in both"
[ "$(stat_of wc2.0 sent)" = "$(stat_of wc2.1 received)" ] &&
	[ "$(stat_of wc2.1 sent)" = "$(stat_of wc2.0 received)" ] &&
	[ "$(stat_of wc2.0 sent)" -gt 10000 ]
ok $? "word count, two workers: each shuffled what the other received ($(stat_of wc2.0 sent) and $(stat_of wc2.1 sent) bytes)"

printf '# the job of three\n127.0.0.1:%s  # rank 0\n127.0.0.1:%s\n\n127.0.0.1:%s\n' \
	"$(free_port)" "$(free_port)" "$(free_port)" >"$TMP/peers"
wc3=""
for r in 0 1 2; do
	timeout 120 "$W" $BLK -f "$TMP/peers" -r $r --job wordcount -i "$TMP/corpus" \
		-T 65536 -o "$TMP/wc3.$r" 2>"$TMP/wc3.$r.err" &
	wc3="$wc3 $!"
done
wc3ok=0
for p in $wc3; do wait "$p" || wc3ok=1; done
[ $wc3ok = 0 ] && merged wc3 | cmp -s - "$TMP/ref.sorted"
ok $? "word count, three workers from a peers file: parts together equal the reference"
job wcs 2 --job wordcount -i "$TMP/corpus" -T 65536 --stage 1000 &&
	merged wcs | cmp -s - "$TMP/ref.sorted"
ok $? "word count, two workers, a stage of 1000 records (filled and added by one block as records come): parts equal the reference"

"$MR/mr-gen" points --n 60000 --dim 6 --clusters 10 --seed 3 -o "$TMP/points" &&
	"$MR/mr-ref" kmeans "$TMP/points" 10 8 >"$TMP/kref" 2>/dev/null
ok $? "mr-gen makes 60000 points; mr-ref clusters them"
close() { # FILE: within 1e-3 of the reference, every coordinate
	paste -d' ' "$TMP/kref" "$1" | awk '
		{ for (i = 1; i <= 6; i++) { d = $i - $(i + 6); if (d < 0) d = -d
		  if (d > m) m = d } }
		END { if (NR != 10 || m > 1e-3) { print "# max difference " m " over " NR " lines"; exit 1 } }'
}
job km1 1 --job kmeans -i "$TMP/points" -k 10 -n 8 && close "$TMP/km1.0"
ok $? "k-means, one worker: centroids within 1e-3 of the reference"
job km2 2 --job kmeans -i "$TMP/points" -k 10 -n 8 && close "$TMP/km2.0" &&
	cmp -s "$TMP/km2.0" "$TMP/km2.1"
ok $? "k-means, two workers through gsock: centroids within 1e-3, both workers agree"

# A worker killed mid-shuffle: the other fails with a sentence, at once.
P0=$(free_port) P1=$(free_port)
"$W" $BLK -p "127.0.0.1:$P0,127.0.0.1:$P1" -r 1 -d $((1 % NGPU)) --hold-shuffle 30000 \
	--job wordcount -i "$TMP/corpus" -T 65536 -o "$TMP/k.1" 2>"$TMP/k.1.err" &
K1=$!
PIDS="$PIDS $K1"
timeout 60 "$W" $BLK -p "127.0.0.1:$P0,127.0.0.1:$P1" -r 0 \
	--job wordcount -i "$TMP/corpus" -T 65536 -o "$TMP/k.0" 2>"$TMP/k.0.err" &
K0=$!
for _ in $(seq 400); do
	grep -q 'holds its shuffle' "$TMP/k.1.err" && break
	sleep 0.05
done
grep -q 'holds its shuffle' "$TMP/k.1.err"
ok $? "a worker pauses halfway through its shuffle (test aid)"
"$STAT" -j >"$TMP/stat.json" 2>&1
python3 - "$TMP/stat.json" "$BACKEND" "$((1 % NGPU))" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
devs = sorted(a["device"].split(" ")[0] for a in d["applications"])
print("# devices", devs)
assert devs == sorted([sys.argv[2] + ":0", sys.argv[2] + ":" + sys.argv[3]]), devs
EOF
ok $? "gsock-stat shows the two workers, each on its device"
t0=$(now_ms)
kill -9 "$K1"
wait "$K0"
rc=$?
t1=$(now_ms)
[ "$rc" != 0 ] && [ $((t1 - t0)) -lt 20000 ]
ok $? "rank 1 killed mid-shuffle: rank 0 fails (status $rc) in $((t1 - t0)) ms"
grep -q "rank 1's data ended after [0-9]* of [0-9]* bytes: that worker is gone" "$TMP/k.0.err"
rc=$?
[ $rc = 0 ] || sed 's/^/#   /' "$TMP/k.0.err"
ok $rc "rank 0 says which worker went and how far its data came"

# A worker that never comes: the job fails within the timeout, not later.
t0=$(now_ms)
timeout 60 "$W" $BLK -p "127.0.0.1:$(free_port),127.0.0.1:$(free_port)" -r 0 -w 1500 \
	--job kmeans -i "$TMP/points" -k 10 -n 8 >/dev/null 2>"$TMP/never.err"
rc=$?
t1=$(now_ms)
[ "$rc" != 0 ] && [ $((t1 - t0)) -lt 15000 ] &&
	grep -q "no worker connected in time: Connection timed out; the job failed" "$TMP/never.err"
ok $? "k-means with a worker that never comes: fails in $((t1 - t0)) ms, saying so"

# Bad input gets a sentence and a status, nothing else.
"$W" --job kmeans -i "$TMP/corpus" >/dev/null 2>"$TMP/bad.err"
rc=$?
[ $rc = 65 ] && grep -q "is not a points file" "$TMP/bad.err"
ok $? "k-means on a text file: status 65 and why"
"$W" $BLK --job wordcount -i "$TMP/corpus" -T 1024 >/dev/null 2>"$TMP/full.err"
rc=$?
[ $rc != 0 ] && grep -q "the word table is full (give --table-slots more)" "$TMP/full.err"
ok $? "a word table too small for the corpus: the job fails and says how to fix it"
kill -0 "$GSOCKD_PID"
ok $? "gsockd is still running"
finish
