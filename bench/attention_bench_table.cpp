// SPDX-License-Identifier: MIT
// eigen_attention_bench: the attention table, every (d, causal, kernel, threads, T) of one scalar
// type: fused, dec-into, dec-value and naive.
#include "attention_bench.hpp"

namespace ea_attention_bench {

// ---------------------------------------------------------------------------------------------
// The attention table

struct NaiveEntry {
  Timing timing;
  std::vector<double> out;  // O of the naive path, for the check
};

template <typename T>
std::map<std::tuple<Idx, Idx, bool>, NaiveEntry>& naive_cache() {
  static std::map<std::tuple<Idx, Idx, bool>, NaiveEntry> cache;
  return cache;
}

void print_attention_header() {
  std::printf("%-6s %4s %3s %-9s %3s %6s | %9s %9s %9s %9s %9s | %7s %7s %7s %7s %7s %7s | %8s\n", "type",
              "d", "cau", "kernel", "thr", "T", "fused ms", "fused", "dec-into", "dec-value", "naive",
              "fus/pk", "into/pk", "fus/nai", "fus/gem", "into/fu", "val/nai", "max|diff|");
  std::printf("%-6s %4s %3s %-9s %3s %6s | %9s %9s %9s %9s %9s | %7s %7s %7s %7s %7s %7s | %8s\n", "", "", "",
              "", "", "", "", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s", "", "", "", "", "", "", "");
  std::fflush(stdout);
}

// One row; returns false when a result check failed.
template <typename T>
bool attention_row(const Args& a, const char* type, Idx d, bool causal, ea::Kernel kernel, int threads, Idx t,
                   const Yardsticks& y, Csv& csv) {
  const Inputs<T> in(t, d);
  ea::Options opt;
  opt.causal = causal;
  opt.kernel = kernel;
  opt.threads = threads;
  const double flops = attention_flops(t, d, causal);

  Mat<T> out(t, d);
  out.setZero();
  Timing fused, into, value;
  if (a.m_fused) fused = measure(a.seconds, a.reps, [&] { ea::attention_into(in.q, in.k, in.v, out, opt); });
  Mat<T> dec_attn;
  if (a.m_into) {
    Mat<T> scores(t, t);
    dec_attn.resize(t, d);
    into = measure(a.seconds, a.reps,
                   [&] { ea::attention_decomposed_into(in.q, in.k, in.v, scores, dec_attn, opt); });
  }
  if (a.m_value) {
    value = measure(a.seconds, a.reps, [&] {
      ea::DecomposedResult<T> r = ea::attention_decomposed(in.q, in.k, in.v, opt);
      g_sink = g_sink + double(r.attn(0, 0));
    });
  }

  // The naive path runs single-threaded whatever `threads` says and does not depend on the
  // kernel: measured once per (d, causal, T) and scalar type.
  const NaiveEntry* naive = nullptr;
  if (a.m_naive && t <= a.naive_max_t) {
    auto& cache = naive_cache<T>();
    const auto key = std::make_tuple(d, t, causal);
    auto it = cache.find(key);
    if (it == cache.end()) {
      Mat<T> o(t, d);
      const T scale = T(1) / std::sqrt(T(d));
      NaiveEntry e;
      e.timing = measure(a.seconds, a.reps, [&] {
        eabench::naive_attention(in.q.data(), in.k.data(), in.v.data(), t, t, d, d, causal, scale, o.data(),
                                 a.naive_variant);
      });
      e.out.assign(o.data(), o.data() + o.size());
      it = cache.emplace(key, std::move(e)).first;
    }
    naive = &it->second;
  }

  // The check: fused (or, without it, dec-into) against naive (or, without it, dec-into).
  double diff = kNaN;
  const Mat<T>* ours = a.m_fused ? &out : (a.m_into ? &dec_attn : nullptr);
  if (ours != nullptr && naive != nullptr) {
    Mat<T> o(t, d);
    for (Idx i = 0; i < o.size(); ++i) o.data()[i] = T(naive->out[static_cast<std::size_t>(i)]);
    diff = max_abs_diff(*ours, o);
  } else if (a.m_fused && a.m_into) {
    diff = max_abs_diff(out, dec_attn);
  }
  const double g_fused = a.m_fused ? gflops(flops, fused) : kNaN;
  const double g_into = a.m_into ? gflops(flops, into) : kNaN;
  const double g_value = a.m_value ? gflops(flops, value) : kNaN;
  const double g_naive = naive ? gflops(flops, naive->timing) : kNaN;
  const double peak = y.peak_at(threads);
  const double r_fn = g_fused / g_naive, r_fg = g_fused / y.gemm, r_if = g_into / g_fused,
               r_vn = g_value / g_naive, r_fp = g_fused / peak, r_ip = g_into / peak;
  print_row("%-6s %4ld %3d %-9s %3d %6ld | %9s %9s %9s %9s %9s | %7s %7s %7s %7s %7s %7s | %8s%s\n", type,
            long(d), int(causal), resolved_name(kernel), threads, long(t), fmt(fused.median * 1e3, 2).c_str(),
            fmt(g_fused).c_str(), fmt(g_into).c_str(), fmt(g_value).c_str(), fmt(g_naive).c_str(),
            fmt(r_fp, 2).c_str(), fmt(r_ip, 2).c_str(), fmt(r_fn, 2).c_str(), fmt(r_fg, 2).c_str(),
            fmt(r_if, 2).c_str(), fmt(r_vn, 2).c_str(), fmt_e(diff).c_str(),
            (diff > tolerance<T>()) ? " !" : "");
  std::ostringstream line;
  line << "attn," << type << ',' << d << ',' << int(causal) << ',' << resolved_name(kernel) << ',' << threads
       << ',' << t << ',' << csv_num(fused.median) << ',' << csv_num(g_fused) << ',' << csv_num(into.median)
       << ',' << csv_num(g_into) << ',' << csv_num(value.median) << ',' << csv_num(g_value) << ','
       << csv_num(naive ? naive->timing.median : kNaN) << ',' << csv_num(g_naive) << ',' << csv_num(y.gemm)
       << ',' << csv_num(r_fn) << ',' << csv_num(r_fg) << ',' << csv_num(r_if) << ',' << csv_num(r_vn) << ','
       << csv_num(diff) << ',' << fused.reps << ',' << fused.inner << ',' << csv_num(peak) << ','
       << csv_num(r_fp) << ',' << csv_num(r_ip);
  csv.add(line.str());
  return !(diff > tolerance<T>());
}

template <typename T>
bool attention_table(const Args& a, const char* type, const std::vector<ea::Kernel>& kernels,
                     const Yardsticks& y, Csv& csv) {
  bool ok = true;
  for (Idx d : a.ds) {
    for (int c : a.causal) {
      std::printf("\n");
      print_attention_header();
      for (ea::Kernel k : kernels) {
        for (int thr : a.threads) {
          for (Idx t : a.ts) ok = attention_row<T>(a, type, d, c != 0, k, thr, t, y, csv) && ok;
        }
      }
    }
    naive_cache<T>().clear();
  }
  return ok;
}

template bool attention_table<float>(const Args&, const char*, const std::vector<ea::Kernel>&,
                                     const Yardsticks&, Csv&);
template bool attention_table<double>(const Args&, const char*, const std::vector<ea::Kernel>&,
                                      const Yardsticks&, Csv&);

}  // namespace ea_attention_bench
