// SPDX-License-Identifier: MIT
// fuzz_attention, the backward calls: attention_backward and attention_backward_into (single head,
// with or without d_scores, on inputs given as strided Maps, column-major copies or expressions and
// outputs as Maps or resizable matrices), attention_heads_backward_into (masks, bias, key lengths, ALiBi,
// d_scores, d_bias) and attention_varlen_backward_into (fuzz_attention.cpp: the input format and the
// contract). The forward's ATTN and LSE come from the library's forward on the same inputs, or
// (robustness) from the input's values; the gradients are held to the long-double reference of
// test/support/reference_backward.hpp.
#include "fuzz_attention_model.hpp"
#include "fuzz_overlap.hpp"

#include "../support/reference_backward.hpp"

namespace ea_fuzz_attention {
namespace {

// ---------------------------------------------------------------------------------------------
// The checks of the gradients, shared by the three calls.

/// A backward call's inputs and gradients as the checks see them: accessors of the matrices of
/// sequence s (a batch entry or a packed sequence), query head h ([s * H + h]) and K/V head g
/// ([s * Hkv + g]).
template <class T>
struct Grads {
  Index S = 0, H = 0, Hkv = 0, dk = 0, dv = 0;
  std::vector<Acc<T>> q, o, lse, d_o, d_s, dq;  // [s * H + h]; d_s absent without d_scores
  std::vector<Acc<bool>> mask;                  // [s * H + h] (absent without a mask)
  std::vector<Acc<T>> bias;                     // [s * H + h] (absent without a bias)
  std::vector<Acc<T>> k, v, dk_, dv_;           // [s * Hkv + g]
  std::vector<Index> keys, offset;              // [s]: the key length; the causal/window/ALiBi offset
  std::vector<T> slopes;                        // [h]; empty without ALiBi
  std::vector<T> sinks;                         // [h]; empty without sinks
  std::vector<Acc<T>> d_lse;                    // [s * H + h]; empty without dL/dLSE
  const T* d_sinks = nullptr;                   // H values of dL/dsinks, when wanted
  std::vector<Acc<T>> d_bias;                   // [bb * db_heads + bh]
  Index db_batch = 0, db_heads = 0;             // d_bias's batch (1 or S) and heads (1 or H)
  bool forward = false;    // ATTN and LSE are the forward's (else arbitrary: no numeric checks)
  bool reference = false;  // and small: compare with the long-double reference
};

/// What the checks need of one query row.
struct RowInfo {
  Index nvis = 0;     // visible keys
  bool safe = false;  // every input its gradients depend on is finite and |x| <= 1e3
  bool tame = false;  // and its logits are small (<= 50): the reference applies
};

/// Its gradient elements against the reference: within 4x the reference's own per-element bound
/// (reference_backward.hpp), plus `slack` for what underflows.
inline bool near_reference(long double got, long double ref, long double tol, long double slack,
                           long double& worst) {
  const long double bound = 4 * tol + slack;
  if (bound > 0) worst = std::max(worst, std::fabs(got - ref) / bound);
  return std::fabs(got - ref) <= bound;
}

template <class T>
void check_gradients(const Grads<T>& g, const Rules<T>& rules, bool bottom_right, const char* call) {
  const Index S = g.S, H = g.H, Hkv = g.Hkv, dk = g.dk, dv = g.dv;
  const Index group = Hkv > 0 ? H / Hkv : 1;
  const bool heads = S > 0 && H > 0 && Hkv > 0;
  const bool scale_safe = rules.scale <= T(1e3);
  const bool alibi = !g.slopes.empty();
  // Visibility and row information, per (s, h).
  std::vector<std::vector<char>> vis(static_cast<std::size_t>(heads ? S * H : 0));
  std::vector<std::vector<RowInfo>> info(vis.size());
  for (Index s = 0; s < S && heads; ++s) {
    for (Index h = 0; h < H; ++h) {
      const std::size_t at = static_cast<std::size_t>(s * H + h);
      const Acc<T>&q = g.q[at], &k = g.k[static_cast<std::size_t>(s * Hkv + h / group)],
            &v = g.v[static_cast<std::size_t>(s * Hkv + h / group)];
      const Index tq = q.rows, tk = k.rows;
      const T slope = alibi ? g.slopes[static_cast<std::size_t>(h)] : T(0);
      std::vector<char>& vs = vis[at];
      vs.assign(static_cast<std::size_t>(tq * tk), 0);
      info[at].assign(static_cast<std::size_t>(tq), RowInfo{});
      for (Index i = 0; i < tq; ++i) {
        RowInfo& row = info[at][static_cast<std::size_t>(i)];
        bool safe = g.forward && scale_safe && (!alibi || tame_value(slope, 1e3));
        for (Index d = 0; d < dk; ++d) safe = safe && tame_value(q(i, d), 1e3);
        if (!g.d_lse.empty()) safe = safe && tame_value(g.d_lse[at](i, 0), 1e3);
        for (Index c = 0; c < dv; ++c)
          safe = safe && tame_value(g.d_o[at](i, c), 1e3) && tame_value(g.o[at](i, c), 1e3);
        // A finite sink beyond the logits' range (|sink| > 50) leaves the reference's bounds behind;
        // a NaN or +inf one gives the row a non-finite LSE (not safe, below).
        bool tame = g.sinks.empty() || !std::isfinite(g.sinks[static_cast<std::size_t>(h)]) ||
                    std::fabs(double(g.sinks[static_cast<std::size_t>(h)])) <= 50;
        for (Index j = 0; j < tk; ++j) {
          const bool seen =
              j < g.keys[static_cast<std::size_t>(s)] &&
              key_visible(rules.causal, rules.wl, rules.wr, i, j, g.offset[static_cast<std::size_t>(s)],
                          rules.chunk, rules.chunk_origin) &&
              (!g.mask[at].present() || g.mask[at](i, j));
          vs[static_cast<std::size_t>(i * tk + j)] = seen;
          if (!seen) continue;
          ++row.nvis;
          for (Index d = 0; d < dk; ++d) safe = safe && tame_value(k(j, d), 1e3);
          for (Index c = 0; c < dv; ++c) safe = safe && tame_value(v(j, c), 1e3);
          if (g.bias[at].present()) safe = safe && tame_value(g.bias[at](i, j), 1e3);
          if (g.d_s[at].present()) safe = safe && tame_value(g.d_s[at](i, j), 1e3);
          if (!safe) continue;
          long double mag = 0;
          for (Index d = 0; d < dk; ++d) mag += std::fabs((long double)q(i, d) * k(j, d));
          tame = tame && (long double)rules.scale * mag <= 50;
          if (alibi) {
            const long double dist = std::fabs((long double)(i + g.offset[static_cast<std::size_t>(s)] - j));
            tame = tame && std::fabs((long double)slope) * dist <= 50;
          }
          if (g.bias[at].present()) tame = tame && std::fabs((long double)g.bias[at](i, j)) <= 50;
        }
        if (row.nvis > 0) safe = safe && std::isfinite(g.lse[at](i, 0));
        row.safe = safe;
        row.tame = safe && tame;
      }
    }
  }
  std::size_t zeros = 0, finite = 0, compared = 0;  // elements checked, for the description
  long double worst = 0;                            // the largest error against the reference / its bound
  const auto seen = [&](Index s, Index h, Index i, Index j) {
    const std::size_t at = static_cast<std::size_t>(s * H + h);
    return vis[at]
              [static_cast<std::size_t>(i * g.k[static_cast<std::size_t>(s * Hkv + h / group)].rows + j)] !=
           0;
  };

  // The reference, per sequence (small calls whose ATTN and LSE are the forward's). Only tame
  // rows, and keys only tame rows see, are compared with it: what they depend on is given to it
  // as it is, and everything else as 0, so that non-finite or large values elsewhere in a head
  // leave its error bounds (which take the head's largest logit) finite and tight.
  std::vector<ea_test::BackwardReference> refs;
  std::vector<long double> slack;
  if (g.reference && heads) {
    for (Index s = 0; s < S; ++s) {
      const Index tq = g.q[static_cast<std::size_t>(s * H)].rows,
                  tk = g.k[static_cast<std::size_t>(s * Hkv)].rows;
      ea_test::Array4 Q(1, H, tq, dk), K(1, Hkv, tk, dk), V(1, Hkv, tk, dv), dO(1, H, tq, dv);
      std::optional<ea_test::Array4> dS, dLse;
      long double magnitude = 1;  // of the inputs given, for the underflow slack
      const auto take = [&](bool tame, long double x) -> long double {
        if (!tame) return 0;
        magnitude = std::max(magnitude, std::fabs(x));
        return x;
      };
      ea_test::MultiHeadSpec spec;
      spec.causal = rules.causal;
      spec.bottom_right = bottom_right;
      spec.scale = (long double)rules.scale;
      // Windows beyond any distance of these small calls are unbounded ones (and keep the
      // reference's i + offset -+ window from overflowing).
      spec.window_left = rules.wl > (Index(1) << 20) ? -1 : long(rules.wl);
      spec.window_right = rules.wr > (Index(1) << 20) ? -1 : long(rules.wr);
      spec.chunk = long(rules.chunk), spec.chunk_origin = long(rules.chunk_origin);  // |.| <= 2^60
      spec.softcap = (long double)rules.softcap;
      spec.key_lengths = {static_cast<std::int64_t>(g.keys[static_cast<std::size_t>(s)])};
      for (const T x : g.slopes) spec.alibi.push_back(tame_value(x, 1e3) ? x : T(0));
      // A NaN or +inf sink leaves its head unchecked: none, for the reference.
      for (const T x : g.sinks) spec.sinks.push_back(std::isfinite(x) ? (long double)x : -INFINITY);
      if (!g.d_lse.empty()) dLse = ea_test::Array4(1, H, tq, 1);
      if (g.d_s[static_cast<std::size_t>(s * H)].present()) dS = ea_test::Array4(1, H, tq, tk);
      if (g.mask[static_cast<std::size_t>(s * H)].present()) spec.mask = ea_test::Array4(1, H, tq, tk);
      if (g.bias[static_cast<std::size_t>(s * H)].present()) spec.bias = ea_test::Array4(1, H, tq, tk);
      std::vector<char> key_tame(static_cast<std::size_t>(Hkv * tk), 0);  // seen by a tame row
      for (Index h = 0; h < H; ++h) {
        const std::size_t at = static_cast<std::size_t>(s * H + h);
        for (Index i = 0; i < tq; ++i) {
          const bool tame = info[at][static_cast<std::size_t>(i)].tame;
          for (Index d = 0; d < dk; ++d) Q(0, h, i, d) = take(tame, g.q[at](i, d));
          for (Index c = 0; c < dv; ++c) dO(0, h, i, c) = take(tame, g.d_o[at](i, c));
          // dL/dLSE of a row that sees no key goes to dL/dsink alone.
          if (dLse)
            (*dLse)(0, h, i, 0) = take(tame || (info[at][static_cast<std::size_t>(i)].nvis == 0 &&
                                                tame_value(g.d_lse[at](i, 0), 1e3)),
                                       g.d_lse[at](i, 0));
          for (Index j = 0; j < tk; ++j) {
            const bool pair = tame && seen(s, h, i, j);
            if (dS) (*dS)(0, h, i, j) = take(pair, g.d_s[at](i, j));
            if (spec.mask) (*spec.mask)(0, h, i, j) = g.mask[at](i, j) ? 1 : 0;
            if (spec.bias) (*spec.bias)(0, h, i, j) = pair ? (long double)g.bias[at](i, j) : 0;
            if (pair) key_tame[static_cast<std::size_t>(h / group * tk + j)] = 1;
          }
        }
      }
      for (Index kh = 0; kh < Hkv; ++kh) {
        const std::size_t at = static_cast<std::size_t>(s * Hkv + kh);
        for (Index j = 0; j < tk; ++j) {
          const bool tame = key_tame[static_cast<std::size_t>(kh * tk + j)] != 0;
          for (Index d = 0; d < dk; ++d) K(0, kh, j, d) = take(tame, g.k[at](j, d));
          for (Index c = 0; c < dv; ++c) V(0, kh, j, c) = take(tame, g.v[at](j, c));
        }
      }
      refs.push_back(ea_test::reference_heads_backward<T>(Q, K, V, spec, dO, dS, dLse));
      // Products and sums that underflow are off by up to half the smallest subnormal each, and
      // such errors are scaled by up to scale * magnitude^2 on their way to a gradient.
      const long double n = static_cast<long double>(dk + dv + H * tq + tk + 8);
      slack.push_back(16 * (long double)std::numeric_limits<T>::denorm_min() *
                      (1 + (long double)rules.scale) * (1 + magnitude) * (1 + magnitude) * n * n);
    }
  }

  // dQ: zero for a row that sees no key; finite when its inputs are; the reference's when tame.
  for (Index s = 0; s < S && heads; ++s) {
    for (Index h = 0; h < H; ++h) {
      const std::size_t at = static_cast<std::size_t>(s * H + h);
      const Acc<T>& dq = g.dq[at];
      for (Index i = 0; i < dq.rows; ++i) {
        const RowInfo& row = info[at][static_cast<std::size_t>(i)];
        const std::string where = format("%s s=%td h=%td: dQ row %td (%td visible keys, safe=%d, tame=%d)",
                                         call, s, h, i, row.nvis, int(row.safe), int(row.tame));
        for (Index d = 0; d < dk; ++d) {
          const T x = dq(i, d);
          if (row.nvis == 0) {
            ++zeros;
            EA_EXPECT(x == 0, "%s: dQ(%td) = %.9g for a row that sees no key (must be 0)", where.c_str(), d,
                      double(x));
            continue;
          }
          if (row.safe) {
            ++finite;
            EA_EXPECT(std::isfinite(x), "%s: dQ(%td) = %.9g is not finite though its inputs are",
                      where.c_str(), d, double(x));
          }
          if (row.tame && !refs.empty()) {
            const auto& ref = refs[static_cast<std::size_t>(s)];
            ++compared;
            EA_EXPECT(near_reference(x, ref.dq(0, h, i, d), ref.dq_tol(0, h, i, d),
                                     slack[static_cast<std::size_t>(s)], worst),
                      "%s: dQ(%td) = %.9g, reference %.9Lg (bound %.3Lg)", where.c_str(), d, double(x),
                      ref.dq(0, h, i, d), ref.dq_tol(0, h, i, d));
          }
        }
      }
    }
  }
  // dK and dV: zero for a key no row of the group sees (padded keys included); finite and the
  // reference's when every row that sees it is safe (tame).
  for (Index s = 0; s < S && heads; ++s) {
    for (Index kh = 0; kh < Hkv; ++kh) {
      const std::size_t at = static_cast<std::size_t>(s * Hkv + kh);
      const Acc<T>&dK = g.dk_[at], &dV = g.dv_[at];
      for (Index j = 0; j < dK.rows; ++j) {
        bool any = false, all_safe = true, all_tame = true;
        for (Index h = kh * group; h < (kh + 1) * group; ++h) {
          const std::size_t qat = static_cast<std::size_t>(s * H + h);
          for (Index i = 0; i < g.q[qat].rows; ++i) {
            if (!seen(s, h, i, j)) continue;
            any = true;
            all_safe = all_safe && info[qat][static_cast<std::size_t>(i)].safe;
            all_tame = all_tame && info[qat][static_cast<std::size_t>(i)].tame;
          }
        }
        const std::string where = format("%s s=%td kv head %td: key %td (seen=%d, safe=%d, tame=%d)", call, s,
                                         kh, j, int(any), int(all_safe), int(all_tame));
        const auto one = [&](const Acc<T>& grad, Index cols, const char* name, const ea_test::Array4* ref,
                             const ea_test::Array4* tol) {
          for (Index c = 0; c < cols; ++c) {
            const T x = grad(j, c);
            if (!any) {
              ++zeros;
              EA_EXPECT(x == 0, "%s: %s(%td) = %.9g for a key no row sees (must be 0)", where.c_str(), name,
                        c, double(x));
              continue;
            }
            if (all_safe) {
              ++finite;
              EA_EXPECT(std::isfinite(x), "%s: %s(%td) = %.9g is not finite though its inputs are",
                        where.c_str(), name, c, double(x));
            }
            if (all_tame && ref != nullptr) {
              ++compared;
              EA_EXPECT(near_reference(x, (*ref)(0, kh, j, c), (*tol)(0, kh, j, c),
                                       slack[static_cast<std::size_t>(s)], worst),
                        "%s: %s(%td) = %.9g, reference %.9Lg (bound %.3Lg)", where.c_str(), name, c,
                        double(x), (*ref)(0, kh, j, c), (*tol)(0, kh, j, c));
            }
          }
        };
        const ea_test::BackwardReference* ref = refs.empty() ? nullptr : &refs[static_cast<std::size_t>(s)];
        one(dK, dk, "dK", ref ? &ref->dk : nullptr, ref ? &ref->dk_tol : nullptr);
        one(dV, dv, "dV", ref ? &ref->dv : nullptr, ref ? &ref->dv_tol : nullptr);
      }
    }
  }
  // dbias: zero where no (sequence, head) it sums over sees the pair (an empty sum too: no
  // sequence or no head); finite and the reference's sum when every row that sees it is safe
  // (tame).
  for (Index bb = 0; bb < g.db_batch; ++bb) {
    for (Index bh = 0; bh < g.db_heads; ++bh) {
      const Acc<T>& db = g.d_bias[static_cast<std::size_t>(bb * g.db_heads + bh)];
      for (Index i = 0; i < db.rows; ++i) {
        for (Index j = 0; j < db.cols; ++j) {
          bool any = false, all_safe = true, all_tame = true;
          long double ref = 0, tol = 0, sl = 0;
          for (Index s = 0; s < S && heads; ++s) {
            if (g.db_batch != 1 && s != bb) continue;
            for (Index h = 0; h < H; ++h) {
              if (g.db_heads != 1 && h != bh) continue;
              if (!seen(s, h, i, j)) continue;
              any = true;
              const RowInfo& row = info[static_cast<std::size_t>(s * H + h)][static_cast<std::size_t>(i)];
              all_safe = all_safe && row.safe;
              all_tame = all_tame && row.tame;
              if (!refs.empty()) {
                ref += refs[static_cast<std::size_t>(s)].d_bias(0, h, i, j);
                tol += refs[static_cast<std::size_t>(s)].d_bias_tol(0, h, i, j);
                sl = std::max(sl, slack[static_cast<std::size_t>(s)]);
              }
            }
          }
          const T x = db(i, j);
          const std::string where = format("%s: dbias(%td, %td, %td, %td) (seen=%d, safe=%d, tame=%d)", call,
                                           bb, bh, i, j, int(any), int(all_safe), int(all_tame));
          if (!any) {
            ++zeros;
            EA_EXPECT(x == 0, "%s = %.9g, but no (sequence, head) it sums over sees that pair (must be 0)",
                      where.c_str(), double(x));
            continue;
          }
          if (all_safe) {
            ++finite;
            EA_EXPECT(std::isfinite(x), "%s = %.9g is not finite though its inputs are", where.c_str(),
                      double(x));
          }
          if (all_tame && !refs.empty()) {
            ++compared;
            EA_EXPECT(near_reference(x, ref, tol, sl * H, worst), "%s = %.9g, reference %.9Lg (bound %.3Lg)",
                      where.c_str(), double(x), ref, tol);
          }
        }
      }
    }
  }
  // dL/dsinks, per head: the sum over every sequence's rows of -P_sink,i (D_i - dLSE_i). Exactly 0
  // without rows (no sequence, T_q = 0), and for a sink of -inf (no sink) when every row is safe
  // or sees no key with finite dOUT and dLSE (its D_i finite); with a finite sink, then finite, and
  // the reference's sum when every such row is tame.
  for (Index h = 0; g.d_sinks != nullptr && h < H; ++h) {
    const T x = g.d_sinks[h], sink = g.sinks[static_cast<std::size_t>(h)];
    Index rows = 0;
    bool all_safe = g.forward, all_tame = g.forward && heads;
    long double ref = 0, tol = 0, sl = 0;
    for (Index s = 0; s < S && heads; ++s) {
      const std::size_t at = static_cast<std::size_t>(s * H + h);
      for (Index i = 0; i < g.q[at].rows; ++i) {
        ++rows;
        const RowInfo& row = info[at][static_cast<std::size_t>(i)];
        bool dead_ok = row.nvis == 0 && (g.d_lse.empty() || tame_value(g.d_lse[at](i, 0), 1e3));
        for (Index c = 0; c < dv; ++c) dead_ok = dead_ok && tame_value(g.d_o[at](i, c), 1e3);
        all_safe = all_safe && (row.safe || dead_ok);
        all_tame = all_tame && (row.tame || dead_ok);
      }
      if (!refs.empty()) {
        ref += refs[static_cast<std::size_t>(s)].d_sinks[static_cast<std::size_t>(h)];
        tol += refs[static_cast<std::size_t>(s)].d_sinks_tol[static_cast<std::size_t>(h)];
        sl = std::max(sl, slack[static_cast<std::size_t>(s)]);
      }
    }
    const std::string where = format("%s: dL/dsink(%td) (sink %.9g, %td rows, safe=%d, tame=%d)", call, h,
                                     double(sink), rows, int(all_safe), int(all_tame));
    if (rows == 0 || (sink == -std::numeric_limits<T>::infinity() && all_safe)) {
      ++zeros;
      EA_EXPECT(x == 0, "%s = %.9g (must be 0: no rows, or no sink)", where.c_str(), double(x));
      continue;
    }
    all_safe = all_safe && std::isfinite(sink);
    all_tame = all_tame && all_safe;
    if (all_safe) {
      ++finite;
      EA_EXPECT(std::isfinite(x), "%s = %.9g is not finite though its inputs are", where.c_str(), double(x));
    }
    if (all_tame && !refs.empty()) {
      ++compared;
      EA_EXPECT(near_reference(x, ref, tol, sl * (rows + 1), worst),
                "%s = %.9g, reference %.9Lg (bound %.3Lg)", where.c_str(), double(x), ref, tol);
    }
  }
  note(
      format("  checked: %zu gradient elements exactly 0, %zu finite, %zu against the reference (worst error "
             "%.3Lg of its bound)",
             zeros, finite, compared, worst));
}

template <class T>
Rules<T> rules_of(const ea::Options& opt, Index dk) {
  Rules<T> rules;
  rules.causal = opt.causal;
  rules.wl = opt.window_left, rules.wr = opt.window_right;
  rules.chunk = opt.chunk_size, rules.chunk_origin = opt.chunk_origin;
  rules.scale = resolved_scale<T>(opt, dk);
  rules.softcap = static_cast<T>(opt.softcap);
  return rules;
}

/// The forward's values copied into a tensor of (perhaps faulted) sizes, where both have them;
/// false when the tensor cannot hold them all (its elements share memory: zero or overlapping
/// strides), so that what a call reads from it is not the forward's.
template <class T>
bool copy_into(const Tensor<T>& t, const std::vector<T>& src, Index B, Index H, Index rows, Index cols) {
  const auto at = [&](Index b, Index h, Index i, Index c) -> const T& {
    return src[static_cast<std::size_t>(((b * H + h) * rows + i) * cols + c)];
  };
  const Index nb = std::min(B, t.n[0]), nh = std::min(H, t.n[1]), ni = std::min(rows, t.n[2]),
              nc = std::min(cols, t.n[3]);
  for (Index b = 0; b < nb; ++b)
    for (Index h = 0; h < nh; ++h)
      for (Index i = 0; i < ni; ++i)
        for (Index c = 0; c < nc; ++c) t.at(b, h, i, c) = at(b, h, i, c);
  bool held = true;
  for (Index b = 0; b < nb; ++b)
    for (Index h = 0; h < nh; ++h)
      for (Index i = 0; i < ni; ++i)
        for (Index c = 0; c < nc; ++c)
          held = held && std::memcmp(&t.at(b, h, i, c), &at(b, h, i, c), sizeof(T)) == 0;
  return held;
}

/// Where ATTN and LSE come from.
inline const char* source_name(bool arbitrary, bool forward_ok) {
  return arbitrary ? "arbitrary values" : forward_ok ? "the forward" : "arbitrary values (the forward threw)";
}

// ---------------------------------------------------------------------------------------------
// attention_heads_backward_into and attention_varlen_backward_into.

/// Which tensor a fault, a claim or an overlap concerns.
enum Slot { kQ, kK, kV, kOut, kLse, kDOut, kDScores, kDQ, kDK, kDV, kDBias, kMask, kBias, kSlots };
const char* bw_slot_name(int s) {
  static const char* names[] = {"Q",  "K",  "V",  "out",    "lse",  "d_out", "d_scores",
                                "dq", "dk", "dv", "d_bias", "mask", "bias"};
  return names[s];
}

/// One multi-head backward call, its phases in this order: decode, lay_out, fill_values,
/// make_views, forward (ATTN and LSE), expect, invoke, then the checks of a call that returned.
template <class T>
struct HeadsBackwardCall {
  HeadsBackwardCall(Call call_, const ea::Options& opt_, Reader& r_, bool big_)
      : call(call_), opt(opt_), r(r_), big(big_) {}

