#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CPU clients of a GPU echo server for t/direct-preload.t, run under the
preload: each mode exercises one way a program uses its descriptor, and
prints "ok ..." or "fail ..." lines (exit status 1 on any failure).

  epoll-et PORT N        non-blocking, edge-triggered epoll: N bytes out and
                         back through one connection (N > the ring: full-ring
                         waits on EPOLLOUT)
  oneshot PORT N [HOW]   N round trips of 64 B, each answer waited for with
                         epoll (EPOLLIN | EPOLLONESHOT), re-armed with
                         EPOLL_CTL_MOD after each event (HOW lt: EPOLLIN
                         alone; poll0: waits with no timeout, 0.2 ms apart
                         while none comes; busy: beside a member whose
                         echo is never read, always ready)
  oneshot-nap PORT SINK S  a one-shot member re-armed after each event, in
                         a set whose waits nap (a member to a sink server
                         always owes an answer) and end at once (an eventfd
                         left readable), for S seconds: 200 round trips at
                         least, none waited for 0.5 s
  select PORT N          the same with select(2), level-triggered
  fork PORT              parent connects; a child round-trips on the same
                         descriptor; then the parent does, after it exits
  nonblock PORT          O_NONBLOCK set and cleared with fcntl, then with
                         ioctl (socket.setblocking): an empty recv says
                         EAGAIN at once, or waits for the echo; a forked
                         child's change of the shared flag holds in the
                         parent too
  epoll-many PORT N R    N non-blocking connections in one level-triggered
                         epoll set (every third also watched for
                         EPOLLOUT), R rounds of 64 B on each: every answer
                         right, no descriptor twice in one epoll_wait,
                         none that is not a member
  poll0 PORT N R         N non-blocking connections in one epoll set, R
                         rounds of 64 B on each, every answer found by
                         epoll_wait with no timeout, 0.2 ms apart while
                         none has come (an open-loop client between its
                         sends): every answer right
  poll-epoll PORT R      an epoll set holding a non-blocking connection,
                         watched by poll and then by select (an event loop
                         embedded in another's): R round trips each, the
                         set's descriptor readable for every answer
  starve PORT            two connections' rings full of echo in one
                         level-triggered epoll set with an always readable
                         pipe, 2000 waits of one event (8 bytes read from
                         a connection): all three are reported
  late-member PORT HOW   a thread sleeps in epoll_wait on an empty set, from
                         before the process's first connection; a
                         connection is added to the set, then polled for
                         POLLOUT with no wait (HOW poll), or added for
                         EPOLLRDHUP and changed to EPOLLIN (HOW mod): its
                         echo wakes the sleeper
  dup PORT               a dup'd descriptor carries on after the original
                         is closed; closing the last ends the connection
  exec PORT              exec with the descriptor inheritable is refused
                         (EOPNOTSUPP); with close-on-exec it goes ahead
  rights PORT            passing the descriptor with SCM_RIGHTS is refused
  timeout PORT           SO_RCVTIMEO on a silent connection: EAGAIN in time
  names PORT             getsockname/getpeername/getsockopt answer as TCP
  shutdown PORT N        shutdown(SHUT_WR) after N bytes: the echo comes
                         back, then EOF
  stream PORT SECONDS    round trips of 1 MiB until killed or SECONDS pass
  wait-end PORT          connect, say "connected", then block in recv and
                         print how the connection ended and when
  late PORT              the echo comes while the program looks elsewhere;
                         then epoll_wait, epoll_pwait2, poll and select
                         each see the descriptor readable at once
  raw PORT               bytes written with the raw write(2) system call
                         (around the preload): the next recv fails loudly
  until-up PORT          connect every 20 ms until something listens (10 s
                         at most), then one round trip: prints the tries
  refused PORT N         N connects to a port nothing listens on
  unread PORT N [close]  send N bytes, never read the echo, say "connected"
                         and sleep (to be killed), or close after 0.3 s
  forkread PORT N        send N bytes and fork; the parent closes its copy
                         with the echo unread, then the child reads it all
  closerange PORT        a subprocess (close_fds) leaves the connection
                         working; close_range, then closefrom, close a
                         direct descriptor without close(): its number,
                         taken again by a file, writes and reads the file
  scopes PORT            each wait looks at the descriptors it covers: two
                         threads' epoll sets of their own, a member closed
                         under a dup, a set inside a set, a dup of a set,
                         a set inside one whose other member is always
                         ready (or changed behind the preload's back), poll
                         over a pipe and a connection; every echo
                         lands while nothing looks and is seen at once
"""
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import threading
import time


def connect(port, blocking=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect(("127.0.0.1", int(port)))
    s.setblocking(blocking)
    return s


def recv_exactly(s, n):
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got.extend(chunk)
    return bytes(got)


def round_trip(s, data):
    """Send data while a thread reads the echo (rings are smaller than
    what one call may send, as a socket's buffers can be)."""
    back = []
    t = threading.Thread(target=lambda: back.append(recv_exactly(s, len(data))))
    t.start()
    s.sendall(data)
    t.join()
    return back and back[0] == data


def say(good, what):
    print(("ok " if good else "fail ") + what, flush=True)
    return good


def epoll_et(port, n):
    n = int(n)
    data = os.urandom(n)
    s = connect(port, blocking=False)
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
    sent, got, waits = 0, bytearray(), 0
    deadline = time.time() + 60
    while len(got) < n and time.time() < deadline:
        # Edge-triggered: drain both ways until EAGAIN, then wait.
        while sent < n:
            try:
                sent += s.send(data[sent:sent + 65536])
            except BlockingIOError:
                break
        while True:
            try:
                chunk = s.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                return say(False, "epoll-et: EOF after %d bytes" % len(got))
            got.extend(chunk)
        if len(got) < n:
            ep.poll(5)
            waits += 1
    return say(bytes(got) == data, "epoll-et %d bytes back intact (%d waits)" % (n, waits))


def oneshot(port, n, how=None):
    n, lt = int(n), how == "lt"
    s = connect(port, blocking=False)
    ep = select.epoll()
    ev = select.EPOLLIN | (0 if lt else select.EPOLLONESHOT)
    ep.register(s.fileno(), ev)
    if how == "busy":  # a member whose echo is never read: always ready
        b = connect(port, blocking=False)
        ep.register(b.fileno(), select.EPOLLIN)
        b.sendall(b"x" * 64)
    for i in range(n):
        data = os.urandom(64)
        s.sendall(data)
        got = bytearray()
        deadline = time.time() + 5
        while len(got) < 64:
            if how == "poll0":
                evs = ep.poll(0)
                if not evs:
                    time.sleep(0.0002)
            else:
                evs = ep.poll(5)
            if s.fileno() not in [fd for fd, _ in evs]:
                if time.time() > deadline:
                    return say(False, "oneshot: round trip %d: no event in 5 s" % i)
                continue
            try:
                chunk = s.recv(64 - len(got))
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                return say(False, "oneshot: EOF in round trip %d" % i)
            if chunk:
                got.extend(chunk)
            if not lt:
                ep.modify(s.fileno(), ev)
        if bytes(got) != data:
            return say(False, "oneshot: round trip %d came back wrong" % i)
    return say(True, "oneshot%s: %d round trips of 64 B intact" % (" (%s)" % how if how else "", n))


def oneshot_nap(port, sink, seconds):
    """An exact set: a level-triggered connection to a sink server (it only
    sends: an answer is always owed, so waits nap), an eventfd left
    readable (the naps' kernel part ends at once) and a one-shot
    connection to the echo server, re-armed after each event."""
    m, a = connect(port, blocking=False), connect(sink, blocking=False)
    k = os.eventfd(1)
    ep = select.epoll()
    ep.register(a.fileno(), select.EPOLLIN)
    ep.register(k, select.EPOLLIN)
    ev = select.EPOLLIN | select.EPOLLONESHOT
    ep.register(m.fileno(), ev)
    t0 = last = time.time()
    trips = got = 0
    worst = 0.0
    m.sendall(b"x" * 64)
    while time.time() - t0 < float(seconds):
        try:
            a.send(b"y" * 64)
        except BlockingIOError:
            pass
        for fd, _ in ep.poll(0.1):
            if fd != m.fileno():
                continue
            try:
                got += len(m.recv(4096))
            except BlockingIOError:
                pass
            ep.modify(m.fileno(), ev)
            if got >= 64:
                now = time.time()
                worst, last, got = max(worst, now - last), now, 0
                trips += 1
                m.sendall(b"x" * 64)
    worst = max(worst, time.time() - last)
    return say(trips >= 200 and worst < 0.5,
               "oneshot-nap: %d round trips in %s s beside a busy eventfd, the longest %.3f s" %
               (trips, seconds, worst))


def select_mode(port, n):
    n = int(n)
    data = os.urandom(n)
    s = connect(port, blocking=False)
    sent, got = 0, bytearray()
    deadline = time.time() + 60
    while len(got) < n and time.time() < deadline:
        r, w, _ = select.select([s], [s] if sent < n else [], [], 5)
        if w:
            try:
                sent += s.send(data[sent:sent + 65536])
            except BlockingIOError:
                pass
        if r:
            try:
                chunk = s.recv(1 << 20)
            except BlockingIOError:
                continue  # select may say readable and be wrong, as POSIX allows
            if not chunk:
                break
            got.extend(chunk)
    return say(bytes(got) == data, "select %d bytes back intact" % n)


def fork_mode(port):
    s = connect(port)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if round_trip(s, b"child" * 1000) else 1)
    _, st = os.waitpid(pid, 0)
    good = say(os.waitstatus_to_exitcode(st) == 0, "fork: the child's round trip on the parent's descriptor")
    return say(round_trip(s, b"parent" * 1000), "fork: the parent's after the child exited") and good


def nonblock_mode(port):
    import fcntl
    import signal

    def alarm(_sig, _frame):
        raise TimeoutError("recv waited")

    signal.signal(signal.SIGALRM, alarm)
    s = connect(port)
    fd = s.fileno()

    def empty_recv_says_eagain():
        signal.alarm(3)
        try:
            s.recv(64)
            return False
        except BlockingIOError:
            return True
        except TimeoutError:
            return False
        finally:
            signal.alarm(0)

    def recv_waits_for_echo():
        data = os.urandom(64)
        t = threading.Timer(0.3, lambda: s.sendall(data))
        t0 = time.time()
        t.start()
        signal.alarm(5)
        try:
            got = recv_exactly(s, 64)
        except (BlockingIOError, TimeoutError):
            got = None
        finally:
            signal.alarm(0)
            t.join()
        return got == data and time.time() - t0 >= 0.25

    fl = fcntl.fcntl(fd, fcntl.F_GETFL)
    good = say(empty_recv_waits := not (fl & os.O_NONBLOCK), "nonblock: a blocking socket's descriptor is blocking")
    fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
    good = say(empty_recv_says_eagain(), "nonblock: O_NONBLOCK set with fcntl: an empty recv says EAGAIN") and good
    fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
    good = say(recv_waits_for_echo(), "nonblock: cleared with fcntl: recv waits for the echo") and good
    s.setblocking(False)
    good = say(empty_recv_says_eagain(), "nonblock: set with ioctl FIONBIO: EAGAIN") and good
    s.setblocking(True)
    good = say(recv_waits_for_echo(), "nonblock: cleared with ioctl FIONBIO: recv waits") and good
    pid = os.fork()
    if pid == 0:
        fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        os._exit(0)
    os.waitpid(pid, 0)
    good = say(empty_recv_says_eagain(), "nonblock: a forked child set it on the shared descriptor: the parent's recv says EAGAIN") and good
    pid = os.fork()
    if pid == 0:
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
        os._exit(0)
    os.waitpid(pid, 0)
    return say(recv_waits_for_echo(), "nonblock: the child cleared it: the parent's recv waits") and good and empty_recv_waits


def echo_round(socks, by_fd, r, wait, seen=lambda evs: None):
    """Round r: 64 B out on each socket, the echoes collected from the
    events wait() returns (seen() looks at each wait's events first).
    Returns (answers missing after 10 s, answers wrong, waits)."""
    want = {}
    for i, s in enumerate(socks):
        want[s.fileno()] = struct.pack("!II", r, i) * 8
        s.sendall(want[s.fileno()])
    got = {fd: b"" for fd in want}
    left = set(want)
    deadline = time.time() + 10
    wrong = waits = 0
    while left and time.time() < deadline:
        evs = wait()
        waits += 1
        seen(evs)
        for fd, ev in evs:
            if fd not in by_fd or not ev & select.EPOLLIN:
                continue
            try:
                got[fd] += by_fd[fd].recv(4096)
            except BlockingIOError:
                pass
            if len(got[fd]) >= 64:
                wrong += got[fd] != want[fd]
                left.discard(fd)
    return len(left), wrong, waits


def epoll_many(port, n, rounds):
    n, rounds = int(n), int(rounds)
    socks = [connect(port, blocking=False) for _ in range(n)]
    by_fd = {s.fileno(): s for s in socks}
    ep = select.epoll()
    for i, s in enumerate(socks):
        ep.register(s.fileno(), select.EPOLLIN | (select.EPOLLOUT if i % 3 == 0 else 0))
    bad = {"twice": 0, "strangers": 0}

    def seen(evs):
        fds = [fd for fd, _ in evs]
        bad["twice"] += len(fds) - len(set(fds))
        bad["strangers"] += sum(fd not in by_fd for fd in fds)

    wrong = waits = 0
    for r in range(rounds):
        missing, w, k = echo_round(socks, by_fd, r, lambda: ep.poll(1.0), seen)
        wrong, waits = wrong + w, waits + k
        if missing:
            return say(False, "epoll-many: round %d: %d answers missing" % (r, missing))
    good = say(not bad["twice"] and not bad["strangers"] and not wrong,
               "epoll-many: %d connections x %d rounds in %d waits: %d descriptors twice in one wait, %d strangers, %d answers wrong" %
               (n, rounds, waits, bad["twice"], bad["strangers"], wrong))
    for s in socks:
        s.close()
    return good


def poll0(port, n, rounds):
    n, rounds = int(n), int(rounds)
    socks = [connect(port, blocking=False) for _ in range(n)]
    by_fd = {s.fileno(): s for s in socks}
    ep = select.epoll()
    for s in socks:
        ep.register(s.fileno(), select.EPOLLIN)

    def wait():
        evs = ep.poll(0)
        if not evs:
            time.sleep(0.0002)  # as a paced client between its sends
        return evs

    wrong = waits = 0
    for r in range(rounds):
        missing, w, k = echo_round(socks, by_fd, r, wait)
        wrong, waits = wrong + w, waits + k
        if missing:
            return say(False, "poll0: round %d: %d answers missing" % (r, missing))
    good = say(not wrong, "poll0: %d connections x %d rounds in %d waits of no time: %d answers wrong" %
               (n, rounds, waits, wrong))
    for s in socks:
        s.close()
    return good


def poll_epoll(port, rounds):
    s = connect(port, blocking=False)
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN)
    p = select.poll()
    p.register(ep.fileno(), select.POLLIN)
    worst = 0.0
    for how in ("poll", "select"):
        for r in range(int(rounds)):
            data = struct.pack("!I", r) * 16
            s.sendall(data)
            got = b""
            t0 = time.time()
            while len(got) < len(data):
                ready = p.poll(3000) if how == "poll" else select.select([ep.fileno()], [], [], 3.0)[0]
                if not ready:
                    return say(False, "poll-epoll: %s round %d: the set's descriptor not readable in 3 s (%d of %d bytes)" %
                               (how, r, len(got), len(data)))
                for _fd, _ev in ep.poll(0):
                    while True:
                        try:
                            b = s.recv(4096)
                        except BlockingIOError:
                            break
                        if not b:
                            return say(False, "poll-epoll: EOF")
                        got += b
            worst = max(worst, time.time() - t0)
            if got != data:
                return say(False, "poll-epoll: %s round %d: wrong bytes" % (how, r))
    return say(worst < 0.2, "poll-epoll: %s round trips through poll, then select, on an epoll set: slowest %.1f ms" %
               (rounds, worst * 1000))


def starve(port):
    socks = [connect(port, blocking=False) for _ in range(2)]
    ep = select.epoll()
    for i, s in enumerate(socks):
        ep.register(s.fileno(), select.EPOLLIN)
        s.sendall(b"x")
    time.sleep(0.1)
    for s in socks:  # the echo, and a read that says EAGAIN
        while True:
            try:
                if not s.recv(65536):
                    return say(False, "starve: EOF")
            except BlockingIOError:
                break
    for s in socks:
        s.sendall(b"y" * 16384)
    time.sleep(0.3)
    r, w = os.pipe()
    os.write(w, b"p")
    ep.register(r, select.EPOLLIN)
    count = {s.fileno(): 0 for s in socks}
    count[r] = 0
    by_fd = {s.fileno(): s for s in socks}
    for _ in range(2000):
        evs = ep.poll(1.0, 1)
        if not evs:
            return say(False, "starve: a wait of one event found none")
        fd = evs[0][0]
        count[fd] += 1
        if fd in by_fd:
            try:
                by_fd[fd].recv(8)
            except BlockingIOError:
                pass
    a, b, p = (count[socks[0].fileno()], count[socks[1].fileno()], count[r])
    return say(min(a, b, p) >= 250, "starve: 2000 waits of one event: %d and %d for the two connections, %d for the pipe" % (a, b, p))


def late_member(port, how):
    ep = select.epoll()
    res = []

    def waiter():
        res.append((ep.poll(5.0), time.time()))

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    c = connect(port, blocking=False)
    if how == "mod":
        ep.register(c.fileno(), select.EPOLLRDHUP)
        ep.modify(c.fileno(), select.EPOLLIN)
    else:
        ep.register(c.fileno(), select.EPOLLIN)
        p = select.poll()
        p.register(c.fileno(), select.POLLOUT)
        p.poll(0)
    time.sleep(0.01)
    t0 = time.time()
    c.sendall(b"hello")
    t.join()
    evs, t1 = res[0]
    return say([fd for fd, _ in evs] == [c.fileno()] and t1 - t0 < 0.2,
               "late-member (%s): the sleeper saw %s %.3f s after the send" % (how, [fd for fd, _ in evs], t1 - t0))


def dup_mode(port):
    s = connect(port)
    fd2 = os.dup(s.fileno())
    s.close()
    t = socket.socket(fileno=fd2)
    good = say(round_trip(t, b"dup" * 5000), "dup: the copy carries on after the original is closed")
    t.shutdown(socket.SHUT_WR)
    return say(t.recv(10) == b"", "dup: EOF after shutdown on the copy") and good


def exec_mode(port):
    s = connect(port)
    os.set_inheritable(s.fileno(), True)
    try:
        os.execv("/bin/true", ["true"])
        good = False
    except OSError as e:
        good = e.errno == errno.EOPNOTSUPP
        say(good, "exec with an inheritable direct descriptor: %s" % os.strerror(e.errno))
    os.set_inheritable(s.fileno(), False)
    sys.stdout.flush()
    if not good:
        return False
    os.execv("/bin/sh", ["sh", "-c", "echo ok exec with it close-on-exec goes ahead"])


def rights_mode(port):
    s = connect(port)
    a, b = socket.socketpair()
    try:
        socket.send_fds(a, [b"x"], [s.fileno()])
        return say(False, "SCM_RIGHTS of a direct descriptor went through")
    except OSError as e:
        good = say(e.errno == errno.EOPNOTSUPP, "SCM_RIGHTS refused: %s" % os.strerror(e.errno))
    return say(round_trip(s, b"after" * 100), "... and the connection still works") and good


def timeout_mode(port):
    s = connect(port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000))
    t0 = time.time()
    try:
        s.recv(10)
        return say(False, "SO_RCVTIMEO: recv returned")
    except BlockingIOError:
        dt = time.time() - t0
        return say(0.25 < dt < 2, "SO_RCVTIMEO 300 ms: EAGAIN after %.2f s" % dt)


