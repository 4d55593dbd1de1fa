// SPDX-License-Identifier: MIT
// eigen_attention_multihead_bench, section 1: attention_heads_into (MHA and GQA, BHTD and BTHD)
// against the single-head call.
#include "multihead_bench.hpp"

namespace ea_multihead_bench {

// ---------------------------------------------------------------------------------------------
// Section 1: attention_heads_into against the single-head call

struct HeadsCtx {
  const Args* a;
  const char* type;
  ea::Kernel kernel;
  Checks* checks;
};

void print_heads_header() {
  std::printf("%-6s %4s %3s %3s %6s %4s %4s %-7s | %9s %9s %9s %6s | %9s %9s\n", "type", "d", "cau", "thr",
              "T", "H", "H_kv", "layout", "ms", "GFLOP/s", "1-head", "ratio", "vs ref", "vs exact");
  std::printf("%-6s %4s %3s %3s %6s %4s %4s %-7s | %9s %9s %9s %6s | %9s %9s\n", "", "", "", "", "", "", "",
              "", "", "", "GFLOP/s", "", "max|diff|", "max|diff|");
  std::fflush(stdout);
}

// One row of the table, for the call timed `tm` on these views: its rate against the single-head
// rate, the `ref` check and sampled rows against exact, and a note when below the 0.9 target.
template <typename T>
void heads_row(const HeadsCtx& c, const char* layout, const ea::HeadsView<const T>& q,
               const ea::HeadsView<const T>& k, const ea::HeadsView<const T>& v,
               const ea::HeadsView<const T>& out, const ea::Options& opt, const Timing& tm,
               double single_rate, double ref) {
  const Idx t = q.tokens, d = q.dim, H = q.heads, Hkv = k.heads;
  const double exact = exact_first_last_heads<T>(q, k, v, out, opt);
  const double rate = gflops(computed_pairs(t, t, opt), d, H, tm.median);
  const double ratio = rate / single_rate;
  std::printf("%-6s %4ld %3d %3d %6ld %4ld %4ld %-7s | %9.2f %9.1f %9.1f %5.2f%s | %9s %9s\n", c.type,
              long(d), int(opt.causal), opt.threads, long(t), long(H), long(Hkv), layout, tm.median * 1e3,
              rate, single_rate, ratio, ratio < 0.9 ? "*" : " ",
              check_cell(ref, ref_tolerance<T>(), *c.checks).c_str(),
              check_cell(exact, exact_tolerance<T>(), *c.checks).c_str());
  std::fflush(stdout);
  if (ratio < 0.9) {
    char what[160];
    std::snprintf(what, sizeof what, "%s d=%ld causal=%d threads=%d T=%ld H=%ld H_kv=%ld %s: %.2f", c.type,
                  long(d), int(opt.causal), opt.threads, long(t), long(H), long(Hkv), layout, ratio);
    c.checks->below_target.push_back(what);
  }
}

// MHA or GQA (H, H_kv) at one (T, d, causal, threads): the BHTD row, and the BTHD row when asked.
template <typename T>
void heads_config(const HeadsCtx& c, Idx t, Idx d, bool causal, int threads, Idx H, Idx Hkv, bool with_bthd,
                  const Mat<T>& single_out, double single_rate) {
  const Args& a = *c.a;
  ea::Options opt;
  opt.causal = causal;
  opt.kernel = c.kernel;
  opt.threads = threads;
  const std::vector<T> q = make_heads<T>(H, t, d, 1), k = make_heads<T>(Hkv, t, d, 2),
                       v = make_heads<T>(Hkv, t, d, 3);
  std::vector<T> o(q.size(), T(0));
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, H, t, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, Hkv, t, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, Hkv, t, d);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), 1, H, t, d);
  const Timing tm = time_heads<T>(a, Q, K, V, O, opt);
  const ea::HeadsView<const T> Oc = O;

  // Head 0 against the single-head call (the same inputs), the last head against its own
  // single-head call (catches a wrong GQA head mapping); heads_row adds sampled rows against exact.
  const Idx last = H - 1, last_kv = last / (H / Hkv);
  double ref = rows_diff<T>(Oc, 0, 0, 0, ea::HeadsView<const T>::single(single_out), 0, 0, 0, t);
  {
    Mat<T> out_last(t, d);
    ea::attention_into(ConstMap<T>(q.data() + last * t * d, t, d),
                       ConstMap<T>(k.data() + last_kv * t * d, t, d),
                       ConstMap<T>(v.data() + last_kv * t * d, t, d), out_last, opt);
    const auto L = ea::HeadsView<const T>::single(out_last);
    ref = worst(ref, rows_diff<T>(Oc, 0, last, 0, L, 0, 0, 0, t));
  }
  heads_row<T>(c, "BHTD", Q, K, V, Oc, opt, tm, single_rate, ref);
  if (!with_bthd) return;

  // The same inputs in BTHD buffers, every head against the BHTD result.
  const std::vector<T> qb = to_bthd(q, H, t, d), kb = to_bthd(k, Hkv, t, d), vb = to_bthd(v, Hkv, t, d);
  std::vector<T> ob(o.size(), T(0));
  const auto Qb = ea::HeadsView<const T>::bthd(qb.data(), 1, t, H, d);
  const auto Kb = ea::HeadsView<const T>::bthd(kb.data(), 1, t, Hkv, d);
  const auto Vb = ea::HeadsView<const T>::bthd(vb.data(), 1, t, Hkv, d);
  const auto Ob = ea::HeadsView<T>::bthd(ob.data(), 1, t, H, d);
  const Timing tb = time_heads<T>(a, Qb, Kb, Vb, Ob, opt);
  const ea::HeadsView<const T> Obc = Ob;
  heads_row<T>(c, "BTHD", Qb, Kb, Vb, Obc, opt, tb, single_rate, all_heads_diff<T>(Obc, Oc));
}