  Call call;
  const ea::Options& opt;
  Reader& r;
  bool big;

  // Decoded.
  bool varlen = false, has_ds = false, has_db = false, arbitrary = false;
  HeadsShape sh;
  MaskChoice mc;
  Index n[kSlots][4] = {};
  std::array<bool, kSlots> present{};
  Claim claim;
  int claim_slot = -1;
  Lay lays[kSlots] = {};
  Index pads[kSlots] = {};
  int alias_out = -1, alias_host = 0;
  Index alias_shift = 0;

  // Memory.
  Arena arena;
  Tensor<T> t[kMask];
  Tensor<bool> mask;
  Tensor<T> bias;
  Tensor<std::int64_t> lengths, cuq, cuk;
  Tensor<T> slopes;
  // Decoded last (fill_terms): the sinks, dL/dLSE and where dL/dsinks goes, each in a buffer of
  // its own.
  Tensor<T> sinks, d_lse, d_sinks;
  bool has_sinks = false, has_dlse = false, has_dsinks = false;

  // What the library is handed and what must happen.
  ea::HeadsView<const T> Qv, Kv, Vv, Ov, Lv, DOv, DSv;
  ea::HeadsView<T> DQv, DKv, DVv, DBv;
  ea::Masks<T> masks;
  ea::BackwardTerms<T> terms;
  Index sequences = 0;
  bool forward_ok = false;
  Expect e;

