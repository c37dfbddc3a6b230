#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Unmodified CPU peers for gsock's end-to-end tests.

  sizes PORT N...        one connection per size: send N random bytes while
                         reading the echo concurrently; print "ok N" if intact
  concurrent PORT C SEED C connections at once, random sizes 1 B..1 MiB;
                         print "ok C" when every one came back intact
  echo-server ADDR       a threaded CPU echo server (tcp ADDR=host:port, or a
                         unix path); prints "listening PORT|PATH", then
                         "accepted" for each connection
  reuseport-echo-server ADDR
                         the same, its port shared (SO_REUSEPORT)
  late-echo-server ADDR SECONDS
                         the same, its first accept SECONDS after listening
  epoll-echo-server ADDR the same in one thread: non-blocking sockets in an
                         epoll set (selectors), accept4 included
  fork-echo-server ADDR  the threaded server in 2 forked children that
                         accept on the parent's listener
  dup-echo-server ADDR   the threaded server, its listener moved to another
                         descriptor (dup2, the first closed) after a
                         subprocess ran (vfork, close_range in the child)
  fin-server DATA        accept one connection, send DATA, close (FIN)
  rst-server DATA        accept one connection, send DATA, reset (RST)
  silent-server          accept and hold connections without sending
"""
import os
import random
import selectors
import socket
import sys
import threading
import time


def connect(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def round_trip(port, payload, barrier=None):
    """Send payload and read it back concurrently; return what came back.
    With a barrier, wait on it once connected so connections overlap."""
    s = connect(port)
    if barrier:
        barrier.wait(60)
    got = bytearray()

    def reader():
        while len(got) < len(payload):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got.extend(chunk)

    t = threading.Thread(target=reader)
    t.start()
    s.sendall(payload)
    t.join(60)
    s.close()
    return bytes(got)


def sizes(port, *ns):
    bad = 0
    for n in map(int, ns):
        payload = os.urandom(n)
        back = round_trip(port, payload)
        if back == payload:
            print("ok", n, flush=True)
        else:
            bad += 1
            first = next((i for i in range(min(len(back), n)) if back[i] != payload[i]), min(len(back), n))
            print("bad", n, "got", len(back), "first difference at", first, flush=True)
    return 1 if bad else 0


def concurrent(port, count, seed):
    rng = random.Random(int(seed))
    lens = [rng.choice([1, rng.randint(1, 4096), rng.randint(1, 1 << 20)]) for _ in range(int(count))]
    results = [None] * len(lens)
    barrier = threading.Barrier(len(lens))

    def one(i):
        payload = rng_bytes(seed, i, lens[i])
        results[i] = round_trip(port, payload, barrier) == payload

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(lens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    good = sum(1 for r in results if r)
    print("ok" if good == len(lens) else "bad", good, "of", len(lens), "total bytes", sum(lens), flush=True)
    return 0 if good == len(lens) else 1


def rng_bytes(seed, i, n):
    return random.Random(int(seed) * 1000003 + i).randbytes(n)


def listen(addr, reuseport=False):
    if addr.startswith("/"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(addr)
        name = addr
    else:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((host, int(port)))
        name = s.getsockname()[1]
    s.listen(128)
    print("listening", name, flush=True)
    return s


def echo_server(addr, reuseport=False, late=0.0):
    ls = listen(addr, reuseport)
    time.sleep(late)
    echo_server_on(ls)


def echo_server_on(ls):
    def serve(c):
        with c:
            while True:
                data = c.recv(1 << 16)
                if not data:
                    return
                c.sendall(data)
    while True:
        c, _ = ls.accept()
        print("accepted", flush=True)
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def fork_echo_server(addr):
    ls = listen(addr)
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            echo_server_on(ls)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)


def dup_echo_server(addr):
    import subprocess
    ls = listen(addr)
    subprocess.run(["true"], check=True)
    os.dup2(ls.fileno(), 77)
    moved = socket.socket(fileno=77)
    ls.close()
    echo_server_on(moved)


def epoll_echo_server(addr):
    ls = listen(addr)
    ls.setblocking(False)
    sel = selectors.EpollSelector()
    sel.register(ls, selectors.EVENT_READ)
    out = {}
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is ls:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                out[c] = b""
                sel.register(c, selectors.EVENT_READ)
                print("accepted", flush=True)
                continue
            try:
                data = s.recv(1 << 16)
            except BlockingIOError:
                data = None
            if data == b"":
                sel.unregister(s)
                del out[s]
                s.close()
                continue
            out[s] += data or b""
            try:
                n = s.send(out[s])
            except BlockingIOError:
                n = 0
            out[s] = out[s][n:]
            sel.modify(s, selectors.EVENT_READ |
                       (selectors.EVENT_WRITE if out[s] else 0))


def fin_server(data, reset=False):
    ls = listen("127.0.0.1:0")
    c, _ = ls.accept()
    c.sendall(data.encode())
    if reset:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        # Wait for the probe's first read so the reset follows the data.
        threading.Event().wait(0.3)
    c.close()
    threading.Event().wait(30)


def silent_server():
    ls = listen("127.0.0.1:0")
    held = []
    while True:
        c, _ = ls.accept()
        held.append(c)


def main(argv):
    mode = argv[1]
    if mode == "sizes":
        return sizes(argv[2], *argv[3:])
    if mode == "concurrent":
        return concurrent(argv[2], argv[3], argv[4])
    if mode == "echo-server":
        return echo_server(argv[2])
    if mode == "reuseport-echo-server":
        return echo_server(argv[2], reuseport=True)
    if mode == "late-echo-server":
        return echo_server(argv[2], late=float(argv[3]))
    if mode == "dup-echo-server":
        return dup_echo_server(argv[2])
    if mode == "fork-echo-server":
        return fork_echo_server(argv[2])
    if mode == "epoll-echo-server":
        return epoll_echo_server(argv[2])
    if mode == "fin-server":
        return fin_server(argv[2])
    if mode == "rst-server":
        return fin_server(argv[2], reset=True)
    if mode == "silent-server":
        return silent_server()
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
