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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
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

/// Auto and every kernel here except Kernel::Reference, the plain-Eigen yardstick documented as
/// forming T_q x T_k temporaries ("slow and memory-hungry"); it is not meant for loops.
std::vector<ea::Kernel> kernels_checked() {
  std::vector<ea::Kernel> kernels = {ea::Kernel::Auto};
  for (const ea::Kernel k : ea::available_kernels())
    if (k != ea::Kernel::Reference) kernels.push_back(k);
  return kernels;
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
  const std::vector<ea::Kernel> kernels = kernels_checked();
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
    // An attention sink, and the backward's dL/dLSE in and dL/dsink out.
    const T sink = T(0.75);
    ea::Masks<T> sink_masks;
    sink_masks.sinks = &sink;
    const ea::Vector<T> d_lse = ea::Vector<T>::Random(s.tq);
    T d_sink = 0;
    ea::BackwardTerms<T> terms;
    terms.d_lse = ea::HeadsView<const T>::single(d_lse);
    terms.d_sinks = &d_sink;
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
      expect_no_allocation("attention_into with lse and a sink " + where,
                           [&] { ea::attention_into(Q, K, V, out, lse, opt, sink_masks); });
      expect_no_allocation("attention_backward_into with a sink, d_lse and d_sinks " + where, [&] {
        ea::attention_backward_into(Q, K, V, out, lse, d_out, dq, dk, dv, opt, sink_masks, terms);
      });
    }
  }
}