  void decode() {
    varlen = call == Call::VarlenBackward;
    const std::uint8_t v = r.u8();
    has_ds = !varlen && (v & 1);
    const int db = (v >> 1) & 3;  // 2: d_bias with a bias; 3: d_bias, a bias or not
    has_db = !varlen && db >= 2;
    arbitrary = ((v >> 3) & 3) == 3;
    sh = decode_heads_shape(r, big, varlen);
    mc = decode_mask_choice(r, varlen, sh.B, sh.H);
    if (db == 2 && !varlen) mc.bias = true;
    const Index B = sh.B, H = sh.H, Hkv = sh.Hkv, tq = sh.tq, tk = sh.tk, dk = sh.dk, dv = sh.dv;
    const auto set = [&](int s, Index b, Index h, Index tt, Index d) {
      n[s][0] = b, n[s][1] = h, n[s][2] = tt, n[s][3] = d;
    };
    set(kQ, B, H, tq, dk);
    set(kK, B, Hkv, tk, dk);
    set(kV, B, Hkv, tk, dv);
    set(kOut, B, H, tq, dv);
    set(kLse, B, H, tq, 1);
    set(kDOut, B, H, tq, dv);
    set(kDScores, B, H, tq, tk);
    set(kDQ, B, H, tq, dk);
    set(kDK, B, Hkv, tk, dk);
    set(kDV, B, Hkv, tk, dv);
    set(kDBias, mc.bb, mc.bh, tq, tk);
    set(kMask, mc.mb, mc.mh, tq, tk);
    set(kBias, mc.bb, mc.bh, tq, tk);
    present = {true, true, true, true, true, true, has_ds, true, true, true, has_db, mc.mask, mc.bias};
    // A real shape fault (the buffers follow it): one size one more or one less.
    {
      const std::uint8_t f = r.u8() % 4;
      if (f >= 2) {
        const std::uint8_t b = r.u8();
        const int slot = (b & 15) % kSlots, axis = (b >> 4) % 4;
        if (present[slot]) {
          n[slot][axis] += f == 3 || n[slot][axis] == 0 ? 1 : -1;
          note(format("fault: %s size %d is %td", bw_slot_name(slot), axis, n[slot][axis]));
        }
      }
      if (r.u8() % 8 == 7) {
        sh.H = Hkv * sh.group + 1;  // not a multiple of the key/value heads
        for (int s : {kQ, kOut, kLse, kDOut, kDScores, kDQ}) n[s][1] = sh.H;
        note(format("fault: H = %td with %td key/value heads", sh.H, Hkv));
      }
    }
    // A claimed size (the buffer does not follow it): every size of a backward call is compared
    // with another one, so any claim must be rejected.
    {
      const std::uint8_t b = r.u8();
      if (b % 8 == 7) {
        const std::uint8_t w = r.u8();
        claim_slot = (w & 15) % kSlots;
        claim.axis = (w >> 4) % 4;
        claim.value = kHuge[r.u8() % 6];
        if (!present[claim_slot]) claim_slot = -1, claim.axis = -1;
      }
    }
    // Layouts and overlap.
    for (int s = 0; s < kSlots; ++s) {
      const std::uint8_t b = r.u8();
      lays[s] = s <= kDScores ? heads_input_lay(b)
                : s <= kDBias ? heads_output_lay(b)
                              : (b % 3 == 2   ? Lay::ColMajor
                                 : b % 3 == 1 ? Lay::Padded
                                              : Lay::BHTD);
      pads[s] = 1 + (b >> 4) % 3;
    }
    {
      const std::uint8_t b = r.u8();
      if (b % 8 == 7 && !big) {
        alias_out = kDQ + (b >> 3) % 4;
        alias_host = r.u8() % 12;  // Q K V out lse d_out d_scores, bias, slopes/cu_q, lengths/cu_k, mask, dq
        alias_shift = r.u8() % 6;
      }
    }
  }

