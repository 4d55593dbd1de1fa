// SPDX-License-Identifier: MIT
// eigen_attention_low_precision_bench: the prefill table. Chunked prefill over a paged KV cache:
// T_q new tokens (16 and 64) of one sequence attend to its T_k = 4096 cached keys (H = 32,
// H_kv = 8, d = 128, pages of 16 tokens, causal), attention_decode on a float cache and on a
// bfloat16 cache of the same values, float queries, timed alternately, per thread count and kernel.
// These many query rows take decode's GEMM path, which on avx512bf16 multiplies bf16 pairs for a
// bf16 cache. FLOPs 4 H T_q T_k d (the causal corner of T_q x T_q left out of nothing: T_k >>
// T_q). Checked: the bf16 output within 2^-6 max |out| of the float cache's (a sanity check; the
// tests hold each element to its bound).
#include "low_precision_bench.hpp"

namespace ea_low_precision_bench {

bool prefill_table(const Args& a) {
  const Idx H = 32, Hkv = 8, d = 128, page = 16, tk = a.smoke ? 256 : 4096;
  const std::vector<Idx> tqs = a.smoke ? std::vector<Idx>{16} : std::vector<Idx>{16, 64};
  std::printf(
      "prefill: attention_decode(cache, sequence, Q, opt) of T_q new tokens over T_k = %ld cached keys, H = "
      "%ld,\n"
      "H_kv = %ld, d = %ld, pages of %ld, causal; a float cache and a bfloat16 cache of the same values, "
      "float\n"
      "queries; GFLOP/s = 4 H T_q T_k d / time; /float = bf16 GFLOP/s over float GFLOP/s, same row;\n"
      "checks: 'ok' = the bf16 output within 2^-6 max |out| of the float cache's\n\n",
      long(tk), long(H), long(Hkv), long(d), long(page));
  std::printf("%6s %4s %3s %-16s | %9s %8s | %9s %8s %6s | %s\n", "T_q", "d", "thr", "kernel", "float ms",
              "GFLOP/s", "bf16 ms", "GFLOP/s", "/float", "checks");
  Mat<float> k(tk, Hkv * d), v(tk, Hkv * d);
  fill(k, 11);
  fill(v, 12);
  ea::PagedKVCache<float> wide(Hkv, d, d, page, tk + page);
  ea::PagedKVCache<bf16> narrow(Hkv, d, d, page, tk + page);
  const ea::SequenceId fs = wide.create(), bs = narrow.create();
  // The same values in both: the float cache holds the bf16 values widened.
  const Mat<float> kb = k.cast<bf16>().cast<float>(), vb = v.cast<bf16>().cast<float>();
  wide.append(fs, kb, vb);
  narrow.append(bs, kb, vb);
  bool ok = true;
  for (Idx tq : tqs) {
    Mat<float> q(tq, H * d);
    fill(q, 13);
    for (int threads : a.threads) {
      for (ea::Kernel kernel : kernels_to_run(a.kernel)) {
        ea::Options opt;
        opt.causal = true;
        opt.kernel = kernel;
        opt.threads = threads;
        Mat<float> out_f(tq, H * d), out_b(tq, H * d);
        // Side by side (float, bf16, float, ...), as the backward section.
        const auto [tf, tb] = bench::measure_alternating(
            a.seconds, a.reps, [&] { out_f = ea::attention_decode(wide, fs, q, opt); },
            [&] { out_b = ea::attention_decode(narrow, bs, q, opt); });
        const double float_s = tf.median, bf16_s = tb.median;
        const bool good = (out_b - out_f).cwiseAbs().maxCoeff() <= 0x1p-6f * out_f.cwiseAbs().maxCoeff();
        ok = ok && good;
        const double f = 4.0 * double(H) * double(tq) * double(tk) * double(d);
        const std::string label = kernel == ea::Kernel::Auto ? std::string("auto=") + resolved_name(kernel)
                                                             : ea::kernel_name(kernel);
        std::printf("%6ld %4ld %3d %-16s | %9s %8s | %9s %8s %6s | %s\n", long(tq), long(d), threads,
                    label.c_str(), fmt(float_s * 1e3, 2).c_str(), fmt(f / float_s / 1e9).c_str(),
                    fmt(bf16_s * 1e3, 2).c_str(), fmt(f / bf16_s / 1e9).c_str(),
                    fmt(float_s / bf16_s, 2).c_str(), good ? "ok" : "off !");
        std::fflush(stdout);
        g_sink = g_sink + double(out_f(0, 0)) + double(out_b(0, 0));
      }
    }
  }
  return ok;
}

}  // namespace ea_low_precision_bench
