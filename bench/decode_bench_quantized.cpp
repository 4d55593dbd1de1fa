// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench, section 7: the error of the quantized caches (not a timing). One
// decode step (T_q = 1) of the --shape heads over T_k keys of realistic data, Gaussian keys and
// values with outlier channels (each KV head's keys have 2 channels 10x the others, its values 1,
// as the keys of LLMs have), stored as float, bf16, half, int8, e4m3 and e5m2; the output of each
// against the float cache's output (which is within the float rounding bound of the exact one:
// test/decode_vs_reference.cpp), and the stored elements against the float ones. The error of a
// quantized decode is this quantization error: on the dequantized elements the call is the float
// call (test/quantized_cache.cpp, bitwise).
#include "decode_bench.hpp"

#include <random>

namespace ea_decode_bench {
namespace {

/// Gaussian rows (T x heads d), the channels in `outliers` of each head times 10.
Mat<float> realistic(Idx T, Idx heads, Idx d, std::initializer_list<Idx> outliers, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Mat<float> m(T, heads * d);
  for (Idx i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  for (Idx h = 0; h < heads; ++h)
    for (const Idx c : outliers) m.col(h * d + c) *= 10;
  return m;
}

/// The value of a stored element (E5M2: the top byte of a half; E4M3: its fields moved into a half's,
/// times 2^8, S.1111.111 NaN).
float decoded(ea::Int8 q) { return q.bits; }
float decoded(ea::Float8E5M2 q) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(q.bits << 8)));
}
float decoded(ea::Float8E4M3 q) {
  if ((q.bits & 0x7f) == 0x7f) return kNaN;
  const auto h = static_cast<std::uint16_t>(((q.bits & 0x7f) << 7) | ((q.bits & 0x80) << 8));
  return 256 * static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h));
}

struct Errors {
  double rms = 0, max = 0;  // relative RMS (||x - ref|| / ||ref||) and max |x - ref| / max |ref|
};
Errors errors(const Mat<float>& x, const Mat<float>& ref) {
  const double diff = double((x - ref).norm()), norm = double(ref.norm());
  const double worst = double((x - ref).cwiseAbs().maxCoeff()), top = double(ref.cwiseAbs().maxCoeff());
  return {norm > 0 ? diff / norm : 0, top > 0 ? worst / top : 0};
}

}  // namespace

void quantized_section(const Args& a, ea::Kernel kernel, Summary& sum) {
  const Idx Tk = std::min<Idx>(a.t_k, 8192), Hkv = a.kv_heads, d = a.d, H = a.heads, page = 64;
  std::printf(
      "== 7. the error of quantized caches (not timed): one decode step, T_k = %ld, H = %ld, H_kv = %ld, d = "
      "%ld; keys and values\n"
      "   Gaussian with outlier channels (per KV head, 2 key channels and 1 value channel 10x), queries "
      "Gaussian, scale 1/sqrt(d)\n"
      "   K, V: the stored elements (dequantized) against the float ones; out: the output against the "
      "float cache's\n"
      "   rel RMS = ||x - float|| / ||float||; rel max = max |x - float| / max |float|\n",
      long(Tk), long(H), long(Hkv), long(d));
  std::printf("%-7s | %9s %9s | %9s %9s | %9s %9s\n", "storage", "K rel RMS", "K rel max", "V rel RMS",
              "V rel max", "out RMS", "out max");
  const Mat<float> K = realistic(Tk, Hkv, d, {0, d / 3}, 21), V = realistic(Tk, Hkv, d, {d / 2}, 22);
  const Mat<float> Q = realistic(1, H, d, {}, 23);
  ea::Options opt;
  opt.kernel = kernel;
  Mat<float> ref;
  for (const std::string s : {"float", "bf16", "half", "int8", "e4m3", "e5m2"}) {
    with_storage(s, [&](auto tag) {
      using T = decltype(tag);
      ea::PagedKVCache<T> cache(Hkv, d, d, page, Tk);
      const auto id = cache.create();
      cache.append(id, K, V);
      const Mat<float> out = ea::attention_decode(cache, id, Q, opt);
      if (s == "float") ref = out;
      // The stored elements, read from the pages (HND) and dequantized.
      Mat<float> k(Tk, Hkv * d), v(Tk, Hkv * d);
      const auto pages = cache.pages(id);
      for (Idx n = 0; n < Tk; ++n) {
        const Idx p = pages[static_cast<std::size_t>(n / page)], slot = n % page;
        for (Idx h = 0; h < Hkv; ++h) {
          const Idx row = (p * Hkv + h) * page + slot;
          for (Idx c = 0; c < d; ++c) {
            if constexpr (ea::kIsQuantized<T>) {
              k(n, h * d + c) = cache.key_scales()[row] * decoded(cache.key_pages()[row * d + c]);
              v(n, h * d + c) = cache.value_scales()[row] * decoded(cache.value_pages()[row * d + c]);
            } else {
              k(n, h * d + c) = static_cast<float>(cache.key_pages()[row * d + c]);
              v(n, h * d + c) = static_cast<float>(cache.value_pages()[row * d + c]);
            }
          }
        }
      }
      const Errors ek = errors(k, K), ev = errors(v, V), eo = errors(out, ref);
      std::printf("%-7s | %9s %9s | %9s %9s | %9s %9s\n", s.c_str(), fmt_e(ek.rms).c_str(),
                  fmt_e(ek.max).c_str(), fmt_e(ev.rms).c_str(), fmt_e(ev.max).c_str(), fmt_e(eo.rms).c_str(),
                  fmt_e(eo.max).c_str());
      if (s != "float") {
        sum.lines.push_back(s + ": decode output rel RMS error " + fmt_e(eo.rms) +
                            " against the float cache (" +
                            "Gaussian K/V with outlier channels, T_k = " + std::to_string(Tk) + ")");
      }
    });
  }
  std::printf("\n");
}

}  // namespace ea_decode_bench
