// SPDX-License-Identifier: MIT
// eigen_attention_programmable_bench: programmable attention (Masks::score_mod, mask_mod,
// block_mask; docs/programmable.md) against the built-in options that compute the same function,
// each pair timed alternately in one run (medians), forward and backward. See bench/README.md.
//
// Sections (float, [1, H, T, d] BHTD, each at every thread count asked):
//   causal     mask_mod k <= q with a block mask (128 x 128) against Options::causal (target >= 0.9)
//   documents  8 packed causal documents as a mask_mod on one sequence of T, with a block mask,
//              against attention_varlen_into on the same documents (target >= 0.9)
//   softcap    score_mod c math::tanh(s / c) (Math.hpp) against Options::softcap = c (target >= 0.9)
//   sparse     a block mask of 128 x 128 tiles at 10 % density (BlockMask::from_blocks, random
//              tiles, every query block keeps one) against the dense call (target >= 8x)
//   callable   the cost of a score_mod the compiler vectorises (s - slope (q - k)), of one it cannot
//              (the same through a function it may not inline) and of a soft-cap through std::tanh
//              (a call into the C library per logit), against no score_mod
// GFLOP/s count 4 T_q T_k d (forward) and 10 T_q T_k d (backward) over the visible pairs.
// The host's FMA peak (1 and 2 threads) is measured in the same run (fma_peak.cpp).
#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "fma_peak.hpp"
#include "harness.hpp"

namespace bench {
const char* const kProgram = "eigen_attention_programmable_bench";
const char* const kUsage =
    "[--sections causal,documents,softcap,sparse,callable] [--t 4096] [--heads 4] [--d 64]\n"
    "       [--threads 1,2] [--reps 5] [--seconds 0.5] [--kernel auto|avx512|...] [--no-backward] "
    "[--no-peak]";
}  // namespace bench

