// Which kernels exist, which this CPU runs, and the dispatch to them (over threads).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernel.hpp"
#include "kernel_abi.hpp"
#include "thread_pool.hpp"

namespace EigenAttention {
namespace {

bool cpu_has_avx2() {
#if defined(EIGEN_ATTENTION_HAVE_AVX2)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(EIGEN_ATTENTION_HAVE_AVX512)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Built once: resolving a kernel must not allocate (the _into calls allocate nothing).
const std::vector<Kernel>& kernels_here() {
  static const std::vector<Kernel> kernels = [] {
    std::vector<Kernel> k;
    if (cpu_has_avx512()) k.push_back(Kernel::Avx512);
    if (cpu_has_avx2()) k.push_back(Kernel::Avx2);
    k.push_back(Kernel::Portable);
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
    case Kernel::Auto: return "auto";
    case Kernel::Reference: return "reference";
    case Kernel::Portable: return "portable";
    case Kernel::Avx2: return "avx2";
    case Kernel::Avx512: return "avx512";
  }
  return "unknown";
}

namespace internal {

template <typename T>
RowsKernel<T> tiled_kernel(Kernel kernel) {
  switch (kernel) {
#if defined(EIGEN_ATTENTION_HAVE_AVX512)
    case Kernel::Avx512: return &avx512_rows;
#endif
#if defined(EIGEN_ATTENTION_HAVE_AVX2)
    case Kernel::Avx2: return &avx2_rows;
#endif
    default: return &portable_rows;
  }
}

template RowsKernel<float> tiled_kernel<float>(Kernel);
template RowsKernel<double> tiled_kernel<double>(Kernel);

Kernel resolve_kernel(const char* api, Kernel requested) {
  const std::vector<Kernel>& available = kernels_here();
  if (requested == Kernel::Auto) return available.front();
  if (std::find(available.begin(), available.end(), requested) != available.end()) return requested;
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": kernel '" +
                              kernel_name(requested) + "' is not available on this CPU or in this build");
}

int useful_threads(int requested, double work) {
  constexpr double kMinWorkPerThread = 1 << 20;
  const double useful = std::min<double>(work / kMinWorkPerThread + 1, 1 << 16);
  return std::max(1, std::min(resolve_threads(requested), static_cast<int>(useful)));
}

}  // namespace internal
}  // namespace EigenAttention
