// SPDX-License-Identifier: MIT
// eigen_attention_low_precision_bench: the backward table. For every (T, d, causal), every thread
// count and every kernel, attention_backward_into(Q, K, V, out, lse, dout, dq, dk, dv, opt) on
// float and on bfloat16 inputs of the same values, back to back, and their ratio (10 T^2 d FLOPs,
// half when causal). Checked: a bf16 gradient equals the float backward on the widened inputs
// rounded once (the widening kernels), or, on bf16 pairs (avx512bf16: P and dZ rounded to bf16 for
// their products), is within 2^-6 of its array's largest magnitude of it: a sanity check only, the
// tests hold each element to its error bound (test/bf16_dot_product.cpp).
#include <cstring>

#include "low_precision_bench.hpp"

namespace ea_low_precision_bench {
namespace {

double backward_flops(Idx t, Idx d, bool causal) { return 2.5 * flops(t, d, causal); }

// The bf16 gradient against the float one: bitwise once rounded, or within 2^-6 max |g|.
bool gradient_ok(const Mat<bf16>& g, const Mat<float>& wide, bool pairs) {
  const Mat<bf16> rounded = wide.cast<bf16>();
  if (!pairs)
    return std::memcmp(g.data(), rounded.data(), sizeof(bf16) * static_cast<std::size_t>(g.size())) == 0;
  const float largest = wide.cwiseAbs().maxCoeff();
  return (g.cast<float>() - wide).cwiseAbs().maxCoeff() <= 0x1p-6f * largest;
}

}  // namespace

bool backward_table(const Args& a, std::vector<BackwardRow>& rows) {
  std::printf(
      "attention_backward_into(Q, K, V, out, lse, dout, dq, dk, dv, opt), outputs preallocated;\n"
      "GFLOP/s = 10*T*T*d / time (half when causal); /float = bf16 GFLOP/s over float GFLOP/s of the\n"
      "same row (same kernel and threads, timed alternately: float, bf16, float, ...); checks:\n"
      "'bits ok' = the bf16 gradients equal the float backward on the widened inputs rounded once;\n"
      "'pairs ok' = on bf16 pairs (avx512bf16)\n"
      "within 2^-6 max |g| of it; '!' = a check failed (exit status 1)\n\n");
  std::printf("%6s %4s %3s %3s %-16s | %9s %8s | %9s %8s %6s | %s\n", "T", "d", "cau", "thr", "kernel",
              "float ms", "GFLOP/s", "bf16 ms", "GFLOP/s", "/float", "checks");
  bool ok = true;
  for (Idx t : a.ts) {
    for (Idx d : a.ds) {
      for (int c : a.causal) {
        const bool causal = c != 0;
        const ea_attention_bench::Inputs<float> in(t, d);
        Mat<float> dout(t, d);
        fill(dout, 7);
        ea::Options fwd;
        fwd.causal = causal;
        Mat<float> out(t, d);
        Eigen::VectorXf lse(t);
        ea::attention_into(in.q, in.k, in.v, out, lse, fwd);
        const Mat<bf16> q16 = in.q.cast<bf16>(), k16 = in.k.cast<bf16>(), v16 = in.v.cast<bf16>(),
                        out16 = out.cast<bf16>(), dout16 = dout.cast<bf16>();
        // The float call on exactly the bf16 values (widened), so that both compute the same function.
        const Mat<float> qw = q16.cast<float>(), kw = k16.cast<float>(), vw = v16.cast<float>(),
                         outw = out16.cast<float>(), doutw = dout16.cast<float>();
        for (int threads : a.threads) {
          for (ea::Kernel kernel : kernels_to_run(a.kernel)) {
            ea::Options opt = fwd;
            opt.kernel = kernel;
            opt.threads = threads;
            BackwardRow r;
            r.t = t;
            r.d = d;
            r.causal = causal;
            r.threads = threads;
            r.kernel = kernel;
            Mat<float> dq(t, d), dk(t, d), dv(t, d);
            Mat<bf16> dq16(t, d), dk16(t, d), dv16(t, d);
            // Side by side (float, bf16, float, ...): the ratio is what the table is for.
            const auto [tf, tb] = bench::measure_alternating(
                a.seconds, a.reps,
                [&] { ea::attention_backward_into(qw, kw, vw, outw, lse, doutw, dq, dk, dv, opt); },
                [&] {
                  ea::attention_backward_into(q16, k16, v16, out16, lse, dout16, dq16, dk16, dv16, opt);
                });
            r.float_s = tf.median;
            r.bf16_s = tb.median;
            const ea::Kernel runs = kernel == ea::Kernel::Auto ? ea::auto_kernel() : kernel;
            const bool pairs = runs == ea::Kernel::Avx512Bf16 || runs == ea::Kernel::Amx;
            r.ok =
                gradient_ok(dq16, dq, pairs) && gradient_ok(dk16, dk, pairs) && gradient_ok(dv16, dv, pairs);
            r.pairs = pairs;
            ok = ok && r.ok;
            const double f = backward_flops(t, d, causal);
            const std::string label = kernel == ea::Kernel::Auto
                                          ? std::string("auto=") + resolved_name(kernel)
                                          : ea::kernel_name(kernel);
            std::printf("%6ld %4ld %3d %3d %-16s | %9s %8s | %9s %8s %6s | %s\n", long(t), long(d),
                        int(causal), threads, label.c_str(), fmt(r.float_s * 1e3, 2).c_str(),
                        fmt(f / r.float_s / 1e9).c_str(), fmt(r.bf16_s * 1e3, 2).c_str(),
                        fmt(f / r.bf16_s / 1e9).c_str(), fmt(r.float_s / r.bf16_s, 2).c_str(),
                        r.ok ? (pairs ? "pairs ok" : "bits ok") : (pairs ? "pairs off !" : "bits differ !"));
            std::fflush(stdout);
            rows.push_back(r);
          }
        }
      }
    }
  }
  return ok;
}

}  // namespace ea_low_precision_bench