namespace {

using namespace bench;
using Idx = std::ptrdiff_t;

volatile double g_sink = 0;

struct Args {
  bool s_causal = true, s_documents = true, s_softcap = true, s_sparse = true, s_callable = true;
  Idx t = 4096, heads = 4, d = 64;
  std::vector<int> threads{1, 2};
  int reps = 5;
  double seconds = 0.5;
  ea::Kernel kernel = ea::Kernel::Auto;
  bool backward = true;
  bool peak = true;
};

/// Deterministic inputs in [-1, 1).
std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = static_cast<float>(static_cast<double>(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return v;
}

/// One [1, H, T, d] problem with its outputs and gradients.
struct Buffers {
  Idx H, T, d;
  std::vector<float> q, k, v, out, lse, d_out, dq, dk, dv;
  Buffers(Idx H_, Idx T_, Idx d_)
      : H(H_),
        T(T_),
        d(d_),
        q(random_vector(std::size_t(H_ * T_ * d_), 1)),
        k(random_vector(std::size_t(H_ * T_ * d_), 2)),
        v(random_vector(std::size_t(H_ * T_ * d_), 3)),
        out(std::size_t(H_ * T_ * d_)),
        lse(std::size_t(H_ * T_)),
        d_out(random_vector(std::size_t(H_ * T_ * d_), 4)),
        dq(out.size()),
        dk(out.size()),
        dv(out.size()) {}
  ea::HeadsView<const float> in(const std::vector<float>& x) const {
    return ea::HeadsView<const float>::bhtd(x.data(), 1, H, T, d);
  }
  ea::HeadsView<float> at(std::vector<float>& x) { return ea::HeadsView<float>::bhtd(x.data(), 1, H, T, d); }
  ea::HeadsView<float> lse_view() { return ea::HeadsView<float>::bhtd(lse.data(), 1, H, T, 1); }
  void forward(const ea::Options& opt, const ea::Masks<float>& masks) {
    ea::attention_heads_into(in(q), in(k), in(v), at(out), lse_view(), opt, masks);
    g_sink = g_sink + out[0];
  }
  /// The forward, then (backward) the backward on its results, with `terms`.
  void run(const ea::Options& opt, const ea::Masks<float>& masks, bool with_backward,
           const ea::BackwardTerms<float>& terms = {}) {
    forward(opt, masks);
    if (with_backward) backward(opt, masks, terms);
  }
  void backward(const ea::Options& opt, const ea::Masks<float>& masks,
                const ea::BackwardTerms<float>& terms) {
    ea::attention_heads_backward_into(in(q), in(k), in(v), in(out), lse_view(), in(d_out), at(dq), at(dk),
                                      at(dv), opt, masks, terms);
    g_sink = g_sink + dq[0];
  }
};

/// The largest |a - b| over two buffers.
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

int g_failures = 0;

/// One row: `what` at `threads`, the built-in call (a) against the programmed one (b), timed
/// alternately; their GFLOP/s over `pairs` visible pairs per head, the ratio (b's speed over a's),
/// the target, and the results' max |diff| (`diff`).
void report(const char* what, const char* pass, int threads, double pairs, double flops_per_pair, Idx H,
            Idx d, const std::pair<Timing, Timing>& t, double target, double diff) {
  const double fa = flops_per_pair * pairs * double(H) * double(d) / t.first.median / 1e9;
  const double fb = flops_per_pair * pairs * double(H) * double(d) / t.second.median / 1e9;
  const double ratio = t.first.median / t.second.median;
  const char* verdict = target <= 0 ? "-" : ratio >= target ? "met" : "MISS";
  std::printf("%-10s %-8s %3d | %9.2f %9.2f | %9.1f %9.1f | %7.2f %6.2f %-4s | %9.2e\n", what, pass, threads,
              t.first.median * 1e3, t.second.median * 1e3, fa, fb, ratio, target, verdict, diff);
  std::fflush(stdout);
}

double causal_pairs(Idx T) { return double(T) * double(T + 1) / 2; }

void header(const char* title) {
  std::printf("== %s\n", title);
  std::printf("%-10s %-8s %3s | %9s %9s | %9s %9s | %7s %6s %-4s | %9s\n", "case", "pass", "thr", "ms a",
              "ms b", "GFLOP/s a", "GFLOP/s b", "b/a", "target", "", "max|diff|");
}

/// Times a and b (forward, then backward) and reports them.
void pair_rows(const Args& a, const char* what, int threads, double pairs, double target,
               const std::function<void(Buffers&, bool)>& builtin,
               const std::function<void(Buffers&, bool)>& programmed, Buffers& x, Buffers& y) {
  for (const bool backward : {false, true}) {
    if (backward && !a.backward) continue;
    const auto t = measure_alternating(
        a.seconds, a.reps, [&] { builtin(x, backward); }, [&] { programmed(y, backward); });
    const double diff = backward ? max_diff(x.dq, y.dq) : max_diff(x.out, y.out);
    report(what, backward ? "backward" : "forward", threads, pairs, backward ? 10 : 4, x.H, x.d, t, target,
           diff);
  }
}

void causal_section(const Args& a) {
  header("causal: b = mask_mod k <= q + block_mask (128 x 128), a = Options::causal");
  Buffers x(a.heads, a.t, a.d), y(a.heads, a.t, a.d);
  const auto mm = ea::mask_mod([](auto, auto, auto q, auto k) { return k <= q; });
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, a.t, a.t);
  for (const int threads : a.threads) {
    ea::Options opt;
    opt.kernel = a.kernel, opt.threads = threads;
    ea::Options causal = opt;
    causal.causal = true;
    ea::Masks<float> masks;
    masks.mask_mod = mm;
    masks.block_mask = bm;
    pair_rows(
        a, "causal", threads, causal_pairs(a.t), 0.9, [&](Buffers& b, bool bw) { b.run(causal, {}, bw); },
        [&](Buffers& b, bool bw) { b.run(opt, masks, bw); }, x, y);
  }
}

void documents_section(const Args& a) {
  header("documents: b = 8 packed causal documents as mask_mod + block_mask, a = attention_varlen_into");
  // Eight documents of uneven lengths that fill T.
  std::vector<std::int64_t> cu{0};
  const double weights[8] = {1.0, 0.4, 1.7, 0.8, 1.2, 0.3, 1.5, 1.1};
  double sum = 0;
  for (double w : weights) sum += w;
  double acc = 0;
  for (int i = 0; i < 8; ++i) {
    acc += weights[i];
    cu.push_back(i == 7 ? a.t : static_cast<std::int64_t>(std::llround(acc / sum * double(a.t))));
  }
  std::vector<std::int32_t> doc(static_cast<std::size_t>(a.t));
  double pairs = 0;
  for (int i = 0; i < 8; ++i) {
    for (std::int64_t p = cu[i]; p < cu[i + 1]; ++p) doc[static_cast<std::size_t>(p)] = i;
    pairs += causal_pairs(cu[i + 1] - cu[i]);
  }
  // (& rather than &&: both sides are cheap, and without a branch the loop vectorises.)
  const auto mm = ea::mask_mod([&](auto, auto, auto q, auto k) {
    return (k <= q) & (doc[static_cast<std::size_t>(q)] == doc[static_cast<std::size_t>(k)]);
  });
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, a.t, a.t);
  Buffers x(a.heads, a.t, a.d), y(a.heads, a.t, a.d);
  for (const int threads : a.threads) {
    ea::Options opt;
    opt.kernel = a.kernel, opt.threads = threads;
    ea::Options causal = opt;
    causal.causal = true;
    ea::Masks<float> masks;
    masks.mask_mod = mm;
    masks.block_mask = bm;
    const auto varlen = [&](Buffers& b, bool backward) {
      ea::attention_varlen_into(b.in(b.q), b.in(b.k), b.in(b.v), cu.data(), cu.data(), 8, b.at(b.out),
                                b.lse_view(), causal);
      if (backward)
        ea::attention_varlen_backward_into(b.in(b.q), b.in(b.k), b.in(b.v), b.in(b.out), b.lse_view(),
                                           b.in(b.d_out), cu.data(), cu.data(), 8, b.at(b.dq), b.at(b.dk),
                                           b.at(b.dv), causal);
      g_sink = g_sink + b.out[0];
    };
    const auto programmed = [&](Buffers& b, bool backward) { b.run(opt, masks, backward); };
    pair_rows(a, "documents", threads, pairs, 0.9, varlen, programmed, x, y);
  }
}