  void lay_out() {
    for (int s = 0; s < kMask; ++s)
      t[s] = make_tensor<T>(n[s][0], n[s][1], n[s][2], n[s][3], lays[s], pads[s]);
    mask = make_tensor<bool>(n[kMask][0], n[kMask][1], n[kMask][2], n[kMask][3], lays[kMask], pads[kMask]);
    bias = make_tensor<T>(n[kBias][0], n[kBias][1], n[kBias][2], n[kBias][3], lays[kBias], pads[kBias]);
    for (int s = 0; s <= kDScores; ++s) place(t[s], arena);
    place(mask, arena);
    place(bias, arena);
    lengths = make_tensor<std::int64_t>(1, 1, 1, sh.B, Lay::BHTD, 0);
    slopes = make_tensor<T>(1, 1, 1, sh.H, Lay::BHTD, 0);
    cuq = make_tensor<std::int64_t>(1, 1, 1, Index(sh.cu_q.size()), Lay::BHTD, 0);
    cuk = make_tensor<std::int64_t>(1, 1, 1, Index(sh.cu_k.size()), Lay::BHTD, 0);
    place(lengths, arena);
    place(slopes, arena);
    place(cuq, arena);
    place(cuk, arena);
    for (int s = kDQ; s <= kDBias; ++s) {
      const int host = alias_host;
      if (s != alias_out || (host == 6 && !has_ds) || (host == 7 && !mc.bias) || (host == 10 && !mc.mask) ||
          (host == 11 && s == kDQ)) {
        place(t[s], arena);
        continue;
      }
      const char* name = host <= 6    ? bw_slot_name(host)
                         : host == 7  ? "bias"
                         : host == 8  ? (varlen ? "cu_seqlens_q" : "alibi_slopes")
                         : host == 9  ? (varlen ? "cu_seqlens_k" : "key_lengths")
                         : host == 10 ? "mask"
                                      : "dq";
      if (host <= 6) place_inside(t[s], t[host], arena, alias_shift);
      if (host == 7) place_inside(t[s], bias, arena, alias_shift);
      if (host == 8 && varlen) place_inside(t[s], cuq, arena, alias_shift);
      if (host == 8 && !varlen) place_inside(t[s], slopes, arena, alias_shift);
      if (host == 9) place_inside(t[s], varlen ? cuk : lengths, arena, alias_shift);
      if (host == 10) place_inside(t[s], mask, arena, alias_shift);
      if (host == 11) place_inside(t[s], t[kDQ], arena, alias_shift);
      note(format("  %s placed over %s + %td elements", bw_slot_name(s), name, alias_shift));
    }
    arena.allocate();
  }

  void fill_values() {
    note(format("  %s<%s>%s, ATTN and LSE from %s%s%s", call_name(call), type_name<T>(), big ? " (big)" : "",
                arbitrary ? "the input" : "the forward", has_ds ? ", with d_scores" : "",
                has_db ? ", with d_bias" : ""));
    for (int s = 0; s <= kV; ++s) {
      Filler<T> f(r, big);
      fill(t[s], f);
      note(format("  %s %s values %s", bw_slot_name(s), t[s].describe().c_str(), f.describe().c_str()));
    }
    if (mc.mask) {
      note("  mask " + mask.describe());
      fill_mask(mask, r);
    }
    if (mc.bias) {
      Filler<T> f(r, big);
      fill(bias, f);
      note("  bias " + bias.describe() + " values " + f.describe());
    }
    if (mc.lengths) fill_key_lengths(r, lengths, sh.B, sh.tk);
    if (mc.alibi) fill_alibi(r, slopes, sh.H, big);
    for (std::size_t i = 0; i < sh.cu_q.size(); ++i) cuq.at(0, 0, 0, Index(i)) = sh.cu_q[i];
    for (std::size_t i = 0; i < sh.cu_k.size(); ++i) cuk.at(0, 0, 0, Index(i)) = sh.cu_k[i];
    if (varlen) {
      std::string s =
          format("  %td sequences%s: cu_seqlens_q", sh.S, sh.seq_claim < 0 ? " (passed as -1)" : "");
      for (auto x : sh.cu_q) s += format(" %lld", (long long)x);
      s += "; cu_seqlens_k";
      for (auto x : sh.cu_k) s += format(" %lld", (long long)x);
      note(s);
    }
    // out and lse (overwritten by the forward's unless arbitrary), d_out, d_scores.
    for (int s = kOut; s <= kDScores; ++s) {
      if (!present[s]) continue;
      Filler<T> f(r, big);
      fill(t[s], f);
      note(format("  %s %s values %s", bw_slot_name(s), t[s].describe().c_str(), f.describe().c_str()));
    }
    for (int s = kDQ; s <= kDBias; ++s)
      if (present[s]) note(format("  %s %s", bw_slot_name(s), t[s].describe().c_str()));
    if (claim_slot >= 0)
      note(format("claim: %s size %d = %td (its buffer holds %td)", bw_slot_name(claim_slot), claim.axis,
                  claim.value, n[claim_slot][claim.axis]));
  }

