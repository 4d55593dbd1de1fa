// SPDX-License-Identifier: MIT
// eigen_attention_low_precision_bench: the rates table. For every (T, d, causal), every thread
// count and every kernel, the fused call attention_into(Q, K, V, O, opt) on float, bfloat16 and
// half inputs of the same values, back to back; on Kernel::Auto also what a user does without
// the library's 16-bit path: the inputs converted to float, the float call, the result rounded.
#include "low_precision_bench.hpp"

#include <cstring>

namespace ea_low_precision_bench {

std::vector<ea::Kernel> kernels_to_run(const std::string& name) {
  if (name != "all") return {bench::parse_kernel(name)};
  // Auto, then every other kernel but Reference and the one Auto runs (auto_kernel(): not the
  // first available one where the table keeps Auto off a faster-listed kernel, as on Intel cores
  // with AVX512-BF16).
  std::vector<ea::Kernel> out{ea::Kernel::Auto};
  for (ea::Kernel k : ea::available_kernels()) {
    if (k != ea::Kernel::Reference && k != ea::auto_kernel()) out.push_back(k);
  }
  return out;
}

namespace {

// The same bits (not the same values: a NaN or a signed zero counts).
template <typename T>
bool same_bits(const Mat<T>& a, const Mat<T>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0;
}

template <typename T>
struct Three {
  Mat<T> q, k, v;
};

// The float inputs of eigen_attention_bench (uniform in [-1, 1]), and the same rounded to T.
template <typename T>
Three<T> rounded(const ea_attention_bench::Inputs<float>& in) {
  return {in.q.cast<T>(), in.k.cast<T>(), in.v.cast<T>()};
}

// What a user does today with 16-bit inputs: convert them to float, call the float kernel,
// round the result. The float buffers are the caller's and already of the right size, so no
// allocation is timed: the conversions and the call only.
template <typename Low>
struct Converted {
  Mat<float> q, k, v, o;
  Converted(Idx t, Idx d) : q(t, d), k(t, d), v(t, d), o(t, d) {}
  void operator()(const Three<Low>& in, Mat<Low>& out, const ea::Options& opt) {
    q = in.q.template cast<float>();
    k = in.k.template cast<float>();
    v = in.v.template cast<float>();
    ea::attention_into(q, k, v, o, opt);
    out = o.template cast<Low>();
  }
};

// The outputs of one (kernel, threads): float, bf16 and half.
struct Outputs {
  Mat<float> f;
  Mat<bf16> b;
  Mat<half> h;
  Outputs(Idx t, Idx d) : f(t, d), b(t, d), h(t, d) {}
  bool operator==(const Outputs& o) const {
    return same_bits(f, o.f) && same_bits(b, o.b) && same_bits(h, o.h);
  }
};

std::string kernel_label(ea::Kernel k) {
  if (k == ea::Kernel::Auto) return std::string("auto=") + resolved_name(k);
  return ea::kernel_name(k);
}

void print_header() {
  std::printf(
      "%6s %4s %3s %3s %-12s | %8s %7s | %8s %7s %6s | %8s %7s %6s | %8s %7s %6s | %8s %7s %6s | %s\n", "T",
      "d", "cau", "thr", "kernel", "float ms", "GFLOP/s", "bf16 ms", "GFLOP/s", "/float", "half ms",
      "GFLOP/s", "/float", "cvt-bf16", "GFLOP/s", "/float", "cvt-half", "GFLOP/s", "/float", "checks");
  std::fflush(stdout);
}

void print(const Row& r) {
  const double f = r.gflops(r.float_s), b = r.gflops(r.bf16_s), h = r.gflops(r.half_s);
  const double cb = r.gflops(r.cvt_bf16_s), ch = r.gflops(r.cvt_half_s);
  const double target = forward_target(r.threads, r.bf16_pairs);
  const bool miss = r.kernel == ea::Kernel::Auto && std::isfinite(target) && b / f < target;
  std::string checks =
      r.bf16_bits && r.half_bits ? (r.bf16_pairs ? "bits ok, bf16 pairs ok" : "bits ok") : "";
  if (!r.bf16_bits) checks += r.bf16_pairs ? "bf16 pairs off by > 2^-7 !" : "bf16 bits differ !";
  if (!r.half_bits) checks += std::string(checks.empty() ? "" : ", ") + "half bits differ !";
  if (!r.same_as_first_threads) checks += ", differs from the first thread count !";
  print_row(
      "%6ld %4ld %3d %3d %-12s | %8s %7s | %8s %7s %5s%s | %8s %7s %6s | %8s %7s %6s | %8s %7s %6s | %s\n",
      long(r.t), long(r.d), int(r.causal), r.threads, kernel_label(r.kernel).c_str(),
      fmt(r.float_s * 1e3, 2).c_str(), fmt(f).c_str(), fmt(r.bf16_s * 1e3, 2).c_str(), fmt(b).c_str(),
      fmt(b / f, 2).c_str(), miss ? "*" : " ", fmt(r.half_s * 1e3, 2).c_str(), fmt(h).c_str(),
      fmt(h / f, 2).c_str(), fmt(r.cvt_bf16_s * 1e3, 2).c_str(), fmt(cb).c_str(), fmt(cb / f, 2).c_str(),
      fmt(r.cvt_half_s * 1e3, 2).c_str(), fmt(ch).c_str(), fmt(ch / f, 2).c_str(), checks.c_str());
}

// The rows of one (T, d, causal): every thread count, every kernel.
bool rates_group(const Args& a, Idx t, Idx d, bool causal, std::vector<Row>& rows) {
  const ea_attention_bench::Inputs<float> in(t, d);
  const Three<float> fin{in.q, in.k, in.v};
  const Three<bf16> bin = rounded<bf16>(in);
  const Three<half> hin = rounded<half>(in);
  const std::vector<ea::Kernel> kernels = kernels_to_run(a.kernel);
  Converted<bf16> cvt_b(t, d);
  Converted<half> cvt_h(t, d);
  std::map<int, Outputs> first;  // per kernel, the outputs of the first thread count
  bool ok = true;
  for (int threads : a.threads) {
    for (ea::Kernel kernel : kernels) {
      ea::Options opt;
      opt.causal = causal;
      opt.kernel = kernel;
      opt.threads = threads;
      Row r;
      r.t = t;
      r.d = d;
      r.causal = causal;
      r.threads = threads;
      r.kernel = kernel;
      Outputs out(t, d);
      // float, bf16 and half back to back, so that their ratios come from the same minute.
      r.float_s =
          measure(a.seconds, a.reps, [&] { ea::attention_into(fin.q, fin.k, fin.v, out.f, opt); }).median;
      r.bf16_s =
          measure(a.seconds, a.reps, [&] { ea::attention_into(bin.q, bin.k, bin.v, out.b, opt); }).median;
      r.half_s =
          measure(a.seconds, a.reps, [&] { ea::attention_into(hin.q, hin.k, hin.v, out.h, opt); }).median;
      // The promise checked: a 16-bit call equals the float call on the widened inputs, rounded
      // once. On Auto rows that is what the converted-first timing computes; else untimed.
      Mat<bf16> ref_b(t, d);
      Mat<half> ref_h(t, d);
      if (kernel == ea::Kernel::Auto) {
        r.cvt_bf16_s = measure(a.seconds, a.reps, [&] { cvt_b(bin, ref_b, opt); }).median;
        r.cvt_half_s = measure(a.seconds, a.reps, [&] { cvt_h(hin, ref_h, opt); }).median;
      } else {
        cvt_b(bin, ref_b, opt);
        cvt_h(hin, ref_h, opt);
      }
      // The bf16 forward of the avx512bf16 and amx kernels rounds the weights to bf16 for P V (Q, K
      // and V are bf16 already): within the P-rounded model of the float call, |error| <= 2^-9
      // sum_j p_j |v_j| <= 2^-9 here (|V| <= 1) plus the two results' roundings (2^-9 each at |O| <= 1).
      const ea::Kernel runs = kernel == ea::Kernel::Auto ? ea::auto_kernel() : kernel;
      r.bf16_pairs = runs == ea::Kernel::Avx512Bf16 || runs == ea::Kernel::Amx;
      r.bf16_bits = r.bf16_pairs
                        ? (out.b.cast<float>() - ref_b.cast<float>()).cwiseAbs().maxCoeff() <= 0x1p-7f
                        : same_bits(out.b, ref_b);
      r.half_bits = same_bits(out.h, ref_h);
      const auto it = first.find(static_cast<int>(kernel));
      if (it == first.end()) {
        first.emplace(static_cast<int>(kernel), std::move(out));
      } else {
        r.same_as_first_threads = out == it->second;
      }
      g_sink = g_sink + double(ref_b(0, 0)) + double(ref_h(0, 0));
      ok = ok && r.ok();
      print(r);
      rows.push_back(r);
    }
  }
  return ok;
}

}  // namespace

bool rates_table(const Args& a, std::vector<Row>& rows) {
  std::printf(
      "attention_into(Q, K, V, O, opt), O preallocated; GFLOP/s = 4*T*T*d / time (half when causal);\n"
      "/float = that column's GFLOP/s over the float GFLOP/s of the same row (same kernel, same threads,\n"
      "same minute); cvt-bf16 / cvt-half (Kernel::Auto rows) = the float call on 16-bit inputs converted\n"
      "first: Q.cast<float>(), K.cast<float>(), V.cast<float>() into preallocated float matrices (this\n"
      "file is compiled for the baseline instruction set, as a user's default build), the float call,\n"
      "the result cast back; * = bf16/float under the target (where Auto runs bf16 pairs: %.1f at 1\n"
      "thread, %.1f at 2 threads; elsewhere 1.0, no loss);\n"
      "checks: 'bits ok' = the bf16 and half outputs equal, bit for bit, the float call of the same\n"
      "kernel and threads on the widened inputs rounded once; 'bf16 pairs ok' = on avx512bf16 (bf16 on\n"
      "vdpbf16ps, P rounded to bf16) the bf16 output within 2^-7 of that instead (the P-rounded\n"
      "model); '!' = a check failed (exit status 1)\n\n",
      kTargetOneThread, kTargetTwoThreads);
  bool ok = true;
  print_header();
  for (Idx t : a.ts) {
    for (Idx d : a.ds) {
      for (int c : a.causal) ok = rates_group(a, t, d, c != 0, rows) && ok;
    }
  }
  return ok;
}

}  // namespace ea_low_precision_bench
