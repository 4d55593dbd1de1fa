// SPDX-License-Identifier: MIT
// eigen_attention_low_precision_bench: how fast EigenAttention computes attention on bfloat16 and
// half inputs (computed in float: each tile widened as it is loaded, results rounded once; or, on
// the avx512bf16 kernel, bf16 pairs on vdpbf16ps), against its own float call in the same run, and
// where the CPU's bf16 dot-product unit is faster than widening. See bench/README.md.
//
// In one run, after a header that names the CPU and its 16-bit units (the flags amx_bf16,
// avx512_bf16 and avx512_fp16 of /proc/cpuinfo):
//   units  one core: vfmadd231ps zmm against vdpbf16ps zmm (and vfmadd231ph zmm), GFLOP/s with
//          32 FLOPs per FMA instruction and 64 per vdpbf16ps, latency-free (12 and 24
//          accumulators) and as a dependent chain; the widening of half and bf16 to float and
//          the narrowing back (low_precision_bench_units.cpp);
//   gemm   Eigen's square sgemm, 1 thread (attention_bench_gemm.cpp): the yardstick;
//   rates  for T = 4096, one head, d = 64 and 128, causal or not, 1 and 2 threads, and every
//          kernel (Auto, then each other available kernel but the reference): the fused call
//          attention_into on float, bfloat16 and half inputs of the same values, back to back,
//          and on Auto the float call on 16-bit inputs converted first (the conversions and the
//          result's rounding timed), with the ratios to float (low_precision_bench_rates.cpp);
// then a summary in Markdown and the targets, met or not. GFLOP/s = 4 T^2 d / time (half
// when causal); times are medians. Every 16-bit output is checked, bit for bit, against the float
// call on the widened inputs rounded once, and against the first thread count's; the run exits 1
// when a check fails (a missed target is reported, not failed). Never run as a test; --smoke is
// a quick "does it run".
//
// The sections live in low_precision_bench_*.cpp; low_precision_bench.hpp lists them.
#include "low_precision_bench.hpp"

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_low_precision_bench";
const char* const bench::kUsage =
    "usage: eigen_attention_low_precision_bench [options]\n"
    "  --T LIST, --t LIST  sequence lengths T (T_q = T_k = T), comma list (default 4096)\n"
    "  --d LIST            head dimensions d (d_k = d_v = d) (default 64,128)\n"
    "  --threads LIST      Options::threads values (default 1,2; 0 = all hardware threads)\n"
    "  --causal LIST       0, 1 or both (default 0,1)\n"
    "  --kernel K          all (Auto, then every other available kernel but the reference),\n"
    "                      or one of auto|amx|avx512bf16|avx512|avx2|portable|reference\n"
    "                      (default all)\n"
    "  --reps N            measured runs per config (default 5; 0 = 3..5 by --seconds)\n"
    "  --seconds S         one run lasts about S/5 (back-to-back calls); default 1\n"
    "  --unit-seconds S    one run of a unit loop lasts about S/5 (5 runs); default 0.5\n"
    "  --gemm-n N          size of the square reference sgemm (default 2048)\n"
    "  --sections LIST     of units, rates, backward, prefill (default all; rates includes the sgemm)\n"
    "  --units             the units section only (= --sections units)\n"
    "  --no-units          the rates only (= --sections rates)\n"
    "  --quick             T = 512, d = 64, 3 reps of ~0.04 s, short unit loops, sgemm 512\n"
    "                      (explicit options win): about 10 s\n"
    "  --smoke             T = 128, d = 64, 1 rep, one call of each unit loop, sgemm 128: under\n"
    "                      a second; exits 0 when every check passes\n"
    "  --help\n"
    "Exit status: 0, or 1 when a check fails (targets missed are reported, not failed).\n";

