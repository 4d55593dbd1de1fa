// SPDX-License-Identifier: MIT
// eigen_attention_bench: how fast EigenAttention is, against the naive Eigen expression and
// Eigen's own GEMM, measured in one run on one machine. See bench/README.md.
//
// For every (scalar type, d, causal, kernel, threads, T) it times
//   fused      attention_into(Q, K, V, O, opt), O preallocated;
//   dec-into   attention_decomposed_into(Q, K, V, SCORES, ATTN, opt), both preallocated;
//   dec-value  attention_decomposed(Q, K, V, opt), the result allocated, used and dropped;
//   naive      S = scale * (Q K^T) into a fresh T x T matrix, causal mask via triangularView,
//              row softmax, O = S V (baseline.cpp; single-threaded);
// and, once per scalar type, Eigen's square 2048^3 GEMM, plus the two attention-shaped products
// Q K^T and P V per (type, d, T). GFLOP/s count 4 T_q T_k d FLOPs per attention call (half of
// that when causal) and 2 m n k per GEMM. Times are medians.
//
// Modes: --scaling (fused time ~ T^2, extra memory ~ T, measured in forked children),
// --memory-probe (extra peak memory of one fused call at T = 65536, d = 64), --smoke (tiny).
// Run with --help for the options.
//
// The sections live in attention_bench_*.cpp; attention_bench.hpp lists them.
#include "attention_bench.hpp"

