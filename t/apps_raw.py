# SPDX-License-Identifier: Apache-2.0
"""Hostile and hand-made requests for t/facever.t and t/matmul.t.

  apps_raw.py badmagic PORT      wrong magic: expect FV_E_PROTO, then EOF
  apps_raw.py badsize PORT       a 5000-pixel side: expect FV_E_SIZE, then EOF
  apps_raw.py truncated PORT     half a picture, then close
  apps_raw.py pipelined PORT    two requests for an unknown id and a wrong magic in
                               one send: answers in order, then EOF
  apps_raw.py stall PORT SECS    half a picture, then wait for the server to cut
  apps_raw.py pgm PATH 1|2       write a 96x80 PGM picture: waves (1) or noise
  apps_raw.py mm-badmagic PORT   matmul: wrong magic: MM_E_PROTO, then EOF
  apps_raw.py mm-badsize PORT N  matmul: side N: MM_E_SIZE, then EOF
  apps_raw.py mm-truncated PORT  matmul: half of A, then close
Prints what happened as one line: "status N eof" or "closed after S".
"""
import socket
import struct
import sys
import time

REQ, RESP = 0x31515646, 0x31525646
MM_REQ, MM_RESP = 0x31514d4d, 0x31524d4d


def conn(port):
    s = socket.create_connection(("127.0.0.1", int(port)))
    s.settimeout(10)
    return s


def answer(s):
    data = b""
    while len(data) < 16:
        chunk = s.recv(16 - len(data))
        if not chunk:
            return None
        data += chunk
    magic, seq, status, dist = struct.unpack("<IIif", data)
    return status if magic == RESP else "badmagic"


def mm_answer(s):
    data = b""
    while len(data) < 16:
        chunk = s.recv(16 - len(data))
        if not chunk:
            return None
        data += chunk
    magic, seq, status, n = struct.unpack("<IIiI", data)
    return status if magic == MM_RESP else "badmagic"


def eof(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def main():
    what = sys.argv[1]
    if what == "pgm":
        import math
        import random
        seed = int(sys.argv[3])
        w, h = 96, 80
        if seed == 1:  # vertical waves
            px = bytes(int(128 + 100 * math.sin(x / 2.0)) for y in range(h) for x in range(w))
        else:  # noise
            r = random.Random(seed)
            px = bytes(r.randrange(256) for _ in range(w * h))
        with open(sys.argv[2], "wb") as f:
            f.write(b"P5\n%d %d\n255\n" % (w, h) + px)
        return
    s = conn(sys.argv[2])
    if what == "badmagic":
        s.sendall(struct.pack("<IIIHH", 0xdeadbeef, 1, 0, 64, 64) + bytes(64 * 64))
        st = answer(s)
        print("status", st, "eof" if eof(s) else "open")
    elif what == "badsize":
        s.sendall(struct.pack("<IIIHH", REQ, 2, 0, 5000, 64))
        st = answer(s)
        print("status", st, "eof" if eof(s) else "open")
    elif what == "pipelined":
        good = lambda seq: struct.pack("<IIIHH", REQ, seq, 999999, 16, 16) + bytes(256)
        s.sendall(good(1) + good(2) + struct.pack("<IIIHH", 0xdeadbeef, 3, 0, 16, 16))
        got = []
        for _ in range(3):
            data = b""
            while len(data) < 16:
                chunk = s.recv(16 - len(data))
                if not chunk:
                    break
                data += chunk
            if len(data) < 16:
                break
            magic, seq, status, dist = struct.unpack("<IIif", data)
            got.append("%d:%d" % (seq, status))
        print(" ".join(got), "eof" if eof(s) else "open")
    elif what == "truncated":
        s.sendall(struct.pack("<IIIHH", REQ, 3, 0, 128, 128) + bytes(5000))
        s.close()
        print("sent")
    elif what == "mm-badmagic":
        s.sendall(struct.pack("<IIII", 0xdeadbeef, 1, 4, 0) + bytes(2 * 16 * 4))
        st = mm_answer(s)
        print("status", st, "eof" if eof(s) else "open")
    elif what == "mm-badsize":
        s.sendall(struct.pack("<IIII", MM_REQ, 2, int(sys.argv[3]), 0))
        st = mm_answer(s)
        print("status", st, "eof" if eof(s) else "open")
    elif what == "mm-truncated":
        s.sendall(struct.pack("<IIII", MM_REQ, 3, 64, 0) + bytes(1000))
        s.close()
        print("sent")
    elif what == "stall":
        s.settimeout(float(sys.argv[3]))
        s.sendall(struct.pack("<IIIHH", REQ, 4, 0, 128, 128) + bytes(5000))
        t0 = time.time()
        try:
            cut = eof(s)
        except socket.timeout:
            cut = False
        print("closed after %.1f" % (time.time() - t0) if cut else "still open")


main()
