// SPDX-License-Identifier: MIT
// fuzz_attention, the multi-head calls: attention_heads_into, attention_heads_decomposed_into,
// attention_varlen_into, attention_varlen_decomposed_into, with masks, biases, key lengths, ALiBi slopes,
// attention sinks and packed offsets (fuzz_attention.cpp: the input format and the contract).
#include "check/shard.hpp"  // the distributed calls' check of a rank's shard (core library, abi::)
#include "fuzz_attention_model.hpp"
#include "fuzz_overlap.hpp"

namespace ea_fuzz_attention {

/// Which tensor a fault or an overlap concerns.
enum Slot { kQ, kK, kV, kOut, kLse, kScores, kAverage, kMask, kBias, kSlots };
const char* slot_name(int s) {
  static const char* names[] = {"Q", "K", "V", "out", "lse", "scores", "average_scores", "mask", "bias"};
  return names[s];
}

/// One multi-head call (heads<T>), its state shared by the phases, which run in this order:
/// decode (shapes, packed offsets, faults, claimed sizes, layouts, aliasing), lay_out (the
/// tensors in the arena), fill_values, make_views, expect (what MultiHead.hpp's rules make of
/// the call), invoke, then the checks of a call that returned: check_rows, check_average,
/// check_untouched, check_threads.
template <class T>
struct HeadsCall {
  HeadsCall(Call call_, const ea::Options& opt_, Reader& r_, bool big_)
      : call(call_), opt(opt_), r(r_), big(big_) {}

  Call call;
  const ea::Options& opt;
  Reader& r;
  bool big;

  // Decoded (decode).
  bool varlen = false, decomposed = false;
  Index B = 0, Hkv = 0, group = 0, tq = 0, tk = 0, dk = 0, dv = 0, H = 0;
  Index S = 0;  // packed sequences (varlen)
  std::vector<std::int64_t> cu_q = std::vector<std::int64_t>(1, 0), cu_k = std::vector<std::int64_t>(1, 0);
  Index seq_claim = 0;
  Index n[kSlots][4] = {};
  bool has_lse = false, has_out = false, has_scores = false, has_average = false;
  bool has_mask = false, has_bias = false, has_lengths = false, has_alibi = false;
  Index mb = 0, mh = 0, bb = 0, bh = 0;
  Claim claim;
  int claim_slot = -1;
  Lay lays[kSlots] = {};
  Index pads[kSlots] = {};
  int alias_out = -1, alias_host = 0;
  Index alias_shift = 0;

  // Memory (lay_out, fill_values).
  Arena arena;
  Tensor<T> t[kSlots - 2];
  Tensor<bool> mask;
  Tensor<T> bias;
  std::array<bool, kSlots> present{};
  Tensor<std::int64_t> lengths;
  Tensor<T> slopes;
  Tensor<T> sinks;  // H values, decoded after the others (fill_values)
  bool has_sinks = false;
  // Programmable attention, decoded last: the program, the callables that read it, and a block
  // mask of tiles block_rows x block_cols (0: none) built from its mask once the call is known
  // to be valid (expect).
  Program program;
  ea::ScoreMod<ProgramScore> score_fn{ProgramScore{&program}};
  ea::MaskMod<ProgramMask> mask_fn{ProgramMask{&program}};
  Index block_rows = 0, block_cols = 0;
  std::optional<ea::BlockMask> blocks;
  Tensor<std::int64_t> cuq, cuk;
  Index packed_size = 0;
  Tensor<T> packed;  // varlen_decomposed: the packed weights
  std::size_t packed_claim = 0;

  // What the library is handed (make_views) and what must happen (expect).
  ea::HeadsView<const T> Qv, Kv, Vv;
  ea::HeadsView<T> Ov, Lv, Sv, Av;
  ea::Masks<T> masks;
  Index sequences = 0;
  Expect e;

