# SPDX-License-Identifier: Apache-2.0
"""Hand-made and hostile HTTP requests for t/infer.t.

  infer_http.py badline PORT        "GARBAGE" as a request line
  infer_http.py huge PORT           a Content-Length of a terabyte, no body
  infer_http.py path PORT PGM       the picture POSTed to /v2/upscale
  infer_http.py truncated PORT PGM  the head and most of the body, then the
                                    end of what it sends
  infer_http.py endless PORT SECS   a head that never ends: a byte every
                                    0.2 s for at most SECS
  infer_http.py stall PORT          half a head, then nothing (the answer
                                    waited for at most 10 s)
  infer_http.py bighead PORT N     a head whose field is N bytes long, its
                                    end not sent (the answer waited for at
                                    most 10 s)
  infer_http.py fields PORT PGM N  the picture with N more "A: b" fields
  infer_http.py slow PORT PGM SECS  the request a byte a second, at most SECS
  infer_http.py half PORT PGM       the head and most of the body, then sleep
                                    (for the test to kill it)
  infer_http.py pipelined PORT PGM  three requests in one send, the last
                                    with "Connection: close"
  infer_http.py paced PORT PGM     two pipelined requests, the second
                                    with "Connection: close", sent in three
                                    parts 0.6 s apart: each arrives within
                                    a second, both take 1.2 s
  infer_http.py continue PORT PGM  a request, then in the same send the
                                    head of one with "Expect: 100-continue"
                                    and "Connection: close"; its body 0.3 s
                                    later
  infer_http.py continue10 PORT PGM  an HTTP/1.0 request with "Expect:
                                    100-continue", its body 0.3 s later
  infer_http.py keepalive PORT PGM N  N requests, one at a time, on one
                                    connection
  infer_http.py deaf PORT PGM SECS  the picture from a 4 KiB receive
                                    buffer, then nothing read for SECS
Prints what happened as one line: each answer's status, then "eof" if
the server closed the connection, or "open" (a wait for more timed
out); the first error answer's body line after a colon; "closed" when
no answer came before the end, "open" when none came in time.
"""
import socket
import sys
import time


def conn(port):
    s = socket.create_connection(("127.0.0.1", int(port)))
    s.settimeout(15)
    return s


def request(pgm, path="/v1/upscale", extra=b""):
    body = open(pgm, "rb").read()
    return (b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), len(body), extra)) + body


class Reader:
    def __init__(self, s):
        self.s, self.buf, self.eof = s, b"", False

    def fill(self):
        """More bytes: whether some came. At the end (or a reset) eof is
        set; a wait that times out leaves it clear: the connection is
        open, and a check for a close must fail."""
        try:
            chunk = self.s.recv(65536)
        except socket.timeout:
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
        self.buf += chunk
        return bool(chunk)

    def answer(self):
        """(status, body) of the next answer, or None at the end."""
        while b"\r\n\r\n" not in self.buf:
            if not self.fill():
                return None
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buf) < length:
            if not self.fill():
                return None
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, body

    def rest(self, want=99):
        """Every answer up to want, then whether the connection ended."""
        out, why = [], ""
        for _ in range(want):
            a = self.answer()
            if a is None:
                break
            out.append(str(a[0]))
            if a[0] >= 400 and not why:
                why = a[1].decode(errors="replace").strip()
        if len(out) == want:
            self.s.settimeout(0.5)
            try:
                self.fill()
            except OSError:
                pass
        words = out + ["eof" if self.eof else "open"]
        if not out:
            words = ["closed" if self.eof else "open"]
        return " ".join(words) + (": " + why if why else "")


def main():
    what, port = sys.argv[1], sys.argv[2]
    if what == "deaf":  # a small window before the connect: a slow reader
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(15)
        s.connect(("127.0.0.1", int(port)))
    else:
        s = conn(port)
    r = Reader(s)
    if what == "badline":
        s.sendall(b"GARBAGE\r\n\r\n")
        print(r.rest())
    elif what == "huge":
        s.sendall(b"POST /v1/upscale HTTP/1.1\r\nContent-Length: 1000000000000\r\n\r\n")
        print(r.rest())
    elif what == "path":
        s.sendall(request(sys.argv[3], "/v2/upscale"))
        print(r.rest())
    elif what in ("truncated", "half"):
        q = request(sys.argv[3])
        s.sendall(q[: len(q) - len(q) // 4])
        if what == "half":
            print("sent", flush=True)
            time.sleep(60)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        print(r.rest(1))
    elif what == "endless":
        s.sendall(b"POST /v1/upscale HTTP/1.1\r\nX-Endless: ")
        end = time.time() + float(sys.argv[3])
        s.setblocking(False)
        while time.time() < end and not r.eof:
            try:
                s.send(b"a")
                r.fill()
            except BlockingIOError:
                pass
            except OSError:
                break
            time.sleep(0.2)
        s.setblocking(True)
        s.settimeout(2)
        print(r.rest(1))
    elif what == "stall":
        s.sendall(b"POST /v1/upscale HTTP/1.1\r\nHost: t\r\n")
        s.settimeout(10)
        print(r.rest(1))
    elif what == "bighead":
        s.sendall(b"POST /v1/upscale HTTP/1.1\r\nX-Big: " + b"a" * int(sys.argv[3]))
        s.settimeout(10)
        print(r.rest(1))
    elif what == "fields":
        s.sendall(request(sys.argv[3], extra=b"A: b\r\n" * int(sys.argv[4])))
        print(r.rest(1))
    elif what == "slow":
        q = request(sys.argv[3])
        end = time.time() + float(sys.argv[4])
        i = 0
        try:
            while i < len(q) and time.time() < end:
                s.send(q[i:i + 1])
                i += 1
                time.sleep(1)
        except OSError:
            pass
        print(r.rest(1))
    elif what == "pipelined":
        q = request(sys.argv[3])
        s.sendall(q + q + request(sys.argv[3], extra=b"Connection: close\r\n"))
        print(r.rest(3))
    elif what == "paced":
        q, last = request(sys.argv[3]), request(sys.argv[3], extra=b"Connection: close\r\n")
        s.sendall(q[:-10])
        time.sleep(0.6)
        s.sendall(q[-10:] + last[:20])
        time.sleep(0.6)
        s.sendall(last[20:])
        print(r.rest(2))
    elif what in ("continue", "continue10"):
        body = open(sys.argv[3], "rb").read()
        head = (b"POST /v1/upscale HTTP/1.%d\r\nContent-Length: %d\r\n"
                b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
                % (what == "continue", len(body)))
        s.sendall((request(sys.argv[3]) if what == "continue" else b"") + head)
        time.sleep(0.3)
        s.sendall(body)
        print(r.rest(3 if what == "continue" else 2))
    elif what == "keepalive":
        n = int(sys.argv[4])
        got = []
        for _ in range(n):
            s.sendall(request(sys.argv[3]))
            a = r.answer()
            got.append(str(a[0]) if a else "none")
        print(" ".join(got))
    elif what == "deaf":
        s.sendall(request(sys.argv[3]))
        time.sleep(float(sys.argv[4]))
        print(r.rest(1))


main()