template <typename T>
void heads_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  const HeadsCtx c{&a, type, kernel, &checks};
  // (H, H_kv) rows: MHA for every --h, then the GQA pairs.
  std::vector<std::pair<Idx, Idx>> configs;
  for (Idx h : a.hs) configs.emplace_back(h, h);
  for (const auto& p : a.gqa) configs.push_back(p);
  for (Idx d : a.ds) {
    for (int causal : a.causal) {
      for (int threads : a.threads) {
        for (Idx t : a.ts) {
          ea::Options opt;
          opt.causal = causal != 0;
          opt.kernel = kernel;
          opt.threads = threads;
          Mat<T> q1(t, d), k1(t, d), v1(t, d), o1(t, d);
          fill_stream(q1.data(), t * d, 1, 0);
          fill_stream(k1.data(), t * d, 2, 0);
          fill_stream(v1.data(), t * d, 3, 0);
          const Timing ts = measure(a.seconds, a.reps, [&] {
            ea::attention_into(q1, k1, v1, o1, opt);
            g_sink = g_sink + double(o1(0, 0));
          });
          const double pairs = computed_pairs(t, t, opt);
          const double rate = gflops(pairs, d, 1, ts.median);
          const auto Q1 = ea::HeadsView<const T>::single(q1);
          const auto K1 = ea::HeadsView<const T>::single(k1);
          const auto V1 = ea::HeadsView<const T>::single(v1);
          const auto O1 = ea::HeadsView<const T>::single(o1);
          const double exact = exact_rows_diff<T>(Q1, K1, V1, O1, 0, 0, 0, 0, t, t, opt);
          std::printf("%-6s %4ld %3d %3d %6ld %4d %4d %-7s | %9.2f %9.1f %9s %6s | %9s %9s\n", type, long(d),
                      causal, threads, long(t), 1, 1, "1-head", ts.median * 1e3, rate, "", "", "",
                      check_cell(exact, exact_tolerance<T>(), checks).c_str());
          std::fflush(stdout);
          for (const auto& [H, Hkv] : configs) {
            heads_config<T>(c, t, d, causal != 0, threads, H, Hkv, t == a.bthd_t, o1, rate);
          }
        }
      }
    }
  }
}

template void heads_section<float>(const Args&, const char*, ea::Kernel, Checks&);
template void heads_section<double>(const Args&, const char*, ea::Kernel, Checks&);

}  // namespace ea_multihead_bench