namespace ea_attention_bench {
namespace {

// ---------------------------------------------------------------------------------------------
// --smoke: every path once on a tiny problem, all naive variants checked against the fused call.

template <typename T>
bool smoke_variants(const char* type) {
  bool ok = true;
  for (bool causal : {false, true}) {
    const Idx t = 128, d = 64;
    const Inputs<T> in(t, d);
    ea::Options opt;
    opt.causal = causal;
    Mat<T> fused(t, d), o(t, d);
    ea::attention_into(in.q, in.k, in.v, fused, opt);
    for (NaiveVariant v : {NaiveVariant::RowLoop, NaiveVariant::ColMajor, NaiveVariant::RowMajorExpr}) {
      eabench::naive_attention(in.q.data(), in.k.data(), in.v.data(), t, t, d, d, causal,
                               T(1) / std::sqrt(T(d)), o.data(), v);
      const double diff = max_abs_diff(fused, o);
      const bool good = diff <= tolerance<T>();
      ok = ok && good;
      std::printf("  smoke: %s causal=%d naive %-13s vs fused: max|diff| = %.1e %s\n", type, int(causal),
                  eabench::naive_variant_name(v), diff, good ? "ok" : "MISMATCH");
    }
  }
  return ok;
}

// The tiles of each kernel for each type and d, as the library's tile policy chooses them here.
void print_tiles(const Args& a, const std::vector<ea::Kernel>& kernels) {
  std::printf(
      "tiles (kernel_tiles(): query rows per task, micro-kernel strip rows x panel keys, keys per key "
      "tile):\n");
  for (ea::Kernel k : kernels) {
    if (k == ea::Kernel::Reference) continue;
    for (const std::string& type : a.types) {
      for (Idx d : a.ds) {
        const ea::KernelTiles t = ea::kernel_tiles(k, type == "double", d, d);
        std::printf(
            "  %-9s %-6s d = %4ld: task %ld rows, strip %ld x %ld, key tile %ld (L1 %ld KiB, L2 %ld KiB)\n",
            ea::kernel_name(t.kernel), type.c_str(), long(d), long(t.task_rows), long(t.strip_rows),
            long(t.panel_keys), long(t.key_tile), long(t.l1_bytes / 1024), long(t.l2_bytes / 1024));
      }
    }
  }
  std::fflush(stdout);
}

void write_csv(const Args& a, const Csv& csv) {
  if (!a.csv) return;
  std::string text =
      "# kind=attn: kind,type,d,causal,kernel,threads,T,fused_s,fused_gflops,decinto_s,decinto_gflops,"
      "decvalue_s,decvalue_gflops,naive_s,naive_gflops,gemm_square_gflops,fused_over_naive,fused_over_gemm,"
      "decinto_over_fused,decvalue_over_naive,max_abs_diff,reps,inner,fma_peak_gflops,fused_over_peak,"
      "decinto_over_peak\n"
      "# kind=gemm: kind,type,shape,m,n,k,seconds,gflops,over_square\n"
      "# kind=peak: kind,type,threads,gflops\n"
      "# kind=scaling: "
      "kind,type,d,causal,kernel,threads,T,seconds,gflops,time_over_T2_vs_first,extra_peak_mib,"
      "qkvo_mib,naive_s_mib\n"
      "# kind=memory: kind,type,d,causal,kernel,threads,T,seconds,extra_peak_mib,qkvo_mib\n";
  for (const std::string& l : csv.lines) text += l + "\n";
  if (a.csv_path.empty()) {
    std::printf("\n# CSV\n%s", text.c_str());
  } else {
    std::ofstream f(a.csv_path);
    f << text;
    if (!f) {
      std::fprintf(stderr, "eigen_attention_bench: cannot write %s\n", a.csv_path.c_str());
    } else {
      std::printf("\nCSV written to %s\n", a.csv_path.c_str());
    }
  }
}

int run(Args a) {
  const std::vector<ea::Kernel> kernels = kernels_to_run(a.kernel);
  Csv csv;
  if (a.explain) {
    print_tiles(a, kernels);
    return 0;
  }

  if (a.memory_probe || a.scaling) {
    if (!a.t_given)
      a.ts = a.memory_probe ? std::vector<Idx>{65536}
                            : std::vector<Idx>{1024, 2048, 4096, 8192, 16384, 32768, 65536};
    if (!a.d_given) a.ds = {64};
    if (!a.type_given) a.types = {"float"};
    if (!a.threads_given) a.threads = {1};
    if (!a.causal_given) a.causal = {0};
    print_machine(a, kernels);
    int rc = 0;
    if (a.memory_probe) {
      for (const std::string& type : a.types) {
        const int r = type == "float" ? memory_probe<float>(a, kernels, "float", csv)
                                      : memory_probe<double>(a, kernels, "double", csv);
        rc = std::max(rc, r);
      }
    } else {
      // Every child of every type before any timing: this process must not have started the
      // library's threads before a fork.
      std::vector<ScalingGroup> groups;
      for (const std::string& type : a.types) {
        if (type == "float")
          scaling_children<float>(a, kernels, "float", groups);
        else
          scaling_children<double>(a, kernels, "double", groups);
      }
      for (const std::string& type : a.types) {
        const bool ok = type == "float" ? scaling_timings<float>(a, groups, csv)
                                        : scaling_timings<double>(a, groups, csv);
        if (!ok) rc = 1;
      }
    }
    write_csv(a, csv);
    return rc;
  }

  bool ok = true;
  if (a.smoke) {
    a.ts = {128};
    if (!a.d_given) a.ds = {64};
    a.reps = 1;
    a.seconds = 0;
    a.gemm_n = 256;
    print_machine(a, kernels);
    // The fork path first, before any library thread exists.
    ea::Options opt;
    const ChildReport r = fused_memory_in_child<float>(256, 64, opt);
    std::printf("  smoke: memory child: %s (extra %.2f MiB)\n", r.ok ? "ok" : r.error, extra_mib(r));
    ok = ok && r.ok;
    ok = smoke_variants<float>("float") && ok;
    ok = smoke_variants<double>("double") && ok;
  } else {
    print_machine(a, kernels);
  }
  print_tiles(a, kernels);

  std::printf("Eigen GEMM reference rates (1 thread):\n");
  GemmRates rates;
  for (const std::string& type : a.types) {
    rates.square[type] =
        type == "float" ? square_gemm<float>(a, "float", csv) : square_gemm<double>(a, "double", csv);
  }
  if (a.m_shapes) {
    std::printf("\nattention-shaped Eigen GEMMs (1 thread; ratios to the square GEMM of that type):\n");
    std::printf("  %-6s %4s %6s | %10s %8s | %10s %8s\n", "type", "d", "T", "Q*K^T", "/square", "P*V",
                "/square");
    std::printf("  %-6s %4s %6s | %10s %8s | %10s %8s\n", "", "", "", "GFLOP/s", "", "GFLOP/s", "");
    for (const std::string& type : a.types) {
      for (Idx d : a.ds) {
        if (type == "float")
          shaped_gemms<float>(a, "float", d, rates.square[type], csv);
        else
          shaped_gemms<double>(a, "double", d, rates.square[type], csv);
      }
    }
  }

  // The host's FMA peak, per thread count of the table, in this run.
  std::map<std::string, Yardsticks> yardsticks;
  std::printf("\nhost FMA peak (%s, 12 independent accumulators per thread):\n", eabench::fma_unit().c_str());
  for (int thr : a.threads) {
    const int n = thr > 0 ? thr : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const eabench::FmaPeak p = eabench::measure_fma_peak(n, a.smoke ? 0.01 : 1.0);
    yardsticks["float"].peak[thr] = p.float_gflops;
    yardsticks["double"].peak[thr] = p.double_gflops;
    std::printf("  %d thread%s: float %s GFLOP/s, double %s GFLOP/s\n", n, n == 1 ? "" : "s",
                fmt(p.float_gflops).c_str(), fmt(p.double_gflops).c_str());
    csv.add("peak,float," + std::to_string(n) + "," + csv_num(p.float_gflops));
    csv.add("peak,double," + std::to_string(n) + "," + csv_num(p.double_gflops));
  }
  std::fflush(stdout);

  std::printf(
      "\nattention (GFLOP/s; ratios: fus/pk = fused/host FMA peak (same threads), into/pk =\n"
      "dec-into/peak, fus/nai = fused/naive, fus/gem = fused/square GEMM (1 thread), into/fu =\n"
      "dec-into/fused, val/nai = dec-value/naive; max|diff| = fused vs naive ATTN)\n");
  for (const std::string& type : a.types) {
    Yardsticks& y = yardsticks[type];
    y.gemm = rates.square[type];
    ok = (type == "float" ? attention_table<float>(a, "float", kernels, y, csv)
                          : attention_table<double>(a, "double", kernels, y, csv)) &&
         ok;
  }
  std::printf("\nload at end: %s\n", load_average().c_str());
  write_csv(a, csv);
  if (!ok) {
    std::printf("some results disagree beyond tolerance (marked !)\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ea_attention_bench

int main(int argc, char** argv) {
  try {
    return ea_attention_bench::run(ea_attention_bench::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_bench: %s\n", e.what());
    return 1;
  }
}
