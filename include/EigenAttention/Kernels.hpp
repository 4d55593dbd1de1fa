// SPDX-License-Identifier: MIT
/// \file Kernels.hpp
/// The implementations of attention that the library holds, and which of them this CPU runs.
#pragma once

#include <cstddef>
#include <vector>

#include <EigenAttention/export.hpp>

namespace EigenAttention {

/// Which implementation computes the result (Options::kernel). Every kernel computes the same
/// function; the choice changes speed, memory and the last bits of rounding only.
enum class Kernel {
  Auto,        ///< the fastest kernel for this CPU (the default; auto_kernel() says which).
  Reference,   ///< plain Eigen expressions that read like the formula; slow, single-threaded, and
               ///< it forms T_q x T_k even in the fused call. The yardstick for the others.
               ///< The tiled kernels below: query tiles x key tiles with an online softmax; the
               ///< fused call never forms T_q x T_k; Options::threads splits the query tiles.
  Portable,    ///< the tiled kernel compiled for the baseline instruction set (runs anywhere).
  Avx2,        ///< the tiled kernel compiled for AVX2 + FMA (x86-64 only).
  Avx512,      ///< the tiled kernel compiled for AVX-512 F/DQ/BW/VL (x86-64 only).
  Avx512Bf16,  ///< Avx512 with the bfloat16 fused forward and backward on vdpbf16ps (AVX512-BF16,
               ///< x86-64 only): Q and K as bf16 pairs, the weights P (and the backward's dZ)
               ///< rounded to bf16 for their products, as FlashAttention does on GPUs
               ///< (docs/low_precision.md gives the error); every other call is Avx512's, bit
               ///< for bit. Auto takes it only on CPUs whose unit is
               ///< faster than widening to float (AMD Zen 4 and 5; not the Intel cores measured).
  Amx          ///< Avx512 with the bfloat16 fused forward and backward on AMX tiles (tdpbf16ps;
               ///< AMX-TILE and AMX-BF16, x86-64 Linux only): the products of Avx512Bf16's pairs
               ///< (the same error model, another order of the sums); every other call, a bf16
               ///< cache's prefill included, is Avx512's, bit for bit. Auto takes it wherever the
               ///< CPU and the OS support it (Intel Sapphire Rapids and later); the library asks
               ///< the OS for the tile state once, at its first kernel query
               ///< (docs/low_precision.md).
};

/// The last enumerator, the fastest kernel: available_kernels() walks down from it. (The
/// library's table of kernels, src/kernels/kernels.cmake, is checked against it at build time.)
constexpr Kernel kFastestKernel = Kernel::Amx;

/// Can this build run `kernel` on this CPU? Auto, Portable and Reference: always. Avx2, Avx512,
/// Avx512Bf16 and Amx: when the library was built with them (x86-64 with GCC or Clang) and this CPU
/// and OS support them.
EIGEN_ATTENTION_EXPORT bool kernel_available(Kernel kernel);

/// The kernel that Kernel::Auto runs on this CPU: the first of available_kernels(), except where
/// that kernel's unit exists but is not faster here (Avx512Bf16 on CPUs outside its vendor and
/// family table: then Avx512). Fixed for the process, never chosen by timing.
EIGEN_ATTENTION_EXPORT Kernel auto_kernel();

/// The kernels this build can run on this CPU, fastest first (Kernel::Auto: auto_kernel()).
/// Always ends with Kernel::Portable then Kernel::Reference (see kernel_available()).
/// (Inline: the vector is made by your code, whatever its standard library's debug mode.)
inline std::vector<Kernel> available_kernels() {
  std::vector<Kernel> kernels;
  for (int k = static_cast<int>(kFastestKernel); k >= static_cast<int>(Kernel::Reference); --k) {
    if (kernel_available(static_cast<Kernel>(k))) kernels.push_back(static_cast<Kernel>(k));
  }
  return kernels;
}

/// A short lower-case name: "auto", "reference", "portable", "avx2", "avx512", "avx512bf16", "amx".
EIGEN_ATTENTION_EXPORT const char* kernel_name(Kernel kernel);

/// How a tiled kernel cuts one head's forward pass on this CPU (kernel_tiles()): what its tile
/// policy chose from the CPU's data caches and the head dims (docs/performance.md). For
/// benchmarks and diagnostics; the results never depend on it beyond the last bits.
struct KernelTiles {
  Kernel kernel = Kernel::Auto;   ///< the kernel that runs (Auto resolved)
  std::ptrdiff_t task_rows = 0;   ///< query rows of one task, the unit the threads share
  std::ptrdiff_t strip_rows = 0;  ///< query rows of one micro-kernel strip
  std::ptrdiff_t panel_keys = 0;  ///< keys of one packed panel of K
  std::ptrdiff_t key_tile = 0;    ///< keys of one key tile (its K and V packed once per call)
  std::ptrdiff_t l1_bytes = 0;    ///< the L1 data cache the choice was made from
  std::ptrdiff_t l2_bytes = 0;    ///< the L2 cache the choice was made from
};

/// The tiles `kernel` (Auto: the fastest here) uses for the forward pass of heads with dims d_k
/// and d_v whose arithmetic is in double (`is_double`) or in float (float, bfloat16, half).
/// Throws std::invalid_argument for Kernel::Reference (it has no tiles), a kernel not available
/// here (kernel_available()), or a negative dim.
EIGEN_ATTENTION_EXPORT KernelTiles kernel_tiles(Kernel kernel, bool is_double, std::ptrdiff_t d_k,
                                                std::ptrdiff_t d_v);

}  // namespace EigenAttention
