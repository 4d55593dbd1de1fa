#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference cases for scaled dot-product attention, computed by PyTorch in float64.

Needs Debian's python3-torch (apt-get install python3-torch); run with /usr/bin/python3.
Each case is a text file:
    causal 0|1
    align top_left|bottom_right
    scale default|<number>
    then the matrices Q, K, V, SCORES, ATTN, LSE, each as a line "NAME rows cols"
    followed by `rows` lines of `cols` numbers (17 significant digits).
SCORES is the softmax weight matrix (T_q x T_k), ATTN the output (T_q x d_v), and
LSE the natural log of each row's sum of exp(scaled, masked logits) (T_q x 1;
-inf for a row whose keys are all masked, where SCORES and ATTN rows are zero).
"""
import math, os
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(7)

def mat(f, name, m):
    f.write(f"{name} {m.shape[0]} {m.shape[1]}\n")
    for row in m.tolist():
        f.write(" ".join(f"{x:.17g}" for x in row) + "\n")

def case(name, tq, tk, dk, dv, causal=False, align="top_left", scale=None, mag=1.0):
    q = torch.randn(tq, dk, dtype=torch.float64) * mag
    k = torch.randn(tk, dk, dtype=torch.float64) * mag
    v = torch.randn(tk, dv, dtype=torch.float64)
    s = 1.0 / math.sqrt(dk) if scale is None else scale
    logits = (q @ k.T) * s
    if causal:
        offset = 0 if align == "top_left" else tk - tq
        i = torch.arange(tq).unsqueeze(1)
        j = torch.arange(tk).unsqueeze(0)
        logits = logits.masked_fill(j > i + offset, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    w = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # fully masked rows: zeros
    o = w @ v
    with open(os.path.join(HERE, name + ".txt"), "w") as f:
        f.write(f"causal {int(causal)}\nalign {align}\n")
        f.write("scale default\n" if scale is None else f"scale {scale:.17g}\n")
        for n, m in (("Q", q), ("K", k), ("V", v), ("SCORES", w), ("ATTN", o), ("LSE", lse)):
            mat(f, n, m)

case("seed_3x4", 3, 3, 4, 4)
case("seed_3x4_causal", 3, 3, 4, 4, causal=True)
case("dv_differs", 6, 6, 8, 3, causal=True)
case("rect_keys", 4, 9, 16, 5)
case("rect_keys_causal_top_left", 4, 9, 16, 5, causal=True)
case("rect_keys_causal_bottom_right", 4, 9, 16, 5, causal=True, align="bottom_right")
case("more_queries_bottom_right", 9, 4, 16, 5, causal=True, align="bottom_right")
case("scale_two", 7, 7, 10, 10, scale=2.0)
case("large_logits", 12, 12, 32, 8, causal=True, mag=20.0)
case("odd_block_edges", 131, 131, 72, 24, causal=True)
case("one_token", 1, 1, 5, 2, causal=True)
print("done")