void softcap_section(const Args& a) {
  header("softcap: b = score_mod 30 math::tanh(s / 30), a = Options::softcap = 30 (both causal)");
  Buffers x(a.heads, a.t, a.d), y(a.heads, a.t, a.d);
  const auto sm =
      ea::score_mod([](auto s, auto, auto, auto, auto) { return 30.0f * ea::math::tanh(s / 30.0f); });
  for (const int threads : a.threads) {
    ea::Options opt;
    opt.kernel = a.kernel, opt.threads = threads, opt.causal = true;
    ea::Options capped = opt;
    capped.softcap = 30;
    ea::Masks<float> masks;
    masks.score_mod = sm;
    pair_rows(
        a, "softcap", threads, causal_pairs(a.t), 0.9, [&](Buffers& b, bool bw) { b.run(capped, {}, bw); },
        [&](Buffers& b, bool bw) { b.run(opt, masks, bw); }, x, y);
  }
}

void sparse_section(const Args& a) {
  header("sparse: b = block mask of 128 x 128 tiles at 10 % density (from_blocks), a = the dense call");
  const Idx n = (a.t + 127) / 128;
  std::vector<std::int64_t> offsets{0}, columns;
  std::uint64_t s = 0x2545F4914F6CDD1Dull;
  for (Idx rb = 0; rb < n; ++rb) {
    std::vector<std::int64_t> row;
    for (Idx cb = 0; cb < n; ++cb) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      if ((s >> 11) % 10 == 0) row.push_back(cb);
    }
    if (row.empty()) row.push_back(rb);  // every query block sees something
    columns.insert(columns.end(), row.begin(), row.end());
    offsets.push_back(static_cast<std::int64_t>(columns.size()));
  }
  const ea::BlockMask bm = ea::BlockMask::from_blocks(1, 1, a.t, a.t, 128, 128, offsets, columns);
  std::printf("   density %.3f (%zu of %ld tiles)\n", bm.density(), columns.size(), long(n * n));
  Buffers x(a.heads, a.t, a.d), y(a.heads, a.t, a.d);
  for (const int threads : a.threads) {
    ea::Options opt;
    opt.kernel = a.kernel, opt.threads = threads;
    ea::Masks<float> masks;
    masks.block_mask = bm;
    // (The results differ: the ratio is of times; GFLOP/s count each call's own visible pairs.)
    for (const bool backward : {false, true}) {
      if (backward && !a.backward) continue;
      const auto t = measure_alternating(
          a.seconds, a.reps, [&] { x.run(opt, {}, backward); }, [&] { y.run(opt, masks, backward); });
      const double dense = double(a.t) * double(a.t), sparse = double(columns.size()) * 128 * 128;
      const double f = backward ? 10 : 4;
      std::printf("%-10s %-8s %3d | %9.2f %9.2f | %9.1f %9.1f | %7.2f %6.2f %-4s | %9s\n", "sparse",
                  backward ? "backward" : "forward", threads, t.first.median * 1e3, t.second.median * 1e3,
                  f * dense * double(a.heads * a.d) / t.first.median / 1e9,
                  f * sparse * double(a.heads * a.d) / t.second.median / 1e9,
                  t.first.median / t.second.median, 8.0,
                  t.first.median / t.second.median >= 8 ? "met" : "MISS", "-");
      std::fflush(stdout);
    }
  }
}

