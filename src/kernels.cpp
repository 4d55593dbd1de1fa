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

std::vector<Kernel> available_kernels() { return kernels_here(); }

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
namespace {

constexpr index_t kTaskRows = 128;  // query rows per task handed to a thread
// Below this many multiply-adds per thread (T_q * T_k * (d_k + d_v)), another thread costs
// more than it saves.
constexpr double kMinWorkPerThread = 1 << 20;

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

template <typename M>
RawMatrix<typename M::Scalar> raw(M* m) {
  if (m == nullptr) return {nullptr, 0, 0, 0, 0};
  return {m->data(), m->rows(), m->cols(), m->outerStride(), m->innerStride()};
}

template <typename T>
RawMatrix<const T> raw_input(const ConstStridedMap<T>& m) {
  return {m.data(), m.rows(), m.cols(), m.outerStride(), m.innerStride()};
}

}  // namespace

Kernel resolve_kernel(const char* api, Kernel requested) {
  const std::vector<Kernel>& available = kernels_here();
  if (requested == Kernel::Auto) return available.front();
  if (std::find(available.begin(), available.end(), requested) != available.end()) return requested;
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": kernel '" +
                              kernel_name(requested) + "' is not available on this CPU or in this build");
}

template <typename T>
void run_kernel(Kernel kernel, const Problem<T>& p, const Outputs<T>& out, int threads) {
  if (kernel == Kernel::Reference) {
    reference_kernel(p, out);
    return;
  }
  const RawProblem<T> raw_problem{raw_input(p.q), raw_input(p.k), raw_input(p.v), p.scale, p.causal, p.offset,
                                  raw(out.scores), raw(out.attn), raw(out.lse),
                                  out.scores != nullptr, out.attn != nullptr, out.lse != nullptr};
  const RowsKernel<T> rows = tiled_kernel<T>(kernel);
  const index_t tq = p.tq();
  const index_t tasks = (tq + kTaskRows - 1) / kTaskRows;
  const double work = static_cast<double>(tq) * static_cast<double>(p.tk()) *
                      static_cast<double>(p.dk() + p.dv() + 1) * (p.causal ? 0.5 : 1.0);
  const int useful = static_cast<int>(std::min<double>(work / kMinWorkPerThread + 1, 1 << 16));
  const int n_threads = std::min(resolve_threads(threads), useful);
  // With a causal mask the last query tiles see the most keys: hand those out first, so that
  // the threads run out of work together.
  const bool heaviest_last = p.causal;
  ThreadPool::instance().run(tasks, n_threads, [&](index_t task) {
    const index_t tile = heaviest_last ? tasks - 1 - task : task;
    const index_t first = tile * kTaskRows;
    rows(raw_problem, first, std::min(kTaskRows, tq - first));
  });
}

template void run_kernel<float>(Kernel, const Problem<float>&, const Outputs<float>&, int);
template void run_kernel<double>(Kernel, const Problem<double>&, const Outputs<double>&, int);

}  // namespace internal
}  // namespace EigenAttention
