/// \file Kernels.hpp
/// The implementations of attention that the library holds, and which of them this CPU runs.
#pragma once

#include <vector>

namespace EigenAttention {

/// Which implementation computes the result (Options::kernel). Every kernel computes the same
/// function; the choice changes speed, memory and the last bits of rounding only.
enum class Kernel {
  Auto,       ///< the fastest kernel this CPU supports (the default).
  Reference,  ///< plain Eigen expressions that read like the formula; slow, and it forms
              ///< T_q x T_k even in the fused call. The yardstick the others are tested against.
  Portable    ///< tiled online-softmax kernel in portable Eigen code; never forms T_q x T_k.
};

/// The kernels this build can run on this CPU, fastest first; Kernel::Auto means the first.
/// Always contains Kernel::Portable and Kernel::Reference, in that order, at the end.
std::vector<Kernel> available_kernels();

/// A short lower-case name: "auto", "reference", "portable".
const char* kernel_name(Kernel kernel);

}  // namespace EigenAttention
