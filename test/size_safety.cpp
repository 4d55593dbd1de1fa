// SPDX-License-Identifier: MIT
// Impossible sizes: shapes whose element or byte counts overflow Eigen::Index are rejected with
// std::invalid_argument naming the sizes before anything is allocated or read; a result that is
// representable but does not fit in memory surfaces as std::bad_alloc; the fused calls never
// form T_q x T_k.
//
// The huge views claim their shapes over one page mapped PROT_NONE: any read or write of it
// crashes the test, so a rejection proves that validation touched no memory. An
// std::invalid_argument (rather than Eigen's std::bad_alloc) proves it ran before allocating.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_size_safety {

using namespace ea_test;

// Under AddressSanitizer or ThreadSanitizer an allocation of terabytes is reported and ends the
// program (unless allocator_may_return_null=1): the std::bad_alloc cases are skipped there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EA_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define EA_TEST_SANITIZED 1
#endif
#endif
#ifndef EA_TEST_SANITIZED
#define EA_TEST_SANITIZED 0
#endif

namespace {

using Index = Eigen::Index;
constexpr Index kTwo20 = Index{1} << 20, kTwo29 = Index{1} << 29, kTwo32 = Index{1} << 32,
                kTwo40 = Index{1} << 40, kTwo50 = Index{1} << 50, kTwo60 = Index{1} << 60;

/// One page that may be neither read nor written: the data of every huge view below.
void* guard_page() {
  static void* page = [] {
    void* p = mmap(nullptr, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return p;
  }();
  return page;
}
template <class T>
T* guard() {
  return static_cast<T*>(guard_page());
}

/// What a call did: "ok", "invalid_argument: <message>", "bad_alloc", "length_error: ...", ...
template <class F>
std::string outcome(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return std::string("invalid_argument: ") + e.what();
  } catch (const std::bad_alloc&) {
    return "bad_alloc";
  } catch (const std::length_error& e) {
    return std::string("length_error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other exception: ") + e.what();
  } catch (...) {
    return "non-standard exception";
  }
  return "ok";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

/// The call throws std::invalid_argument whose message holds every number in `numbers`.
#define CHECK_REJECTS(call, ...)                                     \
  do {                                                               \
    const std::string what_ = outcome([&] { (void)(call); });        \
    CAPTURE(what_);                                                  \
    CHECK_MESSAGE(starts_with(what_, "invalid_argument: "), #call);  \
    for (const long long n_ : std::vector<long long>{__VA_ARGS__}) { \
      CAPTURE(n_);                                                   \
      CHECK(what_.find(std::to_string(n_)) != std::string::npos);    \
    }                                                                \
  } while (false)

/// The call throws std::bad_alloc (or std::length_error, the standard library's word for an
/// allocation it will not attempt), nothing else.
#define CHECK_BAD_ALLOC(call)                                                             \
  do {                                                                                    \
    const std::string what_ = outcome([&] { (void)(call); });                             \
    CAPTURE(what_);                                                                       \
    CHECK_MESSAGE((what_ == "bad_alloc" || starts_with(what_, "length_error: ")), #call); \
  } while (false)

template <class T>
using CMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using WMap = Eigen::Map<RowMatrix<T>>;
template <class T>
using SMap = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
template <class T>
using SWMap = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
using DStride = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;

/// A rows x cols input claimed over the guard page (contiguous row-major).
template <class T>
CMap<T> huge(Index rows, Index cols) {
  return CMap<T>(guard<T>(), rows, cols);
}
template <class T>
WMap<T> huge_out(Index rows, Index cols) {
  return WMap<T>(guard<T>(), rows, cols);
}

/// A view of `n` elements: [1, 1, 1, n] over `data`.
template <class T>
ea::HeadsView<T> flat(T* data, Index n) {
  return {data, 1, 1, 1, n, 0, 0, 0, 1};
}

/// A contiguous [B, H, T, D] view over the guard page, strides written out (HeadsView::bhtd
/// would multiply them in the caller, where they may overflow).
template <class T>
ea::HeadsView<T> huge_heads(Index b, Index h, Index t, Index d, Index bs, Index hs, Index ts, Index ds = 1) {
  return {guard<std::remove_const_t<T>>(), b, h, t, d, bs, hs, ts, ds};
}

bool overcommit_always() {
  std::ifstream f("/proc/sys/vm/overcommit_memory");
  int mode = 0;
  return (f >> mode) && mode == 1;
}

}  // namespace

TEST_CASE_TEMPLATE("size safety: Q and K claiming 2^40 rows with different d_k are rejected unread", T, float,
                   double) {
  const auto Q = huge<T>(kTwo40, 8);
  const auto K = huge<T>(kTwo40, 7);
  const auto V = huge<T>(kTwo40, 4);
  auto out = huge_out<T>(kTwo40, 4);
  auto scores = huge_out<T>(kTwo40, kTwo40);  // itself uncountable; Q/K is the first complaint
  CHECK_REJECTS(ea::attention(Q, K, V), 8, 7, kTwo40);
  CHECK_REJECTS(ea::attention_decomposed(Q, K, V), 8, 7, kTwo40);
  CHECK_REJECTS(ea::attention_scores(Q, K), 8, 7);
  CHECK_REJECTS(ea::attention_into(Q, K, V, out), 8, 7);
  CHECK_REJECTS(ea::attention_decomposed_into(Q, K, V, scores, out), 8, 7);
  CHECK_REJECTS(ea::attention_scores_into(Q, K, scores), 8, 7);
}

TEST_CASE_TEMPLATE("size safety: an input whose element count overflows Eigen::Index is rejected unread", T,
                   float, double) {
  // Consistent shapes, 2^80 elements each: no pointer into them could be formed.
  const auto Q = huge<T>(kTwo40, kTwo40);
  const auto K = huge<T>(kTwo40, kTwo40);
  const auto V = huge<T>(kTwo40, 4);
  auto out = huge_out<T>(kTwo40, 4);
  auto scores = huge_out<T>(kTwo40, kTwo40);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    CHECK_REJECTS(ea::attention(Q, K, V, opt), kTwo40);
    CHECK_REJECTS(ea::attention_decomposed(Q, K, V, opt), kTwo40);
    CHECK_REJECTS(ea::attention_scores(Q, K, opt), kTwo40);
    CHECK_REJECTS(ea::attention_into(Q, K, V, out, opt), kTwo40);
    CHECK_REJECTS(ea::attention_decomposed_into(Q, K, V, scores, out, opt), kTwo40);
    CHECK_REJECTS(ea::attention_scores_into(Q, K, scores, opt), kTwo40);
  }
  // V alone: 2^40 x 2^30.
  const auto Qs = huge<T>(kTwo40, 8), Ks = huge<T>(kTwo40, 8);
  const auto Vhuge = huge<T>(kTwo40, Index{1} << 30);
  CHECK_REJECTS(ea::attention(Qs, Ks, Vhuge), kTwo40, Index{1} << 30);
  // An output: attention_into's `out` claiming 2^40 x 2^40 where 2^40 x 4 is due is the wrong
  // shape; one of the right shape but uncountable cannot occur with countable inputs except
  // through ATTN = T_q x d_v, below.
  CHECK_REJECTS(ea::attention_into(Qs, Ks, huge<T>(kTwo40, 4), scores), kTwo40);
}

TEST_CASE_TEMPLATE(
    "size safety: by-value SCORES of T_q = T_k = 2^32 throw std::invalid_argument before reading Q", T, float,
    double) {
  // Q, K and V are countable (2^35 elements); SCORES would be 2^64 elements.
  const auto Q = huge<T>(kTwo32, 8);
  const auto K = huge<T>(kTwo32, 8);
  const auto V = huge<T>(kTwo32, 8);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    opt.causal = true;
    CHECK_REJECTS(ea::attention_decomposed(Q, K, V, opt), kTwo32);
    CHECK_REJECTS(ea::attention_scores(Q, K, opt), kTwo32);
    const SMap<T> q(Q.data(), kTwo32, 8, DStride(8, 1)), k(K.data(), kTwo32, 8, DStride(8, 1)),
        v(V.data(), kTwo32, 8, DStride(8, 1));
    CHECK_REJECTS(ea::attention_decomposed(q, k, v, opt), kTwo32);
    CHECK_REJECTS(ea::attention_scores(q, k, opt), kTwo32);
  }
  // ATTN = T_q x d_v overflowing while Q (2^40 x 1) and V (1 x 2^40) are small enough to count.
  const auto Qt = huge<T>(kTwo40, 1), Kt = huge<T>(1, 1), Vt = huge<T>(1, kTwo40);
  CHECK_REJECTS(ea::attention(Qt, Kt, Vt), kTwo40);
  CHECK_REJECTS(ea::attention_decomposed(Qt, Kt, Vt), kTwo40);
}

TEST_CASE_TEMPLATE("size safety: strides whose byte span overflows Eigen::Index are rejected unread", T,
                   float, double) {
  ea::Options opt;
  const SMap<T> ok(guard<T>(), 16, 8, DStride(8, 1));
  const SMap<T> far_rows(guard<T>(), 16, 8, DStride(kTwo60, 1));   // 15 * 2^60 elements apart
  const SMap<T> far_cols(guard<T>(), 16, 8, DStride(8, -kTwo60));  // negative, just as far
  const SMap<T> min_stride(guard<T>(), 1, 8,
                           DStride(std::numeric_limits<Index>::min(), 1));  // |stride| overflows
  for (const auto* bad : {&far_rows, &far_cols}) {
    CHECK_REJECTS(ea::attention(*bad, ok, ok, opt), kTwo60);
    CHECK_REJECTS(ea::attention(ok, *bad, ok, opt), kTwo60);
    CHECK_REJECTS(ea::attention(ok, ok, *bad, opt), kTwo60);
    RowMatrix<T> unsized;  // inputs are checked before an output is sized
    CHECK_REJECTS(ea::attention_into(*bad, ok, ok, unsized, opt), kTwo60);
    CHECK(unsized.size() == 0);
  }
  const std::string what = outcome([&] { ea::attention(min_stride, ok, ok, opt); });
  CAPTURE(what);
  CHECK(starts_with(what, "invalid_argument: "));
  CHECK(what.find("-9223372036854775808") != std::string::npos);
  // Outputs: right shape, impossible strides (nothing is written: the guard page would crash).
  const SWMap<T> out_far(guard<T>(), 16, 8, DStride(kTwo60, 1));
  const SWMap<T> lse_far(guard<T>(), 16, 1, DStride(kTwo60, 1));
  const SWMap<T> scores_far(guard<T>(), 16, 16, DStride(16, kTwo60));
  const SWMap<T> out_ok(guard<T>(), 16, 8, DStride(8, 1));
  CHECK_REJECTS(ea::attention_into(ok, ok, ok, out_far, opt), kTwo60);
  CHECK_REJECTS(ea::attention_into(ok, ok, ok, out_ok, lse_far, opt), kTwo60);
  CHECK_REJECTS(ea::attention_scores_into(ok, ok, scores_far, opt), kTwo60);
  CHECK_REJECTS(ea::attention_decomposed_into(ok, ok, ok, scores_far, out_ok, opt), kTwo60);
}

TEST_CASE_TEMPLATE("size safety: d_k past the kernels' scratch limit is rejected, even over real memory", T,
                   float, double) {
  // Stride 0: one real element stands for 2^50 (or 2^60) columns, a legitimate view. The tiled
  // kernels' per-thread scratch holds a few thousand rows of d_k: its count must be
  // representable, so such a d_k is rejected by name.
  const T one[1] = {T(1)};
  for (const Index dk : {kTwo50, kTwo60}) {
    CAPTURE(dk);
    const SMap<T> q(one, 1, dk, DStride(0, 0)), k(one, 1, dk, DStride(0, 0)), v(one, 1, 1, DStride(1, 1));
    const SMap<T> v_wide(one, 1, dk, DStride(0, 0));
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      ea::Options opt;
      opt.kernel = kernel;
      CHECK_REJECTS(ea::attention(q, k, v, opt), dk);
      CHECK_REJECTS(ea::attention_decomposed(q, k, v, opt), dk);
      const SMap<T> q1(one, 1, 1, DStride(1, 1));
      CHECK_REJECTS(ea::attention(q1, q1, v_wide, opt), dk);  // d_v
    }
    // The same through the multi-head calls: a [1, 1, 1, dk] view with stride 0.
    const ea::HeadsView<const T> hq{one, 1, 1, 1, dk, 0, 0, 0, 0};
    T o[1] = {T(0)};
    CHECK_REJECTS(ea::attention_heads_into(hq, hq, ea::HeadsView<const T>{one, 1, 1, 1, 1, 0, 0, 1, 1},
                                           ea::HeadsView<T>{o, 1, 1, 1, 1, 0, 0, 1, 1}),
                  dk);
  }
  // T_k past the limit (K with stride 0), with a by-value fused call.
  const Index tk = kTwo60;
  const SMap<T> q(one, 1, 1, DStride(1, 1)), k(one, tk, 1, DStride(0, 0)), v(one, tk, 1, DStride(0, 0));
  CHECK_REJECTS(ea::attention(q, k, v, ea::Options{}), tk);
}