  /// Reads the configuration, front to back.
  void decode() {
    varlen = call == Call::Varlen || call == Call::VarlenDecomposed;
    decomposed = call == Call::HeadsDecomposed;
    const HeadsShape shape = decode_heads_shape(r, big, varlen);
    B = shape.B, Hkv = shape.Hkv, group = shape.group, H = shape.H;
    tq = shape.tq, tk = shape.tk, dk = shape.dk, dv = shape.dv;
    S = shape.S, cu_q = shape.cu_q, cu_k = shape.cu_k, seq_claim = shape.seq_claim;
    // Real shape faults (the buffers follow them) and claimed sizes (they do not).
    const auto set = [&](int s, Index b, Index h, Index t, Index d) {
      n[s][0] = b, n[s][1] = h, n[s][2] = t, n[s][3] = d;
    };
    set(kQ, B, H, tq, dk);
    set(kK, B, Hkv, tk, dk);
    set(kV, B, Hkv, tk, dv);
    set(kOut, B, H, tq, dv);
    set(kLse, B, H, tq, 1);
    set(kScores, B, H, tq, tk);
    set(kAverage, B, 1, tq, tk);
    // The presence of the optional pieces.
    const std::uint8_t pres = r.u8();
    has_lse = pres & 1;
    has_out = !decomposed || (pres & 2);
    has_scores = decomposed && (pres & 0x1c) != 0x1c;
    has_average = decomposed && (pres & 0x20);
    const MaskChoice m = decode_mask_choice(r, varlen, B, H);
    has_mask = m.mask, has_bias = m.bias, has_lengths = m.lengths, has_alibi = m.alibi;
    mb = m.mb, mh = m.mh, bb = m.bb, bh = m.bh;
    set(kMask, mb, mh, tq, tk);
    set(kBias, bb, bh, tq, tk);
    {
      const std::uint8_t f = r.u8();
      if (f % 4 == 3) {
        const int slot = (f >> 2) % kSlots;
        const int axis = (f >> 6) % 4;
        n[slot][axis] += 1;
        note(format("fault: %s size %d is %td", slot_name(slot), axis, n[slot][axis]));
      }
      if (r.u8() % 8 == 7) {
        H = Hkv * group + 1;  // not a multiple of the key/value heads
        for (int s : {kQ, kOut, kLse, kScores}) n[s][1] = H;
        note(format("fault: H = %td with %td key/value heads", H, Hkv));
      }
    }
    {
      const std::uint8_t b = r.u8();
      if (b % 8 == 7) {
        claim_slot = (b >> 3) % kSlots;
        claim.axis = (b >> 6) % 4;
        claim.value = kHuge[r.u8() % 6];
        // Only where validation compares the size with another one.
        const bool present = claim_slot <= kV || (claim_slot == kOut && has_out) ||
                             (claim_slot == kLse && has_lse) || (claim_slot == kScores && has_scores) ||
                             (claim_slot == kAverage && has_average) || (claim_slot == kMask && has_mask) ||
                             (claim_slot == kBias && has_bias);
        const bool v_dim_unchecked = claim_slot == kV && claim.axis == 3 && !has_out && has_scores;
        if (!present || v_dim_unchecked) {
          claim_slot = -1, claim.axis = -1;
        }
      }
    }
    // Layouts and overlap.
    for (int s = 0; s < kSlots; ++s) {
      const std::uint8_t b = r.u8();
      lays[s] = s <= kV      ? heads_input_lay(b)
                : s >= kMask ? (b % 3 == 2   ? Lay::ColMajor
                                : b % 3 == 1 ? Lay::Padded
                                             : Lay::BHTD)
                             : heads_output_lay(b);
      pads[s] = 1 + (b >> 4) % 3;
    }
    {
      const std::uint8_t b = r.u8();
      if (b % 8 == 7 && !big) {
        static const int outs[] = {kOut, kLse, kScores, kAverage};
        alias_out = outs[(b >> 3) % 4];
        alias_host = (b >> 5) % 7;  // Q K V out lse scores / mask bias via 6
        alias_shift = r.u8() % 6;
      }
    }
  }