def names_mode(port):
    s = connect(port)
    me, peer = s.getsockname(), s.getpeername()
    good = say(peer == ("127.0.0.1", int(port)), "getpeername %s:%d" % peer)
    good &= say(me[0] == "127.0.0.1" and me[1] > 0, "getsockname %s:%d" % me)
    good &= say(s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM, "SO_TYPE stream")
    good &= say(s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN) == socket.AF_INET, "SO_DOMAIN inet")
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    good &= say(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1, "TCP_NODELAY set and read back")
    good &= say(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0, "SO_ERROR 0")
    # What /proc and ss show: a TCP connection between the two ports.
    return good


def shutdown_mode(port, n):
    n = int(n)
    data = os.urandom(n)
    s = connect(port)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    back = recv_exactly(s, n)
    good = say(back == data, "shutdown: %d bytes echoed after SHUT_WR" % n)
    return say(s.recv(10) == b"", "shutdown: then EOF") and good


def stream(port, seconds):
    s = connect(port)
    data = os.urandom(1 << 20)
    end = time.time() + float(seconds)
    n = 0
    print("connected", flush=True)
    while time.time() < end:
        if not round_trip(s, data):
            return say(False, "stream: round trip %d came back wrong" % n)
        n += 1
    return say(True, "stream: %d round trips of 1 MiB" % n)