TEST_CASE_TEMPLATE("size safety: a representable result too large for memory throws std::bad_alloc", T, float,
                   double) {
  if (EA_TEST_SANITIZED) {
    MESSAGE("skipped under a sanitizer: its allocator ends the program on a request of terabytes");
    return;
  }
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    // 2^29 x 2^29 elements: 2^61 bytes in double, 2^60 in float. Countable in Eigen::Index, but
    // beyond any virtual address space: the allocation fails whatever the overcommit policy,
    // and Q, K, V (over the guard page) are never read.
    const auto Q = huge<T>(kTwo29, 1), K = huge<T>(kTwo29, 1), V = huge<T>(kTwo29, 1);
    CHECK_BAD_ALLOC(ea::attention_decomposed(Q, K, V, opt));
    CHECK_BAD_ALLOC(ea::attention_scores(Q, K, opt));
    // A fused call's ATTN of 2^29 x 2^29 (Q 2^29 x 1, K 1 x 1, V 1 x 2^29).
    CHECK_BAD_ALLOC(ea::attention(Q, huge<T>(1, 1), huge<T>(1, kTwo29), opt));
    // The brief's 2^20 x 2^20 doubles (8 TiB, 4 TiB in float): refused unless the kernel
    // overcommits memory unconditionally (vm.overcommit_memory = 1), where malloc would
    // succeed and the call would go on to read the guard page.
    if (!overcommit_always()) {
      const auto Qm = huge<T>(kTwo20, 1), Km = huge<T>(kTwo20, 1), Vm = huge<T>(kTwo20, 1);
      CHECK_BAD_ALLOC(ea::attention_decomposed(Qm, Km, Vm, opt));
      CHECK_BAD_ALLOC(ea::attention_scores(Qm, Km, opt));
    }
  }
  // The tiled kernels' scratch for d_k = 2^40 (below the limit; Q and K of stride 0 over one
  // real element) is petabytes: std::bad_alloc from the first (calling) thread's workspace.
  const T one[1] = {T(1)};
  const SMap<T> q(one, 1, kTwo40, DStride(0, 0)), v(one, 1, 1, DStride(1, 1));
  for (const auto kernel : ea::available_kernels()) {
    if (kernel == ea::Kernel::Reference) continue;  // it would run a 2^40-term dot product
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    CHECK_BAD_ALLOC(ea::attention(q, q, v, opt));
    CHECK_BAD_ALLOC(ea::attention_decomposed(q, q, v, opt));
    // 256 query rows are two tasks: with two threads one fails on a pool thread, and its
    // exception is rethrown on the caller's.
    const SMap<T> q256(one, 256, kTwo40, DStride(0, 0));
    opt.threads = 2;
    CHECK_BAD_ALLOC(ea::attention(q256, q, v, opt));
    CHECK_BAD_ALLOC(ea::attention_decomposed(q256, q, v, opt));
  }
}

