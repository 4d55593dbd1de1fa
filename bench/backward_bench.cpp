// SPDX-License-Identifier: MIT
// eigen_attention_backward_bench: how fast EigenAttention's backward is, against its own fused
// forward, the naive Eigen backward and Eigen's GEMM, and how much memory it needs, in one run on
// one machine. See bench/README.md.
//
// For every (scalar type, T, d, causal) (default float, T = 4096, d = 64 and 128, causal or not)
// it times, for every thread count (default 1 and 2):
//   forward    attention_into(Q, K, V, out, lse, opt), 4 T^2 d FLOPs (half when causal);
//   backward   attention_backward_into(Q, K, V, out, lse, dout, dq, dk, dv, opt), 10 T^2 d FLOPs
//              (half when causal), all outputs preallocated;
// and once, single-threaded, the naive backward (baseline.cpp: P materialised, S = scale Q K^T,
// mask, row softmax, dV = P^T dO, dP = dO V^T, dS = P .* (dP - rowsum(dP .* P)), dQ = scale dS K,
// dK = scale dS^T Q), whose gradients check ours; plus Eigen's square GEMM of each type. Then, at
// T = 65536, d = 64, the extra peak memory of one backward call (backward_bench_memory.cpp), and
// a summary table in Markdown. Times are medians.
//
// The sections live in backward_bench_*.cpp; backward_bench.hpp lists them.
#include "backward_bench.hpp"

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_backward_bench";
const char* const bench::kUsage =
    "usage: eigen_attention_backward_bench [options]\n"
    "  --T LIST, --t LIST  sequence lengths T (T_q = T_k = T), comma list (default 4096)\n"
    "  --d LIST            head dimensions d (d_k = d_v = d) (default 64,128)\n"
    "  --type LIST         float, double or both (default float)\n"
    "  --threads LIST      Options::threads values (default 1,2; 0 = all hardware threads)\n"
    "  --causal LIST       0, 1 or both (default 0,1)\n"
    "  --kernel K          auto|avx512|avx2|portable|reference (default auto)\n"
    "  --reps N            measured runs per config (default 5; 0 = 3..5 by --seconds)\n"
    "  --seconds S         one run lasts about S/5 (back-to-back calls); default 1\n"
    "  --naive-max-t N     skip the naive backward above T = N (it holds two T x T matrices;\n"
    "                      default 8192)\n"
    "  --gemm-n N          size of the square reference GEMM (default 2048)\n"
    "  --sections LIST     of rates, memory (default both)\n"
    "  --memory            the memory section only (= --sections memory)\n"
    "  --no-memory         the rates only (= --sections rates)\n"
    "  --memory-shape T,d  the memory section's T and d (default 65536,64)\n"
    "  --smoke             a tiny run (T = 256, d = 64, 1 rep, memory at T = 2048): exits 0 when the\n"
    "                      gradients agree\n"
    "  --help\n"
    "Exit status: 0, or 1 when a gradient check fails (targets missed are reported, not failed).\n";

