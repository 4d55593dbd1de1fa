// SPDX-License-Identifier: MIT
/// \file Kernels.hpp
/// The implementations of attention that the library holds, and which of them this CPU runs.
#pragma once

#include <vector>

#include <EigenAttention/export.hpp>

namespace EigenAttention {

/// Which implementation computes the result (Options::kernel). Every kernel computes the same
/// function; the choice changes speed, memory and the last bits of rounding only.
enum class Kernel {
  Auto,       ///< the fastest kernel this CPU supports (the default).
  Reference,  ///< plain Eigen expressions that read like the formula; slow, single-threaded, and
              ///< it forms T_q x T_k even in the fused call. The yardstick for the others.
              ///< The tiled kernels below: query tiles x key tiles with an online softmax; the
              ///< fused call never forms T_q x T_k; Options::threads splits the query tiles.
  Portable,   ///< the tiled kernel compiled for the baseline instruction set (runs anywhere).
  Avx2,       ///< the tiled kernel compiled for AVX2 + FMA (x86-64 only).
  Avx512      ///< the tiled kernel compiled for AVX-512 F/DQ/BW/VL (x86-64 only).
};

/// The last enumerator, the fastest kernel: available_kernels() walks down from it. (The
/// library's table of kernels, src/kernels/kernels.cmake, is checked against it at build time.)
constexpr Kernel kFastestKernel = Kernel::Avx512;

/// Can this build run `kernel` on this CPU? Auto, Portable and Reference: always. Avx2 and
/// Avx512: when the library was built with them (x86-64 with GCC or Clang) and this CPU and OS
/// support them.
EIGEN_ATTENTION_EXPORT bool kernel_available(Kernel kernel);

/// The kernels this build can run on this CPU, fastest first; Kernel::Auto means the first.
/// Always ends with Kernel::Portable then Kernel::Reference (see kernel_available()).
/// (Inline: the vector is made by your code, whatever its standard library's debug mode.)
inline std::vector<Kernel> available_kernels() {
  std::vector<Kernel> kernels;
  for (int k = static_cast<int>(kFastestKernel); k >= static_cast<int>(Kernel::Reference); --k) {
    if (kernel_available(static_cast<Kernel>(k))) kernels.push_back(static_cast<Kernel>(k));
  }
  return kernels;
}

/// A short lower-case name: "auto", "reference", "portable", "avx2", "avx512".
EIGEN_ATTENTION_EXPORT const char* kernel_name(Kernel kernel);

}  // namespace EigenAttention
