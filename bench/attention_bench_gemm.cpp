// SPDX-License-Identifier: MIT
// eigen_attention_bench: Eigen GEMM reference rates, the square GEMM and the attention-shaped
// products Q K^T and P V.
#include "attention_bench.hpp"

namespace ea_attention_bench {

// ---------------------------------------------------------------------------------------------
// GEMM reference rates

template <typename T>
double square_gemm(const Args& a, const char* type, Csv& csv) {
  const Idx n = a.gemm_n;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> A(n, n), B(n, n), C(n, n);
  A.setRandom();
  B.setRandom();
  const Timing t = measure(a.seconds, a.reps, [&] {
    eabench::gemm_square(A.data(), B.data(), C.data(), n);
    g_sink = g_sink + double(C(0, 0));
  });
  const double rate = gflops(2.0 * double(n) * double(n) * double(n), t);
  std::printf("  %-6s %ld^3 (%cgemm): %8.1f GFLOP/s   (%.3f s, median of %d x %d)\n", type,
              static_cast<long>(n), type[0] == 'f' ? 's' : 'd', rate, t.median, t.reps, t.inner);
  std::fflush(stdout);
  csv.add(std::string("gemm,") + type + ",square," + std::to_string(n) + "," + std::to_string(n) + "," +
          std::to_string(n) + "," + csv_num(t.median) + "," + csv_num(rate) + ",1");
  return rate;
}

template <typename T>
void shaped_gemms(const Args& a, const char* type, Idx d, double square, Csv& csv) {
  for (Idx t : a.ts) {
    if (t > a.naive_max_t) {
      print_row("  %-6s %4ld %6ld | %10s %8s | %10s %8s   (T > --naive-max-t)\n", type, long(d), long(t), "-",
                "-", "-", "-");
      continue;
    }
    Mat<T> q(t, d), k(t, d), v(t, d), o(t, d);
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
    double rate_qk, rate_pv;
    Timing tq, tp;
    {
      Mat<T> s(t, t);
      tq = measure(a.seconds, a.reps, [&] { eabench::gemm_qkt(q.data(), k.data(), s.data(), t, t, d); });
      rate_qk = gflops(2.0 * double(t) * double(t) * double(d), tq);
      s.setConstant(T(1) / T(t));  // a plausible P: the rows sum to 1
      tp = measure(a.seconds, a.reps, [&] { eabench::gemm_pv(s.data(), v.data(), o.data(), t, t, d); });
      rate_pv = gflops(2.0 * double(t) * double(t) * double(d), tp);
    }
    print_row("  %-6s %4ld %6ld | %10.1f %8.2f | %10.1f %8.2f\n", type, long(d), long(t), rate_qk,
              rate_qk / square, rate_pv, rate_pv / square);
    const std::string dims = std::to_string(t) + "," + std::to_string(t) + "," + std::to_string(d);
    csv.add(std::string("gemm,") + type + ",qkt," + dims + "," + csv_num(tq.median) + "," + csv_num(rate_qk) +
            "," + csv_num(rate_qk / square));
    csv.add(std::string("gemm,") + type + ",pv," + std::to_string(t) + "," + std::to_string(d) + "," +
            std::to_string(t) + "," + csv_num(tp.median) + "," + csv_num(rate_pv) + "," +
            csv_num(rate_pv / square));
  }
}

template double square_gemm<float>(const Args&, const char*, Csv&);
template double square_gemm<double>(const Args&, const char*, Csv&);
template void shaped_gemms<float>(const Args&, const char*, Idx, double, Csv&);
template void shaped_gemms<double>(const Args&, const char*, Idx, double, Csv&);

}  // namespace ea_attention_bench