  /// The sinks and BackwardTerms, read after everything else (so that inputs from before they
  /// existed decode as they did: 0 bytes give none): the sinks (fill_sinks), then a byte: bit 0
  /// d_lse, bit 1 d_sinks (bits 2-4 all set: even without sinks, which must throw), bits 5-7 all
  /// set: d_lse one token too many (must throw); with d_lse its layout and values.
  void fill_terms() {
    const Index H = n[kQ][1];
    sinks = make_tensor<T>(1, 1, 1, H, Lay::BHTD, 0);
    place(sinks, arena);
    arena.allocate();
    has_sinks = fill_sinks(r, sinks, H);
    const std::uint8_t b = r.u8();
    has_dlse = b & 1;
    has_dsinks = ((b >> 1) & 1) && (has_sinks || ((b >> 2) & 7) == 7);
    const bool dlse_fault = (b >> 5) == 7;
    if (has_dlse) {
      const std::uint8_t lay = r.u8();
      d_lse = make_tensor<T>(n[kLse][0], n[kLse][1], n[kLse][2] + (dlse_fault ? 1 : 0), 1,
                             heads_input_lay(lay), 1 + (lay >> 4) % 3);
      place(d_lse, arena);
    }
    d_sinks = make_tensor<T>(1, 1, 1, has_dsinks ? H : 0, Lay::BHTD, 0);
    place(d_sinks, arena);
    arena.allocate();
    if (has_dlse) {
      Filler<T> f(r, big);
      fill(d_lse, f);
      note(format("  d_lse %s values %s%s", d_lse.describe().c_str(), f.describe().c_str(),
                  dlse_fault ? " (fault: one token too many)" : ""));
    }
    if (has_dsinks) note(format("  d_sinks wanted (%td values)%s", H, has_sinks ? "" : ", without sinks"));
  }

  void make_views() {
    const auto view = [&](int s) { return heads_view<T>(t[s], claim_slot == s ? claim : Claim{}); };
    Qv = view(kQ), Kv = view(kK), Vv = view(kV), Ov = view(kOut), Lv = view(kLse), DOv = view(kDOut);
    if (has_ds) DSv = view(kDScores);
    DQv = view(kDQ), DKv = view(kDK), DVv = view(kDV);
    if (has_db) DBv = view(kDBias);
    if (mc.mask) masks.mask = broadcast_of<bool>(mask, claim_slot == kMask ? claim : Claim{});
    if (mc.bias) masks.bias = broadcast_of<T>(bias, claim_slot == kBias ? claim : Claim{});
    masks.key_lengths = mc.lengths ? lengths.data() : nullptr;
    masks.alibi_slopes = mc.alibi ? slopes.data() : nullptr;
    masks.sinks = has_sinks ? sinks.data() : nullptr;
    if (has_dlse) terms.d_lse = heads_view<T>(d_lse);
    terms.d_sinks = has_dsinks ? d_sinks.data() : nullptr;
    sequences = sh.seq_claim < 0 ? sh.seq_claim : sh.S;
  }

  /// ATTN and LSE from the library's forward on the same views (one thread), unless arbitrary
  /// or the forward throws (then the decoded values stay).
  void forward() {
    if (arbitrary) return;
    const Index B = sh.B, H = sh.H, tq = sh.tq, dv = sh.dv;
    std::vector<T> out(static_cast<std::size_t>(B * H * tq * dv), T(0)),
        lse(static_cast<std::size_t>(B * H * tq), T(0));
    ea::Options one = opt;
    one.threads = 1;
    try {
      const auto O = ea::HeadsView<T>::bhtd(out.data(), B, H, tq, dv);
      const auto L = ea::HeadsView<T>::bhtd(lse.data(), B, H, tq, 1);
      if (varlen) {
        ea::attention_varlen_into(Qv, Kv, Vv, sh.cu_q.data(), sh.cu_k.data(), sequences, O, L, one, masks);
      } else {
        ea::attention_heads_into(Qv, Kv, Vv, O, L, one, masks);
      }
    } catch (const std::invalid_argument&) {
      note("  (the forward threw: ATTN and LSE keep the decoded values)");
      return;
    }
    forward_ok = copy_into(t[kOut], out, B, H, tq, dv);
    forward_ok = copy_into(t[kLse], lse, B, H, tq, 1) && forward_ok;
    if (!forward_ok) note("  (out or lse cannot hold the forward's values: their elements share memory)");
  }

  /// Whether the call must throw: MultiHead.hpp's rules, the overlap rule (fuzz_overlap.hpp).
  void expect() {
    const auto dims = [](const auto& v) { return std::array<Index, 4>{v.batch, v.heads, v.tokens, v.dim}; };
    const auto nonneg = [&](const auto& v) {
      for (Index x : dims(v))
        if (x < 0) return false;
      return true;
    };
    const auto shape_is = [&](const auto& v, Index b, Index h, Index tt, Index d) {
      return nonneg(v) && dims(v) == std::array<Index, 4>{b, h, tt, d};
    };
    e.check(nonneg(Qv) && nonneg(Kv) && nonneg(Vv), "a negative size");
    e.check(Kv.batch == Qv.batch && Vv.batch == Qv.batch, "batch sizes differ");
    e.check(Kv.heads == Vv.heads, "K and V head counts differ");
    e.check(Kv.heads == 0 ? Qv.heads == 0 : (Kv.heads > 0 && Qv.heads % Kv.heads == 0),
            "H is not a multiple of H_kv");
    e.check(Kv.tokens == Vv.tokens, "T_k differs between K and V");
    e.check(Qv.dim == Kv.dim, "d_k differs between Q and K");
    e.check(options_ok<T>(opt, Qv.dim), "an option is invalid");
    const Index B = Qv.batch, H = Qv.heads, tq = Qv.tokens, tk = Kv.tokens, Hkv = Kv.heads;
    e.check(shape_is(Ov, B, H, tq, Vv.dim), "out is not [B, H, T_q, d_v]");
    e.check(shape_is(Lv, B, H, tq, 1), "lse is not [B, H, T_q, 1]");
    e.check(shape_is(DOv, B, H, tq, Vv.dim), "d_out is not [B, H, T_q, d_v]");
    if (has_ds) e.check(shape_is(DSv, B, H, tq, tk), "d_scores is not [B, H, T_q, T_k]");
    e.check(shape_is(DQv, B, H, tq, Qv.dim), "dq is not [B, H, T_q, d_k]");
    e.check(shape_is(DKv, B, Hkv, tk, Qv.dim), "dk is not [B, H_kv, T_k, d_k]");
    e.check(shape_is(DVv, B, Hkv, tk, Vv.dim), "dv is not [B, H_kv, T_k, d_v]");
    if (has_db) {
      e.check(mc.bias, "d_bias is given without a bias");
      if (mc.bias)
        e.check(shape_is(DBv, masks.bias.batch, masks.bias.heads, tq, tk),
                "d_bias does not have the bias's shape");
    }
    if (has_dlse) e.check(shape_is(terms.d_lse, B, H, tq, 1), "d_lse is not [B, H, T_q, 1]");
    if (has_dsinks) e.check(has_sinks, "d_sinks is given without sinks");
    const Index Bseq = varlen ? sequences : B;
    expect_mask_rules<T>(e, varlen, sequences, sh.S, sh.cu_q, sh.cu_k, Qv, Kv, masks);
    if (!e.invalid) {
      const ea::HeadsView<const T> outs[] = {DQv, DKv, DVv, DBv};
      for (const auto& o : outs)
        if (!o.empty()) e.check(nested(o), "an output's strides are not nested");
      for (const auto& o : outs) {
        if (o.empty()) continue;
        for (const auto& in : {Qv, Kv, Vv, Ov, Lv, DOv, DSv})
          expect_apart(e, verdict(o, in), "an output overlaps an input (Q, K, V, out, lse, d_out, d_scores)");
        expect_apart_from_masks(e, o, masks, H, Bseq, varlen ? cuq.data() : nullptr,
                                varlen ? cuk.data() : nullptr);
      }
      for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b) expect_apart(e, verdict(outs[a], outs[b]), "two outputs overlap");
    }
    if (claim_slot >= 0) e.fail("a claimed size exceeds its buffer and must be rejected");
    note(format("expect: %s%s", e.invalid ? ("throw: " + e.why).c_str() : "success",
                e.uncertain ? " (or a throw)" : ""));
  }

