#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A hostile gsock application, for t/bad-input.t.

Speaks the control protocol and the arena protocol from Python (layout as
devlib/gsock_arena.h draws it) and breaks them on purpose, one scenario per
connection. For each scenario prints "ok NAME" when gsockd refused or
dropped the application as it should, "bad NAME ..." otherwise.

usage: bad_arena.py CONTROL_PATH ECHO_PORT
"""
import fcntl
import mmap
import os
import random
import socket
import struct
import sys
import tempfile
import time

CTL_MAGIC, WELCOME_MAGIC = 0x6C746367, 0x6C657767


def _version(header, name):
    """A protocol version, read from its header so the two never drift apart."""
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "devlib", header)
    with open(h) as f:
        for line in f:
            if line.startswith("#define " + name + " "):
                return int(line.split()[2])
    raise SystemExit("bad_arena: no " + name + " in " + h)


CTL_VERSION = _version("gsock_ctl.h", "GS_CTL_VERSION")
ARENA_MAGIC, ARENA_VERSION = 0x31636B6F7367, _version("gsock_arena.h", "GS_ARENA_VERSION")
HDR, CMD, SOCK, DBQ = 192, 384, 256, 64  # sizeof gs_arena_hdr, gs_cmd, gs_sock, gs_dbq (t/ring checks them)
DB_CMD = 0x80000000
OP_SOCKET, OP_CONNECT = 1, 5


def layout(nslots, nsocks, ring, db, nq):
    slots = HDR
    socks = slots + nslots * CMD
    dbq = socks + nsocks * SOCK
    dbo = dbq + nq * DBQ
    rings = (dbo + nq * db * 8 + 4095) & ~4095
    return slots, socks, dbq, dbo, rings, rings + nsocks * 2 * ring


class Arena:
    """One doorbell queue unless told: gsockd then serves it with one worker."""
    def __init__(self, nslots=4, nsocks=4, ring=4096, db=64, nq=1, seal=True):
        self.geo = (nslots, nsocks, ring, db, nq)
        self.slots, self.socks, self.dbq, self.dbo, self.rings, self.size = layout(*self.geo)
        flags = os.MFD_ALLOW_SEALING if seal else 0
        self.fd = os.memfd_create("bad-arena", flags)
        os.ftruncate(self.fd, self.size)
        if seal:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.m = mmap.mmap(self.fd, self.size)
        struct.pack_into("<QIIQIIIIQQQQIIQ", self.m, 0, ARENA_MAGIC, ARENA_VERSION, HDR,
                         self.size, nslots, nsocks, ring, db,
                         self.slots, self.socks, self.dbo, self.rings, nq, 0, self.dbq)
        self.tickets = [0] * nq

    def doorbell(self, what, q=0):
        db = self.geo[3]
        t = self.tickets[q]
        struct.pack_into("<Q", self.m, self.dbo + 8 * (q * db + t % db),
                         (((t + 1) & 0xFFFFFFFF) << 32) | what)
        self.tickets[q] += 1

    def queue_of(self, fd):
        """The doorbell queue gsockd named for socket fd."""
        return struct.unpack_from("<I", self.m, self.socks + fd * SOCK + 24)[0]

    def command(self, slot, op, fd=-1, args=(0, 0, 0), addr=b"", addrlen=None, q=None):
        """Ring the slot's queue by default, as the device does for a new socket."""
        base = self.slots + slot * CMD
        seq = struct.unpack_from("<Q", self.m, base)[0] + 1
        struct.pack_into("<Iiqqq I", self.m, base + 8, op, fd, *args,
                         len(addr) if addrlen is None else addrlen)
        self.m[base + 48:base + 48 + len(addr)] = addr
        struct.pack_into("<Q", self.m, base, seq)
        self.doorbell(DB_CMD | slot, slot % self.geo[4] if q is None else q)
        deadline = time.time() + 5
        while time.time() < deadline:
            if struct.unpack_from("<Q", self.m, base + 192)[0] == seq:
                return struct.unpack_from("<q", self.m, base + 200)[0]
            time.sleep(0.001)
        return None