  /// Places every tensor in the arena (some over others) and allocates it.
  void lay_out() {
    for (int s = 0; s < kMask; ++s)
      t[s] = make_tensor<T>(n[s][0], n[s][1], n[s][2], n[s][3], lays[s], pads[s]);
    bias = make_tensor<T>(n[kBias][0], n[kBias][1], n[kBias][2], n[kBias][3], lays[kBias], pads[kBias]);
    mask = make_tensor<bool>(n[kMask][0], n[kMask][1], n[kMask][2], n[kMask][3], lays[kMask], pads[kMask]);
    present = {true, true, true, has_out, has_lse, has_scores, has_average, has_mask, has_bias};
    for (int s = 0; s <= kV; ++s) place(t[s], arena);
    place(mask, arena);
    place(bias, arena);
    lengths = make_tensor<std::int64_t>(1, 1, 1, B, Lay::BHTD, 0);
    slopes = make_tensor<T>(1, 1, 1, H, Lay::BHTD, 0);
    cuq = make_tensor<std::int64_t>(1, 1, 1, Index(cu_q.size()), Lay::BHTD, 0);
    cuk = make_tensor<std::int64_t>(1, 1, 1, Index(cu_k.size()), Lay::BHTD, 0);
    place(lengths, arena);
    place(slopes, arena);
    place(cuq, arena);
    place(cuk, arena);
    // varlen_decomposed: the packed weights.
    if (call == Call::VarlenDecomposed) {
      for (Index s = 0; s < S; ++s) {
        const Index lq = std::max<Index>(cu_q[s + 1] - cu_q[s], 0),
                    lk = std::max<Index>(cu_k[s + 1] - cu_k[s], 0);
        packed_size += H * lq * lk;
      }
      const std::uint8_t b = r.u8() % 16;
      packed_claim =
          static_cast<std::size_t>(packed_size) + (b == 15 ? 1 : 0) - (b == 14 && packed_size > 0 ? 1 : 0);
      packed = make_tensor<T>(1, 1, 1, Index(packed_claim), Lay::BHTD, 0);
    }
    Tensor<T>* hosts_t[] = {&t[kQ], &t[kK], &t[kV], &t[kOut], &t[kLse], &t[kScores]};
    for (int s = kOut; s <= kAverage; ++s) {
      if (!present[s]) continue;
      if (s == alias_out && alias_host < 6 && (alias_host <= kV || (alias_host < s && present[alias_host]))) {
        place_inside(t[s], *hosts_t[alias_host], arena, alias_shift);
        note(format("  %s placed over %s + %td elements", slot_name(s), slot_name(alias_host), alias_shift));
      } else if (s == alias_out && alias_host == 6) {
        if (has_bias) {
          place_inside(t[s], bias, arena, alias_shift);
          note(format("  %s placed over bias + %td elements", slot_name(s), alias_shift));
        } else {
          if (varlen) {
            place_inside(t[s], cuq, arena, alias_shift);
          } else {
            place_inside(t[s], slopes, arena, alias_shift);
          }
          note(format("  %s placed over %s + %td elements", slot_name(s),
                      varlen ? "cu_seqlens_q" : "alibi_slopes", alias_shift));
        }
      } else {
        place(t[s], arena);
      }
    }
    if (call == Call::VarlenDecomposed) {
      const std::uint8_t b = r.u8();
      if (b % 8 == 7 && !big) {
        const int which = (b >> 3) % 4;
        if (which == 0) place_inside(packed, cuk, arena, 0);
        if (which == 1) place_inside(packed, slopes, arena, 0);
        if (which == 2) place_inside(packed, t[kOut], arena, (b >> 5) % 4);
        if (which == 3) place_inside(packed, t[kQ], arena, (b >> 5) % 4);
        note(format("  packed scores placed over %s", which == 0   ? "cu_seqlens_k"
                                                      : which == 1 ? "alibi_slopes"
                                                      : which == 2 ? "out"
                                                                   : "Q"));
      } else {
        place(packed, arena);
      }
    }
    arena.allocate();
  }

