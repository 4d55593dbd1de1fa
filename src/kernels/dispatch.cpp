// SPDX-License-Identifier: MIT
// Which kernels exist, which this CPU runs, and the dispatch to them. The tiled
// kernels, their CPU tests and their names come from the table (kernels.cmake, table.hpp);
// kernel_set() is the one switch from a Kernel to its entry points.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/abi.hpp"
#include "kernels/kernels.hpp"
#include "kernels/table.hpp"

namespace EigenAttention {
namespace {

// Built once: resolving a kernel must not allocate (the _into calls allocate nothing).
const std::vector<Kernel>& kernels_here() {
  static const std::vector<Kernel> kernels = [] {
    std::vector<Kernel> k;
#define EIGEN_ATTENTION_IF_SUPPORTED(Enumerator, name, cpu_supports) \
  if (cpu_supports) k.push_back(Kernel::Enumerator);
    EIGEN_ATTENTION_TILED_KERNELS(EIGEN_ATTENTION_IF_SUPPORTED)
#undef EIGEN_ATTENTION_IF_SUPPORTED
    k.push_back(Kernel::Reference);
    return k;
  }();
  return kernels;
}

}  // namespace

bool kernel_available(Kernel kernel) {
  if (kernel == Kernel::Auto) return true;
  const std::vector<Kernel>& available = kernels_here();
  return std::find(available.begin(), available.end(), kernel) != available.end();
}

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::Auto:
      return "auto";
    case Kernel::Reference:
      return "reference";
#define EIGEN_ATTENTION_NAME(Enumerator, name, value) \
  case Kernel::Enumerator:                            \
    return #name;
      EIGEN_ATTENTION_ALL_TILED_KERNELS(EIGEN_ATTENTION_NAME)
#undef EIGEN_ATTENTION_NAME
  }
  return "unknown";
}

KernelTiles kernel_tiles(Kernel kernel, bool is_double, std::ptrdiff_t d_k, std::ptrdiff_t d_v) {
  const Kernel k = internal::resolve_kernel("kernel_tiles", kernel);
  if (k == Kernel::Reference)
    throw std::invalid_argument("EigenAttention::kernel_tiles: the reference kernel has no tiles");
  if (d_k < 0 || d_v < 0)
    throw std::invalid_argument("EigenAttention::kernel_tiles: head dims d_k = " + std::to_string(d_k) +
                                ", d_v = " + std::to_string(d_v) + " must not be negative");
  const internal::RawTiles t = internal::kernel_set(k).tiles(is_double, d_k, d_v);
  KernelTiles r;
  r.kernel = k;
  r.task_rows = internal::kTaskRows;
  r.strip_rows = t.strip_rows;
  r.panel_keys = t.panel_keys;
  r.key_tile = t.key_tile;
  r.l1_bytes = t.l1_bytes;
  r.l2_bytes = t.l2_bytes;
  return r;
}

namespace internal {

const KernelSet& kernel_set(Kernel kernel) {
  switch (kernel) {
#define EIGEN_ATTENTION_CASE(Enumerator, name, cpu_supports) \
  case Kernel::Enumerator:                                   \
    return name##_kernel_set;
    EIGEN_ATTENTION_TILED_KERNELS(EIGEN_ATTENTION_CASE)
#undef EIGEN_ATTENTION_CASE
    default:
      return portable_kernel_set;
  }
}

std::uint64_t next_call() {
  static std::atomic<std::uint64_t> calls{0};
  return calls.fetch_add(1, std::memory_order_relaxed) + 1;
}

Kernel resolve_kernel(const char* api, Kernel requested) {
  const std::vector<Kernel>& available = kernels_here();
  if (requested == Kernel::Auto) return available.front();
  if (std::find(available.begin(), available.end(), requested) != available.end()) return requested;
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": kernel '" + kernel_name(requested) +
                              "' is not available on this CPU or in this build");
}

}  // namespace internal
}  // namespace EigenAttention
