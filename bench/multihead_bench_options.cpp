// SPDX-License-Identifier: MIT
// eigen_attention_multihead_bench: the command line (--help lists it) and the description of the
// machine.
#include "multihead_bench.hpp"

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_multihead_bench";
const char* const bench::kUsage =
    "usage: eigen_attention_multihead_bench [options]\n"
    "  --quick            small sizes everywhere (T = 512,1024, H = 4,8, d = 64, GQA 8:2; window\n"
    "                     at T = 2048; varlen 4 sequences of 64..1024) and --seconds 0.3\n"
    "  --sections LIST    of heads,window,varlen (default all)\n"
    "  --type LIST        float, double or both (default float)\n"
    "  --threads LIST     Options::threads values (default 1,2; 0 = all hardware threads)\n"
    "  --kernel K         auto|avx512|avx2|portable|reference (default auto)\n"
    "  --reps N           measured runs per call (default: 3..5, about --seconds per call)\n"
    "  --seconds S        time budget of one measured call when --reps is not given (default 1)\n"
    " heads section:\n"
    "  --t LIST           sequence lengths (T_q = T_k = T) (default 2048,8192)\n"
    "  --h LIST           query heads, MHA (H_kv = H) (default 8,32)\n"
    "  --d LIST           head dimensions (d_k = d_v = d) (default 64,128)\n"
    "  --causal LIST      0, 1 or both (default 0,1)\n"
    "  --gqa LIST         H:H_kv pairs, or none (default 32:8)\n"
    "  --bthd-t N         T of the BTHD rows, 0 = none (default: the smallest T)\n"
    " window section (causal, window_left = W, window_right = 0, and causal chunks of C\n"
    " (Options::chunk_size), against full causal):\n"
    "  --window W         (default 256)\n"
    "  --chunk C          (default 4096; 0 = no chunked row)\n"
    "  --window-shape T,H,d   (default 16384,8,64)\n"
    " varlen section (causal, against padded + key_lengths):\n"
    "  --varlen-seqs N    sequences (default 8)\n"
    "  --varlen-range MIN,MAX   their lengths, drawn deterministically (default 256,4096)\n"
    "  --varlen-shape H,d (default 8,64)\n"
    "  --help\n";