  /// Reads the element values, key lengths, slopes and offsets; describes them.
  void fill_values() {
    // Values.
    for (int s = 0; s <= kV; ++s) {
      Filler<T> f(r, big);
      fill(t[s], f);
      note(format("  %s %s values %s", slot_name(s), t[s].describe().c_str(), f.describe().c_str()));
    }
    for (int s = kOut; s <= kAverage; ++s)
      if (present[s]) note(format("  %s %s", slot_name(s), t[s].describe().c_str()));
    if (has_mask) {
      note("  mask " + mask.describe());
      fill_mask(mask, r);
    }
    if (has_bias) {
      Filler<T> f(r, big);
      fill(bias, f);
      note("  bias " + bias.describe() + " values " + f.describe());
    }
    if (has_lengths) fill_key_lengths(r, lengths, B, tk);
    if (has_alibi) fill_alibi(r, slopes, H, big);
    for (std::size_t i = 0; i < cu_q.size(); ++i) cuq.at(0, 0, 0, Index(i)) = cu_q[i];
    for (std::size_t i = 0; i < cu_k.size(); ++i) cuk.at(0, 0, 0, Index(i)) = cu_k[i];
    if (varlen) {
      std::string s = format("  %td sequences%s: cu_seqlens_q", S, seq_claim < 0 ? " (passed as -1)" : "");
      for (auto x : cu_q) s += format(" %lld", (long long)x);
      s += "; cu_seqlens_k";
      for (auto x : cu_k) s += format(" %lld", (long long)x);
      if (call == Call::VarlenDecomposed)
        s += format("; scores %zu elements (need %td)", packed_claim, packed_size);
      note(s);
    }
    if (claim_slot >= 0)
      note(format("claim: %s size %d = %td (its buffer holds %td)", slot_name(claim_slot), claim.axis,
                  claim.value, n[claim_slot][claim.axis]));
    // Last, so that inputs from before sinks existed decode as they did: the sinks, in a buffer
    // of their own.
    sinks = make_tensor<T>(1, 1, 1, n[kQ][1], Lay::BHTD, 0);
    place(sinks, arena);
    arena.allocate();
    has_sinks = fill_sinks(r, sinks, n[kQ][1]);
    program = decode_program(r);
    const std::uint8_t b = r.u8();
    if (program.has_mask() && b % 4 == 3) {
      block_rows = 1 + (b >> 2) % 8, block_cols = 1 + (b >> 5) % 8;
      note(format("  block mask of %tdx%td tiles", block_rows, block_cols));
    }
  }

  /// The views, masks and sizes handed to the library.
  void make_views() {
    // The views handed to the library.
    const auto in_view = [&](int s) -> ea::HeadsView<const T> {
      return heads_view<T>(t[s], claim_slot == s ? claim : Claim{});
    };
    const auto out_view = [&](int s) -> ea::HeadsView<T> {
      if (!present[s]) return {};
      return heads_view<T>(t[s], claim_slot == s ? claim : Claim{});
    };
    const auto broadcast = [&](const auto& tensor, int s) {
      using E = std::remove_reference_t<decltype(*tensor.data())>;
      if (!present[s]) return ea::BroadcastView<E>{};
      return broadcast_of<E>(tensor, claim_slot == s ? claim : Claim{});
    };
    Qv = in_view(kQ), Kv = in_view(kK), Vv = in_view(kV);
    Ov = out_view(kOut), Lv = out_view(kLse), Sv = out_view(kScores), Av = out_view(kAverage);
    masks.mask = broadcast(mask, kMask);
    masks.bias = broadcast(bias, kBias);
    masks.key_lengths = has_lengths ? lengths.data() : nullptr;
    masks.alibi_slopes = has_alibi ? slopes.data() : nullptr;
    masks.sinks = has_sinks ? sinks.data() : nullptr;
    if (program.has_score()) masks.score_mod = score_fn;
    if (program.has_mask()) masks.mask_mod = mask_fn;
    sequences = seq_claim < 0 ? seq_claim : S;
  }