def hello_bytes(size, magic=CTL_MAGIC):
    return struct.pack("<IIQIIQ", magic, CTL_VERSION, size, 0, 0, 0)


def connect(path, greeted=True):
    """A control connection; greeted: read gsockd's welcome first."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(path)
    if greeted:
        global WORKERS
        w = s.recv(256)
        if len(w) != 32 or struct.unpack_from("<I", w)[0] != WELCOME_MAGIC:
            raise SystemExit("gsockd sent no welcome: %r" % (w,))
        WORKERS = struct.unpack_from("<I", w, 8)[0]
    return s


def verdict(s):
    """gsockd's reply status, or None if it closed without one."""
    try:
        r = s.recv(256)
    except OSError:
        return None
    if len(r) < 8:
        return None
    return struct.unpack_from("<Ii", r)[1]


def dropped(s, secs=3):
    """True when gsockd closes the control connection within secs."""
    s.settimeout(secs)
    try:
        return s.recv(64) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


results = []
WORKERS = 0  # gsockd's, from its welcome


def check(name, good, detail=""):
    results.append(good)
    print(("ok " if good else "bad ") + name + (" " + detail if detail and not good else ""), flush=True)


def refused(path, name, data, fds=()):
    s = connect(path)
    socket.send_fds(s, [data], list(fds)) if fds else s.send(data)
    st = verdict(s)
    check(name, st is not None and st < 0, "status %r" % (st,))
    s.close()


def registered(path, arena):
    s = connect(path)
    socket.send_fds(s, [hello_bytes(arena.size)], [arena.fd])
    st = verdict(s)
    if st != 0:
        raise SystemExit("bad registration of a valid arena: %r" % (st,))
    return s