namespace ea_low_precision_bench {
namespace {

using bench::parse_int;
using bench::parse_ints;
using bench::usage_error;

Args parse_args(int argc, char** argv) {
  Args a;
  bool t_given = false, d_given = false, reps_given = false, seconds_given = false, unit_given = false,
       gemm_given = false;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(bench::kUsage, stdout);
      std::exit(0);
    } else if (arg == "--T" || arg == "--t") {
      a.ts = parse_ints<Idx>(args.value(), "T", 1, Idx(1) << 24);
      t_given = true;
    } else if (arg == "--d") {
      a.ds = parse_ints<Idx>(args.value(), "d", 1, 65536);
      d_given = true;
    } else if (arg == "--threads") {
      a.threads = parse_ints<int>(args.value(), "threads", 0, 4096);
    } else if (arg == "--causal") {
      a.causal = parse_ints<int>(args.value(), "causal", 0, 1);
    } else if (arg == "--kernel") {
      a.kernel = args.value();
      if (a.kernel != "all") bench::parse_kernel(a.kernel);  // exits when unknown or unavailable
    } else if (arg == "--reps") {
      const std::string v = args.value();
      a.reps = v == "0" ? 0 : bench::parse_reps(v);
      reps_given = true;
    } else if (arg == "--seconds") {
      a.seconds = bench::parse_seconds(args.value());
      seconds_given = true;
    } else if (arg == "--unit-seconds") {
      a.unit_seconds = bench::parse_seconds(args.value());
      unit_given = true;
    } else if (arg == "--gemm-n") {
      a.gemm_n = static_cast<Idx>(parse_int(args.value(), "gemm-n"));
      if (a.gemm_n < 1) usage_error("--gemm-n must be >= 1");
      gemm_given = true;
    } else if (arg == "--sections") {
      bench::parse_sections(
          args.value(),
          {{"units", &a.units}, {"rates", &a.rates}, {"backward", &a.backward}, {"prefill", &a.prefill}});
    } else if (arg == "--units") {
      a.units = true;
      a.rates = a.backward = a.prefill = false;
    } else if (arg == "--no-units") {
      a.units = false;
      a.rates = a.backward = a.prefill = true;
    } else if (arg == "--quick") {
      a.quick = true;
    } else if (arg == "--smoke") {
      a.smoke = true;
    } else {
      usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  if (a.quick || a.smoke) {  // explicit options win
    if (!t_given) a.ts = {Idx(a.smoke ? 128 : 512)};
    if (!d_given) a.ds = {64};
    if (!reps_given) a.reps = a.smoke ? 1 : 3;
    if (!seconds_given) a.seconds = a.smoke ? 0 : 0.2;
    if (!unit_given) a.unit_seconds = a.smoke ? 0 : 0.1;
    if (!gemm_given) a.gemm_n = a.smoke ? 128 : 512;
  }
  return a;
}

// The units line: the 16-bit flags of /proc/cpuinfo (as `grep -o -w
// 'amx_bf16\|avx512_bf16\|avx512_fp16' /proc/cpuinfo` finds them, once), and what
// __builtin_cpu_supports says.
void print_units_line() {
  std::string found, absent;
  for (const char* f : {"amx_bf16", "avx512_bf16", "avx512_fp16"}) {
    std::string& s = bench::cpu_has_flag(f) ? found : absent;
    s += (s.empty() ? "" : " ") + std::string(f);
  }
  std::printf(
      "  units     %s  (16-bit units among amx_bf16 avx512_bf16 avx512_fp16 in /proc/cpuinfo; absent: %s)\n",
      found.empty() ? "(none)" : found.c_str(), absent.empty() ? "none" : absent.c_str());
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  std::printf("            __builtin_cpu_supports: avx512f %s, avx512bf16 %s; CPUID: avx512fp16 %s\n",
              __builtin_cpu_supports("avx512f") ? "yes" : "no",
              __builtin_cpu_supports("avx512bf16") ? "yes" : "no", cpu_has_avx512fp16() ? "yes" : "no");
#endif
}

void print_machine(const Args& a) {
  bench::print_machine_common("EigenAttention low-precision benchmark", kernels_to_run(a.kernel));
  print_units_line();
  std::printf("  baseline  sgemm: Eigen compiled with '%s' (SIMD: %s), single-threaded\n",
              eabench::baseline_flags(), eabench::baseline_simd());
  if (a.rates) {
    std::string ts;
    for (Idx t : a.ts) ts += (ts.empty() ? "" : ",") + std::to_string(t);
    std::printf(
        "  shapes    T = %s, one head, T_q = T_k, d_k = d_v = d; inputs uniform in [-1, 1] in float,\n"
        "            the 16-bit inputs the same values rounded (Eigen's cast, to nearest even)\n",
        ts.c_str());
    std::printf(
        "  timing    after 1-2 warm-up calls, median of %s, each run = enough back-to-back calls\n"
        "            to last ~%.2g s; FLOPs: 4*T*T*d per call (half when causal), sgemm 2*n^3\n\n",
        a.reps > 0 ? (std::to_string(a.reps) + " runs").c_str() : "3..5 runs (about --seconds per config)",
        a.seconds / 5);
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);
}

std::string threads_text(int n) { return std::to_string(n) + (n == 1 ? " thread" : " threads"); }

const Row* find_row(const std::vector<Row>& rows, Idx t, Idx d, bool causal, int threads, ea::Kernel k) {
  for (const Row& r : rows) {
    if (r.t == t && r.d == d && r.causal == causal && r.threads == threads && r.kernel == k) return &r;
  }
  return nullptr;
}

// The summary, one Markdown table per T, to paste into docs/performance.md.
void print_summary(const Args& a, const std::vector<Row>& rows, double sgemm, const UnitsReport& units) {
  std::printf("summary (Markdown; medians; ratios of GFLOP/s in the same run)\n");
  if (std::isfinite(units.fma_gflops)) {
    std::printf(
        "\none core: vfmadd231ps zmm %s GFLOP/s, vdpbf16ps zmm %s GFLOP/s (12 acc; %s with 24), clock ~%s "
        "GHz\n",
        fmt(units.fma_gflops).c_str(), fmt(units.dpbf16_gflops).c_str(), fmt(units.dpbf16_24_gflops).c_str(),
        fmt(units.clock_ghz, 2).c_str());
  }
  const std::vector<ea::Kernel> kernels = kernels_to_run(a.kernel);
  for (Idx t : rows.empty() ? std::vector<Idx>{} : a.ts) {
    std::string head = "| T = " + std::to_string(t) + ", one head |";
    std::string rule = "|---|";
    for (Idx d : a.ds) {
      for (int c : a.causal) {
        head += " d = " + std::to_string(d) + (c ? " causal" : "") + " |";
        rule += "---|";
      }
    }
    std::printf("\n%s\n%s\n", head.c_str(), rule.c_str());
    // One line: `label` and, per column, what `cell` makes of that column's row(s).
    auto line = [&](const std::string& label, auto cell) {
      std::string s = "| " + label + " |";
      for (Idx d : a.ds) {
        for (int c : a.causal) s += " " + cell(d, c != 0) + " |";
      }
      std::printf("%s\n", s.c_str());
    };
    auto rate = [&](int thr, ea::Kernel k, double Row::*field) {
      return [&, thr, k, field](Idx d, bool c) {
        const Row* r = find_row(rows, t, d, c, thr, k);
        return r ? fmt(r->gflops(r->*field)) : std::string("-");
      };
    };
    auto ratio = [&](int thr, ea::Kernel k, double Row::*field, bool bold) {
      return [&, thr, k, field, bold](Idx d, bool c) {
        const Row* r = find_row(rows, t, d, c, thr, k);
        if (!r) return std::string("-");
        const std::string v = fmt(r->float_s / (r->*field), 2);
        return bold ? "**" + v + "**" : v;
      };
    };
    const std::string autok = std::string("auto = ") + resolved_name(ea::Kernel::Auto);
    for (int thr : a.threads) {
      const std::string th = ", " + threads_text(thr);
      line("float `attention_into` GFLOP/s (" + autok + ")" + th, rate(thr, ea::Kernel::Auto, &Row::float_s));
      line("bf16 GFLOP/s" + th, rate(thr, ea::Kernel::Auto, &Row::bf16_s));
      line("half GFLOP/s" + th, rate(thr, ea::Kernel::Auto, &Row::half_s));
      line("float on bf16 inputs converted first, GFLOP/s" + th,
           rate(thr, ea::Kernel::Auto, &Row::cvt_bf16_s));
      line("float on half inputs converted first, GFLOP/s" + th,
           rate(thr, ea::Kernel::Auto, &Row::cvt_half_s));
      const double target = forward_target(
          thr, ea::auto_kernel() == ea::Kernel::Avx512Bf16 || ea::auto_kernel() == ea::Kernel::Amx);
      line("bf16 / float" + th + (std::isfinite(target) ? " (target >= " + fmt(target, 1) + ")" : ""),
           ratio(thr, ea::Kernel::Auto, &Row::bf16_s, true));
      line("half / float" + th, ratio(thr, ea::Kernel::Auto, &Row::half_s, false));
      line("converted-first bf16 / float" + th, ratio(thr, ea::Kernel::Auto, &Row::cvt_bf16_s, false));
      line("converted-first half / float" + th, ratio(thr, ea::Kernel::Auto, &Row::cvt_half_s, false));
    }
    for (int thr : a.threads) {
      if (thr == 1 || std::find(a.threads.begin(), a.threads.end(), 1) == a.threads.end()) continue;
      line("speed-up " + std::to_string(thr) + " / 1 threads, float / bf16 / half", [&, thr](Idx d, bool c) {
        const Row* one = find_row(rows, t, d, c, 1, ea::Kernel::Auto);
        const Row* r = find_row(rows, t, d, c, thr, ea::Kernel::Auto);
        if (!one || !r) return std::string("-");
        return fmt(one->float_s / r->float_s, 2) + " / " + fmt(one->bf16_s / r->bf16_s, 2) + " / " +
               fmt(one->half_s / r->half_s, 2);
      });
    }
    for (ea::Kernel k : kernels) {
      if (k == ea::Kernel::Auto) continue;
      for (int thr : a.threads) {
        const std::string th = std::string(ea::kernel_name(k)) + ", " + threads_text(thr);
        line("kernel " + th + ": float / bf16 / half GFLOP/s", [&, k, thr](Idx d, bool c) {
          const Row* r = find_row(rows, t, d, c, thr, k);
          if (!r) return std::string("-");
          return fmt(r->gflops(r->float_s)) + " / " + fmt(r->gflops(r->bf16_s)) + " / " +
                 fmt(r->gflops(r->half_s));
        });
        line("kernel " + th + ": bf16 / float, half / float", [&, k, thr](Idx d, bool c) {
          const Row* r = find_row(rows, t, d, c, thr, k);
          if (!r) return std::string("-");
          return fmt(r->float_s / r->bf16_s, 2) + ", " + fmt(r->float_s / r->half_s, 2);
        });
      }
    }
    if (std::isfinite(sgemm)) {
      std::string s =
          "| Eigen sgemm " + std::to_string(a.gemm_n) + "^3, 1 thread, same run | " + fmt(sgemm) + " |";
      for (std::size_t i = 1; i < a.ds.size() * a.causal.size(); ++i) s += " |";
      std::printf("%s\n", s.c_str());
    }
  }
  std::fflush(stdout);
}

// Targets of bf16 on Kernel::Auto against the same-run float rate, met or not: one line per row
// of `rows` (Row or BackwardRow) that runs on Auto and has a target (`target_of`), then a verdict.
template <class R, class Target>
void print_target_lines(const char* title, const std::vector<R>& rows, Target&& target_of) {
  if (rows.empty()) return;
  std::vector<std::string> met, missed;
  for (const R& r : rows) {
    const double target = target_of(r), x = r.float_s / r.bf16_s;
    if (r.kernel != ea::Kernel::Auto || !std::isfinite(target)) continue;
    const std::string what = "T = " + std::to_string(r.t) + " d = " + std::to_string(r.d) +
                             (r.causal ? " causal" : "") + ", " + threads_text(r.threads) +
                             ": bf16 / float = " + fmt(x, 2) + (x >= target ? " >= " : " < ") +
                             fmt(target, 1);
    (x >= target ? met : missed).push_back(what);
  }
  std::printf("\ntargets (%s on Kernel::Auto = %s against the same-run float):\n", title,
              resolved_name(ea::Kernel::Auto));
  for (const std::string& m : met) std::printf("  met      %s\n", m.c_str());
  for (const std::string& m : missed) std::printf("  MISSED   %s\n", m.c_str());
  std::printf("  => %s\n", missed.empty() ? "all met" : "not all met");
}

// The forward's targets (forward_target: where Auto runs bf16 pairs, 1 thread >= 1.5x the same-run
// float rate and 2 threads >= 1.8x; elsewhere >= 1.0x, no loss).
void print_targets(const std::vector<Row>& rows) {
  print_target_lines("the bf16 forward", rows,
                     [](const Row& r) { return forward_target(r.threads, r.bf16_pairs); });
}

// Issue 27's backward target: bf16 / float >= 1.3 on Kernel::Auto where it runs bf16 pairs, >= 1.0
// elsewhere (no loss).
void print_backward_targets(const std::vector<BackwardRow>& rows) {
  print_target_lines("the bf16 backward", rows,
                     [](const BackwardRow& r) { return r.pairs ? kTargetBackward : 1.0; });
}

int run(const Args& a) {
  print_machine(a);
  UnitsReport units;
  if (a.units) units_section(a, units);
  bool ok = true;
  std::vector<Row> rows;
  double sgemm = kNaN;
  if (a.rates) {
    ea_attention_bench::Args ga;  // the square GEMM of eigen_attention_bench, as it measures it
    ga.gemm_n = a.gemm_n;
    ga.seconds = a.seconds;
    ga.reps = a.reps;
    ea_attention_bench::Csv unused;
    std::printf("Eigen GEMM reference rate (1 thread):\n");
    sgemm = ea_attention_bench::square_gemm<float>(ga, "float", unused);
    std::printf("\n");
    ok = rates_table(a, rows);
    std::printf("\n");
  }
  std::vector<BackwardRow> backward_rows;
  if (a.backward) {
    ok = backward_table(a, backward_rows) && ok;
    std::printf("\n");
  }
  if (a.prefill) {
    ok = prefill_table(a) && ok;
    std::printf("\n");
  }
  print_summary(a, rows, sgemm, units);
  print_targets(rows);
  print_backward_targets(backward_rows);
  std::printf("\nload at end: %s\n", bench::load_average().c_str());
  if (!ok) {
    std::printf("some checks failed (marked !)\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ea_low_precision_bench

int main(int argc, char** argv) {
  try {
    return ea_low_precision_bench::run(ea_low_precision_bench::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_low_precision_bench: %s\n", e.what());
    return 1;
  }
}