TEST_CASE_TEMPLATE("size safety: _into with an Eigen::Matrix output that would grow past Eigen::Index", T,
                   float, double) {
  // The front door resizes a resizable output before the compiled call sees it; Eigen's resize
  // refuses T_q x T_k = 2^64 with std::bad_alloc before allocating anything. Either that or
  // std::invalid_argument is acceptable; Q and K are never read.
  const auto Q = huge<T>(kTwo32, 8), K = huge<T>(kTwo32, 8), V = huge<T>(kTwo32, 8);
  RowMatrix<T> scores, attn(0, 0);
  const std::string what = outcome([&] { ea::attention_scores_into(Q, K, scores); });
  CAPTURE(what);
  CHECK((what == "bad_alloc" || starts_with(what, "invalid_argument: ")));
  const std::string what2 = outcome([&] { ea::attention_decomposed_into(Q, K, V, scores, attn); });
  CAPTURE(what2);
  CHECK((what2 == "bad_alloc" || starts_with(what2, "invalid_argument: ")));
  CHECK(scores.size() == 0);
  MESSAGE("attention_scores_into with a RowMatrix output, T_q = T_k = 2^32: " << what);
}

TEST_CASE("size safety: the fused calls never form T_q x T_k (T = 2^21 with a sliding window)") {
  // T_q x T_k floats would be 2^42 x 4 bytes = 16 TiB, far beyond any test machine: forming it
  // would throw std::bad_alloc (or, where memory is overcommitted, exhaust it). A window of 4
  // keeps the work O(T). Under a sanitizer (ten times slower) 2^18 (256 GiB) stands in.
  using T = float;
  const Index t = Index{1} << (EA_TEST_SANITIZED ? 18 : 21);
  Rng rng(77);
  RowMatrix<T> Q(t, 1), K(t, 1), V(t, 1);
  for (Index i = 0; i < t; ++i) {
    Q(i, 0) = static_cast<T>(rng.uniform());
    K(i, 0) = static_cast<T>(rng.uniform());
    V(i, 0) = static_cast<T>(rng.uniform());
  }
  ea::Options opt;
  opt.window_left = opt.window_right = 4;
  opt.threads = 2;
  // The exact answer of row i: keys [i - 4, i + 4].
  const auto expected = [&](Index i) {
    long double m = -INFINITY, l = 0, acc = 0;
    for (Index j = std::max<Index>(0, i - 4); j <= std::min(t - 1, i + 4); ++j)
      m = std::max(m, static_cast<long double>(Q(i, 0)) * K(j, 0));
    for (Index j = std::max<Index>(0, i - 4); j <= std::min(t - 1, i + 4); ++j) {
      const long double w = std::exp(static_cast<long double>(Q(i, 0)) * K(j, 0) - m);
      l += w;
      acc += w * V(j, 0);
    }
    return acc / l;
  };
  for (const auto kernel : ea::available_kernels()) {
    if (kernel == ea::Kernel::Reference) continue;  // documented to form T_q x T_k
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const RowMatrix<T> attn = ea::attention(Q, K, V, opt);
    REQUIRE(attn.rows() == t);
    const long double tol = attention_budget<T>(1, 1, 1, 9).attn;  // |logit| <= 1, 9 keys a row
    for (const Index i : {Index{0}, Index{3}, t / 2 + 1, t - 5, t - 1}) {
      CAPTURE(i);
      CHECK(near(attn(i, 0), expected(i), tol));
    }
  }
  // The multi-head call, on the same kernels.
  RowMatrix<T> heads_out(t, 1);
  opt.kernel = ea::Kernel::Auto;
  ea::attention_heads_into(ea::HeadsView<const T>::single(Q), ea::HeadsView<const T>::single(K),
                           ea::HeadsView<const T>::single(V), ea::HeadsView<T>::single(heads_out), opt);
  for (const Index i : {Index{0}, t / 2 + 1, t - 1}) {
    CAPTURE(i);
    CHECK(near(heads_out(i, 0), expected(i), attention_budget<T>(1, 1, 1, 9).attn));
  }
}

