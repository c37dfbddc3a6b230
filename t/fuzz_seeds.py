#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write the seed corpus of t/fuzz_ctl.c into DIR (t/fuzz/ctl/ in the tree):
valid registrations of a few geometries, and the hostile cases of
t/bad_arena.py that concern registration, in t/fuzz_ctl.c's input format
(a byte of how, the hello, the arena's bytes).

usage: fuzz_seeds.py DIR
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_arena import CMD, DB_CMD, OP_CONNECT, OP_SOCKET, Arena, hello_bytes  # noqa: E402

HELLO, MEMFD, SEAL, EXTRA, HANGUP, SERVE = 1, 2, 4, 8, 16, 32
AF_INET, SOCK_STREAM = 2, 1


def seed(d, name, how, hello, arena):
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes([how]) + hello + arena)


def post(a, slot, op, fd=-1, args=(0, 0, 0), addr=b""):
    """A command in slot and its doorbell, as the device writes them (no wait)."""
    base = a.slots + slot * CMD
    struct.pack_into("<Iiqqq I", a.m, base + 8, op, fd, *args, len(addr))
    a.m[base + 48:base + 48 + len(addr)] = addr
    struct.pack_into("<Q", a.m, base, 1)
    a.doorbell(DB_CMD | slot, slot % a.geo[4])


def main(d):
    os.makedirs(d, exist_ok=True)
    ok = HELLO | MEMFD | SEAL
    for name, geo in (("small", (1, 1, 4096, 64, 1)), ("two-queues", (2, 3, 4096, 64, 2)),
                      ("wide", (8, 8, 4096, 128, 4))):
        a = Arena(*geo)
        img = bytes(a.m[:a.size])
        seed(d, "valid-" + name, ok, hello_bytes(a.size), img)
    a = Arena(1, 1, 4096, 64, 1)
    img = bytes(a.m[:a.size])
    seed(d, "unsealed", HELLO | MEMFD, hello_bytes(a.size), img)
    seed(d, "no-memfd", HELLO, hello_bytes(a.size), img)
    seed(d, "two-fds", ok | EXTRA, hello_bytes(a.size), img)
    seed(d, "size-mismatch", ok, hello_bytes(a.size + 4096), img)
    seed(d, "silent", 0, hello_bytes(a.size), img)
    seed(d, "hangup", HANGUP, hello_bytes(a.size), img)
    seed(d, "old-version", ok, struct.pack("<IIQ", 0x6C746367, 2, a.size), img)
    # gsock-stat's request: the stats magic, no descriptor; and with one.
    seed(d, "stats", HELLO, struct.pack("<IIQ", 0x61747367, 1, 0), b"")
    seed(d, "stats-with-fd", ok, struct.pack("<IIQ", 0x61747367, 1, 0), img)
    bad = bytearray(img)
    struct.pack_into("<I", bad, 24, 1000)  # nslots lies
    seed(d, "bad-geometry", ok, hello_bytes(a.size), bytes(bad))
    # Served: a socket, and one connecting to a loopback port.
    a = Arena(2, 2, 4096, 64, 1)
    post(a, 0, OP_SOCKET, args=(AF_INET, SOCK_STREAM, 0))
    seed(d, "serve-socket", ok | SERVE, hello_bytes(a.size), bytes(a.m[:a.size]))
    a = Arena(2, 2, 4096, 64, 1)
    post(a, 0, OP_SOCKET, args=(AF_INET, SOCK_STREAM, 0))
    post(a, 1, OP_CONNECT, fd=0,
         addr=struct.pack("<HH4s8x", AF_INET, 9, bytes([127, 0, 0, 1])))
    seed(d, "serve-connect", ok | SERVE, hello_bytes(a.size), bytes(a.m[:a.size]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
