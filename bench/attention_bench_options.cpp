// SPDX-License-Identifier: MIT
// eigen_attention_bench: the command line (--help lists it) and the description of the machine.
#include "attention_bench.hpp"

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_bench";
const char* const bench::kUsage =
    "usage: eigen_attention_bench [options]\n"
    "  --t LIST           sequence lengths T (T_q = T_k = T), comma list\n"
    "                     (default 512,1024,2048,4096,8192,16384)\n"
    "  --quick            T = 512,1024\n"
    "  --d LIST           head dimensions d (d_k = d_v = d) (default 64,128)\n"
    "  --type LIST        float, double or both (default float,double)\n"
    "  --threads LIST     Options::threads values (default 1,2; 0 = all hardware threads)\n"
    "  --causal LIST      0, 1 or both (default 0,1)\n"
    "  --kernel K         auto|avx512|avx2|portable|reference, or all = every available\n"
    "                     kernel but the reference (default auto)\n"
    "  --reps N           measured runs per config (default: 3..5, about --seconds per config)\n"
    "  --seconds S        time budget of one config when --reps is not given (default 1)\n"
    "  --methods LIST     of fused,into,value,naive,shapes (default all; the square GEMM always)\n"
    "  --naive-max-t N    skip the naive path and the attention-shaped GEMMs above T = N\n"
    "                     (default 16384)\n"
    "  --naive-variant V  rowloop|colmajor|rowmajor-expr: how the naive path does its softmax\n"
    "                     (default rowloop, the fastest; see bench/README.md)\n"
    "  --gemm-n N         size of the square reference GEMM (default 2048)\n"
    "  --csv[=FILE]       also write machine-readable CSV (to stdout after the tables, or FILE)\n"
    "  --scaling          fused time and extra peak memory against T (float, d = 64, 1 thread,\n"
    "                     T = 1024..65536; --t/--d/--type/--threads/--causal override)\n"
    "  --memory-probe     extra peak memory of one fused call at T = 65536, d = 64 (target:\n"
    "                     <= 64 MiB beyond the inputs and output; exits 1 when above)\n"
    "  --smoke            a tiny run (T = 128, 1 rep) that exercises every path; exits 0 when\n"
    "                     all results agree\n"
    "  --explain          print the tiles each kernel chooses on this CPU for every --type and\n"
    "                     --d (kernel_tiles()), and nothing else (every run prints them too)\n"
    "  --help\n";

namespace ea_attention_bench {

// ---------------------------------------------------------------------------------------------
// Options

NaiveVariant parse_variant(const std::string& s) {
  for (NaiveVariant v : {NaiveVariant::RowLoop, NaiveVariant::ColMajor, NaiveVariant::RowMajorExpr}) {
    if (s == eabench::naive_variant_name(v)) return v;
  }
  usage_error("unknown naive variant '" + s + "'");
}

Args parse_args(int argc, char** argv) {
  Args a;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--t") {
      a.ts = parse_ints<Idx>(args.value(), "T", 1, Idx(1) << 24);
      a.t_given = true;
    } else if (arg == "--quick") {
      a.ts = {512, 1024};
      a.t_given = true;
    } else if (arg == "--d") {
      a.ds = parse_ints<Idx>(args.value(), "d", 1, 65536);
      a.d_given = true;
    } else if (arg == "--type") {
      a.types = bench::parse_types(args.value());
      a.type_given = true;
    } else if (arg == "--threads") {
      a.threads = parse_ints<int>(args.value(), "threads", 0, 4096);
      a.threads_given = true;
    } else if (arg == "--causal") {
      a.causal = parse_ints<int>(args.value(), "causal", 0, 1);
      a.causal_given = true;
    } else if (arg == "--kernel") {
      a.kernel = args.value();
    } else if (arg == "--reps") {
      a.reps = bench::parse_reps(args.value());
    } else if (arg == "--seconds") {
      a.seconds = bench::parse_seconds(args.value());
    } else if (arg == "--methods") {
      a.m_fused = a.m_into = a.m_value = a.m_naive = a.m_shapes = false;
      for (const std::string& m : split(args.value())) {
        if (m == "fused")
          a.m_fused = true;
        else if (m == "into")
          a.m_into = true;
        else if (m == "value")
          a.m_value = true;
        else if (m == "naive")
          a.m_naive = true;
        else if (m == "shapes")
          a.m_shapes = true;
        else
          usage_error("unknown method '" + m + "'");
      }
    } else if (arg == "--naive-max-t") {
      a.naive_max_t = static_cast<Idx>(parse_int(args.value(), "naive-max-t"));
    } else if (arg == "--naive-variant") {
      a.naive_variant = parse_variant(args.value());
    } else if (arg == "--gemm-n") {
      a.gemm_n = static_cast<Idx>(parse_int(args.value(), "gemm-n"));
      if (a.gemm_n < 1) usage_error("--gemm-n must be >= 1");
    } else if (arg == "--csv") {
      a.csv = true;
      if (args.has_value()) a.csv_path = args.value();
    } else if (arg == "--scaling") {
      a.scaling = true;
    } else if (arg == "--memory-probe") {
      a.memory_probe = true;
    } else if (arg == "--smoke") {
      a.smoke = true;
    } else if (arg == "--explain") {
      a.explain = true;
    } else {
      usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  return a;
}

std::vector<ea::Kernel> kernels_to_run(const std::string& name) {
  if (name == "all") {
    std::vector<ea::Kernel> out;
    for (ea::Kernel k : ea::available_kernels()) {
      if (k != ea::Kernel::Reference) out.push_back(k);
    }
    return out;
  }
  return {bench::parse_kernel(name)};
}

// ---------------------------------------------------------------------------------------------
// The machine

void print_machine(const Args& a, const std::vector<ea::Kernel>& kernels) {
  bench::print_machine_common("EigenAttention benchmark", kernels);
  std::printf(
      "  baseline  naive path and GEMM: Eigen compiled with '%s' (SIMD: %s); "
      "naive softmax: %s\n",
      eabench::baseline_flags(), eabench::baseline_simd(), eabench::naive_variant_name(a.naive_variant));
  std::printf(
      "            single-threaded (Eigen without OpenMP): rows with threads > 1 compare "
      "against the 1-thread naive and GEMM rates\n");
  std::printf(
      "  timing    after 1-2 warm-up calls, median of %s, each run = enough back-to-back calls "
      "to last ~%.2g s;\n            FLOPs = 4*T*T*d per attention call (half when causal), 2*m*n*k per "
      "GEMM\n",
      a.reps > 0 ? (std::to_string(a.reps) + " runs").c_str() : "3..5 runs (about --seconds per config)",
      a.seconds / 5);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace ea_attention_bench