  void invoke(const ea::Options& o) {
    if (varlen) {
      ea::attention_varlen_backward_into(Qv, Kv, Vv, Ov, Lv, DOv, cuq.data(), cuk.data(), sequences, DQv, DKv,
                                         DVv, o, masks, terms);
    } else {
      ea::attention_heads_backward_into(Qv, Kv, Vv, Ov, Lv, DOv, DSv, DQv, DKv, DVv, DBv, o, masks, terms);
    }
  }

  /// Nothing but the outputs' elements was written; a packed batch's rows after its last
  /// sequence are left alone.
  void check_untouched() {
    mark_written(t[kDQ], 0, varlen ? sh.cu_q[sh.S] : -1);
    mark_written(t[kDK], 0, varlen ? sh.cu_k[sh.S] : -1);
    mark_written(t[kDV], 0, varlen ? sh.cu_k[sh.S] : -1);
    if (has_db) mark_written(t[kDBias]);
    if (has_dsinks) mark_written(d_sinks);
    arena.expect_only_outputs_changed(call_name(call));
  }

  void check_values() {
    Grads<T> g;
    const Index B = sh.B, H = sh.H, Hkv = sh.Hkv;
    g.S = varlen ? sh.S : B, g.H = H, g.Hkv = Hkv, g.dk = sh.dk, g.dv = sh.dv;
    g.forward = forward_ok;
    // The long-double reference knows the alignments only: with Options::diagonal_offset the
    // structural checks (key_visible at the offset) hold the gradients.
    g.reference = forward_ok && !big && !opt.diagonal_offset;
    const bool bottom_right = opt.alignment == ea::CausalAlignment::BottomRight;
    for (Index s = 0; s < g.S; ++s) {
      const Index q0 = varlen ? sh.cu_q[s] : 0, lq = varlen ? sh.cu_q[s + 1] - q0 : sh.tq;
      const Index k0 = varlen ? sh.cu_k[s] : 0, lk = varlen ? sh.cu_k[s + 1] - k0 : sh.tk;
      const Index b = varlen ? 0 : s;
      const Index keys = mc.lengths ? Index(lengths.at(0, 0, 0, s)) : lk;
      g.keys.push_back(keys);
      g.offset.push_back(diagonal_of(opt, keys, lq));
      for (Index h = 0; h < H; ++h) {
        g.q.push_back(matrix_of(t[kQ], b, h, q0, lq));
        g.o.push_back(matrix_of(t[kOut], b, h, q0, lq));
        g.lse.push_back(matrix_of(t[kLse], b, h, q0, lq));
        g.d_o.push_back(matrix_of(t[kDOut], b, h, q0, lq));
        g.d_s.push_back(has_ds ? matrix_of(t[kDScores], b, h) : Acc<T>{});
        g.dq.push_back(matrix_of(t[kDQ], b, h, q0, lq));
        g.mask.push_back(mc.mask ? matrix_of(mask, mask.n[0] == 1 ? 0 : b, mask.n[1] == 1 ? 0 : h)
                                 : Acc<bool>{});
        g.bias.push_back(mc.bias ? matrix_of(bias, bias.n[0] == 1 ? 0 : b, bias.n[1] == 1 ? 0 : h)
                                 : Acc<T>{});
      }
      for (Index kh = 0; kh < Hkv; ++kh) {
        g.k.push_back(matrix_of(t[kK], b, kh, k0, lk));
        g.v.push_back(matrix_of(t[kV], b, kh, k0, lk));
        g.dk_.push_back(matrix_of(t[kDK], b, kh, k0, lk));
        g.dv_.push_back(matrix_of(t[kDV], b, kh, k0, lk));
      }
    }
    if (mc.alibi)
      for (Index h = 0; h < H; ++h) g.slopes.push_back(slopes.at(0, 0, 0, h));
    if (has_sinks)
      for (Index h = 0; h < H; ++h) g.sinks.push_back(sinks.at(0, 0, 0, h));
    if (has_dlse) {
      for (Index s = 0; s < g.S; ++s) {
        const Index q0 = varlen ? sh.cu_q[s] : 0, lq = varlen ? sh.cu_q[s + 1] - q0 : sh.tq;
        for (Index h = 0; h < H; ++h) g.d_lse.push_back(matrix_of(d_lse, varlen ? 0 : s, h, q0, lq));
      }
    }
    g.d_sinks = has_dsinks ? d_sinks.data() : nullptr;
    if (has_db) {
      g.db_batch = t[kDBias].n[0], g.db_heads = t[kDBias].n[1];
      for (Index bb = 0; bb < g.db_batch; ++bb)
        for (Index bh = 0; bh < g.db_heads; ++bh) g.d_bias.push_back(matrix_of(t[kDBias], bb, bh));
    }
    check_gradients(g, rules_of<T>(opt, sh.dk), bottom_right, call_name(call));
  }

