// SPDX-License-Identifier: MIT
// fuzz_attention's 16-bit calls (lowp<T16>, T16 = Eigen::bfloat16 or Eigen::half; the input's first
// byte picks them: fuzz_attention.cpp). The contract (test/low_precision_api.cpp): a 16-bit call is
// the float call on the widened inputs, its 16-bit results rounded once and its float results
// (LSE, float SCORES) bit for bit; it throws exactly when that float call throws. The exception is
// the fused bf16 forward on Kernel::Avx512Bf16 or Kernel::Amx (Q and K as bf16 pairs, the weights
// rounded to bf16): within 2^-8 (max|V| + |y|) of the float call y, its LSE within 1e-5 (1 + |y|)
// (test/support/low_precision.hpp's check_pairs), checked where both are finite.
//
// What the rest of the input decodes into, after the Options (diagonal_offset included):
//   the call family from the call byte: single-head (attention, attention_into with and without
//   LSE, attention_decomposed_into with SCORES of T16 or of float, attention_scores_into of T16 or
//   float, with and without LSE), multi-head (attention_heads_into, attention_heads_decomposed_into,
//   attention_varlen_into; BHTD or BTHD views, GQA), or the single-head backward
//   (attention_backward, with ATTN and LSE of the 16-bit forward or arbitrary values);
//   the shapes (long ones when big), a shape fault at times, the masks (single-head: bias, ALiBi,
//   sink; multi-head: boolean mask, bias, ALiBi slopes, sinks, broadcast shapes), the element
//   values (fuzz_attention_model.hpp's Filler in float, then rounded to T16: NaN, infinities,
//   values beyond half's range, subnormals).
// The outputs are exact-size buffers filled with a sentinel: a call that throws leaves them so.
#include <cstdint>
#include <vector>

#include "fuzz_attention_model.hpp"

namespace ea_fuzz_attention {
namespace {

template <class T16>
const char* name16() {
  return std::is_same_v<T16, Eigen::bfloat16> ? "bfloat16" : "half";
}

/// The kernel a call with `opt` runs on.
inline ea::Kernel effective_kernel(const ea::Options& opt) {
  return opt.kernel == ea::Kernel::Auto ? ea::auto_kernel() : opt.kernel;
}

/// The fused bf16 forward on bf16 pairs (the weights rounded to bf16).
template <class T16>
bool bf16_pairs(const ea::Options& opt) {
  const ea::Kernel k = effective_kernel(opt);
  return std::is_same_v<T16, Eigen::bfloat16> && (k == ea::Kernel::Avx512Bf16 || k == ea::Kernel::Amx);
}

template <class T16>
std::uint16_t bits16(T16 x) {
  std::uint16_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// n values from a Filler, rounded to T16; `wide` gets them widened back (exactly).
template <class T16>
void fill16(Reader& r, bool big, std::vector<T16>& v, std::vector<float>& wide, std::size_t n,
            const char* what) {
  Filler<float> f(r, big);
  v.resize(n);
  wide.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = T16(f.next());
    wide[i] = static_cast<float>(v[i]);
  }
  note(format("  %s: %zu values, %s", what, n, f.describe().c_str()));
}

/// The largest finite |x| of v (0 when none).
inline float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (const float x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

/// A 16-bit result against the float call's: rounded once (bitwise, NaN for NaN), or on bf16 pairs
/// within check_pairs' bound where both are finite.
template <class T16>
void expect_rounded(const char* call, const char* what, const T16* got, const float* wide, std::size_t n,
                    bool pairs, float v_max) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(got[i]), y = wide[i];
    if (pairs) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      EA_EXPECT(std::fabs(x - y) <= 0x1p-8f * (v_max + std::fabs(y)),
                "%s<%s>: %s[%zu] = %.9g on bf16 pairs, the float call %.9g (beyond 2^-8 (max|V| %.9g + |y|))",
                call, name16<T16>(), what, i, double(x), double(y), double(v_max));
      continue;
    }
    const T16 want = T16(y);
    const bool same = (std::isnan(x) && std::isnan(y)) || bits16(got[i]) == bits16(want);
    EA_EXPECT(
        same,
        "%s<%s>: %s[%zu] = %.9g (bits 0x%04x), the float call rounded once gives %.9g (0x%04x; float %.9g)",
        call, name16<T16>(), what, i, double(x), unsigned(bits16(got[i])), double(static_cast<float>(want)),
        unsigned(bits16(want)), double(y));
  }
}

