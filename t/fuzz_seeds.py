#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write the seed corpus of t/fuzz_ctl.c into DIR (t/fuzz/ctl/ in the tree):
valid registrations of a few geometries, and the hostile cases of
t/bad_arena.py that concern registration, in t/fuzz_ctl.c's input format
(a byte of how, the hello, the arena's bytes). With --arena, that of
t/fuzz_arena.c (t/fuzz/arena/): programs that use each of its operations,
and the inputs that found bugs.

usage: fuzz_seeds.py [--arena] DIR
"""
import base64
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_arena import CMD, CTL_VERSION, DB_CMD, OP_CONNECT, OP_SOCKET, Arena, hello_bytes  # noqa: E402

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
    seed(d, "old-version", ok, struct.pack("<IIQ", 0x6C746367, 2, a.size).ljust(32, b"\0"), img)
    # gsock-stat's request: the stats magic, no descriptor; and with one.
    seed(d, "stats", HELLO, struct.pack("<IIQ", 0x61747367, 3, 0).ljust(32, b"\0"), b"")
    seed(d, "stats-with-fd", ok, struct.pack("<IIQ", 0x61747367, 3, 0).ljust(32, b"\0"), img)
    # The preload's direct request: 127.0.0.1:9 from 127.0.0.1:40000, a
    # descriptor (its socketpair end) with it, and without one.
    def sin(port):
        return struct.pack("<H", AF_INET) + struct.pack("!H", port) + bytes([127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    dreq = struct.pack("<IIII", 0x6E6F6364, CTL_VERSION, 16, 16) + sin(9).ljust(28, b"\0") + \
        sin(40000).ljust(28, b"\0")
    seed(d, "direct-request", HELLO | MEMFD, dreq, img)
    seed(d, "direct-request-no-fd", HELLO, dreq, b"")
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


# t/fuzz_arena.c's operations, in the order of its enum fz_op.
(SOCKET, BIND, LISTEN, ACCEPT, CONNECT, SHUTDOWN, CLOSE, SETSOCKOPT, NAME, SEND,
 RECV, PAIR, TURNS, SLOT, BELL, COUNTER, SOCKPOKE, POKE, PEER, STAT, DIRECT, DPOKE) = range(22)
EPOLL, URING, EPOLL_URING, URING_EPOLL = range(4)
INET, INET6, ABSTRACT, PATH = range(4)  # kinds of SOCKET (but PATH) and PAIR


def setup(workers=EPOLL, nslots=4, nsocks=8, big_ring=False):
    return bytes([workers | (nslots - 1) << 2 | (nsocks - 1) << 4 | big_ring << 7])


def u16(n):
    return struct.pack("<H", n)


def arena_seeds(d):
    """Sockets 0, 1, 2 of a pair: the listener, the connecting end, the accepted."""
    os.makedirs(d, exist_ok=True)
    talk = bytes([SEND, 1]) + u16(3000) + bytes([TURNS, 3, RECV, 2]) + u16(4096) + \
        bytes([SEND, 2]) + u16(5000) + bytes([TURNS, 3, RECV, 1]) + u16(4096) + \
        bytes([TURNS, 3, RECV, 1]) + u16(4096)
    bye = bytes([SHUTDOWN, 1, 1, TURNS, 2, RECV, 2, 16, 0, CLOSE, 2, CLOSE, 1, CLOSE, 0, TURNS, 2])
    seeds = {
        "pair-inet": setup() + bytes([PAIR, INET]) + talk + bytes([STAT]) + bye,
        "pair-inet6-uring": setup(URING) + bytes([PAIR, INET6]) + talk + bye,
        "pair-abstract-two-workers": setup(EPOLL_URING) + bytes([PAIR, ABSTRACT]) + talk + bye,
        "pair-path-two-workers": setup(URING_EPOLL, big_ring=True) + bytes([PAIR, PATH]) + talk +
        bytes([STAT]) + bye,
        # each command on its own, replies taken by the turns
        "commands": setup(nslots=4) + bytes([
            SOCKET, INET, SOCKET, INET | 4, TURNS, 2,
            BIND, 0, INET, SETSOCKOPT, 0, 0, 8 << 3, LISTEN, 0, 4 << 3, TURNS, 2,
            ACCEPT, 0, 1, NAME, 0, 0, CONNECT, 1, 1, TURNS, 4,
            CONNECT, 1, 0, TURNS, 4, ACCEPT, 0, 0, NAME, 1, 1, TURNS, 4,
            SETSOCKOPT, 1, 7, 1 << 3, SETSOCKOPT, 1, 3, 1 << 3, TURNS, 2,
            SHUTDOWN, 2, 2, BIND, 3, 4, 16]) + struct.pack("<HH4s8x", AF_INET, 0, bytes([127, 0, 0, 1])) +
        bytes([TURNS, 2, CLOSE, 0, CLOSE, 1, CLOSE, 2, TURNS, 2]),
        # a CPU program connects, sends, reads the answer, resets
        "peer": setup(EPOLL_URING) + bytes([
            SOCKET, INET, TURNS, 1, BIND, 0, INET, LISTEN, 0, 0, TURNS, 2,
            PEER, 0, 0, 0, 0, PEER, 1, 0]) + u16(2000) + bytes([TURNS, 2, ACCEPT, 0, 0, TURNS, 3,
            RECV, 1]) + u16(4096) + bytes([SEND, 1]) + u16(1000) + bytes([TURNS, 3,
            PEER, 4, 0]) + u16(4096) + bytes([PEER, 2, 0, 0, 0, TURNS, 2, RECV, 1, 16, 0,
            PEER, 3, 0, 0, 0, TURNS, 3, STAT]),
        # ring counters: backwards, past capacity, wrapped
        "counters": setup() + bytes([PAIR, INET, SEND, 1]) + u16(4096) +
        bytes([COUNTER, 1, 1, 2]) + bytes(8) + bytes([TURNS, 2, COUNTER, 2, 0, 1]) + u16(8) + bytes(6) +
        bytes([TURNS, 2, COUNTER, 2, 0, 3]) + bytes(8) + bytes([TURNS, 2]),
        "counter-poll-slot": setup() + bytes([PAIR, INET, COUNTER, 1, 4, 4]) + struct.pack("<Q", 5) +
        bytes([SEND, 2]) + u16(100) + bytes([TURNS, 3]),
        # raw requests: an unknown opcode, an oversized address, a stale sequence
        "slot-raw": setup() + bytes([SLOT, 0, 1, 0, 0, 0, 0, 0, 0, TURNS, 1,
                                     SLOT, 1, 2, 0, 0, 0, 0, 200, 0, TURNS, 1]),
        "slot-bad-op": setup() + bytes([SLOT, 0, 20, 0, 0, 0, 0, 0, 0, TURNS, 1]),
        "slot-stale-seq": setup() + bytes([PAIR, INET, SLOT, 0, 7, 1, 0, 0, 0, 0, 1, TURNS, 2]),
        # doorbells: out of range, a ticket ahead, a raw cell
        "bell-range": setup() + bytes([BELL, 0, 0]) + struct.pack("<I", 0x80000000 | 77) +
        bytes([TURNS, 1]),
        "bell-tickets": setup(EPOLL_URING) + bytes([PAIR, INET, BELL, 0, 2 | 4 << 2]) +
        struct.pack("<I", 1) + bytes([BELL, 1, 3]) + struct.pack("<I", 0x300) + bytes(8) +
        bytes([BELL, 0, 1, 1, 0, 0, 0, TURNS, 2]),
        # bytes anywhere: the header, the socket table
        "poke": setup() + bytes([PAIR, INET, POKE, 0, 0, 0, 0, 8]) + bytes(8) +
        bytes([SOCKPOKE, 1, 192, 8]) + bytes([0xff] * 8) + bytes([SEND, 1, 10, 0, TURNS, 2]),
        # the same-host direct path: pairs whose bytes move in the pool
        "direct-pair": setup() + bytes([DIRECT, 1, PAIR, INET]) + talk + bytes([STAT]) + bye,
        "direct-pair-inet6-uring": setup(URING) + bytes([DIRECT, 1, PAIR, INET6]) + talk + bye,
        # three connections to one listener, two segments: the third is bridged
        "direct-pool-used-up": setup(EPOLL_URING) + bytes([
            DIRECT, 1, SOCKET, INET, TURNS, 1, BIND, 0, INET, LISTEN, 0, 0, TURNS, 2,
            SOCKET, INET, SOCKET, INET, SOCKET, INET, TURNS, 2,
            CONNECT, 1, 0, TURNS, 3, CONNECT, 2, 0, TURNS, 3, CONNECT, 3, 0, TURNS, 3,
            ACCEPT, 0, 0, TURNS, 3, ACCEPT, 0, 0, TURNS, 3, ACCEPT, 0, 0, TURNS, 3,
            SEND, 1]) + u16(3000) + bytes([SEND, 3]) + u16(3000) + bytes([TURNS, 3, RECV, 4]) +
        u16(4096) + bytes([RECV, 6]) + u16(4096) + bytes([STAT, CLOSE, 0, TURNS, 3]),
        # a direct pair's segment header and rings written over: counters
        # past capacity, closed, reset and want words, spill counts
        "direct-poke": setup() + bytes([DIRECT, 1, PAIR, INET, SEND, 1]) + u16(1000) +
        bytes([DPOKE, 0]) + u16(0) + bytes([8]) + struct.pack("<Q", 1 << 40) +  # a tail
        bytes([DPOKE, 0]) + u16(256) + bytes([16]) + bytes([0xff] * 16) +  # closed .. reset
        bytes([DPOKE, 0]) + u16(336) + bytes([16]) + bytes([0xff] * 16) +  # spill counts
        bytes([SEND, 2]) + u16(100) + bytes([TURNS, 3, RECV, 1]) + u16(4096) +
        bytes([RECV, 2]) + u16(4096) + bytes([STAT, TURNS, 2]) + bye,
        # found by t/fuzz_arena.c, in the harness: a positive error poked
        # into the socket table, which the device (trusting gsockd) took
        # for a byte count in grecv; g-calls now leave such a socket alone
        "harness-positive-error": base64.b64decode(
            "DAMKAn8APAsACQG4EQAAABAJAogQEwwDCgEDCgIAEAkCiBMMAwoBAAIQ5wwDABAJAogTDAMKAX4w"
            "CgIAEAkCiBMMAwoBABAMAwAQOg=="),
        # found by t/fuzz_arena.c: a unix path that fills sun_path was
        # kept cut short, the socket file left and another one unlinked
        "crash-unix-path-108": setup() + bytes([SOCKET, ABSTRACT, TURNS, 1, BIND, 0, PATH, 255,
                                                LISTEN, 0, 0, TURNS, 2, CLOSE, 0, TURNS, 2]),
    }
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--arena":
        sys.exit(arena_seeds(sys.argv[2]))
    sys.exit(main(sys.argv[1]))