namespace ea_multihead_bench {

// ---------------------------------------------------------------------------------------------
// Options

std::vector<Idx> parse_tuple(const std::string& s, const char* what, std::size_t n) {
  const std::vector<Idx> v = parse_ints<Idx>(s, what, 1, Idx(1) << 24);
  if (v.size() != n) usage_error(std::string(what) + " needs " + std::to_string(n) + " values");
  return v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool t_given = false, h_given = false, d_given = false, gqa_given = false, window_given = false,
       wshape_given = false, chunk_given = false, vseqs_given = false, vrange_given = false,
       vshape_given = false;
  bool quick = false;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--sections") {
      bench::parse_sections(args.value(),
                            {{"heads", &a.s_heads}, {"window", &a.s_window}, {"varlen", &a.s_varlen}});
    } else if (arg == "--t") {
      a.ts = parse_ints<Idx>(args.value(), "T", 1, Idx(1) << 24);
      t_given = true;
    } else if (arg == "--h") {
      a.hs = parse_ints<Idx>(args.value(), "H", 1, 4096);
      h_given = true;
    } else if (arg == "--d") {
      a.ds = parse_ints<Idx>(args.value(), "d", 1, 65536);
      d_given = true;
    } else if (arg == "--causal") {
      a.causal = parse_ints<int>(args.value(), "causal", 0, 1);
    } else if (arg == "--gqa") {
      a.gqa.clear();
      gqa_given = true;
      const std::string v = args.value();
      if (v != "none") {
        for (const std::string& pair : split(v)) {
          const std::vector<std::string> hk = split(pair, ':');
          if (hk.size() != 2) usage_error("--gqa wants H:H_kv pairs, not '" + pair + "'");
          const Idx h = parse_int(hk[0], "H"), kv = parse_int(hk[1], "H_kv");
          if (h < 1 || kv < 1 || h % kv != 0)
            usage_error("--gqa: H must be a multiple of H_kv in '" + pair + "'");
          a.gqa.emplace_back(h, kv);
        }
      }
    } else if (arg == "--bthd-t") {
      a.bthd_t = static_cast<Idx>(parse_int(args.value(), "bthd-t"));
    } else if (arg == "--window") {
      a.window = static_cast<Idx>(parse_int(args.value(), "window"));
      if (a.window < 0) usage_error("--window must be >= 0");
      window_given = true;
    } else if (arg == "--chunk") {
      a.chunk = static_cast<Idx>(parse_int(args.value(), "chunk"));
      if (a.chunk < 0) usage_error("--chunk must be >= 0");
      chunk_given = true;
    } else if (arg == "--window-shape") {
      const std::vector<Idx> v = parse_tuple(args.value(), "window-shape", 3);
      a.window_t = v[0], a.window_h = v[1], a.window_d = v[2];
      wshape_given = true;
    } else if (arg == "--varlen-seqs") {
      a.varlen_seqs = static_cast<Idx>(parse_int(args.value(), "varlen-seqs"));
      if (a.varlen_seqs < 1) usage_error("--varlen-seqs must be >= 1");
      vseqs_given = true;
    } else if (arg == "--varlen-range") {
      const std::vector<Idx> v = parse_tuple(args.value(), "varlen-range", 2);
      if (v[0] > v[1]) usage_error("--varlen-range: MIN > MAX");
      a.varlen_min = v[0], a.varlen_max = v[1];
      vrange_given = true;
    } else if (arg == "--varlen-shape") {
      const std::vector<Idx> v = parse_tuple(args.value(), "varlen-shape", 2);
      a.varlen_h = v[0], a.varlen_d = v[1];
      vshape_given = true;
    } else if (arg == "--type") {
      a.types = bench::parse_types(args.value());
    } else if (arg == "--threads") {
      a.threads = parse_ints<int>(args.value(), "threads", 0, 4096);
    } else if (arg == "--kernel") {
      a.kernel = args.value();
    } else if (arg == "--reps") {
      a.reps = bench::parse_reps(args.value());
    } else if (arg == "--seconds") {
      a.seconds = bench::parse_seconds(args.value());
      a.seconds_given = true;
    } else {
      usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  if (quick) {  // explicit options win
    if (!t_given) a.ts = {512, 1024};
    if (!h_given) a.hs = {4, 8};
    if (!d_given) a.ds = {64};
    if (!gqa_given) a.gqa = {{8, 2}};
    if (!window_given) a.window = 128;
    if (!chunk_given) a.chunk = 512;
    if (!wshape_given) a.window_t = 2048, a.window_h = 4, a.window_d = 64;
    if (!vseqs_given) a.varlen_seqs = 4;
    if (!vrange_given) a.varlen_min = 64, a.varlen_max = 1024;
    if (!vshape_given) a.varlen_h = 4, a.varlen_d = 64;
    if (!a.seconds_given) a.seconds = 0.3;
  }
  if (a.bthd_t < 0) a.bthd_t = *std::min_element(a.ts.begin(), a.ts.end());
  return a;
}

// ---------------------------------------------------------------------------------------------
// The machine (as attention_bench)

void print_machine(const Args& a, ea::Kernel kernel) {
  bench::print_machine_common("EigenAttention multi-head benchmark", {kernel});
  std::printf(
      "  timing    after 1-2 warm-up calls, median of %s, each run = enough back-to-back calls "
      "to last ~%.2g s;\n            GFLOP/s = 4 * (computed pairs) * d / time, computed pairs = the "
      "(i, j) pairs no mask hides\n",
      a.reps > 0 ? (std::to_string(a.reps) + " runs").c_str() : "3..5 runs (about --seconds per call)",
      a.seconds / 5);
  std::printf(
      "  checks    max|diff| against single-head calls / the other layout / padded (ref) and against\n"
      "            an exact double softmax on sampled rows (exact); '!' = above tolerance, exit 1\n");
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace ea_multihead_bench
