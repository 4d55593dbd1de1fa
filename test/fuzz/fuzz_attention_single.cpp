// SPDX-License-Identifier: MIT
// fuzz_attention, the single-head calls: attention, attention_into (+lse),
// attention_decomposed, attention_decomposed_into (+lse), attention_scores, attention_scores_into
// (+lse, through Compiled.hpp), on inputs given as strided Maps, column-major copies or
// expressions (fuzz_attention.cpp: the input format and the contract).
#include "fuzz_attention_model.hpp"
#include "fuzz_overlap.hpp"

namespace ea_fuzz_attention {

struct SingleSpec {
  Index tq = 0, tk = 0, dk = 0, dv = 0;
  Index kcols = 0, vrows = 0;  // K's columns and V's rows (faults make them differ)
  int share = 0;               // 1: K is Q; 2: V is K; 3: both
  int in_kind = 0, out_kind = 0;
  Lay lay[3] = {};         // Q, K, V
  Lay out_lay[3] = {};     // the outputs, in call order
  bool out_wrong[3] = {};  // output shape off by one row or column
  Index out_pad[3] = {};
  Index r0[3] = {}, c0[3] = {};  // initial sizes of resizable outputs
  int claim_target = -1;         // 0 Q.cols, 1 V.rows, 2 out0.rows, 3 out0.cols, 4 out1.cols, 5 out2.rows
  Index claim_value = 0;
  int alias_out = -1;  // which output lies over another tensor
  int alias_host = 0;  // 0 Q, 1 K, 2 V, 3 the previous output
  Index alias_shift = 0;
};

template <class T, int IK, int OK>
void run_single(Call call, const ea::Options& opt, SingleSpec& sp, Reader& r, bool big) {
  // The LSE form of attention_scores_into exists in Compiled.hpp only, which takes Maps.
  if (call == Call::ScoresIntoLse && !(IK == 0 && OK == 0)) call = Call::ScoresInto;
  Arena arena;
  const bool with_v = call != Call::Scores && call != Call::ScoresInto && call != Call::ScoresIntoLse;
  int outputs = 0;
  const char* out_names[3] = {"", "", ""};
  switch (call) {
    case Call::AttentionInto:
      outputs = 1, out_names[0] = "out";
      break;
    case Call::AttentionIntoLse:
      outputs = 2, out_names[0] = "out", out_names[1] = "lse";
      break;
    case Call::DecomposedInto:
      outputs = 2, out_names[0] = "scores", out_names[1] = "attn";
      break;
    case Call::DecomposedIntoLse:
      outputs = 3, out_names[0] = "scores", out_names[1] = "attn", out_names[2] = "lse";
      break;
    case Call::ScoresInto:
      outputs = 1, out_names[0] = "scores";
      break;
    case Call::ScoresIntoLse:
      outputs = 2, out_names[0] = "scores", out_names[1] = "lse";
      break;
    default:
      break;
  }
  // The right shape of each output.
  Index want_r[3] = {sp.tq, sp.tq, sp.tq}, want_c[3] = {0, 0, 0};
  for (int o = 0; o < outputs; ++o) {
    const std::string n = out_names[o];
    want_c[o] = n == "lse" ? 1 : n == "scores" ? sp.tk : sp.dv;
  }

  // Inputs.
  Tensor<T> q = make_tensor<T>(1, 1, sp.tq, sp.dk, sp.lay[0], 1);
  Tensor<T> k = make_tensor<T>(1, 1, sp.tk, sp.kcols, sp.lay[1], 2);
  Tensor<T> v = make_tensor<T>(1, 1, sp.vrows, sp.dv, sp.lay[2], 1);
  Tensor<T> outs[3];
  for (int o = 0; o < outputs; ++o) {
    outs[o] = make_tensor<T>(1, 1, want_r[o] + (sp.out_wrong[o] && o % 2 == 0),
                             want_c[o] + (sp.out_wrong[o] && o % 2), sp.out_lay[o], sp.out_pad[o]);
  }
  place(q, arena);
  if (sp.share & 1) {
    k = q;
  } else {
    place(k, arena);
  }
  if (sp.share & 2) {
    v = k;
  } else {
    place(v, arena);
  }
  const Tensor<T>* hosts[3] = {&q, &k, &v};
  for (int o = 0; o < outputs; ++o) {
    if (o == sp.alias_out && OK == 0) {
      const Tensor<T>& host = sp.alias_host == 3 && o > 0 ? outs[o - 1] : *hosts[sp.alias_host % 3];
      place_inside(outs[o], host, arena, sp.alias_shift);
    } else {
      place(outs[o], arena);
    }
  }
  arena.allocate();
  {
    Filler<T> fq(r, big);
    fill(q, fq);
    note("  Q " + q.describe() + " values " + fq.describe());
    if (!(sp.share & 1)) {
      Filler<T> fk(r, big);
      fill(k, fk);
      note("  K " + k.describe() + " values " + fk.describe());
    } else {
      note("  K is Q");
    }
    if (!(sp.share & 2)) {
      Filler<T> fv(r, big);
      fill(v, fv);
      note("  V " + v.describe() + " values " + fv.describe());
    } else {
      note("  V is K");
    }
  }
  for (int o = 0; o < outputs; ++o) {
    if (OK == 0) {
      note(format("  output %s %s%s", out_names[o], outs[o].describe().c_str(),
                  o == sp.alias_out ? format(" placed over %s + %td elements",
                                             sp.alias_host == 3       ? "the previous output"
                                             : sp.alias_host % 3 == 0 ? "Q"
                                             : sp.alias_host % 3 == 1 ? "K"
                                                                      : "V",
                                             sp.alias_shift)
                                          .c_str()
                                    : ""));
    } else {
      note(format("  output %s: resizable %s matrix, initially %tdx%td", out_names[o],
                  OK == 1 ? "row-major" : "col-major", sp.r0[o], sp.c0[o]));
    }
  }

  // What must happen.
  Expect e;
  const Index q_cols = sp.claim_target == 0 ? sp.claim_value : sp.dk;
  const Index v_rows = sp.claim_target == 1 ? sp.claim_value : sp.vrows;
  e.check(options_ok<T>(opt, q_cols), "an option is invalid");
  e.check(q_cols == sp.kcols, "d_k differs between Q and K");
  if (with_v) e.check(v_rows == sp.tk, "T_k differs between K and V");
  Claim out_claim[3];
  if (sp.claim_target >= 2) {
    const int o = sp.claim_target == 2 || sp.claim_target == 3 ? 0 : sp.claim_target == 4 ? 1 : 2;
    if (o < outputs && OK == 0)
      out_claim[o] = {sp.claim_target == 2 || sp.claim_target == 5 ? 2 : 3, sp.claim_value};
  }
  if (OK == 0) {
    for (int o = 0; o < outputs; ++o) {
      const Index rows = out_claim[o].axis == 2 ? out_claim[o].value : outs[o].n[2];
      const Index cols = out_claim[o].axis == 3 ? out_claim[o].value : outs[o].n[3];
      e.check(rows == want_r[o] && cols == want_c[o], "an output has the wrong shape");
      if (rows == want_r[o] && cols == want_c[o])
        e.check(nested(outs[o]), "an output's strides are not nested");
    }
    if (sp.alias_out >= 0 && sp.alias_out < outputs) {
      const Tensor<T>& o = outs[sp.alias_out];
      const Tensor<T>& host =
          sp.alias_host == 3 && sp.alias_out > 0 ? outs[sp.alias_out - 1] : *hosts[sp.alias_host % 3];
      const bool host_is_input = !(sp.alias_host == 3 && sp.alias_out > 0);
      const bool host_used = !host_is_input || sp.alias_host % 3 != 2 || with_v;
      if (host_used && elements_intersect(byte_ranges(o), byte_ranges(host))) {
        e.fail("an output overlaps another input or output");
      } else if (host_used) {
        e.uncertain = true;  // the overlap check is conservative (byte ranges)
      }
    }
  }
  note(format("expect: %s%s", e.invalid ? ("throw: " + e.why).c_str() : "success",
              e.uncertain ? " (or either, the check being conservative)" : ""));

  In<T, IK> qi(q, sp.claim_target == 0 ? Claim{3, sp.claim_value} : Claim{});
  In<T, IK> ki(k, Claim{});
  In<T, IK> vi(v, sp.claim_target == 1 ? Claim{2, sp.claim_value} : Claim{});
  std::optional<Out<T, OK>> o0, o1, o2;
  if (outputs > 0) o0.emplace(outs[0], out_claim[0], sp.r0[0], sp.c0[0]);
  if (outputs > 1) o1.emplace(outs[1], out_claim[1], sp.r0[1], sp.c0[1]);
  if (outputs > 2) o2.emplace(outs[2], out_claim[2], sp.r0[2], sp.c0[2]);
  ea::RowMatrix<T> ret_attn, ret_scores;
  ea::Vector<T> ret_lse;
  const auto invoke = [&](const ea::Options& o) {
    const auto& Q = qi.get();
    const auto& K = ki.get();
    const auto& V = vi.get();
    switch (call) {
      case Call::Attention:
        ret_attn = ea::attention(Q, K, V, o);
        break;
      case Call::AttentionInto:
        ea::attention_into(Q, K, V, o0->m, o);
        break;
      case Call::AttentionIntoLse:
        ea::attention_into(Q, K, V, o0->m, o1->m, o);
        break;
      case Call::Decomposed: {
        auto res = ea::attention_decomposed(Q, K, V, o);
        ret_scores = std::move(res.scores), ret_attn = std::move(res.attn), ret_lse = std::move(res.lse);
        break;
      }
      case Call::DecomposedInto:
        ea::attention_decomposed_into(Q, K, V, o0->m, o1->m, o);
        break;
      case Call::DecomposedIntoLse:
        ea::attention_decomposed_into(Q, K, V, o0->m, o1->m, o2->m, o);
        break;
      case Call::Scores:
        ret_scores = ea::attention_scores(Q, K, o);
        break;
      case Call::ScoresInto:
        ea::attention_scores_into(Q, K, o0->m, o);
        break;
      case Call::ScoresIntoLse:
        ea::attention_scores_into(Q, K, o0->m, o1->m, o);
        break;
      default:
        break;
    }
  };
  arena.snapshot();
  const bool returned = outcome(call_name(call), e, [&] { invoke(opt); });
  if (!returned) {
    if (OK == 0) arena.expect_unchanged(call_name(call));
    return;
  }
  if (sp.claim_target >= 0) return;  // accepted a claimed size (e.g. V's rows where no V is read)

  // The results.
  Case<T> c;
  c.name = call_name(call);
  c.q = matrix_of(q, 0, 0);
  c.k = matrix_of(k, 0, 0);
  if (with_v) c.v = matrix_of(v, 0, 0);
  c.keys = sp.tk;
  c.offset = diagonal_of(opt, sp.tk, sp.tq);
  const auto result = [&](int o) -> Acc<T> {
    Acc<T> a;
    if (OK == 0) {
      a = matrix_of(outs[o], 0, 0);
    } else {
      const auto& m = o == 0 ? o0->m : o == 1 ? o1->m : o2->m;
      a = {m.data(), m.rows(), m.cols(), m.rowStride(), m.colStride()};
    }
    EA_EXPECT(a.rows == want_r[o] && a.cols == want_c[o], "%s: output %s is %tdx%td, not %tdx%td",
              call_name(call), out_names[o], a.rows, a.cols, want_r[o], want_c[o]);
    return a;
  };
  for (int o = 0; o < outputs; ++o) {
    const std::string n = out_names[o];
    if (n == "lse" && call == Call::ScoresIntoLse && !(IK == 0 && OK == 0)) continue;
    Acc<T> a = result(o);
    if (OK == 0) mark_written(outs[o]);
    (n == "lse" ? c.lse : n == "scores" ? c.scores : c.attn) = a;
  }
  const auto returned_acc = [&](const auto& m, Index rows, Index cols, const char* what) {
    EA_EXPECT(m.rows() == rows && m.cols() == cols, "%s returned %s of %tdx%td, not %tdx%td", call_name(call),
              what, Index(m.rows()), Index(m.cols()), rows, cols);
    return Acc<T>{m.data(), Index(m.rows()), Index(m.cols()), Index(m.rowStride()), Index(m.colStride())};
  };
  if (call == Call::Attention || call == Call::Decomposed)
    c.attn = returned_acc(ret_attn, sp.tq, sp.dv, "ATTN");
  if (call == Call::Decomposed || call == Call::Scores)
    c.scores = returned_acc(ret_scores, sp.tq, sp.tk, "SCORES");
  if (call == Call::Decomposed) c.lse = returned_acc(ret_lse, sp.tq, 1, "LSE");
  if (OK == 0) arena.expect_only_outputs_changed(call_name(call));

  Rules<T> rules;
  rules.causal = opt.causal;
  rules.wl = opt.window_left, rules.wr = opt.window_right;
  rules.chunk = opt.chunk_size, rules.chunk_origin = opt.chunk_origin;
  rules.scale = resolved_scale<T>(opt, sp.dk);
  rules.softcap = static_cast<T>(opt.softcap);
  check_case(c, rules);

  // Several threads must give the bits of one.
  if (big && opt.threads != 1) {
    Digest first;
    for (const Acc<T>* a : {&c.attn, &c.scores, &c.lse})
      if (a->present()) first.add(*a);
    if (OK == 0) arena.restore();
    ea::Options one = opt;
    one.threads = 1;
    invoke(one);
    Digest again;
    // Returned matrices may have moved: take them anew.
    if (call == Call::Attention || call == Call::Decomposed) c.attn = acc_of(ret_attn);
    if (call == Call::Decomposed || call == Call::Scores) c.scores = acc_of(ret_scores);
    if (call == Call::Decomposed) c.lse = {ret_lse.data(), ret_lse.rows(), 1, 1, 1};
    for (int o = 0; o < outputs && OK != 0; ++o) {
      const std::string n = out_names[o];
      if (n == "lse" && call == Call::ScoresIntoLse) continue;
      (n == "lse" ? c.lse : n == "scores" ? c.scores : c.attn) = result(o);
    }
    for (const Acc<T>* a : {&c.attn, &c.scores, &c.lse})
      if (a->present()) again.add(*a);
    EA_EXPECT(first.bytes == again.bytes, "%s: threads = %d and threads = 1 give different bits",
              call_name(call), opt.threads);
  }
}

template <class T>
void single(Call call, const ea::Options& opt, Reader& r, bool big) {
  SingleSpec sp;
  if (big) {
    sp.tq = r.u16() % 300, sp.tk = r.u16() % 1100, sp.dk = 1 + r.u8() % 4, sp.dv = r.u8() % 5;
  } else {
    sp.tq = r.u8() % 13, sp.tk = r.u8() % 13, sp.dk = r.u8() % 13, sp.dv = r.u8() % 13;
  }
  sp.share = r.u8() % 8;
  if (sp.share > 3) sp.share = 0;
  if (sp.share & 1) sp.tk = sp.tq;
  if (sp.share & 2) sp.dv = sp.dk;
  sp.kcols = sp.dk, sp.vrows = sp.tk;
  const std::uint8_t fault = r.u8() % 16;
  if (fault == 12 && !(sp.share & 1)) sp.kcols = sp.dk + 1;
  if (fault == 13 && !(sp.share & 2)) sp.vrows = sp.tk + 1;
  if (fault == 14 && !(sp.share & 2) && sp.tk > 0) sp.vrows = sp.tk - 1;
  static const int kinds[] = {0, 0, 0, 1, 2};
  sp.in_kind = kinds[r.u8() % 5];
  sp.out_kind = kinds[r.u8() % 5] % 3;
  for (Lay& l : sp.lay) l = input_lay(r.u8());
  for (int o = 0; o < 3; ++o) {
    const std::uint8_t b = r.u8();
    static const Lay lays[] = {Lay::BHTD,     Lay::BHTD,    Lay::ColMajor, Lay::Padded,
                               Lay::ColMajor, Lay::ZeroRow, Lay::ZeroCol,  Lay::Interleaved};
    sp.out_lay[o] = lays[b % 8];
    sp.out_wrong[o] = (b >> 3) % 8 == 7;
    sp.out_pad[o] = (b >> 6) % 3;
    sp.r0[o] = (b >> 3) % 2 ? sp.tq : (b >> 4) % 4;
    sp.c0[o] = (b >> 5) % 4;
  }
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && sp.in_kind == 0 && sp.share == 0) {
      sp.claim_target = (b >> 3) % 6;
      const Index values[] = {Index(1) << 40, Index(1) << 31, (Index(1) << 32) + 1, 13};
      sp.claim_value = values[(b >> 6) % 4];
      if (sp.claim_value == 13) sp.claim_value += sp.tq + sp.tk + sp.dk + sp.dv;
      if (sp.claim_target >= 2 && sp.out_kind != 0) sp.claim_target = -1;
    }
  }
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && sp.in_kind == 0 && sp.out_kind == 0 && !big) {
      sp.alias_out = (b >> 3) % 3;
      sp.alias_host = (b >> 5) % 4;
      sp.alias_shift = r.u8() % 8;
    }
  }
  note(format(
      "single head: %s<%s> T_q=%td T_k=%td d_k=%td d_v=%td (K cols %td, V rows %td) share=%d input kind %d "
      "output kind %d claim %d=%td",
      call_name(call), type_name<T>(), sp.tq, sp.tk, sp.dk, sp.dv, sp.kcols, sp.vrows, sp.share, sp.in_kind,
      sp.out_kind, sp.claim_target, sp.claim_value));
  const int variant = sp.in_kind * 3 + sp.out_kind;
  switch (variant) {
    case 0:
      run_single<T, 0, 0>(call, opt, sp, r, big);
      break;
    case 1:
      run_single<T, 0, 1>(call, opt, sp, r, big);
      break;
    case 2:
      run_single<T, 0, 2>(call, opt, sp, r, big);
      break;
    case 3:
      run_single<T, 1, 0>(call, opt, sp, r, big);
      break;
    case 4:
      run_single<T, 1, 1>(call, opt, sp, r, big);
      break;
    case 5:
      run_single<T, 1, 2>(call, opt, sp, r, big);
      break;
    case 6:
      run_single<T, 2, 0>(call, opt, sp, r, big);
      break;
    case 7:
      run_single<T, 2, 1>(call, opt, sp, r, big);
      break;
    default:
      run_single<T, 2, 2>(call, opt, sp, r, big);
      break;
  }
}

template void single<float>(Call, const ea::Options&, Reader&, bool);
template void single<double>(Call, const ea::Options&, Reader&, bool);

}  // namespace ea_fuzz_attention