/// A score modification the compiler may not inline into the tile loop: one call per logit.
[[gnu::noinline]] float opaque_bias(float s, std::ptrdiff_t q, std::ptrdiff_t k) {
  return s - 0.01f * static_cast<float>(q - k);
}

void callable_section(const Args& a) {
  header(
      "callable: b = with a score_mod (logit_grad: with a gradient callback), a = without (causal); the "
      "cost of the callable (b/a; no target)");
  Buffers x(a.heads, a.t, a.d), y(a.heads, a.t, a.d);
  const auto inlined = ea::score_mod([](auto s, auto, auto, auto q, auto k) { return s - 0.01f * (q - k); });
  const auto opaque = ea::score_mod([](auto s, auto, auto, auto q, auto k) {
    if constexpr (std::is_same_v<decltype(s), float>) {
      return opaque_bias(s, q, k);
    } else {
      return s - 0.01f * (q - k);
    }
  });
  // A soft-cap through the C library's tanh, one call per logit.
  const auto libm = ea::score_mod([](auto s, auto, auto, auto, auto) {
    using std::tanh;
    return 30.0f * tanh(s / 30.0f);
  });
  for (const int threads : a.threads) {
    ea::Options opt;
    opt.kernel = a.kernel, opt.threads = threads, opt.causal = true;
    ea::Masks<float> with_inlined, with_opaque, with_libm;
    with_inlined.score_mod = inlined;
    with_opaque.score_mod = opaque;
    with_libm.score_mod = libm;
    for (const bool backward : {false, true}) {
      if (backward && !a.backward) continue;
      const auto run = [&](Buffers& b, const ea::Masks<float>& m) { b.run(opt, m, backward); };
      for (const auto& [name, m] :
           {std::pair<const char*, const ea::Masks<float>*>{"vectorised", &with_inlined},
            std::pair<const char*, const ea::Masks<float>*>{"opaque", &with_opaque},
            std::pair<const char*, const ea::Masks<float>*>{"std::tanh", &with_libm}}) {
        const auto t = measure_alternating(
            a.seconds, a.reps, [&] { run(x, {}); }, [&] { run(y, *m); });
        report(name, backward ? "backward" : "forward", threads, causal_pairs(a.t), backward ? 10 : 4,
               a.heads, a.d, t, 0, 0);
      }
    }
    // The gradient callback (BackwardTerms::logit_grad) accumulating a relative-position table's
    // gradient, against the same backward without it.
    if (a.backward) {
      std::vector<double> table(static_cast<std::size_t>(2 * a.t - 1), 0.0);
      const auto lg = ea::logit_grad([&](float g, auto, auto, auto q, auto k) {
        table[static_cast<std::size_t>(q - k + a.t - 1)] += g;
      });
      ea::BackwardTerms<float> terms;
      terms.logit_grad = lg;
      const auto t = measure_alternating(
          a.seconds, a.reps, [&] { x.run(opt, {}, true); }, [&] { y.run(opt, {}, true, terms); });
      report("logit_grad", "backward", threads, causal_pairs(a.t), 10, a.heads, a.d, t, 0, 0);
      g_sink = g_sink + static_cast<float>(table[static_cast<std::size_t>(a.t - 1)]);
    }
  }
}

