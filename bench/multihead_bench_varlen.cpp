// SPDX-License-Identifier: MIT
// eigen_attention_multihead_bench, section 3: attention_varlen_into on a packed batch against
// attention_heads_into on the padded batch with key lengths.
#include "multihead_bench.hpp"

namespace ea_multihead_bench {

// ---------------------------------------------------------------------------------------------
// Section 3: varlen against padded

std::vector<Idx> varlen_lengths(const Args& a) {
  std::uint64_t s = 0x2545F4914F6CDD1Dull;
  std::vector<Idx> out;
  for (Idx b = 0; b < a.varlen_seqs; ++b) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    out.push_back(a.varlen_min + Idx((s >> 11) % std::uint64_t(a.varlen_max - a.varlen_min + 1)));
  }
  return out;
}

template <typename T>
void varlen_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  const Idx H = a.varlen_h, d = a.varlen_d, B = a.varlen_seqs;
  const std::vector<Idx> len = varlen_lengths(a);
  std::vector<std::int64_t> cu(static_cast<std::size_t>(B + 1), 0), key_lengths;
  for (Idx b = 0; b < B; ++b) {
    cu[b + 1] = cu[b] + len[b];
    key_lengths.push_back(len[b]);
  }
  const Idx total = cu[B];
  const Idx max_len = *std::max_element(len.begin(), len.end());

  // Packed [1, H, total, d] data, then the same data packed BTHD and padded BHTD (zeros after
  // each sequence's end).
  const std::vector<T> q = make_heads<T>(H, total, d, 1), k = make_heads<T>(H, total, d, 2),
                       v = make_heads<T>(H, total, d, 3);
  const std::vector<T> qb = to_bthd(q, H, total, d), kb = to_bthd(k, H, total, d),
                       vb = to_bthd(v, H, total, d);
  const auto pad = [&](const std::vector<T>& src) {
    std::vector<T> dst(static_cast<std::size_t>(B * H * max_len * d), T(0));
    for (Idx b = 0; b < B; ++b)
      for (Idx h = 0; h < H; ++h)
        std::copy_n(src.data() + (h * total + cu[b]) * d, len[b] * d,
                    dst.data() + ((b * H + h) * max_len) * d);
    return dst;
  };
  const std::vector<T> qp = pad(q), kp = pad(k), vp = pad(v);
  std::vector<T> o(q.size(), T(0)), ob(q.size(), T(0)), op(qp.size(), T(0));

  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, H, total, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, H, total, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, H, total, d);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), 1, H, total, d);
  const auto Qb = ea::HeadsView<const T>::bthd(qb.data(), 1, total, H, d);
  const auto Kb = ea::HeadsView<const T>::bthd(kb.data(), 1, total, H, d);
  const auto Vb = ea::HeadsView<const T>::bthd(vb.data(), 1, total, H, d);
  const auto Ob = ea::HeadsView<T>::bthd(ob.data(), 1, total, H, d);
  const auto Qp = ea::HeadsView<const T>::bhtd(qp.data(), B, H, max_len, d);
  const auto Kp = ea::HeadsView<const T>::bhtd(kp.data(), B, H, max_len, d);
  const auto Vp = ea::HeadsView<const T>::bhtd(vp.data(), B, H, max_len, d);
  const auto Op = ea::HeadsView<T>::bhtd(op.data(), B, H, max_len, d);
  const ea::HeadsView<const T> Oc = O, Obc = Ob, Opc = Op;

  ea::Options base;
  base.causal = true;
  base.kernel = kernel;
  double useful = 0, padded_pairs = 0;  // per head
  for (Idx b = 0; b < B; ++b) {
    useful += computed_pairs(len[b], len[b], base);
    padded_pairs += computed_pairs(max_len, len[b], base);  // padded query rows still see len[b] keys
  }
  ea::Masks<T> masks;
  masks.key_lengths = key_lengths.data();

  for (int threads : a.threads) {
    ea::Options opt = base;
    opt.threads = threads;
    const Timing tv = measure(a.seconds, a.reps, [&] {
      ea::attention_varlen_into(Qb, Kb, Vb, cu.data(), cu.data(), B, Ob, opt);
      g_sink = g_sink + double(ob[0]);
    });
    const Timing th = measure(a.seconds, a.reps, [&] {
      ea::attention_varlen_into(Q, K, V, cu.data(), cu.data(), B, O, opt);
      g_sink = g_sink + double(o[0]);
    });
    const Timing tp = time_heads<T>(a, Qp, Kp, Vp, Op, opt, masks);
    // Both varlen calls against padded (real rows only), against each other, and sampled rows
    // of the first and last sequence, first and last head, against exact.
    const double ref_layouts = all_heads_diff<T>(Obc, Oc);
    double ref_vb = 0, ref_vh = 0, exact_v = 0, exact_h = 0, exact_p = 0;
    for (Idx b = 0; b < B; ++b) {
      for (Idx h = 0; h < H; ++h) {
        ref_vb = worst(ref_vb, rows_diff<T>(Obc, 0, h, cu[b], Opc, b, h, 0, len[b]));
        ref_vh = worst(ref_vh, rows_diff<T>(Oc, 0, h, cu[b], Opc, b, h, 0, len[b]));
      }
    }
    for (Idx b : {Idx(0), B - 1}) {
      for (Idx h : {Idx(0), H - 1}) {
        exact_v = worst(exact_v, exact_rows_diff<T>(Qb, Kb, Vb, Obc, 0, h, h, cu[b], len[b], len[b], opt));
        exact_h = worst(exact_h, exact_rows_diff<T>(Q, K, V, Oc, 0, h, h, cu[b], len[b], len[b], opt));
        exact_p = worst(exact_p, exact_rows_diff<T>(Qp, Kp, Vp, Opc, b, h, h, 0, len[b], len[b], opt));
      }
    }
    const auto row = [&](const char* call, double computed, const Timing& tm, const std::string& ref,
                         double exact) {
      std::printf("%-6s %3d %4ld %4ld %-16s | %12.0f %12.0f %10.2f %9.1f | %9s %9s\n", type, threads, long(H),
                  long(d), call, useful, computed, tm.median * 1e3, gflops(useful, d, H, tm.median),
                  ref.c_str(), check_cell(exact, exact_tolerance<T>(), checks).c_str());
    };
    row("varlen BTHD", useful, tv, check_cell(ref_vb, ref_tolerance<T>(), checks), exact_v);
    row("varlen BHTD", useful, th, check_cell(ref_vh, ref_tolerance<T>(), checks), exact_h);
    row("padded+key_len", padded_pairs, tp, "-", exact_p);
    std::printf(
        "%-6s %3d   varlen speed-up over padded: %.2fx (BTHD), %.2fx (BHTD); padded/useful pairs = %.2f; "
        "varlen BTHD vs BHTD max|diff| %s\n",
        type, threads, tp.median / tv.median, tp.median / th.median, padded_pairs / useful,
        check_cell(ref_layouts, ref_tolerance<T>(), checks).c_str());
    std::fflush(stdout);
  }
}

template void varlen_section<float>(const Args&, const char*, ea::Kernel, Checks&);
template void varlen_section<double>(const Args&, const char*, ea::Kernel, Checks&);

}  // namespace ea_multihead_bench
