#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The scaling model of EigenAttention::MPI (docs/distributed.md): time per layer of one
sequence's attention (all heads, forward) on P nodes, for ring attention (zig-zag and contiguous
layouts) and Ulysses, and the sequence length above which the ring hides its communication.

A node is one rank computing at --gflops (attention GFLOP/s: 4 T^2 d H FLOPs per layer, half of
that causal) with a link of --bandwidth GB/s each way and --latency per message.

Ring (P steps; K/V block k+1 in flight while block k is computed, double-buffered):
  T_blk   = T / P tokens per rank
  c_full  = 4 T_blk^2 d H / R            one (query block, key block) pair, every pair visible
  c       = c_full / 2 (causal, zig-zag: every step of every rank does half a pair; see below)
            c_full     (not causal)
  x       = 2 T_blk d H_kv b / BW + m L  one K/V block (K and V, b bytes a value, m messages)
  ring    = c + (P - 1) max(c, x)        the first (own) block, then P - 1 received ones
  hidden  = 1 - (P - 1) max(0, x - c) / ((P - 1) x)
Causal and contiguous: at every step s >= 1 some rank computes a whole pair (its query block is
after the key block it holds), so a step lasts max(c_full, x): ring_contig = c_full / 2 +
(P - 1) max(c_full, x), about twice the zig-zag time. Under zig-zag rank r holds chunks r and
2P-1-r of 2P; for every pair of ranks exactly two of the four chunk pairs are visible (one of
them a diagonal, half-visible, pair on the own block), hence half a pair at every step.

Ulysses (two all-to-alls, not overlapped): each rank computes H/P heads on the whole sequence:
  compute = 4 T^2 d (H/P) / R (half causal)
  volume  = (P-1) T_blk d b (H/P + 2 max(1, H_kv/P))  in (Q, K, V), (P-1) T_blk d b H/P back
          = 4 T d H b (P-1) / P^2 each way when H_kv = H
  ulysses = compute + (volume_in + volume_out) / BW + 2 (P-1) L;  needs H % P == 0 (P <= H).

Crossover: the ring hides its transfers when c >= x, i.e. a T_blk^2 - beta T_blk - m L >= 0
with a = 4 f d H / R (f = 1/2 causal) and beta = 2 d H_kv b / BW:
  T_blk* = (beta + sqrt(beta^2 + 4 a m L)) / (2 a),   T* = P T_blk*
(without latency T_blk* = beta / a = b R H_kv / (2 f H BW): 4 R / BW tokens for float, causal,
H_kv = H).

--check FILE reads the `model-input` lines that eigen_attention_distributed_bench prints
(bench/results/issue15_distributed.txt) and compares the model, fed with the measured
single-process rate, loopback bandwidth and latency, with the measured times per N.

Writes the table to stdout, and --csv / --json files (scripts/distributed_plot.py draws
docs/distributed_scaling.png from the JSON). Python 3.6+, standard library only.
"""

import argparse
import csv
import json
import math
import re
import sys

# The single-process rate measured by eigen_attention_distributed_bench on this repository's
# 2-vCPU Xeon (AVX-512): attention_heads_into, T = 16384, H = 8, d = 128, float, causal, 1 thread
# (bench/results/issue15_distributed.txt, the N = 1 run's "baseline"; 65-86 over the five runs
# there: the host is shared). One rank = one core at this rate.
MEASURED_GFLOPS = 74.1


def parse_ints(text):
    return [int(v) for v in text.split(",") if v]


def ring_model(t, p, d, h, h_kv, b, rate, bw, lat, causal, msgs):
    """Ring attention, one layer: a dict of the terms above (seconds)."""
    t_blk = t / p
    c_full = 4.0 * t_blk * t_blk * d * h / rate
    c = c_full / 2 if causal else c_full
    x = 2.0 * t_blk * d * h_kv * b / bw + msgs * lat
    ring = c + (p - 1) * max(c, x)
    contig = (c_full / 2 + (p - 1) * max(c_full, x)) if causal else ring
    comm = (p - 1) * x
    exposed = (p - 1) * max(0.0, x - c)
    hidden = 1.0 - exposed / comm if comm > 0 else float("nan")
    return {"t_blk": t_blk, "step_compute": c, "step_transfer": x, "ring": ring,
            "ring_contiguous": contig, "comm": comm, "exposed": exposed, "hidden": hidden,
            "compute_only": c * p, "bytes_per_rank": 2.0 * t_blk * d * h_kv * b * (p - 1)}


def ulysses_model(t, p, d, h, h_kv, b, rate, bw, lat, causal):
    """Ulysses, one layer; None when H is not divisible by P."""
    if h % p != 0:
        return None
    f = 0.5 if causal else 1.0
    compute = f * 4.0 * t * t * d * (h / p) / rate
    t_blk = t / p
    kv_heads = max(1.0, h_kv / p)
    vol_in = (p - 1) * t_blk * d * b * (h / p + 2 * kv_heads)
    vol_out = (p - 1) * t_blk * d * b * (h / p)
    comm = (vol_in + vol_out) / bw + 2 * (p - 1) * lat
    return {"compute": compute, "comm": comm, "total": compute + comm,
            "bytes_per_rank": vol_in + vol_out}


def crossover(d, h, h_kv, b, rate, bw, lat, causal, msgs):
    """T_blk* (tokens per rank) above which one block's compute covers its transfer."""
    f = 0.5 if causal else 1.0
    a = 4.0 * f * d * h / rate
    beta = 2.0 * d * h_kv * b / bw
    return (beta + math.sqrt(beta * beta + 4 * a * msgs * lat)) / (2 * a), beta / a