/// The multi-head forward and backward (GQA, a broadcast bias and its gradient, d_scores) and the
/// varlen forward and backward (two sequences packed), the backward from its forward's ATTN and LSE.
template <class T>
void run_heads_backward(const char* type) {
  using L = std::conditional_t<std::is_same_v<T, double>, double, float>;  // the LSE's type
  using In = ea::HeadsView<const T>;
  using Out = ea::HeadsView<T>;
  const Eigen::Index H = 4, Hkv = 2, tq = 257, tk = 301, dk = 33, dv = 17;
  const auto random = [](Eigen::Index n) {
    std::vector<T> x(static_cast<std::size_t>(n));
    const Eigen::VectorXf r = Eigen::VectorXf::Random(n);
    for (Eigen::Index i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<T>(r(i));
    return x;
  };
  const std::vector<T> q = random(H * tq * dk), k = random(Hkv * tk * dk), v = random(Hkv * tk * dv),
                       d_out = random(H * tq * dv), d_scores = random(H * tq * tk), bias = random(tq * tk);
  std::vector<T> out(q.size() / dk * dv), gq(q.size()), gk(k.size()), gv(v.size()), gbias(bias.size());
  std::vector<L> lse(static_cast<std::size_t>(H * tq));
  const In Q = In::bhtd(q.data(), 1, H, tq, dk), K = In::bhtd(k.data(), 1, Hkv, tk, dk),
           V = In::bhtd(v.data(), 1, Hkv, tk, dv), dO = In::bhtd(d_out.data(), 1, H, tq, dv),
           dS = In::bhtd(d_scores.data(), 1, H, tq, tk), O = In::bhtd(out.data(), 1, H, tq, dv);
  const Out dQ = Out::bhtd(gq.data(), 1, H, tq, dk), dK = Out::bhtd(gk.data(), 1, Hkv, tk, dk),
            dV = Out::bhtd(gv.data(), 1, Hkv, tk, dv), dB = Out::bhtd(gbias.data(), 1, 1, tq, tk);
  const ea::HeadsView<L> lse_out = ea::HeadsView<L>::bhtd(lse.data(), 1, H, tq, 1);
  const ea::HeadsView<const L> lse_in = lse_out;
  ea::Masks<T> masks;
  masks.bias = ea::BroadcastView<T>::matrix(bias.data(), tq, tk);
  // Two sequences of the same buffers, packed (BTHD): 100 + 157 queries, 120 + 181 keys.
  const std::int64_t cu_q[3] = {0, 100, tq}, cu_k[3] = {0, 120, tk};
  const In Qp = In::bthd(q.data(), 1, tq, H, dk), Kp = In::bthd(k.data(), 1, tk, Hkv, dk),
           Vp = In::bthd(v.data(), 1, tk, Hkv, dv), dOp = In::bthd(d_out.data(), 1, tq, H, dv),
           Op = In::bthd(out.data(), 1, tq, H, dv);
  const Out dQp = Out::bthd(gq.data(), 1, tq, H, dk), dKp = Out::bthd(gk.data(), 1, tk, Hkv, dk),
            dVp = Out::bthd(gv.data(), 1, tk, Hkv, dv);
  // Attention sinks (one of them -inf: none), and the backward's dL/dLSE in and dL/dsinks out.
  const std::vector<T> sinks = {T(0.5), T(-1), T(2), T(-std::numeric_limits<float>::infinity())};
  ea::Masks<T> with_sinks = masks;
  with_sinks.sinks = sinks.data();
  ea::Masks<T> varlen_sinks;
  varlen_sinks.sinks = sinks.data();
  std::vector<L> d_lse(lse.size()), d_sinks(static_cast<std::size_t>(H));
  for (std::size_t i = 0; i < d_lse.size(); ++i) d_lse[i] = static_cast<L>(0.25 * double(i % 7) - 0.75);
  ea::BackwardTerms<T> terms, varlen_terms;
  terms.d_lse = ea::HeadsView<const L>::bhtd(d_lse.data(), 1, H, tq, 1);
  terms.d_sinks = d_sinks.data();
  varlen_terms.d_lse = ea::HeadsView<const L>::bthd(d_lse.data(), 1, tq, H, 1);
  varlen_terms.d_sinks = d_sinks.data();
  for (const ea::Kernel kernel : kernels_checked()) {
    ea::Options opt;
    opt.causal = true;
    opt.alignment = ea::CausalAlignment::BottomRight;
    opt.kernel = kernel;
    const std::string where = std::string(type) + " " + ea::kernel_name(kernel);
    ea::attention_heads_into(Q, K, V, Out::bhtd(out.data(), 1, H, tq, dv), lse_out, opt, masks);
    expect_no_allocation("attention_heads_into " + where, [&] {
      ea::attention_heads_into(Q, K, V, Out::bhtd(out.data(), 1, H, tq, dv), lse_out, opt, masks);
    });
    expect_no_allocation("attention_heads_backward_into " + where, [&] {
      ea::attention_heads_backward_into(Q, K, V, O, lse_in, dO, dS, dQ, dK, dV, dB, opt, masks);
    });
    ea::attention_varlen_into(Qp, Kp, Vp, cu_q, cu_k, 2, Out::bthd(out.data(), 1, tq, H, dv), lse_out, opt);
    expect_no_allocation("attention_varlen_into " + where, [&] {
      ea::attention_varlen_into(Qp, Kp, Vp, cu_q, cu_k, 2, Out::bthd(out.data(), 1, tq, H, dv), lse_out, opt);
    });
    expect_no_allocation("attention_varlen_backward_into " + where, [&] {
      ea::attention_varlen_backward_into(Qp, Kp, Vp, Op, lse_in, dOp, cu_q, cu_k, 2, dQp, dKp, dVp, opt);
    });
    // With sinks: the forwards, and the backwards from them with dL/dLSE and dL/dsinks.
    expect_no_allocation("attention_heads_into with sinks " + where, [&] {
      ea::attention_heads_into(Q, K, V, Out::bhtd(out.data(), 1, H, tq, dv), lse_out, opt, with_sinks);
    });
    expect_no_allocation("attention_heads_backward_into with sinks, d_lse and d_sinks " + where, [&] {
      ea::attention_heads_backward_into(Q, K, V, O, lse_in, dO, dS, dQ, dK, dV, dB, opt, with_sinks, terms);
    });
    expect_no_allocation("attention_varlen_into with sinks " + where, [&] {
      ea::attention_varlen_into(Qp, Kp, Vp, cu_q, cu_k, 2, Out::bthd(out.data(), 1, tq, H, dv), lse_out, opt,
                                varlen_sinks);
    });
    expect_no_allocation("attention_varlen_backward_into with sinks, d_lse and d_sinks " + where, [&] {
      ea::attention_varlen_backward_into(Qp, Kp, Vp, Op, lse_in, dOp, cu_q, cu_k, 2, dQp, dKp, dVp, opt,
                                         varlen_sinks, varlen_terms);
    });
  }
}

// bfloat16 and half: the _into forms allocate nothing either, forward and backward (their tiles
// are widened in the same per-thread scratch; the backward's float gradients accumulate in a
// workspace kept from call to call).
template <class T>
void run_low_precision(const char* type) {
  using Row = ea::RowMatrix<T>;
  using Col = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const std::vector<ea::Kernel> kernels = kernels_checked();
  const Shape s{257, 301, 33, 17, true, true};
  const Row Q = Eigen::MatrixXf::Random(s.tq, s.dk).cast<T>();
  const Col K = Eigen::MatrixXf::Random(s.tk, s.dk).cast<T>(),
            V = Eigen::MatrixXf::Random(s.tk, s.dv).cast<T>();
  Row out(s.tq, s.dv), scores(s.tq, s.tk);
  ea::RowMatrix<float> scores_float(s.tq, s.tk);
  ea::Vector<float> lse(s.tq);
  const Row d_out = Eigen::MatrixXf::Random(s.tq, s.dv).cast<T>(),
            d_scores = Eigen::MatrixXf::Random(s.tq, s.tk).cast<T>();
  Row dq(s.tq, s.dk), dv(s.tk, s.dv);
  Col dk(s.tk, s.dk);
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
    ea::attention_into(Q, K, V, out, lse, opt);
    expect_no_allocation("attention_backward_into " + where,
                         [&] { ea::attention_backward_into(Q, K, V, out, lse, d_out, dq, dk, dv, opt); });
    expect_no_allocation("attention_backward_into with d_scores " + where, [&] {
      ea::attention_backward_into(Q, K, V, out, lse, d_out, d_scores, dq, dk, dv, opt);
    });
  }
  run_heads_backward<T>(type);
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
  run_heads_backward<float>("float");
  run_heads_backward<double>("double");
  run_low_precision<Eigen::bfloat16>("bfloat16");
  run_low_precision<Eigen::half>("half");
  std::printf("%d of %d checks allocated nothing on the second call\n", g_checks - g_failures, g_checks);
  return g_failures == 0 ? 0 : 1;
}