  /// Whether the call must throw, by MultiHead.hpp's rules (the overlap rule: fuzz_overlap.hpp).
  void expect() {
    // What must happen (MultiHead.hpp's rules).
    {
      const auto dims = [](const auto& v) { return std::array<Index, 4>{v.batch, v.heads, v.tokens, v.dim}; };
      const auto nonneg = [&](const auto& v) {
        for (Index x : dims(v))
          if (x < 0) return false;
        return true;
      };
      const auto shape_is = [&](const auto& v, Index b, Index h, Index tt, Index d) {
        return nonneg(v) && dims(v) == std::array<Index, 4>{b, h, tt, d};
      };
      if (call == Call::VarlenDecomposed) {
        e.check(sequences >= 0, "negative number of sequences");
        e.check(Qv.heads >= 0, "negative heads");
        if (sequences >= 0) {
          e.check(cu_q[0] == 0 && cu_k[0] == 0, "cu_seqlens must start at 0");
          for (Index s = 0; s < S; ++s)
            e.check(cu_q[s + 1] >= cu_q[s] && cu_k[s + 1] >= cu_k[s], "cu_seqlens decrease");
        }
      }
      e.check(nonneg(Qv) && nonneg(Kv) && nonneg(Vv), "a negative size");
      e.check(Kv.batch == Qv.batch && Vv.batch == Qv.batch, "batch sizes differ");
      e.check(Kv.heads == Vv.heads, "K and V head counts differ");
      e.check(Kv.heads == 0 ? Qv.heads == 0 : (Kv.heads > 0 && Qv.heads % Kv.heads == 0),
              "H is not a multiple of H_kv");
      e.check(Kv.tokens == Vv.tokens, "T_k differs between K and V");
      e.check(Qv.dim == Kv.dim, "d_k differs between Q and K");
      e.check(options_ok<T>(opt, Qv.dim), "an option is invalid");
      if (!Ov.empty() || Sv.empty())
        e.check(shape_is(Ov, Qv.batch, Qv.heads, Qv.tokens, Vv.dim), "out has the wrong shape");
      if (!Lv.empty()) e.check(shape_is(Lv, Qv.batch, Qv.heads, Qv.tokens, 1), "lse has the wrong shape");
      if (!Sv.empty())
        e.check(shape_is(Sv, Qv.batch, Qv.heads, Qv.tokens, Kv.tokens), "scores has the wrong shape");
      if (!Av.empty())
        e.check(shape_is(Av, Qv.batch, 1, Qv.tokens, Kv.tokens), "average_scores has the wrong shape");
      const Index Bseq = varlen ? sequences : Qv.batch;
      expect_mask_rules<T>(e, varlen, sequences, S, cu_q, cu_k, Qv, Kv, masks);
      if (!e.invalid) {
        const ea::HeadsView<const T> outs[] = {Ov, Lv, Sv, Av};
        for (const auto& o : outs) {
          if (!o.empty()) e.check(nested(o), "an output's strides are not nested");
        }
        for (const auto& o : outs) {
          for (const auto& in : {Qv, Kv, Vv}) expect_apart(e, verdict(o, in), "an output overlaps Q, K or V");
          expect_apart_from_masks(e, o, masks, Qv.heads, Bseq, varlen ? cuq.data() : nullptr,
                                  varlen ? cuk.data() : nullptr);
        }
        // Outputs must not overlap each other: MultiHead.hpp says so of every pair.
        for (int a = 0; a < 4; ++a)
          for (int b = a + 1; b < 4; ++b) expect_apart(e, verdict(outs[a], outs[b]), "two outputs overlap");
      }
      if (call == Call::VarlenDecomposed && !e.invalid) {
        e.check(packed_claim == static_cast<std::size_t>(packed_size), "packed scores of the wrong size");
        const ea::HeadsView<const T> pv{packed.data(), 1, 1, 1, Index(packed_claim), 0, 0, 0, 1};
        for (const auto& other : {Qv, Kv, Vv, ea::HeadsView<const T>(Ov), ea::HeadsView<const T>(Lv)}) {
          expect_apart(e, verdict(pv, other), "packed scores overlap an input or output");
        }
        expect_apart(e, verdict(pv, vec_view(cuq.data(), S + 1)), "packed scores overlap cu_seqlens");
        expect_apart(e, verdict(pv, vec_view(cuk.data(), S + 1)), "packed scores overlap cu_seqlens");
        if (has_alibi)
          expect_apart(e, verdict(pv, vec_view(slopes.data(), H)), "packed scores overlap the ALiBi slopes");
      }
      if (claim_slot >= 0) e.fail("a claimed size exceeds its buffer and must be rejected");
      // Weights wanted with no SCORES view: MultiHead.hpp neither allows nor forbids it.
      if (decomposed && !has_scores && !e.invalid) e.uncertain = true;
    }
    // A block mask of the whole call, at its positions: one tile grid for every sequence, so not
    // for a packed batch or per-sequence key lengths with the bottom-right alignment (whose
    // sequences' positions differ).
    const bool per_sequence = varlen || (has_lengths && opt.alignment == ea::CausalAlignment::BottomRight);
    if (block_rows > 0 && !e.invalid && !per_sequence) {
      // (A batch or heads of 1 stands for every one: an empty call's 0 is not a size of a block mask.)
      blocks.emplace(ea::block_mask(mask_fn, std::max<Index>(Qv.batch, 1), std::max<Index>(Qv.heads, 1),
                                    Qv.tokens, Kv.tokens, block_rows, block_cols, opt));
      masks.block_mask = *blocks;
    }
    note(format("expect: %s%s", e.invalid ? ("throw: " + e.why).c_str() : "success",
                e.uncertain ? " (or a throw)" : ""));
  }

