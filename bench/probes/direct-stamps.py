#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Line up two direct-phases -DSTAMPS files (server, client: two processes
on one GPU, one timer) by round trip and print where a round trip goes.

    python3 bench/probes/direct-stamps.py SERVER.bin CLIENT.bin ITERS [all]

With "all", every trace point of either side (devlib/gsock_internal.cuh:
0-5 and 7 inside gsend, 6 and 8-14 inside grecv), in the order of their
medians, instead of the named steps.
"""
import bisect
import sys
from array import array

MAXIT = 100000


def load(path, iters):
    with open(path, "rb") as f:
        n = array("I")
        n.fromfile(f, 16)
        at = array("Q")
        at.fromfile(f, 16 * MAXIT)
        t = array("Q")
        t.fromfile(f, 5 * MAXIT)
    at = [at[k * MAXIT:k * MAXIT + iters] for k in range(16)]
    t = [t[j * MAXIT:j * MAXIT + iters] for j in range(5)]
    return n, at, t


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[4:] not in ([], ["all"]):
        sys.exit("usage: direct-stamps.py SERVER.bin CLIENT.bin ITERS [all]")
    every = len(sys.argv) == 5
    iters = int(sys.argv[3])
    sn, sat, st = load(sys.argv[1], iters)
    cn, cat, ct = load(sys.argv[2], iters)
    skip = iters // 10
    print("trace counts: server", list(sn), "client", list(cn))
    # slot 15: the first MAXIT turns of waits for a lane copy, as each
    # began; five round trips' worth, after the client's gsend call
    calls0 = list(ct[0][:iters])
    for side, n, at in (("server", sn, sat), ("client", cn, cat)):
        if not n[15]:
            continue
        turns = list(at[15][:min(n[15], iters)])
        mid = bisect.bisect_right(calls0, turns[len(turns) // 2])
        for i in range(mid, min(mid + 5, iters - 1)):
            lo = bisect.bisect_left(turns, calls0[i])
            hi = bisect.bisect_left(turns, calls0[i + 1])
            print("%s turns in round trip %d at:" % (side, i),
                  " ".join("%.2f" % ((x - calls0[i]) / 1e3)
                           for x in turns[lo:hi]))
    pts = {"c.gsend": ct[0], "c.gsend.ret": ct[1], "c.grecv.ret": ct[2],
           "s.grecv.ret": st[3], "s.gsend.ret": st[4]}
    # the library's points, each stamp placed in the round trip whose
    # client gsend call came last before it (one timer); a point that
    # fired more than once in a round trip keeps its first stamp, and a
    # round trip where it did not fire has none
    calls = list(pts["c.gsend"])
    names = ((7, "lane.put"), (6, "lane.found"), (0, "gsend.in"),
             (4, "published"))
    if every:
        names = [(k, "%d" % k) for k in range(15)]
    for k, name in names:
        for side, n, at in (("c.", cn, cat), ("s.", sn, sat)):
            if not n[k]:
                continue
            v = [None] * iters
            for x in at[k][:min(n[k], iters)]:
                i = bisect.bisect_right(calls, x) - 1
                if i >= 0 and v[i] is None:
                    v[i] = x
            pts[side + name] = v
    order = ["c.gsend", "c.lane.put", "s.lane.found", "s.grecv.ret",
             "s.gsend.in", "s.lane.put", "c.published", "c.gsend.ret",
             "c.lane.found", "s.published", "s.gsend.ret", "c.grecv.ret"]
    base = pts["c.gsend"]
    if every:
        med = {}
        for name in pts:
            d = [(pts[name][i] - base[i]) / 1e3 for i in range(skip, iters)
                 if pts[name][i] is not None]
            if len(d) >= (iters - skip) // 2:
                med[name] = pct(d, 0.5)
        order = sorted(med, key=lambda x: med[x])
    print("%-14s %8s %8s %8s  (us after the client's gsend call)"
          % ("point", "p50", "p90", "step"))
    last = 0.0
    for name in order:
        if name not in pts:
            continue
        d = [(pts[name][i] - base[i]) / 1e3 for i in range(skip, iters)
             if pts[name][i] is not None]
        if len(d) < (iters - skip) // 2:
            print("%-14s (in %d of %d round trips: left out)"
                  % (name, len(d), iters - skip))
            continue
        m = pct(d, 0.5)
        print("%-14s %8.2f %8.2f %8.2f" % (name, m, pct(d, 0.9), m - last))
        last = m
    rtt = [(pts["c.grecv.ret"][i] - base[i]) / 1e3 for i in range(skip, iters)]
    print("rtt p50 %.2f p99 %.2f us" % (pct(rtt, 0.5), pct(rtt, 0.99)))


if __name__ == "__main__":
    main()
