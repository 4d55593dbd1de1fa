// SPDX-License-Identifier: MIT
// The --help texts of eigen-attention and its commands.
#include "help.hpp"

namespace EigenAttention {
namespace cli {

const char* const kToolHelp = R"(Usage: eigen-attention COMMAND [OPTION]...
       eigen-attention --help | --version

Exact scaled dot-product attention, ATTN = softmax(Q K^T * scale) V, on NumPy .npy files.

Commands:
  demo      the attention of a six-token sentence, with and without the causal mask,
            then a timing (the README's demo)
  run       attention of Q, K and V read from .npy files: writes ATTN, and on request
            the weights (SCORES), the log-sum-exp (LSE) and a heatmap
  heatmap   draws attention weights from a SCORES .npy file as a PNG
  bench     a short throughput table for this machine (a few seconds)
  decode    a synthetic generation loop on a paged KV cache: tokens/s and GB/s

Options:
  -h, --help     show this help and exit
      --version  show the version, the license and the kernels this CPU can run, and exit

'eigen-attention COMMAND --help' describes a command.

Exit status: 0 on success, 1 when a command fails (a bad file, inconsistent shapes),
2 for a bad command line. Errors are one line on stderr:
'eigen-attention: <file or option>: <problem>'.
)";

const char* const kDemoHelp =
    R"(Usage: eigen-attention demo [--quick] [--tokens T] [--dim D] [--runs N] [--heatmap FILE]

Prints the attention weights (SCORES) and outputs (ATTN) of a six-token sentence
embedded in the program, without and with the causal mask, then times attention()
and attention_decomposed() on T random tokens of dimension D (float), without and
with the causal mask. Checks what it shows; exits with 1 when a check fails.

Options:
      --quick     T = 256 and 3 runs: a fast run, as in the test suite
      --tokens T  tokens of the timed problem (default 2048)
      --dim D     d_k = d_v of the timed problem (default 64)
      --runs N    timed runs per call, after one warm-up (default 7)
      --heatmap FILE  also draw the sentence's causal SCORES as a PNG
  -h, --help      show this help and exit
)";

const char* const kRunHelp = R"(Usage: eigen-attention run --q Q.npy --k K.npy --v V.npy [--out ATTN.npy]
           [--scores SCORES.npy] [--lse LSE.npy] [--heatmap OUT.png] [OPTION]...

Computes ATTN = softmax(Q K^T * scale + masks) V for every sequence and head.

Inputs are float16, float32 or float64 (Q, K and V of one dtype: mixed dtypes are an
error), either 2-D, one head (tokens x dim), or 4-D in the layout of --layout: bhtd =
(batch, heads, tokens, dim), bthd = (batch, tokens, heads, dim). K and V may have fewer
heads than Q (grouped-query attention: a divisor of Q's heads; 1 = multi-query). Outputs
keep the inputs' rank and are in the compute type (--compute, by default the inputs'
dtype; float16 is computed in float32 and LSE is float32); ATTN keeps their layout too,
while SCORES and LSE always put the heads before the tokens (PyTorch's and
FlashAttention's order for them), whatever --layout says.

Files:
      --q FILE             queries, [T_q, d_k] or 4-D
      --k FILE             keys, [T_k, d_k] or 4-D
      --v FILE             values, [T_k, d_v] or 4-D
      --out FILE           ATTN: like Q (same layout), with d_v as its last dimension
      --scores FILE        the weights: [T_q, T_k] for 2-D inputs, [batch, heads, T_q, T_k]
                           for 4-D ones, whatever --layout says (bthd inputs too)
      --lse FILE           the log-sum-exp of each row's logits: [T_q] for 2-D inputs,
                           [batch, heads, T_q] for 4-D ones (either layout); -inf for a row
                           that sees no key (its head's sink with --sinks)
  At least one output is required: --out, --scores, --lse or --heatmap (below); only
  those given are written.

Masks and biases, applied in this order:
      --scale X            logits are X * q.k (default 1/sqrt(d_k))
      --softcap X          then X * tanh(logit / X) (default 0: off)
      --alibi FILE         then minus slope_h * |i + offset - j|: one float per query head
      --mask FILE          bool: true = may attend, false = masked; float: added to the
                           logits (converted to the compute type). [T_q, T_k], or
                           [batch or 1, heads or 1, T_q, T_k], always in bhtd order
                           (batch, heads, T_q, T_k), whatever --layout says
      --causal             query i sees keys j <= i + offset only
      --align top-left|bottom-right
                           where the causal frontier, the window and ALiBi sit when
                           T_q != T_k: offset = 0 (top-left, the default) or T_k - T_q
                           (bottom-right: the last query sees every key)
      --window LEFT,RIGHT  query i sees keys i + offset - LEFT .. i + offset + RIGHT
                           only; -1 = unbounded on that side (e.g. --window 256,0)
      --chunk-size N       chunked-local attention (Llama 4): query i sees only the keys
                           of the chunk of N positions that holds key i + offset
                           (0 = off; with --causal, as Llama 4's chunked layers)
      --key-lengths FILE   int32 or int64, one per batch entry: keys from that length on
                           are padding (masked); the alignment then uses it as T_k
      --sinks FILE         attention sinks (gpt-oss): one float logit per query head that
                           joins each row's softmax and carries no value: the weights are
                           exp(logit - LSE), LSE = log(exp(sink_h) + sum of exp(logits)),
                           so they sum to less than 1
  A row that sees no key gets zero weights, a zero output and LSE = -inf (with --sinks:
  LSE = its head's sink).

Other options:
      --compute float|double|bf16|half
                           the type of the computation (default: the inputs' dtype: float
                           for float32, double for float64, half for float16). Q, K, V, a
                           float --mask, --alibi and --sinks are converted to it (exactly
                           when it is wider, rounded once to nearest even when narrower);
                           bf16 and half are computed in float32. Outputs are written in
                           it: float32, float64, float16 (LSE float32); bf16's as float32
                           (NumPy has no bfloat16: bfloat16 values, widened exactly).
                           When bf16 or half rounds the inputs (float32 or float64 files;
                           bf16 of float16 files too), run also computes in the inputs'
                           own type (float32 for float16) on the inputs as read, and in
                           float32 on the rounded inputs, and prints for ATTN (and
                           SCORES, LSE when written) the max abs difference against each:
                           the first is what the rounding of inputs and outputs costs,
                           the second isolates the call's own error from the inputs'
                           rounding; three computations instead of one
      --layout bhtd|bthd   the order of 4-D Q, K, V and ATTN (default bhtd); SCORES and LSE
                           are [batch, heads, ...] in both
      --threads N          threads (default 0: one per hardware thread); the results are
                           the same bit for bit for every N
      --average-heads      --scores (and --heatmap) hold the mean of the weights over the
                           heads: [batch, T_q, T_k] ([T_q, T_k] for 2-D inputs)
      --heatmap FILE       also draws the weights of one head as a PNG
      --batch B            the batch entry the heatmap shows (default 0)
      --head H             the query head the heatmap shows (default 0)
      --tokens FILE        one token per line, to label the heatmap's axes (both when
                           T_q = T_k, else the keys); missing lines are labelled by index
      --quiet              no progress indicator, no summary of the files written (nor
                           the differences of --compute bf16|half)
  -h, --help               show this help and exit

Outputs are written only when everything succeeded: after a failure no output of this
run is left (an existing file of that name is left as it was).

Distributed (sequence-parallel over MPI; only in a build with MPI):
      --distributed ring|ulysses
                           run under mpiexec: each rank reads only its rows (tokens) of
                           Q, K and V, at their offsets in the files, and writes its rows
                           of ATTN and LSE into one output file (rank 0 the header), the
                           same file as without it. ring: the K/V blocks travel around
                           the ranks, any number of heads; ulysses: an all-to-all gives
                           each rank whole sequences of H/P heads, so the query heads H
                           (4-D inputs) must be a multiple of the ranks P. --causal,
                           --align, --window, --chunk-size, --alibi, --key-lengths,
                           --softcap and --scale hold at global positions, and --sinks
                           as without it; --mask, --scores and --heatmap have no
                           sharded form and are refused; --compute is float or double
                           (float16 files: computed in float32, ATTN written as
                           float16, as without it)
      --sharding contiguous|zigzag
                           the tokens of each rank: contiguous = one balanced block each,
                           in rank order (the default); zigzag = 2P chunks, rank r holding
                           chunks r and 2P-1-r (the same causal work on every rank)
  Rank 0 prints the files, then what ran: ranks, sharding, T_q and T_k, the time, the
  bytes sent and the visible (query, key) pairs per rank. --threads is per rank.
  Example: mpiexec -np 4 eigen-attention run --q q.npy --k k.npy --v v.npy \
               --out attn.npy --causal --distributed ring --sharding zigzag --threads 2

Examples:
  eigen-attention run --q q.npy --k k.npy --v v.npy --out attn.npy --causal \
      --scores scores.npy --heatmap scores.png --head 3 --tokens tokens.txt
  eigen-attention run --q q.npy --k k.npy --v v.npy --out attn.npy --compute bf16
    prints, after the files written:
      compute bfloat16: Q, K and V rounded to bfloat16 (max abs rounding R), computed in
        float32; outputs written as float32 (NumPy has no bfloat16)
      ATTN: max abs difference D1 against float32 on the inputs as read, D2 against
        float32 on the rounded inputs; max |ATTN| M
    (each on one line; one line each for SCORES and LSE when they are written)
)";

const char* const kHeatmapHelp =
    R"(Usage: eigen-attention heatmap --scores SCORES.npy --png OUT.png [OPTION]...

Draws attention weights as a PNG heatmap: queries are rows (top to bottom), keys are
columns, colours from dark purple (0) to yellow (the largest weight), masked weights
(exactly 0) near-black. Large matrices are pooled (block means) to fit.

SCORES is float16, float32 or float64, as 'run --scores' writes it (with any --layout):
  [T_q, T_k]                  one head (2-D inputs)
  [batch, T_q, T_k]           the mean over heads ('run --average-heads')
  [batch, heads, T_q, T_k]    every head (4-D inputs)
A 4-D file in the order [batch, T_q, heads, T_k] (made elsewhere) needs --layout bthd.

Options:
      --scores FILE       the weights
      --png FILE          the image to write
      --batch B           the batch entry to draw (default 0)
      --head H            the head to draw (default 0)
      --layout bhtd|bthd  the axis order of a 4-D SCORES file: bhtd = [batch, heads, T_q,
                          T_k] (the default, and what 'run' writes), bthd = [batch, T_q,
                          heads, T_k]; 2-D and 3-D files have one order and ignore it
      --tokens FILE       one token per line, to label the axes: both when T_q = T_k, else
                          the keys; lines beyond those needed are ignored, positions without
                          a line are labelled by their index
      --scale linear|log  how a weight w maps to a colour: linear in w from 0 to the largest
                          weight (the default), or linear in log10(w) from the smallest
                          positive weight (but at most 6 decades below the largest) to the
                          largest, which shows diffuse weights that look uniformly dark on the
                          linear scale; smaller weights take the bottom colour, exact zeros
                          (masked) stay near-black, and the colour bar is labelled in weights
      --quiet             no progress indicator, no summary line
  -h, --help              show this help and exit
)";

const char* const kBenchHelp = R"(Usage: eigen-attention bench [--quick]

Prints a short throughput table for this machine (a few seconds): the fused call
(attention_heads_into, ATTN only) and the decomposed one (attention_heads_decomposed_into, also the
T x T weights), one head, T = 1024 and 2048, d = 64, float, on one thread and on every
hardware thread. GFLOP/s = 4 T^2 d / time.

Options:
      --quick  T = 256 and 512, shorter timings: a check that it runs, not a measurement
  -h, --help   show this help and exit
)";

const char* const kDecodeHelp = R"(Usage: eigen-attention decode [OPTION]...

A synthetic generation loop on a paged KV cache (PagedKVCache, attention_decode): each
sequence's prompt (random keys and values) is appended to the cache, then every step
appends one new token (random key and value) to every sequence and decodes all of them
in one batched call (one query token each). Prints the tokens generated per second
(tokens/s, appends and decodes timed) and the memory bandwidth of the decodes: GB/s =
the bytes they must read (2 x cached tokens x kv-heads x (dim x the storage's bytes,
plus a 4-byte scale for int8, e4m3 and e5m2), summed over the steps) / their time.
Writes no file.

Options:
      --sequences N      sequences decoded together (default 8)
      --heads H          query heads (default 32)
      --kv-heads H_KV    key/value heads, a divisor of H (default 8: grouped-query)
      --dim D            head dimension d_k = d_v (default 128)
      --prompt MIN,MAX   prompt lengths, drawn deterministically from MIN..MAX; one
                         number = all the same (default 512,8192)
      --generate N       tokens generated per sequence (default 256)
      --page-size P      tokens per page of the cache: 16, 32, 64, 128 or 256 (default 16)
      --storage float|bf16|half|int8|e4m3|e5m2
                         the cache's element type (default float); bf16 and half halve
                         the bytes read; int8 and the FP8 formats e4m3 and e5m2 quarter
                         them (quantized as appended, a float scale per token and head);
                         the arithmetic stays float
      --threads N        threads (default 0: one per hardware thread)
  -h, --help             show this help and exit

Example:
  eigen-attention decode --sequences 4 --prompt 1024,4096 --generate 64 --storage bf16
)";

}  // namespace cli
}  // namespace EigenAttention
