#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Clients that abuse gsockd's control socket, for t/control-hygiene.t.

  idle PATH N SECONDS    N connections that read the welcome and never say
                         hello; for each, how gsockd ended it:
                         "dropped STATUS MS MESSAGE" or "open" (still open
                         after SECONDS)
  hold PATH K SECONDS    register K valid arenas and hold them SECONDS; one
                         line each: "registered" or "refused STATUS MESSAGE"
  big PATH NSOCKS NSLOTS one arena of that geometry: "registered" or
                         "refused STATUS MESSAGE"
  crowd PORT N           N clients at once at an echo server on PORT, each
                         sends a line: "echoed E waiting W other O", then
                         whether the echoed ones still echo ("again A") and,
                         once all are closed, a new client ("after ok")
  squat PATH UID SECONDS [silent|full]
                         an impostor, or a stuck gsockd: listens at PATH as
                         UID (another user's needs root), greets every
                         connection as gsockd does (silent: never; full: a
                         listen queue it fills itself and never accepts
                         from), never answers a hello; prints "listening",
                         then "greeted" for each connection and "arena" for
                         each arena handed over, and "handed N arenas" when
                         SECONDS end
  dreq PATH KIND DST SRC INO
                         a preload's direct request (KIND: connect, listen
                         or accept; DST and SRC host:port, or "bad" for an
                         address of no family; INO the listener's inode),
                         with a socketpair end unless KIND is listen:
                         "status STATUS MESSAGE"
"""
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_arena import CTL_MAGIC, CTL_VERSION, WELCOME_MAGIC, Arena, hello_bytes  # noqa: E402


def reply_of(data):
    """(status, message) of a gs_ctl_reply, or None."""
    if len(data) < 8 or struct.unpack_from("<I", data)[0] != CTL_MAGIC:
        return None
    status = struct.unpack_from("<i", data, 4)[0]
    return status, data[8:].split(b"\0")[0].decode(errors="replace")


def connect(path):
    """A control connection, its welcome (or refusal) not yet read."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    for _ in range(500):  # a full listen queue: EAGAIN on a unix socket
        try:
            s.connect(path)
            return s
        except BlockingIOError:
            time.sleep(0.01)
    raise SystemExit("cannot connect to %s: its listen queue stays full" % path)


def idle(path, n, secs):
    t0 = time.monotonic()
    socks = [connect(path) for _ in range(n)]
    ended = {}
    reasons = {}
    deadline = t0 + secs
    while len(ended) < n and time.monotonic() < deadline:
        live = [s for s in socks if s not in ended]
        ready, _, _ = select.select(live, [], [], 0.05)
        for s in ready:
            try:
                data = s.recv(512)
            except OSError:
                data = b""
            if data:
                reasons[s] = reply_of(data) or reasons.get(s)
            else:
                ended[s] = (time.monotonic() - t0) * 1000
    for s in socks:
        if s in ended:
            st, msg = reasons.get(s) or (0, "")
            print("dropped %d %.0f %s" % (st, ended[s], msg or "-"), flush=True)
        else:
            print("open", flush=True)
        s.close()


def register(path, nsocks=4, nslots=4):
    a = Arena(nslots=nslots, nsocks=nsocks)
    s = connect(path)
    r = reply_of(s.recv(512))  # the welcome, or a refusal
    if not r:
        socket.send_fds(s, [hello_bytes(a.size)], [a.fd])
        r = reply_of(s.recv(512))
    if r and r[0] == 0:
        print("registered", flush=True)
        return s, a
    print("refused %d %s" % r if r else "refused 0 (no reply)", flush=True)
    s.close()
    return None, a


def crowd(port, n):
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    msgs = [b"crowd %d\n" % i for i in range(n)]
    for s, m in zip(socks, msgs):
        s.sendall(m)
    time.sleep(1.5)  # the served ones answer well within this
    echoed, waiting, other = [], 0, 0
    for s, m in zip(socks, msgs):
        s.settimeout(0.2)
        try:
            got = s.recv(len(m))
            while got and len(got) < len(m):
                got += s.recv(len(m) - len(got))
            if got == m:
                echoed.append(s)
            else:
                other += 1
        except socket.timeout:
            waiting += 1
        except OSError:
            other += 1
    print("echoed %d waiting %d other %d" % (len(echoed), waiting, other), flush=True)
    again = 0
    for s in echoed:
        s.settimeout(5)
        try:
            s.sendall(b"again\n")
            again += s.recv(16) == b"again\n"
        except OSError:
            pass
    print("again %d" % again, flush=True)
    for s in socks:
        s.close()
    time.sleep(0.5)
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    s.sendall(b"after\n")
    print("after " + ("ok" if s.recv(16) == b"after\n" else "bad"), flush=True)


def squat(path, uid, secs, how):
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lst.bind(path)
    os.chmod(path, 0o777)
    os.setuid(uid)  # SO_PEERCRED names who listened: this user
    conns, held, arenas = [], [], 0
    if how == "full":  # a queue of one, taken by our own connection
        lst.listen(0)
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        filler.connect(path)
        print("listening", flush=True)
        time.sleep(secs)
        return
    lst.listen(16)
    print("listening", flush=True)
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        ready, _, _ = select.select([lst] + conns, [], [], 0.05)
        for s in ready:
            if s is lst:
                c, _ = lst.accept()
                if how == "silent":
                    conns.append(c)
                    continue
                print("greeted", flush=True)
                try:
                    c.send(struct.pack("<IIIIIIQ", WELCOME_MAGIC, CTL_VERSION, 1, 0, 0, 0, 0))
                    conns.append(c)
                except ConnectionError:  # gone before the greeting
                    c.close()
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(s, 64, 4)
            except ConnectionError:  # closed unread: the greeting refused
                msg, fds = b"", []
            for fd in fds:
                print("arena", flush=True)
                os.close(fd)
            arenas += len(fds)
            conns.remove(s)
            if msg:  # a hello, never answered: held open, as if stuck
                held.append(s)
            else:
                s.close()
    print("handed %d arenas" % arenas, flush=True)


DREQ_MAGIC = {"connect": 0x6E6F6364, "listen": 0x73696C64, "accept": 0x63636164}


def sockaddr(text):
    """A sockaddr_in's 16 bytes for host:port; "bad": no family at all."""
    if text == "bad":
        return bytes(16)
    host, _, port = text.rpartition(":")
    return struct.pack("<H", socket.AF_INET) + struct.pack(">H", int(port)) + \
        socket.inet_aton(host) + bytes(8)


def dreq(path, kind, dst, src, ino):
    s = connect(path)
    s.recvmsg(64, socket.CMSG_SPACE(4))  # the welcome and the pool
    d, c = sockaddr(dst), sockaddr(src)
    req = struct.pack("<IIII28s28sQII", DREQ_MAGIC[kind], CTL_VERSION,
                      len(d), len(c), d, c, int(ino), 0, 0)
    pair = None
    if kind == "listen":
        s.sendmsg([req])
    else:
        pair = socket.socketpair()
        s.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                           struct.pack("i", pair[1].fileno()))])
    rep = s.recv(256)
    status = struct.unpack_from("<i", rep, 4)[0]
    print("status %d %s" % (status, rep[16:].split(b"\0")[0].decode()), flush=True)


def main(argv):
    what, path = argv[1], argv[2]
    if what == "idle":
        idle(path, int(argv[3]), float(argv[4]))
    elif what == "hold":
        held = [register(path) for _ in range(int(argv[3]))]
        time.sleep(float(argv[4]))
        for s, _ in held:
            if s:
                s.close()
    elif what == "crowd":
        crowd(int(path), int(argv[3]))
    elif what == "big":
        register(path, int(argv[3]), int(argv[4]))
    elif what == "dreq":
        dreq(path, argv[3], argv[4], argv[5], argv[6])
    elif what == "squat":
        squat(path, int(argv[3]), float(argv[4]), argv[5] if len(argv) > 5 else "greet")
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