def wait_end(port):
    s = connect(port)
    s.sendall(b"hello")
    recv_exactly(s, 5)
    print("connected", flush=True)
    try:
        r = s.recv(10)
        how = "EOF" if r == b"" else "bytes"
    except OSError as e:
        how = errno.errorcode.get(e.errno, str(e.errno))
    print("end %s %d" % (how, int(time.time() * 1000)), flush=True)
    return True


class EpollEvent(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def late(port):
    s = connect(port)
    libc = ctypes.CDLL(None, use_errno=True)
    good = True
    for how in ("epoll_wait", "epoll_pwait2", "poll", "select"):
        s.sendall(b"late")
        time.sleep(0.3)  # the echo lands in the ring; no call of ours looks
        t0 = time.time()
        if how == "poll":
            p = select.poll()
            p.register(s, select.POLLIN)
            ready = bool(p.poll(5000))
        elif how == "select":
            ready = bool(select.select([s], [], [], 5)[0])
        else:
            ep = libc.epoll_create1(0)
            ev = EpollEvent(select.EPOLLIN, 7)
            libc.epoll_ctl(ep, 1, s.fileno(), ctypes.byref(ev))  # EPOLL_CTL_ADD
            out = (EpollEvent * 4)()
            if how == "epoll_wait":
                n = libc.epoll_wait(ep, out, 4, 5000)
            else:
                ts = Timespec(5, 0)
                n = libc.epoll_pwait2(ep, out, 4, ctypes.byref(ts), None)
            ready = n == 1 and out[0].data == 7
            os.close(ep)
        dt = time.time() - t0
        got = recv_exactly(s, 4) if ready else b""
        good &= say(ready and dt < 1 and got == b"late", "%s: readable after %.3f s, %r" % (how, dt, got))
    return good


def raw(port):
    s = connect(port)
    good = say(round_trip(s, b"before" * 10), "raw: a round trip first")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    buf = b"around the preload"
    libc.syscall(1, s.fileno(), buf, len(buf))  # SYS_write
    time.sleep(0.5)
    try:
        s.sendall(b"x")
        r = s.recv(10)
        return say(False, "raw: the connection went on (%r)" % r)
    except OSError as e:
        return say(e.errno == errno.ECONNRESET, "raw: %s" % os.strerror(e.errno)) and good


def until_up(port):
    for tries in range(1, 501):
        try:
            s = connect(port)
            break
        except ConnectionRefusedError:
            time.sleep(0.02)
    else:
        return say(False, "until-up: nothing listened within 10 s")
    print("tries %d" % tries, flush=True)
    return say(round_trip(s, b"up" * 100), "until-up: a round trip after %d tries" % tries)


def refused(port, n):
    bad = 0
    for _ in range(int(n)):
        try:
            connect(port).close()
            bad += 1
        except ConnectionRefusedError:
            pass
    return say(not bad, "refused: %s connects refused" % n)


def unread(port, n, how="sleep"):
    s = connect(port)
    s.sendall(b"u" * int(n))
    print("connected", flush=True)
    time.sleep(0.3 if how == "close" else 60)
    s.close()
    return True


def forkread(port, n):
    n = int(n)
    s = connect(port)
    s.sendall(b"f" * n)
    print("connected", flush=True)
    pid = os.fork()
    if pid == 0:
        time.sleep(0.6)  # the parent lets go of its copy with the echo there
        got = recv_exactly(s, n)
        s.close()
        os._exit(0 if got == b"f" * n else 1)
    time.sleep(0.3)
    s.close()
    _, st = os.waitpid(pid, 0)
    return say(os.waitstatus_to_exitcode(st) == 0, "forkread: the child read the %d-byte echo the parent left" % n)


def seen_late(s, wait, what):
    """Send, let the echo land while nothing looks, then wait(): it must
    report the descriptor within a second."""
    s.sendall(what.encode())
    time.sleep(0.05)
    t0 = time.time()
    ready = wait()
    dt = time.time() - t0
    got = recv_exactly(s, len(what)) if ready else b""
    return ready and dt < 1 and got == what.encode()


def scopes(port):
    """Each kind of wait sees a direct descriptor's echo that landed while
    nothing looked, however the program reached the descriptor."""
    good = True
    libc = ctypes.CDLL(None, use_errno=True)

    def ep_wait(fd, ms=5000):
        out = (EpollEvent * 4)()
        return libc.epoll_wait(fd, out, 4, ms) > 0

    def ep_add(ep, fd):
        ev = EpollEvent(select.EPOLLIN, fd)
        return libc.epoll_ctl(ep, 1, fd, ctypes.byref(ev)) == 0  # EPOLL_CTL_ADD

    # Two threads, each waiting on an epoll set of its own connection.
    bad = []

    def mine(k):
        c = connect(port)
        ep = select.epoll()
        ep.register(c.fileno(), select.EPOLLIN)
        for i in range(40):
            if not seen_late(c, lambda: any(fd == c.fileno() for fd, _ in ep.poll(5)), "t%d-%d" % (k, i)):
                bad.append((k, i))
                break
        ep.close()
        c.close()
    ts = [threading.Thread(target=mine, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    good &= say(not bad, "two threads, an epoll set each: every echo seen (%s)" % (bad or "80 of 80"))
    # A member closed while a dup holds it: the kernel keeps it in the set.
    s = connect(port)
    ep = select.epoll()
    old = s.fileno()
    ep.register(old, select.EPOLLIN)
    t = socket.socket(fileno=os.dup(old))
    s.close()
    good &= say(seen_late(t, lambda: [fd for fd, _ in ep.poll(5)] == [old], "dup"),
                "a member closed under a dup: the set still reports it")
    ep.close()
    # A member added through a duplicate of the set's descriptor.
    ep = select.epoll()
    ep2 = os.dup(ep.fileno())
    good &= say(ep_add(ep2, t.fileno()) and seen_late(t, lambda: ep_wait(ep.fileno()), "dupctl"),
                "a member added through a dup of the set: a wait on the set sees it")
    os.close(ep2)
    ep.close()
    # dup2 of one set over another's number.
    e1, e2 = select.epoll(), select.epoll()
    e2.register(t.fileno(), select.EPOLLIN)
    os.dup2(e2.fileno(), e1.fileno())
    good &= say(seen_late(t, lambda: ep_wait(e1.fileno()), "dup2set"),
                "a set dup2'd over another's number: a wait on that number sees it")
    e1.close()
    e2.close()
    # A set inside a set, directly and through a dup.
    inner, outer = select.epoll(), select.epoll()
    inner.register(t.fileno(), select.EPOLLIN)
    outer.register(inner.fileno(), select.EPOLLIN)
    good &= say(seen_late(t, lambda: [fd for fd, _ in outer.poll(5)] == [inner.fileno()], "nested"),
                "an epoll set inside another: the outer wait sees the echo")
    outer.close()
    d = os.dup(inner.fileno())
    outer = select.epoll()
    good &= say(ep_add(outer.fileno(), d) and seen_late(t, lambda: ep_wait(outer.fileno()), "nestdup"),
                "a dup of a set inside another: the outer wait sees the echo")
    os.close(d)
    outer.close()
    # A duplicate of a set's descriptor.
    ep2 = os.dup(inner.fileno())
    good &= say(seen_late(t, lambda: ep_wait(ep2), "dupset"),
                "a dup of an epoll set's descriptor: its wait sees the echo")
    os.close(ep2)
    inner.close()
    # A connection added by another thread while the set's wait sleeps.
    for held in (False, True):
        ep = select.epoll()
        if held:
            ep.register(t.fileno(), select.EPOLLIN)
        res = []
        w = threading.Thread(target=lambda: res.append(ep_wait(ep.fileno(), 5000)))
        w.start()
        time.sleep(0.2)
        n = connect(port)
        n.sendall(b"added")
        time.sleep(0.1)
        t0 = time.time()
        ep.register(n.fileno(), select.EPOLLIN)
        w.join()
        dt = time.time() - t0
        # armed by the epoll_ctl: not a slice (250 ms) later
        good &= say(res[0] and dt < 0.15 and recv_exactly(n, 5) == b"added",
                    "a connection added while another thread waits on the set%s: seen after %.2f s" %
                    (" (which held one)" if held else "", dt))
        ep.close()
        n.close()
    def busy_beside(t):
        """A set holding a connection whose echo is never read (always
        ready) and a set inside it that holds t. t's last echo was read
        after it landed: whoever made it readable took the wake-up
        request, so nobody but a wait's own look raises its next."""
        busy = connect(port)
        busy.sendall(b"busy")
        t.sendall(b"x")
        time.sleep(0.1)
        recv_exactly(t, 1)
        inner, outer = select.epoll(), select.epoll()
        outer.register(busy.fileno(), select.EPOLLIN)
        outer.register(inner.fileno(), select.EPOLLIN)
        inner.register(t.fileno(), select.EPOLLIN)
        return busy, inner, outer

    # Every wait on the outer set finds its named member ready at once;
    # the inner set's echo must still be seen.
    busy, inner, outer = busy_beside(t)
    t.sendall(b"starve")
    time.sleep(0.1)
    waits, seen, end = 0, False, time.time() + 5
    while not seen and time.time() < end:
        waits += 1
        seen = any(fd == inner.fileno() for fd, _ in outer.poll(0.1))
    good &= say(seen and recv_exactly(t, 6) == b"starve",
                "a set inside a set whose other member is always ready: the inner echo is seen (after %d waits)" % waits)
    for x in (inner, outer, busy):
        x.close()
    # The same, but the member is no longer watched for reading: changed
    # through a duplicate of the set's descriptor, behind the preload's
    # back. The kernel never reports it; the wait must still see the
    # inner set's echo, and soon.
    busy, inner, outer = busy_beside(t)
    d = os.dup(outer.fileno())
    ev = EpollEvent(select.EPOLLRDHUP, busy.fileno())
    modded = libc.epoll_ctl(d, 3, busy.fileno(), ctypes.byref(ev)) == 0  # EPOLL_CTL_MOD
    t.sendall(b"masked")
    time.sleep(0.1)
    t0 = time.time()
    got = [fd for fd, _ in outer.poll(5)]
    dt = time.time() - t0
    good &= say(modded and got == [inner.fileno()] and dt < 1 and recv_exactly(t, 6) == b"masked",
                "a member changed through a dup of its set to be never reported: the inner echo is seen after %.3f s" % dt)
    os.close(d)
    for x in (inner, outer, busy):
        x.close()
    # poll over a plain pipe and a connection.
    r, w = os.pipe()
    p = select.poll()
    p.register(r, select.POLLIN)
    p.register(t, select.POLLIN)
    good &= say(seen_late(t, lambda: [fd for fd, _ in p.poll(5000)] == [t.fileno()], "poll"),
                "poll over a pipe and a connection: the connection is readable")
    os.close(r)
    os.close(w)
    t.close()
    return good


def closerange(port):
    libc = ctypes.CDLL(None, use_errno=True)
    import subprocess
    s = connect(port)
    # subprocess closes the child's descriptors with close_range, in a
    # vfork child that shares this process's memory: ours stay.
    r = subprocess.run(["true"], close_fds=True).returncode
    good = say(r == 0 and round_trip(s, b"sub" * 1000),
               "a subprocess closed its copies (close_fds): the connection works on")
    s.close()
    for how in ("close_range", "closefrom"):
        s = connect(port)
        good &= say(round_trip(s, b"cr" * 1000), "%s: a round trip first" % how)
        s.sendall(b"stale echo")  # its echo lands in the ring, unread
        time.sleep(0.2)
        fd = s.detach()
        if how == "close_range":
            r = libc.close_range(fd, fd, 0)
        else:
            libc.closefrom.restype = None
            r = libc.closefrom(fd)
        path = "/tmp/gsock-closerange.%d" % os.getpid()
        f = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.unlink(path)
        try:
            wrote = os.write(f, b"file bytes")
            os.lseek(f, 0, os.SEEK_SET)
            got = os.read(f, 100)
        except OSError as e:
            wrote, got = -1, os.strerror(e.errno).encode()
        os.close(f)
        good &= say(r in (0, None) and f == fd and wrote == 10 and got == b"file bytes",
                    "%s: descriptor %d, taken again by a file (%d), writes and reads the file: %r"
                    % (how, fd, f, got))
    return good


def main(argv):
    modes = {"epoll-et": epoll_et, "oneshot": oneshot, "oneshot-nap": oneshot_nap, "select": select_mode, "fork": fork_mode, "dup": dup_mode,
             "nonblock": nonblock_mode, "epoll-many": epoll_many, "poll0": poll0,
             "poll-epoll": poll_epoll, "starve": starve, "late-member": late_member,
             "exec": exec_mode, "rights": rights_mode, "timeout": timeout_mode,
             "names": names_mode, "shutdown": shutdown_mode, "stream": stream,
             "wait-end": wait_end, "late": late, "raw": raw,
             "scopes": scopes, "unread": unread, "closerange": closerange,
             "until-up": until_up, "refused": refused, "forkread": forkread}
    if len(argv) < 3 or argv[1] not in modes:
        print(__doc__, file=sys.stderr)
        return 2
    return 0 if modes[argv[1]](*argv[2:]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
