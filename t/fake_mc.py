# SPDX-License-Identifier: Apache-2.0
"""A memcached meta-protocol server for t/server-pipe.t whose keys pick
its answer to "mg KEY v": vN is a hit of N bytes (a, b, c, ... round the
alphabet), miss is EN, huge a 10000-byte hit, srverr SERVER_ERROR, junk
bytes that are no reply the first time it is asked (then "ok"),
alwaysjunk such bytes every time, sleep no answer ever (the connection
stops). Usage: fake_mc.py PORT LOG; LOG gets a line per connection."""
import socket
import sys
import threading
import time

port, log = int(sys.argv[1]), sys.argv[2]
junk_seen = []
lock = threading.Lock()


def value(n):
    return bytes(97 + i % 26 for i in range(n))


def answer(key):
    if key.startswith(b'v') and key[1:].isdigit():
        n = int(key[1:])
        return b'VA %d\r\n' % n + value(n) + b'\r\n'
    if key == b'miss':
        return b'EN\r\n'
    if key == b'huge':
        return b'VA 10000 f0\r\n' + value(10000) + b'\r\n'
    if key == b'srverr':
        return b'SERVER_ERROR out of memory\r\n'
    if key == b'junk':
        with lock:
            first = not junk_seen
            junk_seen.append(1)
        return b'BOGUS\r\n' if first else b'VA 2\r\nok\r\n'
    if key == b'alwaysjunk':
        return b'?\r\n'
    if key == b'sleep':
        return None
    return b'CLIENT_ERROR bad command line format\r\n'


def serve(c):
    buf = b''
    while True:
        d = c.recv(65536)
        if not d:
            break
        buf += d
        while b'\n' in buf:
            line, buf = buf.split(b'\n', 1)
            parts = line.rstrip(b'\r').split(b' ')
            a = answer(parts[1]) if len(parts) == 3 and parts[0] == b'mg' else b'ERROR\r\n'
            if a is None:
                time.sleep(3600)
            c.sendall(a)
    c.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', port))
s.listen(64)
while True:
    c, _ = s.accept()
    with open(log, 'a') as f:
        f.write('connection\n')
    threading.Thread(target=serve, args=(c,), daemon=True).start()
