// SPDX-License-Identifier: MIT
// The subcommands of eigen-attention: their arguments as given on the command line (numbers
// still as text, parsed and checked by the command), and their entry points. Each returns the
// exit status on success and throws Failure, npy::Error or std::invalid_argument otherwise.
#pragma once

#include <string>

namespace EigenAttention {
namespace cli {

struct RunArgs {
  std::string q, k, v, out, scores, lse;
  bool causal = false;
  std::string align = "top-left";
  std::string scale, softcap, window, chunk_size;
  std::string mask, key_lengths, alibi, sinks;
  std::string layout = "bhtd";
  std::string compute;  // float, double, bf16, half; empty: the inputs' type
  bool compute_given = false;
  std::string threads = "0";
  bool average_heads = false;
  std::string heatmap, batch, head, tokens;
  bool quiet = false;
  // --distributed ring|ulysses and --sharding contiguous|zigzag: the run under mpirun
  // (distributed.cpp; built only with MPI).
  std::string distributed, sharding;
  bool distributed_given = false, sharding_given = false;
};
int run_command(const RunArgs& args);
/// `run --distributed`: every rank of MPI_COMM_WORLD reads its rows of Q, K and V and writes its
/// rows of the outputs (distributed.cpp). Without MPI it throws a Failure saying so (run.cpp).
int run_distributed(const RunArgs& args);
/// Ends MPI when run_distributed() started it (MPI_Barrier, MPI_Finalize), once main() has
/// reported the outcome; nothing otherwise.
void finish_distributed();

struct HeatmapArgs {
  std::string scores, png, tokens, batch, head;
  std::string layout = "bhtd";
  std::string scale = "linear";  ///< linear or log
  bool quiet = false;
};
int heatmap_command(const HeatmapArgs& args);

struct BenchArgs {
  bool quick = false;  ///< T = 256 and 512, shorter timings: a smoke test
};
int bench_command(const BenchArgs& args);

/// `decode`: a synthetic generation loop on a paged KV cache. Empty strings: the defaults.
struct DecodeArgs {
  std::string sequences, heads, kv_heads, dim, prompt, generate, threads, page_size;
  std::string storage = "float";
};
int decode_command(const DecodeArgs& args);

}  // namespace cli
}  // namespace EigenAttention