Args parse(int argc, char** argv) {
  Args a;
  ArgReader r(argc, argv);
  while (r.next()) {
    const std::string& n = r.name();
    if (n == "--sections") {
      a.s_causal = a.s_documents = a.s_softcap = a.s_sparse = a.s_callable = false;
      for (const std::string& s : split(r.value())) {
        if (s == "causal")
          a.s_causal = true;
        else if (s == "documents")
          a.s_documents = true;
        else if (s == "softcap")
          a.s_softcap = true;
        else if (s == "sparse")
          a.s_sparse = true;
        else if (s == "callable")
          a.s_callable = true;
        else
          usage_error("unknown section '" + s + "'");
      }
    } else if (n == "--t") {
      a.t = parse_int(r.value(), "--t");
    } else if (n == "--heads") {
      a.heads = parse_int(r.value(), "--heads");
    } else if (n == "--d") {
      a.d = parse_int(r.value(), "--d");
    } else if (n == "--threads") {
      a.threads = parse_ints<int>(r.value(), "--threads", 1, 256);
    } else if (n == "--reps") {
      a.reps = parse_reps(r.value());
    } else if (n == "--seconds") {
      a.seconds = parse_seconds(r.value());
    } else if (n == "--kernel") {
      a.kernel = parse_kernel(r.value());
    } else if (n == "--no-backward") {
      a.backward = false;
    } else if (n == "--no-peak") {
      a.peak = false;
    } else {
      usage_error("unknown option '" + n + "'");
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  print_machine_common("eigen_attention_programmable_bench", {a.kernel});
  std::printf("  shape     float, [1, H = %ld, T = %ld, d = %ld], medians of %d alternating samples\n",
              long(a.heads), long(a.t), long(a.d), a.reps);
  for (const int threads : a.threads) {
    if (!a.peak) break;
    const eabench::FmaPeak peak = eabench::measure_fma_peak(threads, 0.5);
    std::printf("  peak      %s, %d thread(s): %.1f GFLOP/s float\n", eabench::fma_unit().c_str(), threads,
                peak.float_gflops);
  }
  std::printf("\n");
  if (a.s_causal) causal_section(a);
  if (a.s_documents) documents_section(a);
  if (a.s_softcap) softcap_section(a);
  if (a.s_sparse) sparse_section(a);
  if (a.s_callable) callable_section(a);
  return g_failures == 0 ? 0 : 1;
}
