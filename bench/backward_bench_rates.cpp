// SPDX-License-Identifier: MIT
// eigen_attention_backward_bench: the rates table. For every (d, causal, T) of one scalar type,
// and every thread count, the fused forward with LSE and the backward; once per (d, causal, T)
// the naive backward (single-threaded), whose gradients check ours.
#include "backward_bench.hpp"

namespace ea_backward_bench {

namespace {

void print_rates_header() {
  std::printf("%-6s %4s %3s %3s %6s | %8s %8s | %8s %8s | %7s %6s %6s | %8s %7s %7s | %9s\n", "type", "d",
              "cau", "thr", "T", "fwd ms", "fwd", "bwd ms", "bwd", "bwd/fwd", "bwd x", "fwd x", "naive",
              "bwd/nai", "bwd/gem", "grad diff");
  std::printf("%-6s %4s %3s %3s %6s | %8s %8s | %8s %8s | %7s %6s %6s | %8s %7s %7s | %9s\n", "", "", "", "",
              "", "", "GFLOP/s", "", "GFLOP/s", "", "", "", "GFLOP/s", "", "", "(rel)");
  std::fflush(stdout);
}

template <typename T>
double rel_diff(const Mat<T>& ours, const Mat<T>& ref) {
  const double scale = static_cast<double>(ref.cwiseAbs().maxCoeff());
  const double diff = static_cast<double>((ours - ref).cwiseAbs().maxCoeff());
  return scale > 0 ? diff / scale : diff;
}

template <typename T>
struct Grads {
  Mat<T> dq, dk, dv;
  Grads(Idx t, Idx d) : dq(t, d), dk(t, d), dv(t, d) {
    dq.setZero();
    dk.setZero();
    dv.setZero();
  }
  bool operator==(const Grads& o) const { return dq == o.dq && dk == o.dk && dv == o.dv; }
};

// The rows of one (d, causal, T), one per thread count.
template <typename T>
bool rates_group(const Args& a, const char* type, Idx d, bool causal, Idx t, double gemm_rate,
                 std::vector<RateRow>& rows) {
  const Inputs<T> in(t, d);
  Mat<T> dout(t, d);
  fill(dout, 4);
  ea::Options base;
  base.causal = causal;
  base.kernel = bench::parse_kernel(a.kernel);
  // The forward's ATTN and LSE, the backward's inputs (the same for every thread count).
  Mat<T> out(t, d);
  Vec<T> lse(t);
  ea::attention_into(in.q, in.k, in.v, out, lse, base);

  // The naive backward: single-threaded, measured once.
  double naive_rate = kNaN;
  Grads<T> naive(t, d);
  const bool with_naive = t <= a.naive_max_t;
  if (with_naive) {
    const T scale = T(1) / std::sqrt(T(d));
    const Timing tn = measure(a.seconds, a.reps, [&] {
      eabench::naive_attention_backward(in.q.data(), in.k.data(), in.v.data(), dout.data(), t, t, d, d,
                                        causal, scale, naive.dq.data(), naive.dk.data(), naive.dv.data());
    });
    naive_rate = gflops(backward_flops(t, d, causal), tn);
  }

  bool ok = true;
  Grads<T> first(t, d);
  double one_bwd = kNaN, one_fwd = kNaN;  // the 1-thread rates, for the speed-ups
  const std::size_t group_start = rows.size();
  for (std::size_t i = 0; i < a.threads.size(); ++i) {
    ea::Options opt = base;
    opt.threads = a.threads[i];
    Mat<T> out_t(t, d);
    Vec<T> lse_t(t);
    const Timing tf =
        measure(a.seconds, a.reps, [&] { ea::attention_into(in.q, in.k, in.v, out_t, lse_t, opt); });
    Grads<T> g(t, d);
    const Timing tb = measure(a.seconds, a.reps, [&] {
      ea::attention_backward_into(in.q, in.k, in.v, out, lse, dout, g.dq, g.dk, g.dv, opt);
    });

    RateRow r;
    r.type = type;
    r.d = d;
    r.t = t;
    r.causal = causal;
    r.threads = opt.threads;
    r.fwd_s = tf.median;
    r.bwd_s = tb.median;
    r.fwd_gflops = gflops(forward_flops(t, d, causal), tf);
    r.bwd_gflops = gflops(backward_flops(t, d, causal), tb);
    r.naive_gflops = naive_rate;
    r.bwd_over_fwd = r.bwd_gflops / r.fwd_gflops;
    if (with_naive)
      r.rel_diff = std::max({rel_diff(g.dq, naive.dq), rel_diff(g.dk, naive.dk), rel_diff(g.dv, naive.dv)});
    if (i == 0) {
      first = g;
    } else {
      r.same_as_first_threads = g == first;
    }
    if (r.threads == 1) {
      one_bwd = r.bwd_gflops;
      one_fwd = r.fwd_gflops;
    } else {
      r.bwd_speedup = r.bwd_gflops / one_bwd;
      r.fwd_speedup = r.fwd_gflops / one_fwd;
    }
    const bool bad_diff = !(r.rel_diff <= tolerance<T>()) && with_naive;
    ok = ok && !bad_diff && r.same_as_first_threads;
    const bool miss_ratio = r.threads == 1 && r.bwd_over_fwd < kTargetBackwardOverForward;
    const bool miss_speedup = r.threads == 2 && r.bwd_speedup < kTargetSpeedup;
    print_row("%-6s %4ld %3d %3d %6ld | %8s %8s | %8s %8s | %6s%s %5s%s %6s | %8s %7s %7s | %9s%s%s\n", type,
              long(d), int(causal), r.threads, long(t), fmt(r.fwd_s * 1e3, 2).c_str(),
              fmt(r.fwd_gflops).c_str(), fmt(r.bwd_s * 1e3, 2).c_str(), fmt(r.bwd_gflops).c_str(),
              fmt(r.bwd_over_fwd, 2).c_str(), miss_ratio ? "*" : " ", fmt(r.bwd_speedup, 2).c_str(),
              miss_speedup ? "*" : " ", fmt(r.fwd_speedup, 2).c_str(), fmt(naive_rate).c_str(),
              fmt(r.bwd_gflops / naive_rate, 2).c_str(), fmt(r.bwd_gflops / gemm_rate, 2).c_str(),
              ea_attention_bench::fmt_e(r.rel_diff).c_str(), bad_diff ? " !" : "",
              r.same_as_first_threads ? "" : " (differs from the first thread count) !");
    rows.push_back(r);
  }
  // For the summary: the speed-ups of rows measured before the 1-thread one (--threads 2,1).
  for (std::size_t i = group_start; i < rows.size(); ++i) {
    if (rows[i].threads == 1) continue;
    rows[i].bwd_speedup = rows[i].bwd_gflops / one_bwd;
    rows[i].fwd_speedup = rows[i].fwd_gflops / one_fwd;
  }
  return ok;
}

}  // namespace

template <typename T>
bool rates_table(const Args& a, const char* type, double gemm_rate, std::vector<RateRow>& rows) {
  bool ok = true;
  for (Idx t : a.ts) {
    std::printf("\n");
    print_rates_header();
    for (Idx d : a.ds) {
      for (int c : a.causal) ok = rates_group<T>(a, type, d, c != 0, t, gemm_rate, rows) && ok;
    }
  }
  return ok;
}

template bool rates_table<float>(const Args&, const char*, double, std::vector<RateRow>&);
template bool rates_table<double>(const Args&, const char*, double, std::vector<RateRow>&);

}  // namespace ea_backward_bench