  /// The call itself, with options `o`.
  void invoke(const ea::Options& o) {
    switch (call) {
      case Call::Heads:
        ea::attention_heads_into(Qv, Kv, Vv, Ov, Lv, o, masks);
        break;
      case Call::HeadsDecomposed:
        ea::attention_heads_decomposed_into(Qv, Kv, Vv, Sv, Ov, Lv, Av, o, masks);
        break;
      case Call::Varlen:
        ea::attention_varlen_into(Qv, Kv, Vv, cuq.data(), cuk.data(), sequences, Ov, Lv, o, masks);
        break;
      default:
        ea::attention_varlen_decomposed_into(Qv, Kv, Vv, cuq.data(), cuk.data(), sequences, packed.data(),
                                             packed_claim, Ov, Lv, o, masks);
    }
  }

  /// The results, one Case per (sequence, query head).
  void check_rows() {
    Rules<T> rules;
    rules.causal = opt.causal;
    rules.wl = opt.window_left, rules.wr = opt.window_right;
    rules.chunk = opt.chunk_size, rules.chunk_origin = opt.chunk_origin;
    rules.scale = resolved_scale<T>(opt, dk);
    rules.softcap = static_cast<T>(opt.softcap);
    const Index group_size = Hkv > 0 ? H / Hkv : 1;
    for (Index b = 0; b < (varlen ? S : B); ++b) {
      const Index q0 = varlen ? cu_q[b] : 0, lq = varlen ? cu_q[b + 1] - cu_q[b] : tq;
      const Index k0 = varlen ? cu_k[b] : 0, lk = varlen ? cu_k[b + 1] - cu_k[b] : tk;
      const Index bi = varlen ? 0 : b;
      const Index keys = has_lengths ? Index(lengths.at(0, 0, 0, b)) : lk;
      for (Index h = 0; h < H; ++h) {
        Case<T> c;
        c.name = format("%s b=%td h=%td", call_name(call), b, h);
        c.q = matrix_of(t[kQ], bi, h, q0, lq);
        c.k = matrix_of(t[kK], bi, h / group_size, k0, lk);
        c.v = matrix_of(t[kV], bi, h / group_size, k0, lk);
        c.keys = keys;
        c.offset = diagonal_of(opt, keys, lq);
        if (has_mask) c.mask = matrix_of(mask, mask.n[0] == 1 ? 0 : b, mask.n[1] == 1 ? 0 : h);
        if (has_bias) c.bias = matrix_of(bias, bias.n[0] == 1 ? 0 : b, bias.n[1] == 1 ? 0 : h);
        c.alibi = has_alibi;
        if (has_alibi) c.slope = slopes.at(0, 0, 0, h);
        c.has_sink = has_sinks;
        if (has_sinks) c.sink = sinks.at(0, 0, 0, h);
        if (program.has_mask() || program.has_score()) c.program = &program;
        c.batch = b, c.head = h;
        if (has_out) c.attn = matrix_of(t[kOut], bi, h, q0, lq);
        if (has_lse) c.lse = matrix_of(t[kLse], bi, h, q0, lq);
        if (has_scores) c.scores = matrix_of(t[kScores], bi, h);
        if (call == Call::VarlenDecomposed) {
          Index off = 0;
          for (Index s = 0; s < b; ++s) off += H * (cu_q[s + 1] - cu_q[s]) * (cu_k[s + 1] - cu_k[s]);
          c.scores = {packed.data() + off + h * lq * lk, lq, lk, lk, 1};
        }
        check_case(c, rules);
      }
    }
  }

  /// The mean over heads, summed in head order.
  void check_average() {
    if (has_average && has_scores) {
      for (Index b = 0; b < B; ++b)
        for (Index i = 0; i < tq; ++i)
          for (Index j = 0; j < tk; ++j) {
            T sum = 0;
            for (Index h = 0; h < H; ++h) sum += t[kScores].at(b, h, i, j);
            const T mean = H > 0 ? sum / static_cast<T>(H) : T(0);
            const T got = t[kAverage].at(b, 0, i, j);
            EA_EXPECT((std::isnan(mean) && std::isnan(got)) || got == mean,
                      "average_scores(%td, %td, %td) = %.9g, the mean over heads is %.9g", b, i, j,
                      double(got), double(mean));
          }
    }
  }

