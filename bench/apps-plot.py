#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/apps' plots: from one run's CSV, PREFIX-facever.png and
PREFIX-infer.png (requests/s and p99 against connections, closed loop,
G vs C vs P) and PREFIX-matmul.png (products/s against the side n, one
line per variant and connections).

usage: apps-plot.py RUN.csv PREFIX
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"G": "tab:green", "C": "tab:blue", "P": "tab:orange"}
# The closed-loop rows' apps: title, requests/s and p99 divisors (the
# CSV has face verification's p99 in us, inference's in ms) and labels.
CLOSED = {
    "facever": ("face verification, 128x128, memcached", 1000, 1000,
                "thousand requests/s"),
    "infer": ("ESPCN x3 super-resolution over HTTP/1.1", 1, 1,
              "requests/s"),
}


def closed_loop(rows, app, prefix):
    """PREFIX-APP.png: requests/s and p99 against connections."""
    title, per_rps, per_ms, rps_label = CLOSED[app]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for var, colour in COLOURS.items():
        pts = sorted((int(r[2]), float(r[4]), float(r[6])) for r in rows
                     if r[1] == var and r[3] == "closed" and r[4])
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] / per_rps for p in pts], "o-", color=colour,
                 label=var)
        ax2.plot(xs, [p[2] / per_ms for p in pts], "o-", color=colour,
                 label=var)
    for ax, what in ((ax1, rps_label), (ax2, "p99 ms")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("connections (closed loop)")
        ax.set_ylabel(what)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(f"{prefix}-{app}.png", dpi=100)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    closed, mm = {app: [] for app in CLOSED}, []
    with open(sys.argv[1], newline="") as f:
        for row in csv.reader(f):
            if row and row[0] in CLOSED and len(row) >= 15:
                closed[row[0]].append(row)
            elif len(row) >= 12 and row[0] in COLOURS:
                mm.append(row)
    for app, rows in closed.items():
        if rows:
            closed_loop(rows, app, sys.argv[2])
    if mm:
        fig, ax = plt.subplots(figsize=(6, 4))
        for var, colour in COLOURS.items():
            for conns, style in (("1", "o--"), ("8", "o-")):
                pts = sorted((int(r[2]), float(r[3])) for r in mm
                             if r[0] == var and r[1] == conns)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                            color=colour, label=f"{var}, {conns} conn")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (n x n float32)")
        ax.set_ylabel("products/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title("matrix product")
        fig.tight_layout()
        fig.savefig(sys.argv[2] + "-matmul.png", dpi=100)


if __name__ == "__main__":
    main()
