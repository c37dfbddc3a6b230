#!/bin/sh
# ESPCN's weights files and CPU reference (apps/infer): the generator is
# deterministic, the reference agrees with the model written again in
# Python (t/espcn_ref.py) to within one grey level, and the weights
# loader refuses truncated, foreign, reshaped, padded and non-finite
# files with a sentence.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
REF=$GSOCK_BUILD/apps/infer/infer-ref
[ -x "$REF" ] || skip_all "apps/infer/infer-ref is not built"
time_limit 120
plan 12

"$REF" weights -o "$TMP/w1" && "$REF" weights -o "$TMP/w1b" && "$REF" weights -s 2 -o "$TMP/w2"
ok $? "infer-ref writes weights"
cmp -s "$TMP/w1" "$TMP/w1b" && ! cmp -s "$TMP/w1" "$TMP/w2"
ok $? "the same seed gives the same bytes, another seed others"
is "$(wc -c <"$TMP/w1" | tr -d ' ')" 90940 "a weights file is 24 bytes of header and 22729 floats"

python3 -c "
import sys
w, h = 12, 10
sys.stdout.buffer.write(b'P5\n%d %d\n255\n' % (w, h) + bytes((x * 23 + y * 41 + x * y) % 256 for y in range(h) for x in range(w)))" >"$TMP/in.pgm"
"$REF" run -w "$TMP/w1" -i "$TMP/in.pgm" -o "$TMP/out.pgm"
ok $? "infer-ref upscales a 12x10 picture"
got=$(python3 "$GSOCK_SRC/t/espcn_ref.py" "$TMP/w1" "$TMP/in.pgm" "$TMP/out.pgm")
case $got in
"ok 0 "*) r=0 ;;
*) r=1 ;;
esac
ok $r "the Python model agrees to within one level at every pixel: $got"

python3 -c "
import sys
sys.stdout.buffer.write(b'P5\n224 224\n255\n' + bytes((x ^ y) & 255 for y in range(224) for x in range(224)))" >"$TMP/224.pgm"
"$REF" run -w "$TMP/w2" -i "$TMP/224.pgm" -o "$TMP/672.pgm" &&
	[ "$(head -c 15 "$TMP/672.pgm" | tr '\n' ' ')" = "P5 672 672 255 " ]
ok $? "a 224x224 picture becomes 672x672"

# refused: status 65 and a sentence naming what is wrong
refused() { # NAME FILE PATTERN
	"$REF" run -w "$2" -i "$TMP/in.pgm" -o "$TMP/x.pgm" 2>"$TMP/err"
	r=$?
	[ $r = 65 ] && grep -q "$3" "$TMP/err"
	ok $? "$1: status $r, $(cat "$TMP/err")"
}
head -c 1000 "$TMP/w1" >"$TMP/trunc"
refused "a truncated weights file" "$TMP/trunc" "truncated: 1000 bytes where the header says 90940"
python3 -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
open(sys.argv[2], 'wb').write(b'XSPCNW1\0' + b[8:])
b[12] = 32
open(sys.argv[3], 'wb').write(b)
b[12] = 64
open(sys.argv[4], 'wb').write(b + b'\0')
b[24 + 4 * 100:24 + 4 * 101] = b'\0\0\xc0\x7f'
open(sys.argv[5], 'wb').write(b)" "$TMP/w1" "$TMP/magic" "$TMP/shape" "$TMP/tail" "$TMP/nan"
refused "another file" "$TMP/magic" "not an ESPCN weights file"
refused "another shape" "$TMP/shape" "weights of another shape: scale 3, channels 32 and 32"
refused "a byte after the weights" "$TMP/tail" "bytes after the weights"
refused "a NaN" "$TMP/nan" "weight 100 is not a finite number"

printf 'P5\n2000 10\n255\n' >"$TMP/wide.pgm"
head -c 20000 /dev/zero >>"$TMP/wide.pgm"
"$REF" run -w "$TMP/w1" -i "$TMP/wide.pgm" -o "$TMP/x.pgm" 2>"$TMP/err"
r=$?
[ $r = 65 ] && grep -q "4 to 1024 pixels a side" "$TMP/err"
ok $? "a picture 2000 pixels wide is refused: status $r, $(cat "$TMP/err")"
finish