def main(path, echo_port):
    # Control protocol.
    refused(path, "short-hello", b"garbage!!")
    refused(path, "wrong-magic", hello_bytes(4096, magic=0xDEADBEEF))
    refused(path, "no-descriptor", hello_bytes(4096))
    r, w = os.pipe()
    refused(path, "pipe-descriptor", hello_bytes(4096), [r])
    a = Arena(seal=False)
    refused(path, "unsealed-memfd", hello_bytes(a.size), [a.fd])
    # A file on disk is no memfd: no seals, and it can be cut short under
    # gsockd (a SIGBUS). Made where the tests build, not in a tmpfs.
    a = Arena()
    ffd, fpath = tempfile.mkstemp(dir=os.environ.get("GSOCK_BUILD") or None)
    os.unlink(fpath)
    os.write(ffd, a.m[:a.size])
    refused(path, "regular-file-arena", hello_bytes(a.size), [ffd])
    os.close(ffd)
    a = Arena()
    a.m[0:8] = b"notgsock"
    refused(path, "bad-arena-magic", hello_bytes(a.size), [a.fd])
    a = Arena()
    struct.pack_into("<I", a.m, 24, 1000)  # nslots lies (within max_slots)
    refused(path, "bad-geometry", hello_bytes(a.size), [a.fd])
    a = Arena()
    refused(path, "size-mismatch", hello_bytes(a.size + 4096), [a.fd])

    # A connection that never says hello must not hold gsockd up.
    silent = connect(path, greeted=False)
    t0 = time.time()
    a = Arena()
    s = registered(path, a)
    waited = time.time() - t0
    check("silent-connection-does-not-stall", waited < 0.5, "registration took %.2f s" % waited)
    s.close()

    # A valid arena whose contents then go wrong.
    a = Arena()
    s = registered(path, a)
    check("valid-socket-command", a.command(0, OP_SOCKET, args=(socket.AF_INET, socket.SOCK_STREAM, 0)) == 0)
    check("command-bad-fd", a.command(1, OP_CONNECT, fd=3, addr=b"\x02\x00") == -9)
    a.doorbell(DB_CMD | 999)
    check("doorbell-bad-slot", dropped(s))

    a = Arena()
    s = registered(path, a)
    a.command(0, 77)
    check("unknown-opcode", dropped(s))

    a = Arena()
    s = registered(path, a)
    a.command(0, OP_CONNECT, fd=0, addrlen=5000)
    check("oversized-address", dropped(s))

    a = Arena()
    s = registered(path, a)
    fd = a.command(0, OP_SOCKET, args=(socket.AF_INET, socket.SOCK_STREAM, 0))
    sin = (struct.pack("<H", socket.AF_INET) + struct.pack("!H", int(echo_port)) +
           socket.inet_aton("127.0.0.1") + bytes(8))
    r = a.command(1, OP_CONNECT, fd=fd, addr=sin)
    check("connect-for-real", r == 0, "connect returned %r" % (r,))
    struct.pack_into("<Q", a.m, a.socks + fd * SOCK + 192, 10 * 4096)  # tx_tail far ahead
    a.doorbell(fd, a.queue_of(fd))
    check("corrupt-tx-counters", dropped(s))

    # Two queues (two workers): a socket's doorbell rung on the wrong
    # queue is ignored, on the right one acted on; a command about the
    # other worker's socket is served all the same; one request rung on
    # both queues is served once.
    if WORKERS < 2:
        for name in ("two-workers-own-sockets", "command-forwarded-to-owner",
                     "one-request-two-doorbells-served-once", "wrong-queue-doorbell-ignored",
                     "corrupt-counters-on-second-worker"):
            print("skip %s gsockd runs %d worker(s)" % (name, WORKERS), flush=True)
        return finish(path, silent)
    a = Arena(nq=2)
    s = registered(path, a)
    fds = [a.command(k, OP_SOCKET, args=(socket.AF_INET, socket.SOCK_STREAM, 0)) for k in (0, 1)]
    queues = sorted(a.queue_of(fd) for fd in fds if fd is not None and fd >= 0)
    check("two-workers-own-sockets", queues == [0, 1], "queues %r for fds %r" % (queues, fds))
    r = a.command(0, OP_CONNECT, fd=fds[1], addr=sin, q=0)  # the other worker's socket
    check("command-forwarded-to-owner", r == 0, "connect returned %r" % (r,))
    base = a.slots + 2 * CMD
    seq = struct.unpack_from("<Q", a.m, base)[0] + 1
    struct.pack_into("<Iiqqq I", a.m, base + 8, OP_SOCKET, -1, socket.AF_INET, socket.SOCK_STREAM, 0, 0)
    struct.pack_into("<Q", a.m, base, seq)
    a.doorbell(DB_CMD | 2, 0)
    a.doorbell(DB_CMD | 2, 1)
    time.sleep(0.3)
    done = struct.unpack_from("<Q", a.m, base + 192)[0]
    live = sum(1 for k in range(4) if struct.unpack_from("<I", a.m, a.socks + k * SOCK + 8)[0] & 1)
    check("one-request-two-doorbells-served-once", done == seq and live == 3,
          "done_seq %d (seq %d), %d sockets open (3 expected)" % (done, seq, live))
    struct.pack_into("<Q", a.m, a.socks + fds[1] * SOCK + 192, 10 * 4096)
    a.doorbell(fds[1], 1 - a.queue_of(fds[1]))
    check("wrong-queue-doorbell-ignored", not dropped(s, 0.5))
    a.doorbell(fds[1], a.queue_of(fds[1]))
    check("corrupt-counters-on-second-worker", dropped(s))
    return finish(path, silent)


def finish(path, silent):
    """Last: an arena overwritten with garbage while gsockd serves it."""
    a = Arena()
    s = registered(path, a)
    rng = random.Random(7)
    a.m[HDR:a.size] = rng.randbytes(a.size - HDR)
    for _ in range(64):
        a.doorbell(rng.getrandbits(32))
    time.sleep(0.3)
    print("# garbage arena written; t/bad-input.t checks that gsockd lives", flush=True)
    s.close()
    silent.close()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
