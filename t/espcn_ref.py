# SPDX-License-Identifier: Apache-2.0
"""ESPCN x3 written again from its definition in apps/infer/espcn.h, in
plain Python (double precision), for t/infer-ref.t: reads a weights file
and a PGM, and compares a PGM that infer-ref made with its own answer.
Prints "ok DIFFERENT EXACT" (pixels off by more than one, pixels equal)
or why it could not. Usage: espcn_ref.py WEIGHTS IN.pgm OUT.pgm"""
import math
import struct
import sys

R, C1, C2 = 3, 64, 32
C3 = R * R


def pgm(path):
    b = open(path, 'rb').read()
    parts = b.split(maxsplit=4)
    assert parts[0] == b'P5', path
    w, h = int(parts[1]), int(parts[2])
    return w, h, parts[4][:w * h]


def conv(inp, cin, cout, w, h, wt, bias, k, act):
    half = k // 2
    out = []
    for o in range(cout):
        plane = []
        for y in range(h):
            for x in range(w):
                v = bias[o]
                for i in range(cin):
                    src = inp[i]
                    for ky in range(k):
                        yy = y + ky - half
                        if yy < 0 or yy >= h:
                            continue
                        base = ((o * cin + i) * k + ky) * k
                        for kx in range(k):
                            xx = x + kx - half
                            if 0 <= xx < w:
                                v += wt[base + kx] * src[yy * w + xx]
                plane.append(math.tanh(v) if act else v)
        out.append(plane)
    return out


def main():
    raw = open(sys.argv[1], 'rb').read()
    assert raw[:8] == b'ESPCNW1\0'
    n = struct.unpack('<I', raw[20:24])[0]
    p = struct.unpack('<%df' % n, raw[24:24 + 4 * n])
    w1, b1 = 0, C1 * 25
    w2 = b1 + C1
    b2 = w2 + C2 * C1 * 9
    w3 = b2 + C2
    b3 = w3 + C3 * C2 * 9
    w, h, img = pgm(sys.argv[2])
    ow, oh, got = pgm(sys.argv[3])
    if (ow, oh) != (w * R, h * R):
        print('size %dx%d, not %dx%d' % (ow, oh, w * R, h * R))
        return
    x = [[v / 255.0 for v in img]]
    a = conv(x, 1, C1, w, h, p[w1:b1], p[b1:w2], 5, True)
    b = conv(a, C1, C2, w, h, p[w2:b2], p[b2:w3], 3, True)
    c = conv(b, C2, C3, w, h, p[w3:b3], p[b3:b3 + C3], 3, False)
    want = bytearray(ow * oh)
    for y in range(h):
        for xx in range(w):
            for ch in range(C3):
                v = min(255.0, max(0.0, c[ch][y * w + xx] * 255.0))
                want[(y * R + ch // R) * ow + xx * R + ch % R] = int(round(v))
    far = sum(1 for i in range(len(want)) if abs(want[i] - got[i]) > 1)
    same = sum(1 for i in range(len(want)) if want[i] == got[i])
    print('ok %d %d of %d, %d values' % (far, same, len(want), len(set(want))))


main()
