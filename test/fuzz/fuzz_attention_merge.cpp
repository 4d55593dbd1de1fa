// SPDX-License-Identifier: MIT
// fuzz_attention, merge_attention_into: its rows against its formula (fuzz_attention.cpp: the input
// format and the contract).
#include "fuzz_attention_model.hpp"
#include "fuzz_overlap.hpp"

namespace ea_fuzz_attention {

template <class T>
void merge(Reader& r) {
  const Index B = r.u8() % 4, H = r.u8() % 4, Tn = r.u8() % 13, D = r.u8() % 13;
  enum { kOa, kLa, kOb, kLb, kO, kL, kN };
  static const char* names[] = {"out_a", "lse_a", "out_b", "lse_b", "out", "lse"};
  Index n[kN][4];
  for (int s = 0; s < kN; ++s) {
    n[s][0] = B, n[s][1] = H, n[s][2] = Tn, n[s][3] = s % 2 ? 1 : D;
  }
  {
    const std::uint8_t f = r.u8();
    if (f % 4 == 3) {
      const int slot = (f >> 2) % kN, axis = (f >> 5) % 4;
      n[slot][axis] += 1;
      note(format("fault: %s size %d is %td", names[slot], axis, n[slot][axis]));
    }
  }
  Claim claim;
  int claim_slot = -1;
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7) {
      claim_slot = (b >> 3) % kN;
      claim.axis = (b >> 6) % 4;
      claim.value = kHuge[r.u8() % 6];
    }
  }
  Arena arena;
  Tensor<T> t[kN];
  for (int s = 0; s < kN; ++s)
    t[s] = make_tensor<T>(n[s][0], n[s][1], n[s][2], n[s][3], heads_output_lay(r.u8()), 1);
  for (int s = 0; s < kO; ++s) place(t[s], arena);
  // Where the outputs go: apart, in place over an input, or partly over one.
  const std::uint8_t where_out = r.u8() % 8, where_lse = r.u8() % 8;
  const Index shift = r.u8() % 4;
  bool out_same = false, lse_same = false;
  if (where_out == 1 || where_out == 2) {
    t[kO] = t[where_out == 1 ? kOa : kOb];
    out_same = true;
  } else if (where_out == 3) {
    place_inside(t[kO], t[kOa], arena, shift);
  } else if (where_out == 4) {
    place_inside(t[kO], t[kLb], arena, shift);
  } else {
    place(t[kO], arena);
  }
  if (where_lse == 1 || where_lse == 2) {
    t[kL] = t[where_lse == 1 ? kLa : kLb];
    lse_same = true;
  } else if (where_lse == 3) {
    place_inside(t[kL], t[kLa], arena, shift);
  } else if (where_lse == 4 && !out_same) {
    place_inside(t[kL], t[kO], arena, shift);
  } else {
    place(t[kL], arena);
  }
  arena.allocate();
  for (int s = 0; s < kO; ++s) {
    if (s % 2 == 0) {
      Filler<T> f(r, false);
      fill(t[s], f);
      note(format("  %s %s values %s", names[s], t[s].describe().c_str(), f.describe().c_str()));
    } else {
      // Log-sum-exps: -inf (a side that saw no key) often.
      Rng rng(r.u32());
      const int mode = r.u8() % 4;
      for (Index b = 0; b < t[s].n[0]; ++b)
        for (Index h = 0; h < t[s].n[1]; ++h)
          for (Index i = 0; i < t[s].n[2]; ++i)
            for (Index d = 0; d < t[s].n[3]; ++d) {
              T x;
              const double u = rng.unit();
              if (mode == 3) {
                x = palette<T>(unsigned(rng.next()));
              } else if (u < 0.3) {
                x = -std::numeric_limits<T>::infinity();
              } else {
                x = T((rng.unit() * 2 - 1) * (mode == 0 ? 5 : mode == 1 ? 1e3 : 1e30));
              }
              t[s].at(b, h, i, d) = x;
            }
      note(format("  %s %s values mode %d", names[s], t[s].describe().c_str(), mode));
    }
  }
  note(format("  out %s%s; lse %s%s", t[kO].describe().c_str(),
              out_same         ? " (in place)"
              : where_out == 3 ? " (over out_a)"
              : where_out == 4 ? " (over lse_b)"
                               : "",
              t[kL].describe().c_str(),
              lse_same                      ? " (in place)"
              : where_lse == 3              ? " (over lse_a)"
              : where_lse == 4 && !out_same ? " (over out)"
                                            : ""));
  if (claim_slot >= 0)
    note(format("claim: %s size %d = %td (its buffer holds %td)", names[claim_slot], claim.axis, claim.value,
                n[claim_slot][claim.axis]));

  ea::HeadsView<T> v[kN];
  for (int s = 0; s < kN; ++s) v[s] = heads_view<T>(t[s], claim_slot == s ? claim : Claim{});
  // The values before the call (it may merge in place).
  std::vector<T> before[kO];
  for (int s = 0; s < kO; ++s) {
    for (Index b = 0; b < t[s].n[0]; ++b)
      for (Index h = 0; h < t[s].n[1]; ++h)
        for (Index i = 0; i < t[s].n[2]; ++i)
          for (Index d = 0; d < t[s].n[3]; ++d) before[s].push_back(t[s].at(b, h, i, d));
  }

  Expect e;
  {
    const auto dims = [](const auto& x) { return std::array<Index, 4>{x.batch, x.heads, x.tokens, x.dim}; };
    const auto nonneg = [&](const auto& x) {
      for (Index y : dims(x))
        if (y < 0) return false;
      return true;
    };
    e.check(nonneg(v[kOa]), "a negative size");
    e.check(nonneg(v[kOb]) && dims(v[kOb]) == dims(v[kOa]), "out_b differs from out_a");
    e.check(nonneg(v[kO]) && dims(v[kO]) == dims(v[kOa]), "out differs from out_a");
    e.check(nonneg(v[kLa]) &&
                dims(v[kLa]) == (std::array<Index, 4>{v[kOa].batch, v[kOa].heads, v[kOa].tokens, 1}),
            "lse_a is not [B, H, T, 1]");
    e.check(nonneg(v[kLb]) && dims(v[kLb]) == dims(v[kLa]), "lse_b differs from lse_a");
    e.check(nonneg(v[kL]) && dims(v[kL]) == dims(v[kLa]), "lse differs from lse_a");
    if (!e.invalid) {
      const auto same = [](const ea::HeadsView<T>& o, const ea::HeadsView<T>& in) {
        return o.data == in.data && o.batch == in.batch && o.heads == in.heads && o.tokens == in.tokens &&
               o.dim == in.dim && o.batch_stride == in.batch_stride && o.head_stride == in.head_stride &&
               o.token_stride == in.token_stride && o.dim_stride == in.dim_stride;
      };
      e.check(nested(v[kO]) && nested(v[kL]), "an output's strides are not nested");
      for (int in = 0; in < kO; ++in) {
        for (int o : {kO, kL}) {
          if (!same(v[o], v[in])) {
            expect_apart(e, verdict(ea::HeadsView<const T>(v[o]), ea::HeadsView<const T>(v[in])),
                         "an output partly overlaps an input");
          }
        }
      }
      expect_apart(e, verdict(ea::HeadsView<const T>(v[kO]), ea::HeadsView<const T>(v[kL])),
                   "out overlaps lse");
    }
    if (claim_slot >= 0) e.fail("a claimed size exceeds its buffer and must be rejected");
  }
  note(format("expect: %s", e.invalid ? ("throw: " + e.why).c_str() : "success"));
  arena.snapshot();
  if (!outcome("merge_attention_into", e, [&] {
        ea::merge_attention_into(ea::HeadsView<const T>(v[kOa]), ea::HeadsView<const T>(v[kLa]),
                                 ea::HeadsView<const T>(v[kOb]), ea::HeadsView<const T>(v[kLb]), v[kO],
                                 v[kL]);
      })) {
    arena.expect_unchanged("merge_attention_into");
    return;
  }
  mark_written(t[kO]);
  mark_written(t[kL]);
  arena.expect_only_outputs_changed("merge_attention_into");
  constexpr bool is_float = std::is_same_v<T, float>;
  const long double rel = is_float ? 1e-5 : 1e-13;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  Index row = 0;
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < Tn; ++i, ++row) {
        const T la = before[kLa][row], lb = before[kLb][row];
        const T lse = t[kL].at(b, h, i, 0);
        const std::string where =
            format("merge row (%td, %td, %td), lse_a %.9g lse_b %.9g", b, h, i, double(la), double(lb));
        if (la == minus_inf && lb == minus_inf) {
          EA_EXPECT(lse == minus_inf, "%s: merged lse %.9g (must be -inf)", where.c_str(), double(lse));
          for (Index d = 0; d < D; ++d)
            EA_EXPECT(t[kO].at(b, h, i, d) == 0, "%s: out(%td) = %.9g (must be 0)", where.c_str(), d,
                      double(t[kO].at(b, h, i, d)));
          continue;
        }
        // A side is usable when its lse is -inf (it saw no key: MultiHead.hpp says the other side
        // is taken, whatever its out row holds), or finite and tame with a tame out row.
        const auto side_ok = [&](T l, int out_slot) {
          if (l == minus_inf) return true;
          bool ok = tame_value(l, 1e3);
          for (Index d = 0; d < D; ++d) ok = ok && tame_value(before[out_slot][row * D + d], 1e3);
          return ok;
        };
        if (!side_ok(la, kOa) || !side_ok(lb, kOb)) continue;
        const long double m = std::max<long double>(la, lb);
        const long double wa = std::exp((long double)la - m), wb = std::exp((long double)lb - m);
        const long double ref_lse = m + std::log(wa + wb);
        if (lb == minus_inf || la == minus_inf) {
          EA_EXPECT(lse == (la == minus_inf ? lb : la), "%s: merged lse %.9g, one side being empty",
                    where.c_str(), double(lse));
        } else {
          EA_EXPECT(std::fabs(lse - ref_lse) <= rel * (1 + std::fabs(ref_lse)),
                    "%s: merged lse %.9g, reference %.9Lg", where.c_str(), double(lse), ref_lse);
        }
        for (Index d = 0; d < D; ++d) {
          const long double va = before[kOa][row * D + d], vb = before[kOb][row * D + d];
          const long double ref = (wa * va + wb * vb) / (wa + wb);
          const T got = t[kO].at(b, h, i, d);
          if (lb == minus_inf || la == minus_inf) {
            EA_EXPECT(got == (la == minus_inf ? vb : va),
                      "%s: out(%td) = %.9g, but the side with lse -inf saw no key and the other side's value "
                      "is %.9g "
                      "(out_a %.9g, out_b %.9g)",
                      where.c_str(), d, double(got), double(la == minus_inf ? vb : va), double(va),
                      double(vb));
          } else {
            EA_EXPECT(std::fabs(got - ref) <= rel * (std::fabs(va) + std::fabs(vb)) +
                                                  4 * (long double)std::numeric_limits<T>::denorm_min(),
                      "%s: out(%td) = %.9g, reference %.9Lg", where.c_str(), d, double(got), ref);
          }
        }
      }
}

template void merge<float>(Reader&);
template void merge<double>(Reader&);

}  // namespace ea_fuzz_attention
