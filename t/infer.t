#!/bin/sh
# The inference servers end to end over HTTP/1.1: G (the backend under
# test) and C (on the host backend its stage runs the same model code on
# the thread) upscale pictures of mixed sizes, PGM and raw, exactly as
# espcn_run_cpu does (host backend; the cuda backend within infer.h's
# tolerance), and P (OpenBLAS) within the tolerance; curl gets the
# reference's bytes (on cuda within the tolerance), with and without
# "Expect: 100-continue"; a bad
# request line, a terabyte's Content-Length, another path, a head past
# 8 KiB, a head that never ends, half a head and then silence get 400,
# 413, 404, 431, 408 and a close; three pipelined requests are answered
# in order, and so are two that each arrive in time but together take
# longer than the bound; "100 Continue" comes in order, and never to
# HTTP/1.0; a truncated body, a client killed mid-body and
# a client sending a byte a second cost the others nothing; 24
# keep-alive connections at once are all served; the servers stop
# cleanly. A graph's G: a reader that does not read its large answer
# is closed within the turn's short send bound, not held for -T.
# $INFER_GSERVER: another G program to put through the G checks alone
# (t/infer-graph.t's infer-gserver-graph); C and P are then skipped.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
IN=$GSOCK_BUILD/apps/infer
G=${INFER_GSERVER:-$IN/infer-gserver-$BACKEND}
GNAME=$(basename "$G")
C=$IN/infer-cserver-$BACKEND
P=$IN/infer-pserver
[ -x "$G" ] || skip_all "$GNAME is not built"
time_limit 90
plan 52