/// A float result (LSE, float SCORES) against the float call's: bitwise (NaN for NaN), or on bf16
/// pairs within 1e-5 (1 + |y|) where both are finite.
inline void expect_float(const char* call, const char* type, const char* what, const float* got,
                         const float* wide, std::size_t n, bool pairs) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = got[i], y = wide[i];
    if (pairs) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        EA_EXPECT(std::isfinite(x) || std::isfinite(y) || x == y || (std::isnan(x) && std::isnan(y)) ||
                      !(x == -INFINITY || y == -INFINITY),
                  "%s<%s>: %s[%zu] = %.9g on bf16 pairs, the float call %.9g", call, type, what, i, double(x),
                  double(y));
        continue;
      }
      EA_EXPECT(std::fabs(x - y) <= 1e-5f * (1 + std::fabs(y)),
                "%s<%s>: %s[%zu] = %.9g on bf16 pairs, the float call %.9g", call, type, what, i, double(x),
                double(y));
      continue;
    }
    EA_EXPECT((std::isnan(x) && std::isnan(y)) || float_bits(x) == float_bits(y),
              "%s<%s>: %s[%zu] = %.9g, the float call %.9g (must be the same bits)", call, type, what, i,
              double(x), double(y));
  }
}

/// Runs both calls; true when both returned. They must agree: both return, or both throw
/// std::invalid_argument (std::length_error, std::bad_alloc tolerated on either side).
template <class F16, class FF>
bool both(const char* call, const char* type, F16&& call16, FF&& callf) {
  if (g_verbose) {
    std::fprintf(stderr, "%s", ea_fuzz::description().c_str() + g_printed);
    g_printed = ea_fuzz::description().size();
  }
  const auto run = [](auto&& f, std::string& what) -> int {  // 0 returned, 1 invalid_argument, 2 other
    try {
      f();
      return 0;
    } catch (const std::invalid_argument& e) {
      what = e.what();
      return 1;
    } catch (const std::length_error& e) {
      what = e.what();
      return 2;
    } catch (const std::bad_alloc& e) {
      what = e.what();
      return 2;
    }
  };
  std::string w16, wf;
  const int a = run(call16, w16), b = run(callf, wf);
  if (g_verbose)
    note(format("result: %s<%s> %s, float %s", call, type, a == 0 ? "returned" : w16.c_str(),
                b == 0 ? "returned" : wf.c_str()));
  if (a == 2 || b == 2) return false;
  EA_EXPECT(a == b, "%s<%s> %s but the float call on the widened inputs %s", call, type,
            a == 0 ? "returned" : ("threw: " + w16).c_str(), b == 0 ? "returned" : ("threw: " + wf).c_str());
  return a == 0;
}

template <class T, class F>
void expect_untouched(const char* call, const std::vector<T>& v, F sentinel, const char* what) {
  for (std::size_t i = 0; i < v.size(); ++i)
    EA_EXPECT(static_cast<float>(v[i]) == static_cast<float>(sentinel), "%s threw, yet wrote %s[%zu]", call,
              what, i);
}

/// The sizes of a single-head problem, read in the order T_q, T_k, d_k, d_v. Big: T_q below
/// big_tq, T_k below big_tk, d_k 1-8, d_v 0-7; else T_q, T_k and d_k below `small`, d_v 0-8.
void read_sizes(Reader& r, bool big, Index big_tq, Index big_tk, Index small, Index& tq, Index& tk, Index& dk,
                Index& dv) {
  if (big) {
    tq = r.u16() % big_tq, tk = r.u16() % big_tk, dk = 1 + r.u8() % 8, dv = r.u8() % 8;
  } else {
    tq = r.u8() % small, tk = r.u8() % small, dk = r.u8() % small, dv = r.u8() % 9;
  }
}

