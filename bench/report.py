#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/run's report: the CSV of one run and its key=value facts become a
markdown file of tables (with the goals of issue 5 and the ratios to the
physical floors) and, where matplotlib exists, PNG plots beside it.

usage: report.py RUN.csv OUT.md key=value...
"""
import csv
import math
import os
import sys

NAMES = {
    "A": "A gsock (GPU server, g-calls)",
    "B": "B CPU epoll",
    "C": "C CPU-managed GPU",
    "Cb": "Cb CPU-managed GPU, batched",
}


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def fmt(v, digits=1):
    v = num(v)
    if math.isnan(v):
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    a, b = num(a), num(b)
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def kv(s):
    return dict(p.split("=", 1) for p in s.split() if "=" in p)


def paced_table(rows, w, shape):
    """Section 7: CPU at fixed request rates, A/B cores last; each cell the
    median over the rounds and, in brackets, the range."""
    cpu = [r for r in rows if r["section"] == "pacedcpu"]
    lat = [r for r in rows if r["section"] == "paced"]
    if not cpu:
        return
    points = sorted({(int(kv(r["extra"])["rate"]), int(r["conns"])) for r in cpu})
    servers = [s for s in ("A", "B", "Cb") if any(r["server"] == s for r in cpu)]
    rounds = max(int(kv(r["extra"]).get("rep", 1)) for r in cpu)

    def med(xs):
        xs = sorted(x for x in xs if not math.isnan(x))
        return xs[len(xs) // 2] if xs else math.nan

    def cell(vals, digits):
        vals = [v for v in vals if not math.isnan(v)]
        if not vals:
            return "n/a", math.nan
        m = med(vals)
        spread = f" ({fmt(min(vals), digits)}-{fmt(max(vals), digits)})" if len(vals) > 1 else ""
        return f"{fmt(m, digits)}{spread}", m

    w("## 7. CPU at fixed request rates (64 B echo, open loop)")
    w("")
    w(f"bench/loadgen -r: requests go out on a schedule and each round trip counts from "
      f"when it was due. A is the GPU echo server `{shape}`; its cores are gsockd's plus "
      f"the GPU server's host process. "
      f"{rounds} round(s), servers alternating (A, B, Cb, A, ...); a cell is the median "
      f"over the rounds, the range in brackets.")
    w("")
    w("| rate, connections | " + " | ".join(f"{s} cores" for s in servers) +
      " | A gsockd / host | " + " | ".join(f"{s} p50 / p99 us" for s in servers) +
      " | A/B cores |")
    w("| --- " * (2 * len(servers) + 3) + "|")
    for rate, conns in points:
        def sel(src, srv):
            return [r for r in src if r["server"] == srv and r["conns"] == str(conns)
                    and int(kv(r["extra"])["rate"]) == rate]
        cores, med_cores = [], {}
        for srv in servers:
            text, m = cell([num(kv(r["extra"]).get("cores")) for r in sel(cpu, srv)], 2)
            cores.append(text)
            med_cores[srv] = m
        ag = med([num(kv(r["extra"]).get("daemon")) for r in sel(cpu, "A")])
        ah = med([num(kv(r["extra"]).get("host")) for r in sel(cpu, "A")])
        lats = []
        for srv in servers:
            rs = sel(lat, srv)
            lats.append(f"{fmt(med([num(r['p50_us']) for r in rs]), 1)} / "
                        f"{fmt(med([num(r['p99_us']) for r in rs]), 1)}" if rs else "n/a")
        ab = [ratio(kv(a["extra"]).get("cores"), kv(b["extra"]).get("cores"))
              for a in sel(cpu, "A") for b in sel(cpu, "B")
              if kv(a["extra"]).get("rep") == kv(b["extra"]).get("rep")]
        abtext = cell(ab, 2)[0]
        w(f"| {rate:,}/s, {conns} | " + " | ".join(cores) + f" | {fmt(ag, 2)} / {fmt(ah, 2)} | " +
          " | ".join(lats) + f" | {abtext} |")
    miss = sum(int(kv(r["extra"]).get("missing") or 0) for r in cpu)
    lag = max((num(kv(r["extra"]).get("lag_us")) for r in cpu), default=math.nan)
    w("")
    w(f"Requests unanswered: {miss}. The client's worst lateness against its schedule: "
      f"{fmt(lag, 1)} us.")
    w("")


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    out = sys.argv[2]
    facts = dict(a.split("=", 1) for a in sys.argv[3:])
    floors = {}
    for r in rows:
        if r["section"] == "floors":
            floors = kv(r["extra"])

    def pick(section, server=None, conns=None, size=None, extra=None):
        for r in rows:
            if r["section"] != section:
                continue
            if server and r["server"] != server:
                continue
            if conns is not None and r["conns"] != str(conns):
                continue
            if size is not None and r["size"] != str(size):
                continue
            if extra and extra not in r["extra"]:
                continue
            return r
        return None

    def values(section, key):
        return sorted({int(r[key]) for r in rows if r["section"] == section and r[key]})

    servers = [s for s in NAMES if any(r["server"] == s for r in rows)]
    L = []
    w = L.append
    w(f"# gsock benchmarks: {facts.get('backend')} backend, {facts.get('date')}")
    w("")
    w(f"- machine: {facts.get('machine')}")
    w(f"- GPU: {facts.get('gpu')}")
    w(f"- commit: {facts.get('commit')}; command: `{facts.get('command')}`")
    paced_only = all(r["section"] in ("paced", "pacedcpu") for r in rows)
    loop = ("open loop at fixed rates (-r)" if paced_only else
            "closed loop (one request in flight per connection)")
    w(f"- client: bench/loadgen, {loop}, "
      f"up to {facts.get('lt')} threads, pinned `{facts.get('client')}`; servers pinned "
      f"`{facts.get('server')}`")
    w(f"- B and C: {facts.get('ct')} threads (one epoll loop each, SO_REUSEPORT); "
      f"A: gsockd ({facts.get('aw')} workers, io {facts.get('aio')}) + the GPU echo server; for throughput {facts.get('ab')} "
      f"blocks x {facts.get('am')} connections each (gpoll)")
    w("")
    if paced_only:
        w(f"- A's gsockd: {facts.get('gsockd')}")
        w("")
        paced_table(rows, w, facts.get("paced_a"))
        open(out, "w").write("\n".join(L) + "\n")
        return

    def rtt_median(server, size):
        """The repetition with the median p50, and the p50 range of all."""
        rs = sorted((r for r in rows if r["section"] == "rtt" and r["server"] == server
                     and r["size"] == str(size)), key=lambda r: num(r["p50_us"]))
        if not rs:
            return None, ""
        lo, hi = num(rs[0]["p50_us"]), num(rs[-1]["p50_us"])
        return rs[len(rs) // 2], (f" ({fmt(lo, 1)}-{fmt(hi, 1)})" if len(rs) > 1 else "")

    reps = max((int(kv(r["extra"]).get("rep", 1)) for r in rows if r["section"] == "rtt"), default=1)
    w("## 1. Echo round trip, one connection (us)")
    w("")
    w(f"Each point ran {reps} times; the table shows the run with the median p50, and in "
      f"brackets the range of p50 over the runs.")
    w("")
    w("| size | " + " | ".join(f"{s} p50 / p99 / p99.9" for s in servers) +
      " | A/B p50 (goal <= 1.15) | A/C p50 (goal <= 0.6) |")
    w("| --- " * (len(servers) + 3) + "|")
    for size in values("rtt", "size"):
        cells = []
        for s in servers:
            r, spread = rtt_median(s, size)
            cells.append(f"{fmt(r['p50_us'], 2)}{spread} / {fmt(r['p99_us'], 2)} / {fmt(r['p999_us'], 2)}"
                         if r else "n/a")
        a, b, c = (rtt_median(x, size)[0] for x in ("A", "B", "C"))
        w(f"| {size} B | " + " | ".join(cells) +
          f" | {fmt(ratio(a and a['p50_us'], b and b['p50_us']), 2)}"
          f" | {fmt(ratio(a and a['p50_us'], c and c['p50_us']), 2)} |")
    if floors:
        a = rtt_median("A", 64)[0]
        w("")
        w(f"Floors: mapped-memory GPU<->CPU round trip {floors.get('mapped_rtt_us', 'n/a')} us, "
          f"loopback TCP round trip {floors.get('tcp_rtt_p50_us', 'n/a')} us. A at 64 B is "
          f"{fmt(ratio(a and a['p50_us'], floors.get('mapped_rtt_us')), 1)}x the first and "
          f"{fmt(ratio(a and a['p50_us'], floors.get('tcp_rtt_p50_us')), 1)}x the second "
          f"(A's round trip holds one TCP round trip and two GPU<->CPU crossings).")
    w("")

    w("## 2. Echo throughput, 64 B requests: requests/s (p99 us)")
    w("")
    def rate_table(head, section, keys, find, cell, label=str):
        """One row per key: each server's cell, then A's rate over B's."""
        w(f"| {head} | " + " | ".join(servers) + " | A/B |")
        w("| --- " * (len(servers) + 2) + "|")
        for k in keys:
            got = {s: find(section, s, k) for s in servers}
            cells = [cell(got[s]) if got[s] else "n/a" for s in servers]
            a, b = got.get("A"), got.get("B")
            w(f"| {label(k)} | " + " | ".join(cells) + f" | {fmt(ratio(a and a['rps'], b and b['rps']), 2)} |")

    rate_table("connections", "conns", values("conns", "conns"),
               lambda sec, s, c: pick(sec, s, c, 64),
               lambda r: f"{fmt(r['rps'])} ({fmt(r['p99_us'])})")
    w("")
    at = values("sizes", "conns")
    w(f"### by request size, {at[0] if at else '?'} connections: requests/s, MB/s each way (p99 us)")
    w("")
    rate_table("size", "sizes", values("sizes", "size"),
               lambda sec, s, z: pick(sec, s, None, z),
               lambda r: f"{fmt(r['rps'])}, {fmt(r['MBps'])} MB/s ({fmt(r['p99_us'])})",
               lambda z: f"{z} B")
    w("")
    w(f"Goal: A >= B and A >= Cb at 256 and 1024 connections, gsockd's workers ({facts.get('aw')}) "
      f"<= B's threads ({facts.get('ct')}).")
    w("")
    w("### A by GPU blocks (64 B)")
    w("")
    w("| blocks | requests/s | p50 us | p99 us |")
    w("| --- | --- | --- | --- |")
    for r in rows:
        if r["section"] == "blocks":
            w(f"| {kv(r['extra']).get('blocks')} | {fmt(r['rps'])} | {fmt(r['p50_us'], 2)} | {fmt(r['p99_us'], 2)} |")
    w("")
    w("### A by gsockd workers (64 B): requests/s (p99 us), gsockd's cores, us of gsockd CPU per request")
    w("")
    wconns = sorted({int(r["conns"]) for r in rows if r["section"] == "workers"})
    w("| workers, io | " + " | ".join(f"{c} connections" for c in wconns) + " |")
    w("| --- " * (1 + len(wconns)) + "|")
    # (workers, data path) in the order they ran
    runs = list(dict.fromkeys((kv(r["extra"]).get("workers", "0"), kv(r["extra"]).get("io", "?"))
                              for r in rows if r["section"] == "workers"))
    for nw, io in runs:
        cells = []
        for c in wconns:
            r = pick("workers", "A", c, 64, f"workers={nw} io={io}")
            u = next((kv(x["extra"]) for x in rows if x["section"] == "workerscpu"
                      and x["conns"] == str(c) and kv(x["extra"]).get("workers") == nw
                      and kv(x["extra"]).get("io", "?") == io), {})
            cells.append(f"{fmt(r['rps'])} ({fmt(r['p99_us'])}), {u.get('cores', 'n/a')} cores, "
                         f"{u.get('cpu_req', 'n/a')} us" if r else "n/a")
        w(f"| {nw}, {io} | " + " | ".join(cells) + " |")
    for c in wconns:
        b, cb = pick("conns", "B", c, 64), pick("conns", "Cb", c, 64)
        w(f"| B ({facts.get('ct')} threads), Cb, at {c} | {fmt(b and b['rps'])} / {fmt(cb and cb['rps'])} requests/s | |"
          if len(wconns) > 1 else
          f"| B ({facts.get('ct')} threads) / Cb | {fmt(b and b['rps'])} / {fmt(cb and cb['rps'])} |")
    w("")

    w("## 3. Streaming through the server's memory (echo of large messages): GB/s each way")
    w("")
    def gbps_table(sections, first, label):
        """GB/s by server and connections; a row per (section, size)."""
        srows = [r for r in rows if r["section"] in sections]
        sconns = sorted({int(kv(r["extra"]).get("conns", 0)) for r in srows})
        ssrv = [s for s in servers if any(pick(sec, s) for sec in sections)]
        w(f"| {first} | " + " | ".join(f"{s} x{c}" for c in sconns for s in ssrv) + " |")
        w("| --- " * (1 + len(sconns) * len(ssrv)) + "|")
        for sec in sections:
            for size in values(sec, "size"):
                cells = []
                for c in sconns:
                    for s in ssrv:
                        r = pick(sec, s, c, size)
                        cells.append(fmt(num(r["MBps"]) / 1000, 2) if r else "n/a")
                w(f"| {label(sec, size)} | " + " | ".join(cells) + " |")

    def best_a(section, conns=None):
        return max((num(r["MBps"]) / 1000 for r in rows
                    if r["section"] == section and r["server"] == "A"
                    and (conns is None or r["conns"] == conns)), default=math.nan)

    gbps_table(("stream",), "size", lambda sec, size: f"{size} B")
    tcp = num(floors.get("tcp_stream_GBps"))
    best1, bestn = best_a("stream", "1"), best_a("stream")
    w("")
    w(f"Floors: loopback TCP one-way stream {floors.get('tcp_stream_GBps', 'n/a')} GB/s; pinned copies "
      f"{floors.get('h2d_GBps', 'n/a')} GB/s to the GPU, {floors.get('d2h_GBps', 'n/a')} GB/s back. "
      f"A's best single stream of messages: {fmt(best1, 2)} GB/s each way = {fmt(ratio(best1, tcp), 2)} "
      f"of the loopback TCP stream; best aggregate {fmt(bestn, 2)} GB/s (goal >= 25). Here one "
      f"client thread sends each message and reads its echo, so it carries both directions.")
    w("")

    drows = [r for r in rows if r["section"] == "duplex"]
    if drows:
        w("### Full-duplex streams: a sending and a receiving client thread per connection, GB/s each way")
        w("")
        gbps_table(("duplex",), "send size", lambda sec, size: f"{size} B")
        d1, dn = best_a("duplex", "1"), best_a("duplex")
        w("")
        w(f"A's best single duplex stream: {fmt(d1, 2)} GB/s each way = {fmt(ratio(d1, tcp), 2)} of the "
          f"one-way loopback TCP stream (goal >= 0.9), while the same gsockd worker also carries the "
          f"other direction; best aggregate {fmt(dn, 2)} GB/s each way (goal >= 25).")
        w("")

    orows = [r for r in rows if r["section"] in ("up", "down")]
    if orows:
        w("### One-way streams: to a sink that checks every byte (up), from a source (down), GB/s")
        w("")
        gbps_table(("up", "down"), "direction, client call size", lambda sec, size: f"{sec}, {size} B")
        o1 = {sec: best_a(sec, "1") for sec in ("up", "down")}
        w("")
        w(f"A's best single one-way stream: up {fmt(o1['up'], 2)} GB/s = {fmt(ratio(o1['up'], tcp), 2)}, "
          f"down {fmt(o1['down'], 2)} GB/s = {fmt(ratio(o1['down'], tcp), 2)} of the one-way loopback "
          f"TCP stream (goal >= 0.9).")
        w("")

    w("## 4. CPU cost")
    w("")
    w("| what | value |")
    w("| --- | --- |")
    w(f"| gsockd idle, no application | {facts.get('idle_none')} % of a core (goal <= 1) |")
    w(f"| gsockd idle, one GPU server registered | {facts.get('idle_app')} % of a core |")
    w(f"| gsockd under load (64 B, {at[0] if at else '?'} connections) | {facts.get('cpu_load')} % of a core; "
      f"{facts.get('cpu_req')} us of CPU per request |")
    w(f"| the GPU server's host thread, idle | {facts.get('host_idle')} % of a core |")
    for srv in ("B", "C", "Cb"):
        w(f"| {srv} under load (64 B, {at[0] if at else '?'} connections) | {facts.get('cpu_' + srv)} us of CPU per request |")
    w(f"| the GPU server's host process, under that load | {facts.get('host_load')} % of a core |")
    w("")

    w("## 5. Scale: idle connections to one GPU server, and one active among them")
    w("")
    w(f"Arena (pinned, mapped): {facts.get('arena_kb')} KiB for {facts.get('nsocks')} sockets "
      f"= {fmt(ratio(num(facts.get('arena_kb')) * 1024, facts.get('nsocks')), 0)} bytes of pinned memory per socket "
      f"(4 KiB rings each way in this test). Open files per process on this machine: "
      f"{facts.get('nofile')} (gsockd and the client each hold one descriptor per connection).")
    w("")
    w("| idle connections | opened in s | gsockd bytes per socket | 1 active: p50 us | p99 us | requests/s |")
    w("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["section"] != "scale":
            continue
        n = kv(r["extra"]).get("idle")
        m = next((kv(x["extra"]) for x in rows if x["section"] == "scalemem" and x["conns"] == n), {})
        w(f"| {n} | {m.get('open_s', 'n/a')} | {m.get('gsockd_bytes_per_sock', 'n/a')} | "
          f"{fmt(r['p50_us'], 2)} | {fmt(r['p99_us'], 2)} | {fmt(r['rps'])} |")
    w("")

    paced_table(rows, w, facts.get("paced_a"))

    w("## 6. Physical floors (same run)")
    w("")
    w("| floor | value |")
    w("| --- | --- |")
    for k, v in floors.items():
        w(f"| {k} | {v} |")
    w("")

    plots = draw(rows, servers, out)
    if plots:
        w("Plots: " + ", ".join(f"![{p}]({p})" for p in plots))
    else:
        w("Plots: none (matplotlib is not installed here).")
    open(out, "w").write("\n".join(L) + "\n")


def draw(rows, servers, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    base = os.path.splitext(out)[0]
    made = []

    fig, ax = plt.subplots(figsize=(7, 4))
    sizes = sorted({int(r["size"]) for r in rows if r["section"] == "rtt"})
    width = 0.8 / max(1, len(servers))
    for i, s in enumerate(servers):
        ys = []
        for z in sizes:
            v = sorted(num(r["p50_us"]) for r in rows if r["section"] == "rtt"
                       and r["server"] == s and r["size"] == str(z)) or [math.nan]
            ys.append(v[len(v) // 2])
        ax.bar([k + i * width for k in range(len(sizes))], ys, width, label=NAMES[s])
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(sizes))])
    ax.set_xticklabels([f"{z} B" for z in sizes])
    ax.set_ylabel("round trip p50 (us)")
    ax.set_title("Echo round trip, one connection")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(base + "-rtt.png", dpi=110)
    made.append(os.path.basename(base + "-rtt.png"))

    def lines(name, series, xlabel, ylabel, title):
        """A log2-x line plot of {label: [(x, y)...]}, saved as BASE-name.png."""
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, pts in series.items():
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(f"{base}-{name}.png", dpi=110)
        made.append(os.path.basename(f"{base}-{name}.png"))

    lines("conns", {NAMES[s]: sorted((int(r["conns"]), num(r["rps"])) for r in rows
                                     if r["section"] == "conns" and r["server"] == s)
                    for s in servers},
          "connections", "requests/s (64 B)", "Echo throughput")
    sconns = sorted({r["conns"] for r in rows if r["section"] == "stream"})
    lines("stream", {f"{NAMES[s]} x{c}": sorted((int(r["size"]), num(r["MBps"]) / 1000) for r in rows
                                                if r["section"] == "stream" and r["server"] == s
                                                and r["conns"] == c)
                     for s in servers for c in sconns},
          "message size (bytes)", "GB/s each way", "Streaming (echo of large messages)")
    return made


if __name__ == "__main__":
    main()