HTTP="python3 $GSOCK_SRC/t/infer_http.py"
EXACT=-x
[ "$BACKEND" = cuda ] && EXACT= # FMA contraction, CUDA's tanhf: infer.h
PER_MILLE=$(sed -n 's/^#define INFER_OFF_PER_MILLE \([0-9]*\).*/\1/p' "$GSOCK_SRC/apps/infer/infer.h")
# same_pgm GOT WANT: bit for bit, or on cuda as infer_agrees allows
same_pgm() {
	[ "$BACKEND" != cuda ] && { cmp -s "$1" "$2"; return; }
	python3 -c '
import sys
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
d = [abs(x - y) for x, y in zip(a, b)]
off = sum(1 for v in d if v)
sys.exit(len(a) != len(b) or max(d, default=0) > 1 or off > len(a) * int(sys.argv[3]) // 1000 + 1)
' "$1" "$2" "$PER_MILLE"
}

load() { # PORT ARGS...: an infer-client run; its line in $TMP/load
	_port=$1; shift
	timeout 60 "$IN/infer-client" -s "127.0.0.1:$_port" -w "$TMP/w" "$@" >"$TMP/load" 2>&1
	_r=$?
	[ $_r = 0 ] || sed 's/^/#   /' "$TMP/load"
	return $_r
}
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" "$TMP/load"; }

"$IN/infer-ref" weights -s 5 -o "$TMP/w"
python3 -c "
import sys
w, h = 23, 17
sys.stdout.buffer.write(b'P5\n# t/infer.t\n%d %d\n255\n' % (w, h) + bytes((x * 29 + y * 53 + x * y * 7) % 256 for y in range(h) for x in range(w)))" >"$TMP/in.pgm"
tail -c 391 "$TMP/in.pgm" >"$TMP/in.raw"
"$IN/infer-ref" run -w "$TMP/w" -i "$TMP/in.pgm" -o "$TMP/ref.pgm"
ok $? "infer-ref: weights and the reference's 69x51 answer to a 23x17 picture"

start_gsockd
GPORT=$(free_port)
# two blocks of 16 connections each, a one-second bound on requests
start_app gsrv "$G" -l "127.0.0.1:$GPORT" -b 2 -m 16 -T 1000 -I 5000 -w "$TMP/w"
ok $? "$GNAME ($BACKEND, 2 blocks of 16 connections) listens"
have_c=0 have_p=0
CPORT=$(free_port) PPORT=$(free_port)
why_c="infer-cserver-$BACKEND is not built (configure found no libhttp-parser)"
why_p="infer-pserver is not built (configure found no libhttp-parser)"
if [ -n "${INFER_GSERVER:-}" ]; then
	why_c="t/infer.t checks C itself; this run checks $GNAME" why_p=$why_c
	C=/nonexistent P=/nonexistent
fi
[ -x "$C" ] && start_app csrv "$C" -l "127.0.0.1:$CPORT" -T 1000 -w "$TMP/w" && have_c=1
[ -x "$P" ] && OPENBLAS_NUM_THREADS=1 start_app psrv "$P" -l "127.0.0.1:$PPORT" -t 2 -w "$TMP/w" && have_p=1

load "$GPORT" $EXACT -c 4 -n 3 -S 5x7,24x16,40x9,4x30
ok $? "G: 12 pictures of 4 sizes, every pixel checked: $(cat "$TMP/load")"
load "$GPORT" $EXACT -c 2 -n 2 -R -S 13x11,30x4
ok $? "G: raw bodies with X-Width and X-Height"
if [ -n "${INFER_GSERVER:-}" ]; then
	load "$GPORT" $EXACT -c 1 -n 2 -S 1024x15,1024x1024
	ok $? "G: the widest pictures, the largest one alone in its turn, every pixel checked"
else
	KPORT=$(free_port)
	start_app ksrv "$G" -l "127.0.0.1:$KPORT" -b 1 -k 3 -T 1000 -w "$TMP/w" &&
		load "$KPORT" $EXACT -c 1 -n 1 -S 1024x15
	ok $? "G with -k 3: a picture of three bands computed by a group of three blocks, every pixel checked"
	kill -TERM "$ksrv_PID"
	wait "$ksrv_PID"
fi

# each check on G, then on C (or its skip)
on_c() { # DESCRIPTION COMMAND...: run the check on C, or skip it
	_d=$1; shift
	if [ $have_c = 1 ]; then "$@"; else ok 0 "# SKIP C: $_d: $why_c"; fi
}

if command -v curl >/dev/null; then
	curl_pgm() { # NAME PORT
		curl -s -S -m 20 --data-binary @"$TMP/in.pgm" -o "$TMP/$1.pgm" \
			-D "$TMP/$1.head" "http://127.0.0.1:$2/v1/upscale" &&
			same_pgm "$TMP/$1.pgm" "$TMP/ref.pgm" &&
			grep -q 'Content-Type: image/x-portable-graymap' "$TMP/$1.head"
		ok $? "$1: curl POSTs a PGM and gets the reference's bytes"
	}
	curl_raw() { # NAME PORT
		curl -s -S -m 20 -v -H 'Expect: 100-continue' -H 'X-Width: 23' -H 'X-Height: 17' \
			--data-binary @"$TMP/in.raw" -o "$TMP/$1.raw.pgm" \
			"http://127.0.0.1:$2/v1/upscale" 2>"$TMP/$1.curl" &&
			grep -q '< HTTP/1.1 100 Continue' "$TMP/$1.curl" &&
			same_pgm "$TMP/$1.raw.pgm" "$TMP/ref.pgm"
		ok $? "$1: curl with Expect: 100-continue gets 100, then the raw picture upscaled"
	}
	curl_pgm G "$GPORT"
	on_c "curl" curl_pgm C "$CPORT"
	curl_raw G "$GPORT"
	on_c "curl" curl_raw C "$CPORT"
else
	for s in G C G C; do ok 0 "# SKIP $s: curl is not installed (scripts/setup installs it)"; done
fi

refusals() { # NAME PORT
	is "$($HTTP badline "$2")" "400 eof: malformed request line or header field" \
		"$1: a bad request line gets 400 with its reason, and a close"
	is "$($HTTP huge "$2")" "413 eof: the body is larger than a 1024x1024 picture" \
		"$1: a terabyte's Content-Length gets 413 before any body"
	is "$($HTTP path "$2" "$TMP/in.pgm")" "404 eof: no such resource: POST a picture to /v1/upscale" \
		"$1: another path gets 404"
	is "$($HTTP fields "$2" "$TMP/in.pgm" 1360)" "431 eof: the request head is over 8192 bytes" \
		"$1: a head of 8 KiB and more in short fields gets 431 (the whole head counts)"
	t0=$(now_ms)
	got=$($HTTP bighead "$2" 20000)
	t=$(( $(now_ms) - t0 ))
	[ "$got" = "431 eof: the request head is over 8192 bytes" ] && [ $t -lt 800 ]
	ok $? "$1: a head past 8 KiB, not yet ended, gets 431 at once ($got after $t ms)"
	t0=$(now_ms)
	got=$($HTTP endless "$2" 10)
	t=$(( $(now_ms) - t0 ))
	[ "$got" = "408 eof: the request did not arrive in time" ] && [ $t -lt 4000 ]
	ok $? "$1: a head that never ends gets 408 and a close after the 1 s bound ($got after $t ms)"
	t0=$(now_ms)
	got=$($HTTP stall "$2")
	t=$(( $(now_ms) - t0 ))
	[ "$got" = "408 eof: the request did not arrive in time" ] && [ $t -lt 2500 ]
	ok $? "$1: half a head, then silence, gets 408 and a close after the 1 s bound ($got after $t ms)"
	is "$($HTTP pipelined "$2" "$TMP/in.pgm")" "200 200 200 eof" \
		"$1: three pipelined requests answered in order, then Connection: close honoured"
	is "$($HTTP paced "$2" "$TMP/in.pgm")" "200 200 eof" \
		"$1: pipelined requests each within the bound are served, though together they take longer"
	is "$($HTTP continue "$2" "$TMP/in.pgm")" "200 100 200 eof" \
		"$1: \"100 Continue\" comes after the answers to earlier pipelined requests"
	is "$($HTTP continue10 "$2" "$TMP/in.pgm")" "200 eof" \
		"$1: an HTTP/1.0 client gets no \"100 Continue\""
	is "$($HTTP truncated "$2" "$TMP/in.pgm")" "closed" \
		"$1: a body cut short by the client's end gets no answer, and a close"
	load "$2" $EXACT -c 2 -n 2 -S 9x9
	ok $? "$1: after a truncated body and its close, pictures are still right"
}
refusals G "$GPORT"
if [ $have_c = 1 ]; then refusals C "$CPORT"; else
	for i in $(seq 13); do ok 0 "# SKIP C: $why_c"; done
fi

slow() { # NAME PORT: a byte a second beside quick clients
	$HTTP slow "$2" "$TMP/in.pgm" 5 >"$TMP/slow" &
	slow_pid=$!
	sleep 0.5
	load "$2" $EXACT -c 4 -n 3 -S 8x8
	r=$?
	m=$(field max_ms)
	[ $r = 0 ] && [ "${m%.*}" -lt 900 ]
	ok $? "$1: a client sending a byte a second holds no one else up (max $m ms)"
	wait $slow_pid
	is "$(cat "$TMP/slow")" "408 eof: the request did not arrive in time" \
		"$1: and its request is answered 408 at the bound"
}
slow G "$GPORT"
if [ $have_c = 1 ]; then slow C "$CPORT"; else
	for i in 1 2; do ok 0 "# SKIP C: $why_c"; done
fi

deaf() { # NAME PORT: a reader that takes none of its 9 MiB answer
	python3 -c "
import sys
n = 1024
sys.stdout.buffer.write(b'P5\n%d %d\n255\n' % (n, n) + bytes(range(256)) * (n * n // 256))" >"$TMP/big.pgm"
	load "$2" $EXACT -c 4 -r 200 -d 2 -S 8x8 &
	load_pid=$!
	sleep 0.3
	$HTTP deaf "$2" "$TMP/big.pgm" 1.5 >"$TMP/deaf"
	wait $load_pid
	r=$?
	m=$(field max_ms)
	[ $r = 0 ] && [ "${m%.*}" -lt 900 ]
	ok $? "$1: a reader that reads nothing holds no one else's turn for long (max $m ms)"
	is "$(cat "$TMP/deaf")" "closed" "$1: and it is closed before its whole answer"
}
if [ -n "${INFER_GSERVER:-}" ]; then deaf G "$GPORT"; else
	for i in 1 2; do ok 0 "# SKIP G: a graph's bound on a turn's sends; $GNAME holds only its block"; done
fi

many() { # NAME PORT
	load "$2" $EXACT -c 24 -n 3 -S 6x6,8x5
	ok $? "$1: 24 keep-alive connections at once, 3 pictures each, all right"
	is "$($HTTP keepalive "$2" "$TMP/in.pgm" 4)" "200 200 200 200" \
		"$1: four requests one after another on one connection"
	$HTTP half "$2" "$TMP/in.pgm" >"$TMP/half" &
	half_pid=$!
	for _ in $(seq 100); do grep -q sent "$TMP/half" && break; sleep 0.05; done
	kill -9 $half_pid
	wait $half_pid 2>/dev/null
	load "$2" $EXACT -c 2 -n 2 -S 10x10
	r=$?
	grep -q sent "$TMP/half" && [ $r = 0 ]
	ok $? "$1: after a client killed mid-body ($(cat "$TMP/half")), pictures are still right"
}
many G "$GPORT"
if [ $have_c = 1 ]; then many C "$CPORT"; else
	for i in 1 2 3; do ok 0 "# SKIP C: $why_c"; done
fi

if [ $have_p = 1 ]; then
	load "$PPORT" -c 2 -n 3 -S 5x7,24x16,40x9
	ok $? "P ($(sed -n 's/.*, \([a-z]*\) stage.*/\1/p' "$TMP/psrv.out") stage): pictures within the tolerance ($(field off_pixels) pixels one level off)"
	is "$($HTTP badline "$PPORT")" "400 eof: malformed request line or header field" "P: a bad request line gets 400"
else
	for i in 1 2; do ok 0 "# SKIP P: $why_p"; done
fi

kill -TERM "$gsrv_PID"
wait "$gsrv_PID"
r=$?
[ $r = 0 ] && grep -q "pictures" "$TMP/gsrv.out"
ok $? "G stops on SIGTERM with status $r and its report: $(grep -m1 'served\|pictures' "$TMP/gsrv.out")"
if [ $have_c = 1 ]; then
	kill -TERM "$csrv_PID"
	wait "$csrv_PID"
	r=$?
	[ $r = 0 ] && grep -q "served" "$TMP/csrv.out"
	ok $? "C stops on SIGTERM with status $r: $(grep served "$TMP/csrv.out")"
else
	ok 0 "# SKIP C: $why_c"
fi

# the graph server's number of graph sizes: a count it can capture, or a sentence
GG=$IN/infer-gserver-graph
if [ -x "$GG" ]; then
	bad=""
	for n in 1 33 x ""; do
		"$GG" -G "$n" -w "$TMP/w" >"$TMP/gg.out" 2>&1
		r=$?
		[ $r = 64 ] && grep -q "takes a number of graph sizes from 2 to 32, not '$n'" "$TMP/gg.out" ||
			bad="$bad -G '$n' (status $r: $(head -c 200 "$TMP/gg.out"))"
	done
	[ -z "$bad" ]
	ok $? "infer-gserver-graph refuses a number of graph sizes outside 2..32 with status 64 and a sentence${bad:+:$bad}"
else
	ok 0 "# SKIP infer-gserver-graph is not built (configure found no CUDA toolkit with cuBLAS)"
fi
finish