// ---------------------------------------------------------------------------------------------
// Single-head calls.

template <class T16>
void single16(Call call, const ea::Options& opt, Reader& r, bool big) {
  using R16 = ea::RowMatrix<T16>;
  using RF = ea::RowMatrix<float>;
  Index tq, tk, dk, dv;
  read_sizes(r, big, 200, 700, 13, tq, tk, dk, dv);
  const std::uint8_t fault = r.u8() % 16;  // 1: K one column wider; 2: V one row more; 3: bias a column short
  const std::uint8_t mb = r.u8();
  const bool has_bias = (mb & 3) == 1, has_alibi = ((mb >> 2) & 3) == 1, has_sink = ((mb >> 4) & 3) == 1;
  const Index kcols = dk + (fault == 1), vrows = tk + (fault == 2), bcols = tk - (fault == 3 && tk > 0);
  note(format("  single-head<%s>: T_q %td, T_k %td, d_k %td, d_v %td, fault %d, bias %d, alibi %d, sink %d",
              name16<T16>(), tq, tk, dk, dv, int(fault), int(has_bias), int(has_alibi), int(has_sink)));
  std::vector<T16> q, k, v, bias, slope, sink;
  std::vector<float> qf, kf, vf, biasf, slopef, sinkf;
  fill16(r, big, q, qf, std::size_t(tq * dk), "Q");
  fill16(r, big, k, kf, std::size_t(tk * kcols), "K");
  fill16(r, big, v, vf, std::size_t(vrows * dv), "V");
  if (has_bias) fill16(r, big, bias, biasf, std::size_t(tq * bcols), "bias");
  if (has_alibi) fill16(r, false, slope, slopef, 1, "ALiBi slope");
  if (has_sink) fill16(r, false, sink, sinkf, 1, "sink");
  const Eigen::Map<const R16> Q(q.data(), tq, dk), K(k.data(), tk, kcols), V(v.data(), vrows, dv);
  const Eigen::Map<const RF> Qf(qf.data(), tq, dk), Kf(kf.data(), tk, kcols), Vf(vf.data(), vrows, dv);
  ea::Masks<T16> m16;
  ea::Masks<float> mf;
  if (has_bias) {
    m16.bias = ea::BroadcastView<T16>::matrix(bias.data(), tq, bcols);
    mf.bias = ea::BroadcastView<float>::matrix(biasf.data(), tq, bcols);
  }
  if (has_alibi) m16.alibi_slopes = slope.data(), mf.alibi_slopes = slopef.data();
  if (has_sink) m16.sinks = sink.data(), mf.sinks = sinkf.data();
  const float v_max = max_abs(vf);
  const T16 s16 = T16(-7.0f);
  const float sf = -7.0f;
  std::vector<T16> out(std::size_t(tq * dv), s16), scores(std::size_t(tq * tk), s16);
  std::vector<float> outf(out.size(), sf), scoresf(scores.size(), sf), scores_wide(scores.size(), sf),
      lse(std::size_t(tq), sf), lsef(lse.size(), sf);
  Eigen::Map<R16> O(out.data(), tq, dv), S(scores.data(), tq, tk);
  Eigen::Map<RF> Of(outf.data(), tq, dv), Sf(scoresf.data(), tq, tk), Sw(scores_wide.data(), tq, tk);
  Eigen::Map<Eigen::VectorXf> L(lse.data(), tq), Lf(lsef.data(), tq);
  const char* name = call_name(call);
  const char* t = name16<T16>();
  const bool pairs = bf16_pairs<T16>(opt);
  switch (call) {
    case Call::Attention: {
      R16 ret;
      RF retf;
      if (!both(
              name, t, [&] { ret = ea::attention(Q, K, V, opt, m16); },
              [&] { retf = ea::attention(Qf, Kf, Vf, opt, mf); }))
        return;
      EA_EXPECT(ret.rows() == retf.rows() && ret.cols() == retf.cols(),
                "%s<%s>: %tdx%td, the float call %tdx%td", name, t, Index(ret.rows()), Index(ret.cols()),
                Index(retf.rows()), Index(retf.cols()));
      expect_rounded(name, "ATTN", ret.data(), retf.data(), std::size_t(ret.size()), pairs, v_max);
      return;
    }
    case Call::AttentionInto:
    case Call::AttentionIntoLse: {
      const bool with_lse = call == Call::AttentionIntoLse;
      const bool returned = both(
          name, t,
          [&] {
            with_lse ? ea::attention_into(Q, K, V, O, L, opt, m16) : ea::attention_into(Q, K, V, O, opt, m16);
          },
          [&] {
            with_lse ? ea::attention_into(Qf, Kf, Vf, Of, Lf, opt, mf)
                     : ea::attention_into(Qf, Kf, Vf, Of, opt, mf);
          });
      if (!returned) {
        expect_untouched(name, out, s16, "ATTN");
        expect_untouched(name, lse, sf, "LSE");
        return;
      }
      expect_rounded(name, "ATTN", out.data(), outf.data(), out.size(), pairs, v_max);
      if (with_lse) expect_float(name, t, "LSE", lse.data(), lsef.data(), lse.size(), pairs);
      return;
    }
    case Call::Decomposed:
    case Call::DecomposedInto:
    case Call::DecomposedIntoLse: {
      // SCORES of T16 (with LSE) and of float (without), against the float call's.
      const bool float_scores = call == Call::DecomposedInto;
      const bool returned = both(
          name, t,
          [&] {
            if (float_scores) {
              ea::attention_decomposed_into(Q, K, V, Sw, O, opt, m16);
            } else {
              ea::attention_decomposed_into(Q, K, V, S, O, L, opt, m16);
            }
          },
          [&] { ea::attention_decomposed_into(Qf, Kf, Vf, Sf, Of, Lf, opt, mf); });
      if (!returned) {
        expect_untouched(name, out, s16, "ATTN");
        expect_untouched(name, scores, s16, "SCORES");
        expect_untouched(name, scores_wide, sf, "SCORES (float)");
        expect_untouched(name, lse, sf, "LSE");
        return;
      }
      expect_rounded(name, "ATTN", out.data(), outf.data(), out.size(), false, v_max);
      if (float_scores) {
        expect_float(name, t, "SCORES (float)", scores_wide.data(), scoresf.data(), scores.size(), false);
      } else {
        expect_rounded(name, "SCORES", scores.data(), scoresf.data(), scores.size(), false, v_max);
        expect_float(name, t, "LSE", lse.data(), lsef.data(), lse.size(), false);
      }
      return;
    }
    default: {  // the scores calls: SCORES of T16 (ScoresInto), of float (Scores), with LSE (ScoresIntoLse)
      const bool float_scores = call == Call::Scores, with_lse = call == Call::ScoresIntoLse;
      const bool returned = both(
          name, t,
          [&] {
            if (float_scores) {
              ea::attention_scores_into(Q, K, Sw, opt, m16);
            } else if (with_lse) {
              ea::attention_scores_into(Q, K, S, L, opt, m16);
            } else {
              ea::attention_scores_into(Q, K, S, opt, m16);
            }
          },
          [&] { ea::attention_scores_into(Qf, Kf, Sf, Lf, opt, mf); });
      if (!returned) {
        expect_untouched(name, scores, s16, "SCORES");
        expect_untouched(name, scores_wide, sf, "SCORES (float)");
        expect_untouched(name, lse, sf, "LSE");
        return;
      }
      if (float_scores) {
        expect_float(name, t, "SCORES (float)", scores_wide.data(), scoresf.data(), scores.size(), false);
      } else {
        expect_rounded(name, "SCORES", scores.data(), scoresf.data(), scores.size(), false, v_max);
      }
      if (with_lse) expect_float(name, t, "LSE", lse.data(), lsef.data(), lse.size(), false);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Multi-head calls.

template <class T16>
void heads16(Call call, const ea::Options& opt, Reader& r, bool big) {
  using V16 = ea::HeadsView<const T16>;
  using VF = ea::HeadsView<const float>;
  const bool varlen = call == Call::Varlen || call == Call::VarlenDecomposed;
  const bool decomposed = call == Call::HeadsDecomposed;
  HeadsShape sh = decode_heads_shape(r, big, varlen);
  if (big && !varlen) sh.tq = std::min<Index>(sh.tq, 200), sh.tk = std::min<Index>(sh.tk, 700);
  const Index B = sh.B, H = sh.H, Hkv = sh.Hkv, tq = sh.tq, tk = sh.tk, dk = sh.dk, dv = sh.dv;
  const bool bthd = r.u8() & 1;
  const MaskChoice mc = decode_mask_choice(r, varlen, B, H);
  const bool has_sinks = r.u8() % 3 == 1;
  note(
      format("  multi-head<%s>%s: B %td, H %td, H_kv %td, T_q %td, T_k %td, d_k %td, d_v %td, %s, mask %d, "
             "bias %d, alibi %d, sinks %d, sequences %td",
             name16<T16>(), varlen ? " (varlen)" : "", B, H, Hkv, tq, tk, dk, dv, bthd ? "BTHD" : "BHTD",
             int(mc.mask), int(mc.bias), int(mc.alibi), int(has_sinks), sh.S));
  std::vector<T16> q, k, v, bias, slopes, sinks;
  std::vector<float> qf, kf, vf, biasf, slopesf, sinksf;
  fill16(r, big, q, qf, std::size_t(B * H * tq * dk), "Q");
  fill16(r, big, k, kf, std::size_t(B * Hkv * tk * dk), "K");
  fill16(r, big, v, vf, std::size_t(B * Hkv * tk * dv), "V");
  std::vector<char> maskbits;
  if (mc.mask) {
    Rng rng(r.u32());
    maskbits.resize(std::size_t(mc.mb * mc.mh * tq * tk));
    for (char& c : maskbits) c = rng.unit() < 0.7;
  }
  if (mc.bias) fill16(r, big, bias, biasf, std::size_t(mc.bb * mc.bh * tq * tk), "bias");
  if (mc.alibi) fill16(r, false, slopes, slopesf, std::size_t(H), "ALiBi slopes");
  if (has_sinks) fill16(r, false, sinks, sinksf, std::size_t(H), "sinks");
  const auto view = [&](auto* p, Index b, Index h, Index t, Index d) {
    using E = std::remove_pointer_t<decltype(p)>;
    return bthd ? ea::HeadsView<E>::bthd(p, b, t, h, d) : ea::HeadsView<E>::bhtd(p, b, h, t, d);
  };
  ea::Masks<T16> m16;
  ea::Masks<float> mf;
  if (mc.mask) {
    const auto mv = ea::BroadcastView<bool>::per_head(reinterpret_cast<const bool*>(maskbits.data()), mc.mb,
                                                      mc.mh, tq, tk);
    m16.mask = mv, mf.mask = mv;
  }
  if (mc.bias) {
    m16.bias = ea::BroadcastView<T16>::per_head(bias.data(), mc.bb, mc.bh, tq, tk);
    mf.bias = ea::BroadcastView<float>::per_head(biasf.data(), mc.bb, mc.bh, tq, tk);
  }
  if (mc.alibi) m16.alibi_slopes = slopes.data(), mf.alibi_slopes = slopesf.data();
  if (has_sinks) m16.sinks = sinks.data(), mf.sinks = sinksf.data();
  const T16 s16 = T16(-7.0f);
  const float sf = -7.0f;
  std::vector<T16> out(std::size_t(B * H * tq * dv), s16), scores(std::size_t(B * H * tq * tk), s16);
  std::vector<float> outf(out.size(), sf), scoresf(scores.size(), sf), lse(std::size_t(B * H * tq), sf),
      lsef(lse.size(), sf);
  const bool want_lse = r.u8() % 4 != 0;
  const auto lse_view = [&](float* p) {
    return want_lse ? ea::HeadsView<float>::bhtd(p, B, H, tq, 1) : ea::HeadsView<float>{};
  };
  const char* name = call_name(call);
  const char* t = name16<T16>();
  const bool pairs = !decomposed && bf16_pairs<T16>(opt);
  const V16 Q = view(q.data(), B, H, tq, dk), K = view(k.data(), B, Hkv, tk, dk),
            V = view(v.data(), B, Hkv, tk, dv);
  const VF Qf = view(qf.data(), B, H, tq, dk), Kf = view(kf.data(), B, Hkv, tk, dk),
           Vf = view(vf.data(), B, Hkv, tk, dv);
  const Index sequences = sh.seq_claim < 0 ? -1 : sh.S;
  const bool returned = both(
      name, t,
      [&] {
        const auto O = view(out.data(), B, H, tq, dv);
        if (varlen) {
          ea::attention_varlen_into(Q, K, V, sh.cu_q.data(), sh.cu_k.data(), sequences, O,
                                    lse_view(lse.data()), opt, m16);
        } else if (decomposed) {
          ea::attention_heads_decomposed_into(Q, K, V, ea::HeadsView<T16>::bhtd(scores.data(), B, H, tq, tk),
                                              O, lse_view(lse.data()), {}, opt, m16);
        } else {
          ea::attention_heads_into(Q, K, V, O, lse_view(lse.data()), opt, m16);
        }
      },
      [&] {
        const auto O = view(outf.data(), B, H, tq, dv);
        if (varlen) {
          ea::attention_varlen_into(Qf, Kf, Vf, sh.cu_q.data(), sh.cu_k.data(), sequences, O,
                                    lse_view(lsef.data()), opt, mf);
        } else if (decomposed) {
          ea::attention_heads_decomposed_into(Qf, Kf, Vf,
                                              ea::HeadsView<float>::bhtd(scoresf.data(), B, H, tq, tk), O,
                                              lse_view(lsef.data()), {}, opt, mf);
        } else {
          ea::attention_heads_into(Qf, Kf, Vf, O, lse_view(lsef.data()), opt, mf);
        }
      });
  if (!returned) {
    expect_untouched(name, out, s16, "ATTN");
    expect_untouched(name, scores, s16, "SCORES");
    expect_untouched(name, lse, sf, "LSE");
    return;
  }
  // Packed rows after the last sequence belong to none: both calls leave them as they were.
  expect_rounded(name, "ATTN", out.data(), outf.data(), out.size(), pairs, max_abs(vf));
  if (decomposed) expect_rounded(name, "SCORES", scores.data(), scoresf.data(), scores.size(), false, 0.0f);
  if (want_lse) expect_float(name, t, "LSE", lse.data(), lsef.data(), lse.size(), pairs);
}

// ---------------------------------------------------------------------------------------------
// The single-head backward.

template <class T16>
void backward16(Call call, ea::Options opt, Reader& r, bool big) {
  using R16 = ea::RowMatrix<T16>;
  using RF = ea::RowMatrix<float>;
  Index tq, tk, dk, dv;
  read_sizes(r, big, 150, 400, 11, tq, tk, dk, dv);
  const std::uint8_t mode = r.u8();
  const bool from_forward = mode % 4 != 0, with_ds = (mode >> 2) % 3 == 1;
  const bool fault = (mode >> 4) % 8 == 7;  // dOUT a column wider
  // The backward on bf16 pairs rounds P and dZ (test/bf16_dot_product.cpp holds it): here the
  // widening one.
  if (bf16_pairs<T16>(opt)) opt.kernel = ea::Kernel::Portable;
  note(
      format("  backward<%s>: %s, T_q %td, T_k %td, d_k %td, d_v %td, ATTN and LSE %s, d_scores %d, fault %d",
             name16<T16>(), call_name(call), tq, tk, dk, dv, from_forward ? "of the forward" : "arbitrary",
             int(with_ds), int(fault)));
  std::vector<T16> q, k, v, o, d_o, d_s, lse_bits;
  std::vector<float> qf, kf, vf, of, d_of, d_sf, lse;
  fill16(r, big, q, qf, std::size_t(tq * dk), "Q");
  fill16(r, big, k, kf, std::size_t(tk * dk), "K");
  fill16(r, big, v, vf, std::size_t(tk * dv), "V");
  fill16(r, big, d_o, d_of, std::size_t(tq * (dv + fault)), "dOUT");
  if (with_ds) fill16(r, big, d_s, d_sf, std::size_t(tq * tk), "d_scores");
  const Eigen::Map<const R16> Q(q.data(), tq, dk), K(k.data(), tk, dk), V(v.data(), tk, dv),
      dO(d_o.data(), tq, dv + fault), dS(d_s.data(), tq, with_ds ? tk : 0);
  const Eigen::Map<const RF> Qf(qf.data(), tq, dk), Kf(kf.data(), tk, dk), Vf(vf.data(), tk, dv),
      dOf(d_of.data(), tq, dv + fault), dSf(d_sf.data(), tq, with_ds ? tk : 0);
  R16 out(tq, dv);
  Eigen::VectorXf L(tq);
  if (from_forward) {
    try {
      ea::attention_into(Q, K, V, out, L, opt);
    } catch (const std::exception&) {
      return;  // the forward's errors are the forward's family's
    }
  } else {
    fill16(r, big, o, of, std::size_t(tq * dv), "ATTN");
    std::vector<float> lw;
    fill16(r, big, lse_bits, lw, std::size_t(tq), "LSE");
    for (Index i = 0; i < tq; ++i) L(i) = lw[std::size_t(i)];
    if (tq * dv > 0) out = Eigen::Map<const R16>(o.data(), tq, dv);
  }
  const RF Of = out.template cast<float>();
  ea::Gradients<T16> g;
  ea::Gradients<float> gf;
  const char* name = call_name(call);
  const char* t = name16<T16>();
  const bool returned = both(
      name, t,
      [&] {
        g = with_ds ? ea::attention_backward(Q, K, V, out, L, dO, dS, opt)
                    : ea::attention_backward(Q, K, V, out, L, dO, opt);
      },
      [&] {
        gf = with_ds ? ea::attention_backward(Qf, Kf, Vf, Of, L, dOf, dSf, opt)
                     : ea::attention_backward(Qf, Kf, Vf, Of, L, dOf, opt);
      });
  if (!returned) return;
  const auto same = [&](const R16& a, const RF& b, const char* what) {
    EA_EXPECT(a.rows() == b.rows() && a.cols() == b.cols(), "%s<%s>: %s is %tdx%td, the float call's %tdx%td",
              name, t, what, Index(a.rows()), Index(a.cols()), Index(b.rows()), Index(b.cols()));
    expect_rounded(name, what, a.data(), b.data(), std::size_t(a.size()), false, 0.0f);
  };
  same(g.dq, gf.dq, "dQ");
  same(g.dk, gf.dk, "dK");
  same(g.dv, gf.dv, "dV");
}

}  // namespace

template <class T16>
void lowp(Call call, const ea::Options& opt, Reader& r, bool big) {
  if (int(call) <= int(Call::ScoresIntoLse)) {
    note(format("16-bit single-head: %s<%s>%s", call_name(call), name16<T16>(), big ? " (big)" : ""));
    single16<T16>(call, opt, r, big);
  } else if (int(call) >= int(Call::Backward)) {
    note(format("16-bit backward: %s<%s>%s", call_name(call), name16<T16>(), big ? " (big)" : ""));
    backward16<T16>(call, opt, r, big);
  } else {
    // merge_attention_into's byte stands for attention_heads_into here.
    const Call c = call == Call::Merge ? Call::Heads : call == Call::VarlenDecomposed ? Call::Varlen : call;
    note(format("16-bit multi-head: %s<%s>%s", call_name(c), name16<T16>(), big ? " (big)" : ""));
    heads16<T16>(c, opt, r, big);
  }
}

template void lowp<Eigen::bfloat16>(Call, const ea::Options&, Reader&, bool);
template void lowp<Eigen::half>(Call, const ea::Options&, Reader&, bool);

}  // namespace ea_fuzz_attention