namespace ea_backward_bench {
namespace {

using bench::parse_int;
using bench::parse_ints;
using bench::usage_error;

Args parse_args(int argc, char** argv) {
  Args a;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(bench::kUsage, stdout);
      std::exit(0);
    } else if (arg == "--T" || arg == "--t") {
      a.ts = parse_ints<Idx>(args.value(), "T", 1, Idx(1) << 24);
    } else if (arg == "--d") {
      a.ds = parse_ints<Idx>(args.value(), "d", 1, 65536);
    } else if (arg == "--type") {
      a.types = bench::parse_types(args.value());
    } else if (arg == "--threads") {
      a.threads = parse_ints<int>(args.value(), "threads", 0, 4096);
    } else if (arg == "--causal") {
      a.causal = parse_ints<int>(args.value(), "causal", 0, 1);
    } else if (arg == "--kernel") {
      a.kernel = args.value();
      bench::parse_kernel(a.kernel);  // exits when unknown or unavailable
    } else if (arg == "--reps") {
      const std::string v = args.value();
      a.reps = v == "0" ? 0 : bench::parse_reps(v);
    } else if (arg == "--seconds") {
      a.seconds = bench::parse_seconds(args.value());
    } else if (arg == "--naive-max-t") {
      a.naive_max_t = static_cast<Idx>(parse_int(args.value(), "naive-max-t"));
    } else if (arg == "--gemm-n") {
      a.gemm_n = static_cast<Idx>(parse_int(args.value(), "gemm-n"));
      if (a.gemm_n < 1) usage_error("--gemm-n must be >= 1");
    } else if (arg == "--sections") {
      bench::parse_sections(args.value(), {{"rates", &a.rates}, {"memory", &a.memory}});
    } else if (arg == "--memory") {
      a.rates = false;
      a.memory = true;
    } else if (arg == "--no-memory") {
      a.rates = true;
      a.memory = false;
    } else if (arg == "--memory-shape") {
      const std::vector<Idx> shape = parse_ints<Idx>(args.value(), "memory shape", 1, Idx(1) << 24);
      if (shape.size() != 2) usage_error("--memory-shape needs T,d");
      a.memory_t = shape[0];
      a.memory_d = shape[1];
    } else if (arg == "--smoke") {
      a.smoke = true;
    } else {
      usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  if (a.smoke) {
    a.ts = {256};
    a.ds = {64};
    a.reps = 1;
    a.seconds = 0;
    a.gemm_n = 256;
    a.memory_t = 2048;
  }
  return a;
}

void print_machine(const Args& a) {
  bench::print_machine_common("EigenAttention backward benchmark", {bench::parse_kernel(a.kernel)});
  const bool amx = bench::cpu_has_flag("amx_tile");
  std::printf("  isa       AVX-512F %s, AVX-512 BF16 %s, AVX-512 FP16 %s, AMX %s\n",
              bench::cpu_has_flag("avx512f") ? "yes" : "no",
              bench::cpu_has_flag("avx512_bf16") ? "yes" : "no",
              bench::cpu_has_flag("avx512_fp16") ? "yes" : "no",
              amx ? (std::string("yes (") + (bench::cpu_has_flag("amx_bf16") ? "bf16 " : "") +
                     (bench::cpu_has_flag("amx_int8") ? "int8" : "") + ")")
                        .c_str()
                  : "no");
  std::printf("  baseline  naive backward and GEMM: Eigen compiled with '%s' (SIMD: %s), single-threaded\n",
              eabench::baseline_flags(), eabench::baseline_simd());
  std::printf(
      "  timing    after 1-2 warm-up calls, median of %s, each run = enough back-to-back calls to last ~%.2g "
      "s;\n"
      "            FLOPs: forward 4*T*T*d, backward 10*T*T*d (half of each when causal), GEMM 2*n^3\n",
      a.reps > 0 ? (std::to_string(a.reps) + " runs").c_str() : "3..5 runs (about --seconds per config)",
      a.seconds / 5);
  std::printf("\n");
  std::fflush(stdout);
}

std::string threads_text(int n) { return std::to_string(n) + (n == 1 ? " thread" : " threads"); }

const RateRow* find_row(const std::vector<RateRow>& rows, const std::string& type, Idx t, Idx d, bool causal,
                        int threads) {
  for (const RateRow& r : rows) {
    if (r.type == type && r.t == t && r.d == d && r.causal == causal && r.threads == threads) return &r;
  }
  return nullptr;
}

// The summary, one Markdown table per (type, T), to paste into docs/performance.md.
void print_summary(const Args& a, const std::vector<RateRow>& rows, const std::map<std::string, double>& gemm,
                   const std::vector<MemoryRow>& memory) {
  std::printf("\nsummary (Markdown)\n");
  for (const std::string& type : rows.empty() ? std::vector<std::string>{} : a.types) {
    for (Idx t : a.ts) {
      std::string head = "| " + type + ", T = " + std::to_string(t) + ", GFLOP/s |";
      std::string rule = "|---|";
      for (Idx d : a.ds) {
        for (int c : a.causal) {
          head += " d = " + std::to_string(d) + (c ? " causal" : "") + " |";
          rule += "---|";
        }
      }
      std::printf("\n%s\n%s\n", head.c_str(), rule.c_str());
      // One line: `label` and, per column, what `cell` makes of that column's row.
      auto line = [&](const std::string& label, int threads, auto cell) {
        std::string s = "| " + label + " |";
        for (Idx d : a.ds) {
          for (int c : a.causal) {
            const RateRow* r = find_row(rows, type, t, d, c != 0, threads);
            s += " " + (r ? cell(*r) : std::string("-")) + " |";
          }
        }
        std::printf("%s\n", s.c_str());
      };
      const auto rate = [](double v) { return fmt(v); };
      for (int thr : a.threads)
        line("forward `attention_into` (with LSE), " + threads_text(thr), thr,
             [&](const RateRow& r) { return rate(r.fwd_gflops); });
      for (int thr : a.threads)
        line("backward `attention_backward_into`, " + threads_text(thr), thr,
             [&](const RateRow& r) { return "**" + rate(r.bwd_gflops) + "**"; });
      for (int thr : a.threads)
        line("backward / forward, " + threads_text(thr) + (thr == 1 ? " (target >= 0.8)" : ""), thr,
             [&](const RateRow& r) { return fmt(r.bwd_over_fwd, 2); });
      for (int thr : a.threads) {
        if (thr == 1) continue;
        line("backward speed-up, " + std::to_string(thr) + " / 1 threads" +
                 (thr == 2 ? " (target >= 1.8)" : ""),
             thr, [&](const RateRow& r) { return fmt(r.bwd_speedup, 2); });
      }
      line("naive Eigen backward (P materialised), 1 thread", a.threads.front(),
           [&](const RateRow& r) { return rate(r.naive_gflops); });
      line("backward / naive, 1 thread", 1,
           [&](const RateRow& r) { return fmt(r.bwd_gflops / r.naive_gflops, 2); });
      const auto g = gemm.find(type);
      if (g != gemm.end()) {
        std::string s = "| Eigen " + std::string(type == "float" ? "sgemm" : "dgemm") + " " +
                        std::to_string(a.gemm_n) + "^3, 1 thread, same run | " + fmt(g->second) + " |";
        for (std::size_t i = 1; i < a.ds.size() * a.causal.size(); ++i) s += " |";
        std::printf("%s\n", s.c_str());
      }
    }
  }
  if (!memory.empty()) {
    std::printf(
        "\nExtra peak resident memory of one backward call beyond Q, K, V, ATTN, LSE, dO, dQ, dK, dV "
        "(target <= %.0f MiB):\n",
        kTargetMemoryMiB);
  }
  for (const MemoryRow& m : memory) {
    std::printf("- T = %ld, d = %ld, %s, %s, non-causal: %s MiB (the buffers: %.1f MiB; target %s)\n",
                long(m.t), long(m.d), m.type.c_str(), threads_text(m.threads).c_str(),
                fmt(m.extra_mib(), 2).c_str(), m.buffers_mib(),
                !m.r.ok ? "FAILED" : (m.extra_mib() <= kTargetMemoryMiB ? "met" : "NOT MET"));
  }
  std::fflush(stdout);
}

// The targets, met or not.
void print_targets(const std::vector<RateRow>& rows) {
  std::vector<std::string> missed;
  for (const RateRow& r : rows) {
    const std::string what = r.type + " T = " + std::to_string(r.t) + " d = " + std::to_string(r.d) +
                             (r.causal ? " causal" : "") + ", " + threads_text(r.threads) + ": ";
    if (r.threads == 1 && r.bwd_over_fwd < kTargetBackwardOverForward)
      missed.push_back(what + "backward / forward = " + fmt(r.bwd_over_fwd, 2) + " < 0.8");
    if (r.threads == 2 && r.bwd_speedup < kTargetSpeedup)
      missed.push_back(what + "backward speed-up over 1 thread = " + fmt(r.bwd_speedup, 2) + " < 1.8");
  }
  if (rows.empty()) return;
  if (missed.empty()) {
    std::printf("\ntargets: backward / forward >= 0.8 at 1 thread and 2-thread speed-up >= 1.8: all met\n");
  } else {
    std::printf("\ntargets missed (marked * in the table):\n");
    for (const std::string& m : missed) std::printf("  %s\n", m.c_str());
  }
}

int run(const Args& a) {
  print_machine(a);
  // The memory children first: this process must not have started the library's threads
  // before a fork.
  std::vector<MemoryRow> memory;
  if (a.memory) {
    for (const std::string& type : a.types) {
      for (int thr : a.threads) {
        memory.push_back(type == "float" ? backward_memory<float>(a, "float", thr)
                                         : backward_memory<double>(a, "double", thr));
      }
    }
  }

  bool ok = true;
  std::vector<RateRow> rows;
  std::map<std::string, double> gemm;
  if (a.rates) {
    ea_attention_bench::Args ga;  // the square GEMM of eigen_attention_bench, as it measures it
    ga.gemm_n = a.gemm_n;
    ga.seconds = a.seconds;
    ga.reps = a.reps;
    ea_attention_bench::Csv unused;
    std::printf("Eigen GEMM reference rate (1 thread):\n");
    for (const std::string& type : a.types) {
      gemm[type] = type == "float" ? ea_attention_bench::square_gemm<float>(ga, "float", unused)
                                   : ea_attention_bench::square_gemm<double>(ga, "double", unused);
    }
    std::printf(
        "\nforward and backward (GFLOP/s; bwd/fwd = backward / forward rate, target >= %.1f at 1 thread;\n"
        "bwd x, fwd x = speed-up over the 1-thread row, target >= %.1f for the backward at 2 threads;\n"
        "naive = the naive Eigen backward, 1 thread; bwd/gem = backward / square GEMM (1 thread);\n"
        "grad diff = max |ours - naive| / max |naive| over dQ, dK, dV; * = target missed, ! = check "
        "failed)\n",
        kTargetBackwardOverForward, kTargetSpeedup);
    for (const std::string& type : a.types) {
      ok = (type == "float" ? rates_table<float>(a, "float", gemm[type], rows)
                            : rates_table<double>(a, "double", gemm[type], rows)) &&
           ok;
    }
    print_targets(rows);
  }
  if (a.memory) print_memory(memory);
  print_summary(a, rows, gemm, memory);
  for (const MemoryRow& m : memory) ok = ok && m.r.ok;
  std::printf("\nload at end: %s\n", bench::load_average().c_str());
  if (!ok) {
    std::printf("some checks failed (marked !)\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ea_backward_bench

int main(int argc, char** argv) {
  try {
    return ea_backward_bench::run(ea_backward_bench::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_backward_bench: %s\n", e.what());
    return 1;
  }
}
