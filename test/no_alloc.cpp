// SPDX-License-Identifier: MIT
// After one warm-up call, the _into forms with pre-sized outputs allocate nothing (forward and
// backward).
//
// A separate executable (not the doctest one): it replaces malloc, calloc, realloc and the
// aligned allocators with counting forwarders to glibc's own (__libc_*), and counts while a
// flag is set. operator new goes through malloc in libstdc++, Eigen's allocator through malloc
// (or the aligned ones), so every heap allocation is seen. Not built with sanitizers, which
// replace malloc themselves.
#include <EigenAttention/EigenAttention.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* ptr, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

namespace {
bool g_counting = false;
long g_allocations = 0;
inline void count() {
  if (g_counting) ++g_allocations;
}
}  // namespace

extern "C" {
void* malloc(std::size_t size) noexcept {
  count();
  return __libc_malloc(size);
}
void* calloc(std::size_t n, std::size_t size) noexcept {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* ptr, std::size_t size) noexcept {
  count();
  return __libc_realloc(ptr, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  count();
  return __libc_memalign(alignment, size);
}
void* memalign(std::size_t alignment, std::size_t size) noexcept {
  count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
  count();
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace {

namespace ea = EigenAttention;

int g_failures = 0;
int g_checks = 0;

/// Runs f once to warm up, then again while counting; reports a non-zero count.
template <class F>
void expect_no_allocation(const std::string& what, F&& f) {
  f();
  g_allocations = 0;
  g_counting = true;
  f();
  g_counting = false;
  ++g_checks;
  if (g_allocations != 0) {
    ++g_failures;
    std::printf("FAIL: %s: %ld allocation(s) on the second call\n", what.c_str(), g_allocations);
  }
}

struct Shape {
  Eigen::Index tq, tk, dk, dv;
  bool causal, bottom_right;
};

template <class T>
void run(const char* type) {
  using Row = ea::RowMatrix<T>;
  using Col = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const std::vector<Shape> shapes = {{300, 300, 64, 64, true, false},
                                     {300, 300, 64, 64, false, false},
                                     {257, 301, 33, 17, true, true},
                                     {301, 257, 40, 24, true, true},
                                     {1, 300, 64, 64, false, false}};
  // Auto and every kernel here except Kernel::Reference, the plain-Eigen yardstick documented
  // as forming T_q x T_k temporaries ("slow and memory-hungry"); it is not meant for loops.
  std::vector<ea::Kernel> kernels = {ea::Kernel::Auto};
  for (const ea::Kernel k : ea::available_kernels())
    if (k != ea::Kernel::Reference) kernels.push_back(k);
  for (const Shape& s : shapes) {
    // Row-major Q, column-major K and V: both storage orders, viewed in place.
    const Row Q = Row::Random(s.tq, s.dk);
    const Col K = Col::Random(s.tk, s.dk);
    const Col V = Col::Random(s.tk, s.dv);
    Row out(s.tq, s.dv), scores(s.tq, s.tk);
    Col out_col(s.tq, s.dv);
    ea::Vector<T> lse(s.tq);
    const Row d_out = Row::Random(s.tq, s.dv), d_scores = Row::Random(s.tq, s.tk);
    Row dq(s.tq, s.dk), dv(s.tk, s.dv);
    Col dk(s.tk, s.dk);  // a column-major gradient too
    for (const ea::Kernel kernel : kernels) {
      ea::Options opt;
      opt.causal = s.causal;
      opt.alignment = s.bottom_right ? ea::CausalAlignment::BottomRight : ea::CausalAlignment::TopLeft;
      opt.kernel = kernel;
      const std::string where = std::string(type) + " " + ea::kernel_name(kernel) +
                                " T_q=" + std::to_string(s.tq) + " T_k=" + std::to_string(s.tk) +
                                " d_k=" + std::to_string(s.dk) + " d_v=" + std::to_string(s.dv) +
                                (s.causal ? " causal" : "") + (s.bottom_right ? " bottom-right" : "");
      expect_no_allocation("attention_into " + where, [&] { ea::attention_into(Q, K, V, out, opt); });
      expect_no_allocation("attention_into (column-major out) " + where,
                           [&] { ea::attention_into(Q, K, V, out_col, opt); });
      expect_no_allocation("attention_into with lse " + where,
                           [&] { ea::attention_into(Q, K, V, out, lse, opt); });
      expect_no_allocation("attention_decomposed_into " + where,
                           [&] { ea::attention_decomposed_into(Q, K, V, scores, out, opt); });
      expect_no_allocation("attention_decomposed_into with lse " + where,
                           [&] { ea::attention_decomposed_into(Q, K, V, scores, out, lse, opt); });
      expect_no_allocation("attention_scores_into " + where,
                           [&] { ea::attention_scores_into(Q, K, scores, opt); });
      // The backward pass, from this forward's ATTN and LSE. (On one thread, as the forward's
      // checks: with more, a pool thread grows its workspace the first time it runs a task, which
      // may be any call.)
      ea::attention_into(Q, K, V, out, lse, opt);
      expect_no_allocation("attention_backward_into " + where,
                           [&] { ea::attention_backward_into(Q, K, V, out, lse, d_out, dq, dk, dv, opt); });
      expect_no_allocation("attention_backward_into with d_scores " + where, [&] {
        ea::attention_backward_into(Q, K, V, out, lse, d_out, d_scores, dq, dk, dv, opt);
      });
    }
  }
}

// bfloat16 and half: the forward _into forms allocate nothing either (their tiles are widened in
// the same per-thread scratch). The 16-bit backward pass runs on widened copies and allocates
// them (docs/low_precision.md): not checked here.
template <class T>
void run_low_precision(const char* type) {
  using Row = ea::RowMatrix<T>;
  using Col = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  std::vector<ea::Kernel> kernels = {ea::Kernel::Auto};
  for (const ea::Kernel k : ea::available_kernels())
    if (k != ea::Kernel::Reference) kernels.push_back(k);
  const Shape s{257, 301, 33, 17, true, true};
  const Row Q = Eigen::MatrixXf::Random(s.tq, s.dk).cast<T>();
  const Col K = Eigen::MatrixXf::Random(s.tk, s.dk).cast<T>(),
            V = Eigen::MatrixXf::Random(s.tk, s.dv).cast<T>();
  Row out(s.tq, s.dv), scores(s.tq, s.tk);
  ea::RowMatrix<float> scores_float(s.tq, s.tk);
  ea::Vector<float> lse(s.tq);
  for (const ea::Kernel kernel : kernels) {
    ea::Options opt;
    opt.causal = true;
    opt.alignment = ea::CausalAlignment::BottomRight;
    opt.kernel = kernel;
    const std::string where = std::string(type) + " " + ea::kernel_name(kernel);
    expect_no_allocation("attention_into with lse " + where,
                         [&] { ea::attention_into(Q, K, V, out, lse, opt); });
    expect_no_allocation("attention_decomposed_into " + where,
                         [&] { ea::attention_decomposed_into(Q, K, V, scores, out, lse, opt); });
    expect_no_allocation("attention_decomposed_into (float scores) " + where,
                         [&] { ea::attention_decomposed_into(Q, K, V, scores_float, out, opt); });
  }
}

}  // namespace

int main() {
  // The counter must see allocations at all, or a pass would mean nothing.
  g_allocations = 0;
  g_counting = true;
  void* volatile p = std::malloc(64);
  auto* volatile v = new std::vector<double>(1000);
  g_counting = false;
  std::free(p);
  delete v;
  if (g_allocations < 2) {
    std::printf("FAIL: the malloc interposer counted %ld allocation(s) of 2 (malloc and new)\n",
                g_allocations);
    return 1;
  }

  run<float>("float");
  run<double>("double");
  run_low_precision<Eigen::bfloat16>("bfloat16");
  run_low_precision<Eigen::half>("half");
  std::printf("%d of %d checks allocated nothing on the second call\n", g_checks - g_failures, g_checks);
  return g_failures == 0 ? 0 : 1;
}