  /// Nothing else was written: rows of no sequence are untouched.
  void check_untouched() {
    for (int s = kOut; s <= kAverage; ++s) {
      if (!present[s]) continue;
      if (varlen) {
        mark_written(t[s], 0, cu_q[S]);
      } else {
        mark_written(t[s]);
      }
    }
    if (call == Call::VarlenDecomposed) mark_written(packed);
    arena.expect_only_outputs_changed(call_name(call));
  }

  /// Several threads give bitwise the results of one (big inputs).
  void check_threads() {
    if (big && opt.threads != 1) {
      Digest first;
      for (int s = kOut; s <= kAverage; ++s)
        if (present[s])
          first.bytes.insert(first.bytes.end(), (*t[s].arena)[t[s].buf].bytes.get(),
                             (*t[s].arena)[t[s].buf].bytes.get() + (*t[s].arena)[t[s].buf].size);
      if (call == Call::VarlenDecomposed) first.add(Acc<T>{packed.data(), 1, packed.n[3], 0, 1});
      arena.restore();
      ea::Options one = opt;
      one.threads = 1;
      invoke(one);
      Digest again;
      for (int s = kOut; s <= kAverage; ++s)
        if (present[s])
          again.bytes.insert(again.bytes.end(), (*t[s].arena)[t[s].buf].bytes.get(),
                             (*t[s].arena)[t[s].buf].bytes.get() + (*t[s].arena)[t[s].buf].size);
      if (call == Call::VarlenDecomposed) again.add(Acc<T>{packed.data(), 1, packed.n[3], 0, 1});
      EA_EXPECT(first.bytes == again.bytes, "%s: threads = %d and threads = 1 give different bits",
                call_name(call), opt.threads);
    }
  }
};

template <class T>
void heads(Call call, const ea::Options& opt, Reader& r, bool big) {
  HeadsCall<T> c(call, opt, r, big);
  c.decode();
  c.lay_out();
  c.fill_values();
  c.make_views();
  c.expect();
  c.arena.snapshot();
  // The distributed calls' local half (src/check/shard.hpp): each rank's shard is checked by
  // abi::check_shard, the attention_heads_into validator without key lengths and block masks
  // (the component checks those against the whole sequence). On the same views it must write
  // nothing and pass exactly when attention_heads_into validates, or throw its message.
  const bool shard = call == Call::Heads && c.masks.key_lengths == nullptr && c.masks.block_mask.empty();
  std::optional<std::string> shard_error;  // empty: check_shard passed
  if (shard) {
    try {
      ea::abi::check_shard("attention_heads_into", c.Qv, c.Kv, c.Vv, c.Ov, c.Lv, opt, c.masks);
    } catch (const std::invalid_argument& ex) {
      shard_error = ex.what();
    }
    c.arena.expect_unchanged("abi::check_shard");
    if (g_verbose) note(format("abi::check_shard: %s", shard_error ? shard_error->c_str() : "passed"));
  }
  std::optional<std::string> error;  // the call's std::invalid_argument
  bool other_error = false;          // std::length_error or std::bad_alloc
  const bool returned = outcome(call_name(call), c.e, [&] {
    try {
      c.invoke(opt);
    } catch (const std::invalid_argument& ex) {
      error = ex.what();
      throw;
    } catch (...) {
      other_error = true;
      throw;
    }
  });
  if (shard && !other_error) {
    EA_EXPECT(error == shard_error, "attention_heads_into %s, but abi::check_shard on its views %s",
              error ? ("threw: " + *error).c_str() : "returned",
              shard_error ? ("threw: " + *shard_error).c_str() : "passed");
  }
  if (!returned) {
    c.arena.expect_unchanged(call_name(call));
    return;
  }
  c.check_rows();
  c.check_average();
  c.check_untouched();
  c.check_threads();
}

template void heads<float>(Call, const ea::Options&, Reader&, bool);
template void heads<double>(Call, const ea::Options&, Reader&, bool);

}  // namespace ea_fuzz_attention
