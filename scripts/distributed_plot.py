#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Draws docs/distributed_scaling.png from the output of scripts/distributed_model.py.

  /usr/bin/python3 scripts/distributed_plot.py                  # runs the model with its defaults
  /usr/bin/python3 scripts/distributed_plot.py --json model.json --out docs/distributed_scaling.png
  /usr/bin/python3 scripts/distributed_plot.py -- --bandwidth 12.5 --latency 5   # model options after --

Left: time per layer against the number of nodes P, for each sequence length of the model's
table: ring attention with the zig-zag and the contiguous layouts, Ulysses where H % P == 0, and
the work / P with no communication. Right: T*, the sequence length above which the ring hides
its transfers, against P, for the model's node and link and for the comparison nodes and links
of its sweep. Measured points (the --check rows of the JSON, when there are any) are not drawn:
they are loopback runs on one host, in docs/distributed.md's table.

Needs matplotlib, which the project does not otherwise need: on Debian,
`apt-get install python3-matplotlib` (then run this with /usr/bin/python3).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="the model's --json output (default: run the model now)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "distributed_scaling.png"))
    ap.add_argument("model_args", nargs="*", help="options for distributed_model.py (after --)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("distributed_plot.py: needs matplotlib: apt-get install python3-matplotlib "
                 "(Debian), then run with /usr/bin/python3")

    path = args.json
    if path is None:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        subprocess.check_call([sys.executable, os.path.join(HERE, "distributed_model.py"), "--json", path]
                              + args.model_args, stdout=subprocess.DEVNULL)
    with open(path) as f:
        model = json.load(f)
    if args.json is None:
        os.remove(path)
    par = model["parameters"]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    ts = sorted(set(r["T"] for r in model["rows"]))
    for i, t in enumerate(ts):
        rows = [r for r in model["rows"] if r["T"] == t]
        ps = [r["P"] for r in rows]
        c = colors[i % len(colors)]
        label = "T = %dK" % (t // 1024) if t < 1 << 20 else "T = %gM" % (t / float(1 << 20))
        ax1.plot(ps, [r["ring_zigzag_s"] for r in rows], "-o", color=c, ms=4, label=label + ", ring zig-zag")
        ax1.plot(ps, [r["ring_contiguous_s"] for r in rows], "--", color=c, label=label + ", ring contiguous")
        ax1.plot(ps, [r["ideal_s"] for r in rows], ":", color="gray", lw=1)
        uly = [(r["P"], r["ulysses_s"]) for r in rows if r["ulysses_s"] is not None]
        if uly:
            ax1.plot([p for p, _ in uly], [s for _, s in uly], "s", color=c, mfc="none", ms=8,
                     label=label + ", Ulysses (P <= H = %d)" % par["heads"])
    ax1.set_xscale("log", basex=2) if matplotlib.__version__ < "3.3" else ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("nodes P")
    ax1.set_ylabel("seconds per layer (attention, forward)")
    ax1.set_title("Time per layer: %.0f GFLOP/s a node, %.3g GB/s, %.3g us\nH = %d, d = %d, %s, float"
                  " (dotted: work / P)" % (par["gflops"], par["bandwidth_gbs"], par["latency_us"],
                                            par["heads"], par["d"], "causal" if par["causal"] else "not causal"),
                  fontsize=10)
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7, loc="lower left")

    for i, sw in enumerate(model.get("sweep", [])):
        ax2.plot(sw["P"], sw["T_star"], "-o", ms=3, color=colors[i % len(colors)],
                 label="%s: T_blk* = %.0f" % (sw["label"], sw["T_blk_star"]))
    ax2.set_xscale("log", basex=2) if matplotlib.__version__ < "3.3" else ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("nodes P")
    ax2.set_ylabel("T* (tokens): transfers hidden above")
    ax2.set_title("Ring: communication fully hidden for T >= T* = P * T_blk*\n"
                  "(one block pair's compute >= one K/V block's transfer + latency)", fontsize=10)
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)

    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()
