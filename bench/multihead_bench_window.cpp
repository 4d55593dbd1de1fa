// SPDX-License-Identifier: MIT
// eigen_attention_multihead_bench, section 2: a sliding window against full causal attention.
#include "multihead_bench.hpp"

namespace ea_multihead_bench {

// ---------------------------------------------------------------------------------------------
// Section 2: sliding window and chunks against full causal

template <typename T>
void window_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  const Idx t = a.window_t, H = a.window_h, d = a.window_d;
  const std::vector<T> q = make_heads<T>(H, t, d, 1), k = make_heads<T>(H, t, d, 2),
                       v = make_heads<T>(H, t, d, 3);
  std::vector<T> o(q.size(), T(0));
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, H, t, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, H, t, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, H, t, d);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), 1, H, t, d);
  const ea::HeadsView<const T> Oc = O;
  for (int threads : a.threads) {
    double time_of[3] = {kNaN, kNaN, kNaN}, pairs_of[3] = {kNaN, kNaN, kNaN};
    for (int w = 0; w < (a.chunk > 0 ? 3 : 2); ++w) {
      ea::Options opt;
      opt.causal = true;
      opt.kernel = kernel;
      opt.threads = threads;
      if (w == 1) {
        opt.window_left = static_cast<std::ptrdiff_t>(a.window);
        opt.window_right = 0;
      }
      if (w == 2) opt.chunk_size = static_cast<std::ptrdiff_t>(a.chunk);
      const Timing tm = time_heads<T>(a, Q, K, V, O, opt);
      const double pairs = computed_pairs(t, t, opt);
      // Head 0 against the single-head call with the same options, sampled rows against exact.
      Mat<T> o1(t, d);
      ea::attention_into(ConstMap<T>(q.data(), t, d), ConstMap<T>(k.data(), t, d),
                         ConstMap<T>(v.data(), t, d), o1, opt);
      const double ref = rows_diff<T>(Oc, 0, 0, 0, ea::HeadsView<const T>::single(o1), 0, 0, 0, t);
      const double exact = exact_first_last_heads<T>(Q, K, V, Oc, opt);
      char call[64];
      if (w == 0)
        std::snprintf(call, sizeof call, "causal");
      else if (w == 1)
        std::snprintf(call, sizeof call, "window %ld,0", long(a.window));
      else
        std::snprintf(call, sizeof call, "chunk %ld", long(a.chunk));
      std::printf("%-6s %3d %6ld %4ld %4ld %-13s | %12.0f %10.2f %9.1f | %9s %9s\n", type, threads, long(t),
                  long(H), long(d), call, pairs, tm.median * 1e3, gflops(pairs, d, H, tm.median),
                  check_cell(ref, ref_tolerance<T>(), checks).c_str(),
                  check_cell(exact, exact_tolerance<T>(), checks).c_str());
      std::fflush(stdout);
      time_of[w] = tm.median;
      pairs_of[w] = pairs;
    }
    const double time_ratio = time_of[1] / time_of[0], pair_ratio = pairs_of[1] / pairs_of[0];
    std::printf(
        "%-6s %3d   window/causal: time ratio %.4f, computed-pairs ratio %.4f (~2W/T = %.4f); "
        "time ratio / pairs ratio = %.2f\n",
        type, threads, time_ratio, pair_ratio, 2.0 * double(a.window) / double(t), time_ratio / pair_ratio);
    if (a.chunk > 0) {
      // The chunked call's time against full causal's rate over its own pairs (goal <= 1.1).
      const double chunk_time = time_of[2] / time_of[0], chunk_pairs = pairs_of[2] / pairs_of[0];
      std::printf(
          "%-6s %3d   chunk/causal: time ratio %.4f, computed-pairs ratio %.4f; time ratio / pairs ratio = "
          "%.2f (goal <= 1.10)\n",
          type, threads, chunk_time, chunk_pairs, chunk_time / chunk_pairs);
    }
    std::fflush(stdout);
  }
}

template void window_section<float>(const Args&, const char*, ea::Kernel, Checks&);
template void window_section<double>(const Args&, const char*, ea::Kernel, Checks&);

}  // namespace ea_multihead_bench
