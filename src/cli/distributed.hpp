// SPDX-License-Identifier: MIT
// `eigen-attention run --distributed`: what run.cpp checks from the command line and the .npy
// headers before any data is read (plan_distributed, no MPI needed), and what distributed.cpp
// (compiled only with MPI) reads, computes and writes from it.
#pragma once

#include <EigenAttention/Npy.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "commands.hpp"

namespace EigenAttention {
namespace cli {

/// The header of a .npy file: its dtype, shape, and where its data starts. The data is not read.
struct NpyHeader {
  std::string path;
  npy::DType dtype = npy::DType::Float32;
  std::vector<std::int64_t> shape;
  std::uint64_t data_offset = 0;  ///< bytes before the data (magic, version, header)
};

/// Reads and checks the header of `path` (a little-endian float or integer .npy file in C order,
/// its size exactly what the shape needs). \throws Failure naming the file (distributed.cpp).
NpyHeader read_npy_header(const std::string& path);

/// Everything a distributed run needs, checked on every rank alike (the same files and command
/// line give the same plan, or the same error, everywhere).
struct DistributedPlan {
  bool ulysses = false;  ///< --distributed ulysses (else ring)
  bool zigzag = false;   ///< --sharding zigzag (else contiguous)
  Options opt;
  Layout layout = Layout::BHTD;  ///< of 4-D Q, K, V and ATTN (bhtd for 2-D ones)
  int rank = 2;                  ///< 2-D or 4-D inputs
  std::int64_t B = 1, H = 1, Hkv = 1, Tq = 0, Tk = 0, dk = 0, dv = 0;
  NpyHeader q, k, v;
  bool compute_double = false;                 ///< float64 arithmetic (else float32)
  npy::DType out_dtype = npy::DType::Float32;  ///< ATTN: float32, float64 or float16
  npy::DType lse_dtype = npy::DType::Float32;  ///< LSE: the arithmetic's type
  bool has_key_lengths = false;
  std::vector<std::int64_t> key_lengths;  ///< --key-lengths, one per batch entry
  bool has_alibi = false;
  std::vector<double> alibi;  ///< --alibi, one slope per query head (exact in double)
  bool has_sinks = false;
  std::vector<double> sinks;  ///< --sinks, one logit per query head (exact in double)
  std::string out, lse;       ///< the outputs asked for (empty: not written)
  bool quiet = false;
};

/// Parses and checks a `run --distributed` command line, and the headers of its files (run.cpp).
/// \throws Failure (usage errors for the command line), npy::Error.
DistributedPlan plan_distributed(const RunArgs& args);

}  // namespace cli
}  // namespace EigenAttention