TEST_CASE_TEMPLATE("size safety: HeadsView shapes and strides past Eigen::Index are rejected unread", T,
                   float, double) {
  using C = const T;
  const Index n = kTwo20;
  // [2^20, 2^20, 2^20, 2^20] contiguous: 2^80 elements (the strides themselves would overflow;
  // they are set to 0 so that only the count is wrong).
  const auto q_huge = huge_heads<C>(n, n, n, n, 0, 0, 0, 0);
  const auto small = huge_heads<C>(1, 1, 4, 4, 16, 16, 4);
  auto out_small = huge_heads<T>(1, 1, 4, 4, 16, 16, 4);
  CHECK_REJECTS(ea::attention_heads_into(q_huge, q_huge, q_huge, huge_heads<T>(n, n, n, n, 0, 0, 0, 0)), n);
  // dim = 0 does not make the rest countable: B x H x T = 2^60 x 2^20 query rows.
  const auto q_rows = huge_heads<C>(kTwo60, n, 1, 0, 0, 0, 0, 0);
  CHECK_REJECTS(ea::attention_heads_into(q_rows, q_rows, q_rows, huge_heads<T>(kTwo60, n, 1, 0, 0, 0, 0, 0),
                                         [] {
                                           ea::Options o;
                                           o.scale = 1.0;
                                           return o;
                                         }()),
                kTwo60);
  // Countable shapes, strides spanning more than Eigen::Index: Q, K, V, out, lse, scores.
  const auto q_far = huge_heads<C>(1, 2, 4, 4, 0, kTwo60, 4);
  CHECK_REJECTS(
      ea::attention_heads_into(q_far, huge_heads<C>(1, 2, 4, 4, 0, 16, 4),
                               huge_heads<C>(1, 2, 4, 4, 0, 16, 4), huge_heads<T>(1, 2, 4, 4, 0, 16, 4)),
      kTwo60);
  CHECK_REJECTS(ea::attention_heads_into(small, small, small, huge_heads<T>(1, 1, 4, 4, 0, 0, kTwo60)),
                kTwo60);
  CHECK_REJECTS(
      ea::attention_heads_into(small, small, small, out_small, huge_heads<T>(1, 1, 4, 1, 0, 0, -kTwo60),
                               ea::Options{}, ea::Masks<T>{}),
      kTwo60);
  CHECK_REJECTS(ea::attention_heads_decomposed_into(small, small, small,
                                                    huge_heads<T>(1, 1, 4, 4, 0, 0, 4, kTwo60), out_small),
                kTwo60);
  // SCORES [1, 1, 2^32, 2^32] with countable Q and K of 2^32 tokens (stride 0 over the guard).
  const auto q_long = huge_heads<C>(1, 1, kTwo32, 8, 0, 0, 0);
  CHECK_REJECTS(
      ea::attention_heads_decomposed_into(
          q_long, q_long, q_long, huge_heads<T>(1, 1, kTwo32, kTwo32, 0, 0, 0, 0), ea::HeadsView<T>{}),
      kTwo32);
  // A mask or bias of the right shape with strides past Eigen::Index.
  ea::Masks<T> masks;
  masks.bias = {guard<T>(), 1, 1, 4, 4, 0, 0, kTwo60, 1};
  CHECK_REJECTS(ea::attention_heads_into(small, small, small, out_small, ea::Options{}, masks), kTwo60);
  masks = {};
  masks.mask = {guard<bool>(), 1, 1, 4, 4, 0, 0, 4, -kTwo60 * 4};
  CHECK_REJECTS(ea::attention_heads_into(small, small, small, out_small, ea::Options{}, masks), kTwo60 * 4);
  // key_lengths for 2^61 sequences (Q, K, V [2^61, 1, 1, 1] of batch stride 0): 2^64 bytes,
  // rejected before any length is read.
  const Index many = Index{1} << 61;
  masks = {};
  masks.key_lengths = guard<std::int64_t>();
  const auto q_many = huge_heads<C>(many, 1, 1, 1, 0, 0, 1);
  CHECK_REJECTS(ea::attention_heads_into(q_many, q_many, q_many, huge_heads<T>(many, 1, 1, 1, 0, 0, 1),
                                         ea::Options{}, masks),
                many);
  // merge_attention_into: the same checks.
  CHECK_REJECTS(
      ea::merge_attention_into(q_huge, q_huge, q_huge, q_huge, huge_heads<T>(n, n, n, n, 0, 0, 0, 0),
                               huge_heads<T>(n, n, n, 1, 0, 0, 0, 0)),
      n);
  CHECK_REJECTS(ea::merge_attention_into(
                    q_far, huge_heads<C>(1, 2, 4, 1, 0, 4, 1), q_far, huge_heads<C>(1, 2, 4, 1, 0, 4, 1),
                    huge_heads<T>(1, 2, 4, 4, 0, 16, 4), huge_heads<T>(1, 2, 4, 1, 0, 4, 1)),
                kTwo60);
}