  /// Several threads give bitwise the gradients of one (big inputs).
  void check_threads() {
    if (!big || opt.threads == 1) return;
    const auto digest = [&] {
      std::vector<unsigned char> bytes;
      for (int s = kDQ; s <= kDBias; ++s) {
        if (!present[s]) continue;
        const Buffer& b = arena[t[s].buf];
        bytes.insert(bytes.end(), b.bytes.get(), b.bytes.get() + b.size);
      }
      const Buffer& b = arena[d_sinks.buf];
      bytes.insert(bytes.end(), b.bytes.get(), b.bytes.get() + b.size);
      return bytes;
    };
    const std::vector<unsigned char> first = digest();
    arena.restore();
    ea::Options one = opt;
    one.threads = 1;
    invoke(one);
    EA_EXPECT(first == digest(), "%s: threads = %d and threads = 1 give different bits", call_name(call),
              opt.threads);
  }
};

template <class T>
void heads_backward(Call call, const ea::Options& opt, Reader& r, bool big) {
  HeadsBackwardCall<T> c(call, opt, r, big);
  c.decode();
  c.lay_out();
  c.fill_values();
  c.fill_terms();
  c.make_views();
  c.forward();
  c.expect();
  c.arena.snapshot();
  if (!outcome(call_name(call), c.e, [&] { c.invoke(opt); })) {
    c.arena.expect_unchanged(call_name(call));
    return;
  }
  c.check_untouched();
  c.check_values();
  c.check_threads();
}

// ---------------------------------------------------------------------------------------------
// attention_backward and attention_backward_into (Backward.hpp).

/// The single-head tensors.
enum SSlot { sQ, sK, sV, sAttn, sLse, sDAttn, sDScores, sDQ, sDK, sDV, sSlots };
const char* single_slot_name(int s) {
  static const char* names[] = {"Q", "K", "V", "attn", "lse", "d_attn", "d_scores", "dq", "dk", "dv"};
  return names[s];
}

struct BackwardSpec {
  bool into = false, with_ds = false, arbitrary = false;
  Index tq = 0, tk = 0, dk = 0, dv = 0;
  int share = 0;  // 1: K is Q; 2: V is K; 3: both
  int in_kind = 0, out_kind = 0;
  Index n[sSlots][2] = {};  // rows, cols
  Lay lay[sSlots] = {};
  Index pad[sSlots] = {};
  Index r0[3] = {}, c0[3] = {};  // initial sizes of resizable outputs
  int claim_slot = -1, claim_axis = 2;
  Index claim_value = 0;
  int alias_out = -1;  // which output (0 dq, 1 dk, 2 dv) lies over another tensor
  int alias_host = 0;  // Q K V attn lse d_attn d_scores, 7: the previous output
  Index alias_shift = 0;
};

template <class T, int IK, int OK>
void run_backward(const ea::Options& opt, BackwardSpec& sp, Reader& r, bool big) {
  const char* name = sp.into ? "attention_backward_into" : "attention_backward";
  Arena arena;
  Tensor<T> t[sSlots];
  for (int s = 0; s < sSlots; ++s) t[s] = make_tensor<T>(1, 1, sp.n[s][0], sp.n[s][1], sp.lay[s], sp.pad[s]);
  place(t[sQ], arena);
  if (sp.share & 1) {
    t[sK] = t[sQ];
  } else {
    place(t[sK], arena);
  }
  if (sp.share & 2) {
    t[sV] = t[sK];
  } else {
    place(t[sV], arena);
  }
  for (int s = sAttn; s <= sDScores; ++s) place(t[s], arena);
  const bool map_outputs = sp.into && OK == 0;
  if (map_outputs) {
    for (int o = 0; o < 3; ++o) {
      if (o == sp.alias_out) {
        place_inside(t[sDQ + o], sp.alias_host == 7 && o > 0 ? t[sDQ + o - 1] : t[sp.alias_host % 7], arena,
                     sp.alias_shift);
      } else {
        place(t[sDQ + o], arena);
      }
    }
  }
  arena.allocate();
  for (int s = sQ; s <= sDScores; ++s) {
    if ((s == sK && (sp.share & 1)) || (s == sV && (sp.share & 2)) || (s == sDScores && !sp.with_ds))
      continue;
    Filler<T> f(r, big);
    fill(t[s], f);
    note(format("  %s %s values %s", single_slot_name(s), t[s].describe().c_str(), f.describe().c_str()));
  }
  if (sp.share & 1) note("  K is Q");
  if (sp.share & 2) note("  V is K");
  for (int o = 0; o < 3; ++o) {
    if (!sp.into) break;
    if (map_outputs) {
      note(format("  output %s %s%s", single_slot_name(sDQ + o), t[sDQ + o].describe().c_str(),
                  o == sp.alias_out
                      ? format(" placed over %s + %td elements",
                               sp.alias_host == 7 && o > 0 ? single_slot_name(sDQ + o - 1)
                                                           : single_slot_name(sp.alias_host % 7),
                               sp.alias_shift)
                            .c_str()
                      : ""));
    } else {
      note(format("  output %s: resizable %s matrix, initially %tdx%td", single_slot_name(sDQ + o),
                  OK == 1 ? "row-major" : "col-major", sp.r0[o], sp.c0[o]));
    }
  }

  // ATTN and LSE: the forward's (attention_into, one thread) unless arbitrary or it throws.
  bool forward_ok = false;
  if (!sp.arbitrary) {
    ea::RowMatrix<T> out;
    ea::Vector<T> lse;
    ea::Options one = opt;
    one.threads = 1;
    const auto map = [](const Tensor<T>& x) {
      return ea::ConstStridedMap<T>(x.data(), x.n[2], x.n[3],
                                    Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(x.s[2], x.s[3]));
    };
    try {
      ea::attention_into(map(t[sQ]), map(t[sK]), map(t[sV]), out, lse, one);
      const std::vector<T> o(out.data(), out.data() + out.size()), l(lse.data(), lse.data() + lse.size());
      forward_ok = copy_into(t[sAttn], o, 1, 1, out.rows(), out.cols());
      forward_ok = copy_into(t[sLse], l, 1, 1, lse.rows(), 1) && forward_ok;
      if (!forward_ok) note("  (attn or lse cannot hold the forward's values: their elements share memory)");
    } catch (const std::invalid_argument&) {
      note("  (the forward threw: attn and lse keep the decoded values)");
    }
  }
  note(format("  attn and lse from %s", source_name(sp.arbitrary, forward_ok)));

  // What must happen (Backward.hpp, Compiled.hpp).
  Expect e;
  const auto size = [&](int s, int axis) {  // axis 0 rows, 1 cols, as the library is told
    return sp.claim_slot == s && sp.claim_axis == 2 + axis ? sp.claim_value : sp.n[s][axis];
  };
  const Index qr = size(sQ, 0), qc = size(sQ, 1), kr = size(sK, 0), kc = size(sK, 1), vr = size(sV, 0),
              vc = size(sV, 1);
  e.check(options_ok<T>(opt, qc), "an option is invalid");
  e.check(qc == kc, "d_k differs between Q and K");
  e.check(vr == kr, "T_k differs between K and V");
  e.check(size(sAttn, 0) == qr && size(sAttn, 1) == vc, "attn is not T_q x d_v");
  e.check(size(sLse, 0) == qr && size(sLse, 1) == 1, "lse is not T_q x 1");
  e.check(size(sDAttn, 0) == qr && size(sDAttn, 1) == vc, "d_attn is not T_q x d_v");
  if (sp.with_ds) e.check(size(sDScores, 0) == qr && size(sDScores, 1) == kr, "d_scores is not T_q x T_k");
  if (map_outputs) {
    const Index want[3][2] = {{qr, qc}, {kr, qc}, {kr, vc}};
    for (int o = 0; o < 3; ++o) {
      const bool shape_ok = size(sDQ + o, 0) == want[o][0] && size(sDQ + o, 1) == want[o][1];
      e.check(shape_ok, "an output has the wrong shape");
      if (shape_ok) e.check(nested(t[sDQ + o]), "an output's strides are not nested");
    }
    if (sp.alias_out >= 0) {
      const Tensor<T>& o = t[sDQ + sp.alias_out];
      const bool host_is_output = sp.alias_host == 7 && sp.alias_out > 0;
      const int host = host_is_output ? sDQ + sp.alias_out - 1 : sp.alias_host % 7;
      const bool host_used = host != sDScores || sp.with_ds;
      if (host_used && elements_intersect(byte_ranges(o), byte_ranges(t[host]))) {
        e.fail("an output overlaps an input or another output");
      } else if (host_used) {
        e.uncertain = true;  // the overlap check is conservative (byte ranges)
      }
    }
  }
  if (sp.claim_slot >= 0) e.fail("a claimed size exceeds its buffer and must be rejected");
  note(format("expect: %s%s", e.invalid ? ("throw: " + e.why).c_str() : "success",
              e.uncertain ? " (or either, the check being conservative)" : ""));

  const auto claim_of = [&](int s) {
    return sp.claim_slot == s ? Claim{sp.claim_axis, sp.claim_value} : Claim{};
  };
  In<T, IK> qi(t[sQ], claim_of(sQ)), ki(t[sK], claim_of(sK)), vi(t[sV], claim_of(sV));
  In<T, IK> ai(t[sAttn], claim_of(sAttn)), li(t[sLse], claim_of(sLse)), gi(t[sDAttn], claim_of(sDAttn));
  In<T, IK> si(t[sDScores], claim_of(sDScores));
  std::optional<Out<T, OK>> o0, o1, o2;
  if (sp.into) {
    o0.emplace(t[sDQ], claim_of(sDQ), sp.r0[0], sp.c0[0]);
    o1.emplace(t[sDK], claim_of(sDK), sp.r0[1], sp.c0[1]);
    o2.emplace(t[sDV], claim_of(sDV), sp.r0[2], sp.c0[2]);
  }
  ea::Gradients<T> ret;
  const auto invoke = [&](const ea::Options& o) {
    if (sp.into && sp.with_ds) {
      ea::attention_backward_into(qi.get(), ki.get(), vi.get(), ai.get(), li.get(), gi.get(), si.get(), o0->m,
                                  o1->m, o2->m, o);
    } else if (sp.into) {
      ea::attention_backward_into(qi.get(), ki.get(), vi.get(), ai.get(), li.get(), gi.get(), o0->m, o1->m,
                                  o2->m, o);
    } else if (sp.with_ds) {
      ret = ea::attention_backward(qi.get(), ki.get(), vi.get(), ai.get(), li.get(), gi.get(), si.get(), o);
    } else {
      ret = ea::attention_backward(qi.get(), ki.get(), vi.get(), ai.get(), li.get(), gi.get(), o);
    }
  };
  arena.snapshot();
  if (!outcome(name, e, [&] { invoke(opt); })) {
    arena.expect_unchanged(name);
    // Resizable outputs keep their size and values.
    if (sp.into && OK != 0) {
      int o = 0;
      for (const auto* m : {&o0->m, &o1->m, &o2->m}) {
        EA_EXPECT(m->rows() == sp.r0[o] && m->cols() == sp.c0[o] && (m->array() == T(-7)).all(),
                  "%s threw, yet resizable output %s changed (now %tdx%td, was %tdx%td of -7)", name,
                  single_slot_name(sDQ + o), Index(m->rows()), Index(m->cols()), sp.r0[o], sp.c0[o]);
        ++o;
      }
    }
    return;
  }

  // The gradients, of the documented shapes.
  const Index tq = sp.tq, tk = sp.tk, dk = sp.dk, dv = sp.dv;
  const auto result = [&](int o) -> Acc<T> {
    const Index rows = o == 0 ? tq : tk, cols = o == 2 ? dv : dk;
    Acc<T> a = map_outputs ? matrix_of(t[sDQ + o], 0, 0)
               : sp.into   ? (o == 0   ? acc_of(o0->m)
                              : o == 1 ? acc_of(o1->m)
                                       : acc_of(o2->m))
                           : (o == 0   ? acc_of(ret.dq)
                              : o == 1 ? acc_of(ret.dk)
                                       : acc_of(ret.dv));
    EA_EXPECT(a.rows == rows && a.cols == cols, "%s: %s is %tdx%td, not %tdx%td", name,
              single_slot_name(sDQ + o), a.rows, a.cols, rows, cols);
    return a;
  };
  if (map_outputs)
    for (int o = 0; o < 3; ++o) mark_written(t[sDQ + o]);
  arena.expect_only_outputs_changed(name);
  Grads<T> g;
  g.S = 1, g.H = 1, g.Hkv = 1, g.dk = dk, g.dv = dv;
  g.forward = forward_ok;
  g.reference = forward_ok && !big && !opt.diagonal_offset;  // (as above)
  g.q = {matrix_of(t[sQ], 0, 0)};
  g.o = {matrix_of(t[sAttn], 0, 0)};
  g.lse = {matrix_of(t[sLse], 0, 0)};
  g.d_o = {matrix_of(t[sDAttn], 0, 0)};
  g.d_s = {sp.with_ds ? matrix_of(t[sDScores], 0, 0) : Acc<T>{}};
  g.mask = {Acc<bool>{}};
  g.bias = {Acc<T>{}};
  g.k = {matrix_of(t[sK], 0, 0)};
  g.v = {matrix_of(t[sV], 0, 0)};
  g.keys = {tk};
  const bool bottom_right = opt.alignment == ea::CausalAlignment::BottomRight;
  g.offset = {diagonal_of(opt, tk, tq)};
  const auto gather = [&] {
    g.dq = {result(0)};
    g.dk_ = {result(1)};
    g.dv_ = {result(2)};
  };
  gather();
  check_gradients(g, rules_of<T>(opt, dk), bottom_right, name);

  // Several threads give the bits of one.
  if (big && opt.threads != 1) {
    Digest first;
    for (const Acc<T>* a : {&g.dq[0], &g.dk_[0], &g.dv_[0]}) first.add(*a);
    arena.restore();
    ea::Options one = opt;
    one.threads = 1;
    invoke(one);
    gather();  // returned matrices may have moved
    Digest again;
    for (const Acc<T>* a : {&g.dq[0], &g.dk_[0], &g.dv_[0]}) again.add(*a);
    EA_EXPECT(first.bytes == again.bytes, "%s: threads = %d and threads = 1 give different bits", name,
              opt.threads);
  }
}

template <class T>
void single_backward(const ea::Options& opt, Reader& r, bool big) {
  BackwardSpec sp;
  {
    const std::uint8_t v = r.u8();
    sp.into = v & 1;
    sp.with_ds = (v >> 1) & 1;
    sp.arbitrary = ((v >> 2) & 3) == 3;
  }
  if (big) {
    sp.tq = r.u16() % 300, sp.tk = r.u16() % 1100, sp.dk = 1 + r.u8() % 4, sp.dv = r.u8() % 5;
  } else {
    sp.tq = r.u8() % 13, sp.tk = r.u8() % 13, sp.dk = r.u8() % 13, sp.dv = r.u8() % 13;
  }
  sp.share = r.u8() % 8;
  if (sp.share > 3) sp.share = 0;
  if (sp.share & 1) sp.tk = sp.tq;
  if (sp.share & 2) sp.dv = sp.dk;
  const Index want[sSlots][2] = {{sp.tq, sp.dk}, {sp.tk, sp.dk}, {sp.tk, sp.dv}, {sp.tq, sp.dv},
                                 {sp.tq, 1},     {sp.tq, sp.dv}, {sp.tq, sp.tk}, {sp.tq, sp.dk},
                                 {sp.tk, sp.dk}, {sp.tk, sp.dv}};
  for (int s = 0; s < sSlots; ++s) sp.n[s][0] = want[s][0], sp.n[s][1] = want[s][1];
  // A real shape fault: one size one more or one less (not of shared inputs).
  {
    const std::uint8_t f = r.u8() % 4;
    if (f >= 2) {
      const std::uint8_t b = r.u8();
      const int slot = (b & 15) % sSlots, axis = (b >> 4) & 1;
      const bool skip =
          (slot <= sV && sp.share != 0) || (slot == sDScores && !sp.with_ds) || (slot >= sDQ && !sp.into);
      if (!skip) {
        sp.n[slot][axis] += f == 3 || sp.n[slot][axis] == 0 ? 1 : -1;
        note(
            format("fault: %s %s are %td", single_slot_name(slot), axis ? "cols" : "rows", sp.n[slot][axis]));
      }
    }
  }
  static const int kinds[] = {0, 0, 0, 1, 2};
  sp.in_kind = kinds[r.u8() % 5];
  sp.out_kind = sp.into ? kinds[r.u8() % 5] % 3 : 0;
  for (int s = sQ; s <= sDScores; ++s) {
    const std::uint8_t b = r.u8();
    sp.lay[s] = input_lay(b);
    sp.pad[s] = 1 + (b >> 4) % 2;
  }
  for (int o = 0; o < 3; ++o) {
    const std::uint8_t b = r.u8();
    static const Lay lays[] = {Lay::BHTD,     Lay::BHTD,    Lay::ColMajor, Lay::Padded,
                               Lay::ColMajor, Lay::ZeroRow, Lay::ZeroCol,  Lay::Interleaved};
    sp.lay[sDQ + o] = lays[b % 8];
    sp.pad[sDQ + o] = (b >> 6) % 3;
    sp.r0[o] = (b >> 3) % 2 ? want[sDQ + o][0] : (b >> 4) % 4;
    sp.c0[o] = (b >> 5) % 4;
  }
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && sp.in_kind == 0 && sp.share == 0) {
      const std::uint8_t w = r.u8();
      sp.claim_slot = (w & 15) % sSlots;
      sp.claim_axis = 2 + ((w >> 4) & 1);
      const Index values[] = {Index(1) << 40, Index(1) << 31, (Index(1) << 32) + 1, 13};
      sp.claim_value = values[(b >> 6) % 4];
      if (sp.claim_value == 13) sp.claim_value += sp.tq + sp.tk + sp.dk + sp.dv;
      if ((sp.claim_slot >= sDQ && (!sp.into || sp.out_kind != 0)) ||
          (sp.claim_slot == sDScores && !sp.with_ds))
        sp.claim_slot = -1;
    }
  }
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && sp.in_kind == 0 && sp.out_kind == 0 && sp.into && !big) {
      sp.alias_out = (b >> 3) % 3;
      sp.alias_host = r.u8() % 8;
      sp.alias_shift = r.u8() % 8;
    }
  }
  note(format(
      "single head: %s%s<%s>%s T_q=%td T_k=%td d_k=%td d_v=%td share=%d input kind %d output kind %d%s",
      sp.into ? "attention_backward_into" : "attention_backward", sp.with_ds ? "(+d_scores)" : "",
      type_name<T>(), big ? " (big)" : "", sp.tq, sp.tk, sp.dk, sp.dv, sp.share, sp.in_kind, sp.out_kind,
      sp.claim_slot < 0 ? ""
                        : format(" claim: %s %s = %td", single_slot_name(sp.claim_slot),
                                 sp.claim_axis == 2 ? "rows" : "cols", sp.claim_value)
                              .c_str()));
  switch (sp.in_kind * 3 + sp.out_kind) {
    case 0:
      run_backward<T, 0, 0>(opt, sp, r, big);
      break;
    case 1:
      run_backward<T, 0, 1>(opt, sp, r, big);
      break;
    case 2:
      run_backward<T, 0, 2>(opt, sp, r, big);
      break;
    case 3:
      run_backward<T, 1, 0>(opt, sp, r, big);
      break;
    case 4:
      run_backward<T, 1, 1>(opt, sp, r, big);
      break;
    case 5:
      run_backward<T, 1, 2>(opt, sp, r, big);
      break;
    case 6:
      run_backward<T, 2, 0>(opt, sp, r, big);
      break;
    case 7:
      run_backward<T, 2, 1>(opt, sp, r, big);
      break;
    default:
      run_backward<T, 2, 2>(opt, sp, r, big);
      break;
  }
}

}  // namespace

template <class T>
void backward(Call call, const ea::Options& opt, Reader& r, bool big) {
  if (call == Call::Backward) {
    single_backward<T>(opt, r, big);
  } else {
    heads_backward<T>(call, opt, r, big);
  }
}

template void backward<float>(Call, const ea::Options&, Reader&, bool);
template void backward<double>(Call, const ea::Options&, Reader&, bool);

}  // namespace ea_fuzz_attention