def fmt_s(s):
    if s is None or s != s:
        return "n/a"
    if s >= 1:
        return "%.3g s" % s
    if s >= 1e-3:
        return "%.3g ms" % (s * 1e3)
    return "%.3g us" % (s * 1e6)


def fmt_tokens(n):
    if n >= 1 << 20:
        return "%.3gM" % (n / float(1 << 20))
    if n >= 1024:
        return "%.3gK" % (n / 1024.0)
    return "%.0f" % n


def read_measurements(path):
    """The `model-input key=value ...` lines of a bench output, grouped by n (ranks)."""
    runs = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("model-input"):
                continue
            fields = dict(kv.split("=", 1) for kv in re.findall(r"\S+=\S+", line))
            n = int(fields["n"])
            run = runs.setdefault(n, {"methods": {}})
            if "method" in fields:
                run["methods"][fields["method"]] = fields
            else:
                run.update(fields)
    return runs


def check(args, path):
    """The model against the measured N = 1, 2, 4; prints a table; returns its rows."""
    runs = read_measurements(path)
    if not runs:
        sys.exit("distributed_model.py: no model-input lines in %s" % path)
    base = next((float(r["baseline_gflops"]) for r in runs.values() if "baseline_gflops" in r), None)
    bw = next((float(r["pingpong_gbs"]) * 1e9 for r in runs.values() if "pingpong_gbs" in r), None)
    lat = next((float(r["latency_us"]) * 1e-6 for r in runs.values() if "latency_us" in r), None)
    print("\nCheck against %s (loopback, this machine)" % path)
    print("  measured: single-process rate %s GFLOP/s, loopback ping-pong %s GB/s, latency %s us"
          % ("%.1f" % base if base else "?", "%.2f" % (bw / 1e9) if bw else "?",
             "%.1f" % (lat * 1e6) if lat else "?"))
    print("  the model fed with these; a rank's rate = baseline * min(1, cores / N) (oversubscribed:"
          " N ranks share the cores);\n  ratio = measured / model; no overlap: the model with every"
          " transfer after its step's compute")
    asyn = [r for r in runs.values() if "async_wait_s" in r]
    if asyn:
        w, x = float(asyn[0]["async_wait_s"]), float(asyn[0]["async_xfer_s"])
        print("  asynchronous progress measured: %.0f %% of a block moved while a rank computed without"
              " MPI calls" % (100 * max(0.0, min(1.0, 1 - w / x))))
    print("  %-3s %-16s %10s %10s %7s %10s %9s %9s %8s" % ("N", "method", "measured", "model", "ratio",
                                                           "no overlap", "hidden", "model hid", "imbal"))
    rows = []
    for n in sorted(runs):
        run = runs[n]
        t, d, h, h_kv = (int(run[k]) for k in ("t", "d", "h", "hkv"))
        causal = run.get("causal", "1") == "1"
        cores = int(run.get("cores", "2"))
        if base is None:
            continue
        rate = base * 1e9 * min(1.0, cores / float(n))
        link_bw = bw if bw else args.bandwidth * 1e9
        link_lat = lat if lat is not None else args.latency * 1e-6
        for name, m in sorted(run["methods"].items()):
            measured = float(m["seconds_max"])
            msgs = max(1.0, float(m.get("messages_per_step", args.messages_per_step)))
            if name.startswith("ring"):
                r = ring_model(t, n, d, h, h_kv, 4, rate, link_bw, link_lat, causal, msgs)
                model = r["ring"] if name == "ring-zigzag" else r["ring_contiguous"]
                mhid = r["hidden"]
                # No overlap at all (the transfers after the compute, as when the MPI library
                # progresses messages only inside MPI calls):
                c, x = r["step_compute"], r["step_transfer"]
                if name == "ring-zigzag" or not causal:
                    serial = c + (n - 1) * (c + x)
                else:
                    serial = c + (n - 1) * (2 * c + x)
            else:
                u = ulysses_model(t, n, d, h, h_kv, 4, rate, link_bw, link_lat, causal)
                model = u["total"] if u else float("nan")
                serial = model
                mhid = float("nan")
            hid = float(m.get("hidden", "nan"))
            imb = float(m.get("imbalance_pairs", "nan"))
            ratio = measured / model if model == model and model > 0 else float("nan")
            rows.append({"n": n, "method": name, "measured_s": measured, "model_s": model,
                         "model_serial_s": serial, "ratio": ratio, "hidden": hid, "model_hidden": mhid,
                         "imbalance_pairs": imb})
            print("  %-3d %-16s %10s %10s %7.2f %10s %9s %9s %8s" % (
                n, name, fmt_s(measured), fmt_s(model), ratio, fmt_s(serial),
                "n/a" if hid != hid else "%.2f" % hid, "n/a" if mhid != mhid else "%.2f" % mhid,
                "n/a" if imb != imb else "%.3f" % imb))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gflops", type=float, default=MEASURED_GFLOPS,
                    help="attention GFLOP/s of one node (default %(default)s: measured here, 1 core)")
    ap.add_argument("--bandwidth", type=float, default=25.0,
                    help="link bandwidth, GB/s each way (default 25 = 200 Gb/s InfiniBand)")
    ap.add_argument("--latency", type=float, default=2.0, help="latency per message, us (default 2)")
    ap.add_argument("--heads", type=int, default=8, help="query heads H (default 8)")
    ap.add_argument("--kv-heads", type=int, default=None, help="K/V heads H_kv (default H)")
    ap.add_argument("--d", type=int, default=128, help="head dimension (default 128)")
    ap.add_argument("--bytes", type=int, default=4, help="bytes per value (default 4: float)")
    ap.add_argument("--T", default="16384,131072,1048576", help="sequence lengths (default 16K,128K,1M)")
    ap.add_argument("--P", default="8,16,32,64,128,256,512,1024", help="node counts")
    ap.add_argument("--causal", type=int, default=1, choices=(0, 1), help="causal mask (default 1)")
    ap.add_argument("--messages-per-step", type=float, default=2,
                    help="messages per ring step (K and V: default 2)")
    ap.add_argument("--csv", help="write the table as CSV here")
    ap.add_argument("--json", help="write parameters, table and crossover as JSON here")
    ap.add_argument("--check", help="compare with a bench output (bench/results/issue15_distributed.txt)")
    args = ap.parse_args()
    h_kv = args.kv_heads or args.heads
    rate, bw, lat = args.gflops * 1e9, args.bandwidth * 1e9, args.latency * 1e-6
    ts, ps = parse_ints(args.T), parse_ints(args.P)
    causal = bool(args.causal)

    t_blk_star, t_blk_nolat = crossover(args.d, args.heads, h_kv, args.bytes, rate, bw, lat, causal,
                                        args.messages_per_step)
    print("EigenAttention::MPI scaling model: one layer's attention, forward, %s" %
          ("causal" if causal else "not causal"))
    print("  node %.1f GFLOP/s, link %.3g GB/s, latency %.3g us, H = %d, H_kv = %d, d = %d, %d bytes/value"
          % (args.gflops, args.bandwidth, args.latency, args.heads, h_kv, args.d, args.bytes))
    print("  crossover: the ring hides its transfers for T_blk >= %.0f tokens per rank (%.0f without"
          " latency),\n  i.e. T >= T* = P * %.0f" % (t_blk_star, t_blk_nolat, t_blk_star))

    rows = []
    for t in ts:
        print("\nT = %d (%s tokens)" % (t, fmt_tokens(t)))
        print("  %5s %8s %10s %10s %10s %10s %7s %11s %10s %8s" % (
            "P", "T/P", "step comp", "step xfer", "ring zz", "ring cont", "hidden", "ulysses", "ideal",
            "T*"))
        for p in ps:
            r = ring_model(t, p, args.d, args.heads, h_kv, args.bytes, rate, bw, lat, causal,
                           args.messages_per_step)
            u = ulysses_model(t, p, args.d, args.heads, h_kv, args.bytes, rate, bw, lat, causal)
            ideal = (0.5 if causal else 1.0) * 4.0 * t * t * args.d * args.heads / rate / p
            row = {"T": t, "P": p, "T_blk": r["t_blk"], "step_compute_s": r["step_compute"],
                   "step_transfer_s": r["step_transfer"], "ring_zigzag_s": r["ring"],
                   "ring_contiguous_s": r["ring_contiguous"], "ring_hidden": r["hidden"],
                   "ring_bytes_per_rank": r["bytes_per_rank"],
                   "ulysses_s": u["total"] if u else None,
                   "ulysses_bytes_per_rank": u["bytes_per_rank"] if u else None,
                   "ideal_s": ideal, "T_star": p * t_blk_star}
            rows.append(row)
            print("  %5d %8s %10s %10s %10s %10s %7.3f %11s %10s %8s" % (
                p, fmt_tokens(r["t_blk"]), fmt_s(r["step_compute"]), fmt_s(r["step_transfer"]),
                fmt_s(r["ring"]), fmt_s(r["ring_contiguous"]), r["hidden"],
                fmt_s(u["total"]) if u else "n/a (H<P)", fmt_s(ideal), fmt_tokens(p * t_blk_star)))
    print("\n  ring zz: zig-zag layout; ring cont: contiguous layout (causal: ~2x, the last rank's"
          " full blocks);\n  hidden: fraction of the ring's transfers under compute; ideal: the"
          " work / P with no communication;\n  ulysses needs H %% P == 0 (here P <= %d); T*: the"
          " sequence length above which the ring's transfers are hidden." % args.heads)

    checked = check(args, args.check) if args.check else []

    # T* against P for other nodes and links (the plot's second panel).
    sweep = []
    for label, g, link in (("this CPU core, %.3g GB/s" % args.bandwidth, args.gflops, args.bandwidth),
                           ("this CPU core, 1.25 GB/s (10 GbE)", args.gflops, 1.25),
                           ("100 TFLOP/s accelerator, %.3g GB/s" % args.bandwidth, 1e5, args.bandwidth),
                           ("100 TFLOP/s accelerator, 300 GB/s", 1e5, 300.0)):
        tb, _ = crossover(args.d, args.heads, h_kv, args.bytes, g * 1e9, link * 1e9, lat, causal,
                          args.messages_per_step)
        sweep.append({"label": label, "gflops": g, "bandwidth_gbs": link, "T_blk_star": tb,
                      "P": ps, "T_star": [p * tb for p in ps]})
    print("\nT* = P * T_blk* for other nodes and links (same H, d, latency):")
    for sw in sweep:
        print("  %-38s T_blk* = %7s   T*(P=%d) = %s, T*(P=%d) = %s" % (
            sw["label"], fmt_tokens(sw["T_blk_star"]), ps[0], fmt_tokens(sw["T_star"][0]), ps[-1],
            fmt_tokens(sw["T_star"][-1])))

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"parameters": {"gflops": args.gflops, "bandwidth_gbs": args.bandwidth,
                                      "latency_us": args.latency, "heads": args.heads, "kv_heads": h_kv,
                                      "d": args.d, "bytes": args.bytes, "causal": causal,
                                      "messages_per_step": args.messages_per_step},
                       "T_blk_star": t_blk_star, "T_blk_star_no_latency": t_blk_nolat,
                       "rows": rows, "check": checked, "sweep": sweep}, f, indent=1)


if __name__ == "__main__":
    main()