TEST_CASE_TEMPLATE("size safety: packed varlen weights past Eigen::Index are rejected before allocating", T,
                   float, double) {
  using C = const T;
  // One sequence of 2^32 queries and 2^32 keys: T_q x T_k = 2^64 weights.
  const std::int64_t cu[2] = {0, std::int64_t{1} << 32};
  CHECK_REJECTS(ea::varlen_scores_size(cu, cu, 1, 1), kTwo32);
  // Two sequences each fine, their sum with 4 heads not: 2 x 4 x 2^30 x 2^30 = 2^63.
  const std::int64_t cu2[3] = {0, std::int64_t{1} << 30, std::int64_t{1} << 31};
  CHECK_REJECTS(ea::varlen_scores_size(cu2, cu2, 2, 4), Index{1} << 30);
  const auto q = huge_heads<C>(1, 4, Index{1} << 31, 8, 0, 0, 0);
  CHECK_REJECTS(ea::attention_varlen_decomposed_into(q, q, q, cu2, cu2, 2, guard<T>(), 0,
                                                     huge_heads<T>(1, 4, Index{1} << 31, 8, 0, 0, 0)),
                Index{1} << 30);
  // A batch whose batch + 1 offsets could not be counted: rejected before the offsets are
  // allocated or read (they are the guard page).
  const Index batch = std::numeric_limits<Index>::max();
  CHECK_REJECTS(ea::varlen_scores_size(guard<std::int64_t>(), guard<std::int64_t>(), batch, 1), batch);
  CHECK_REJECTS(ea::attention_varlen_into(q, q, q, guard<std::int64_t>(), guard<std::int64_t>(), batch,
                                          huge_heads<T>(1, 4, Index{1} << 31, 8, 0, 0, 0)),
                batch);
}

}  // namespace test_size_safety
