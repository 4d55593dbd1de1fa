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
#include <EigenAttention/EigenAttention.hpp>

#include "harness.hpp"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "baseline.hpp"

namespace ea = EigenAttention;
using Clock = bench::Clock;
using eabench::Idx;
using eabench::NaiveVariant;

namespace {

template <typename T>
using Mat = ea::RowMatrix<T>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMiB = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// Options

struct Args {
  std::vector<Idx> ts{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<Idx> ds{64, 128};
  std::vector<std::string> types{"float", "double"};
  std::vector<int> threads{1, 2};
  std::vector<int> causal{0, 1};
  std::string kernel = "auto";
  int reps = 0;           // 0: chosen per config (3..5, about `seconds` per config)
  double seconds = 1.0;   // time budget of one measured config
  Idx naive_max_t = 16384;
  Idx gemm_n = 2048;
  NaiveVariant naive_variant = NaiveVariant::RowLoop;
  bool m_fused = true, m_into = true, m_value = true, m_naive = true, m_shapes = true;
  bool csv = false;
  std::string csv_path;  // empty: CSV to stdout
  bool scaling = false, memory_probe = false, smoke = false;
  bool t_given = false, d_given = false, type_given = false, threads_given = false, causal_given = false;
};

}  // namespace

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
    "  --help\n";

namespace {

using bench::kUsage;
using bench::parse_int;
using bench::parse_ints;
using bench::resolved_name;
using bench::split;
using bench::usage_error;

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
        if (m == "fused") a.m_fused = true;
        else if (m == "into") a.m_into = true;
        else if (m == "value") a.m_value = true;
        else if (m == "naive") a.m_naive = true;
        else if (m == "shapes") a.m_shapes = true;
        else usage_error("unknown method '" + m + "'");
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
// Timing

using bench::measure;
using bench::seconds_since;
using bench::Timing;

double attention_flops(Idx t, Idx d, bool causal) {
  const double f = 4.0 * double(t) * double(t) * double(d);
  return causal ? f / 2 : f;
}

double gflops(double flops, const Timing& t) { return flops / t.median / 1e9; }

// ---------------------------------------------------------------------------------------------
// Formatting

std::string fmt(double v, int prec = 1) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string fmt_e(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string csv_num(double v) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

struct Csv {
  std::vector<std::string> lines;
  void add(const std::string& l) { lines.push_back(l); }
};

template <class... Cols>
void print_row(const char* format, Cols... cols) {
  std::printf(format, cols...);
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// The machine

using bench::load_average;

void print_machine(const Args& a, const std::vector<ea::Kernel>& kernels) {
  bench::print_machine_common("EigenAttention benchmark", kernels);
  std::printf("  baseline  naive path and GEMM: Eigen compiled with '%s' (SIMD: %s); "
              "naive softmax: %s\n",
              eabench::baseline_flags(), eabench::baseline_simd(), eabench::naive_variant_name(a.naive_variant));
  std::printf("            single-threaded (Eigen without OpenMP): rows with threads > 1 compare "
              "against the 1-thread naive and GEMM rates\n");
  std::printf("  timing    after 1-2 warm-up calls, median of %s, each run = enough back-to-back calls "
              "to last ~%.2g s;\n            FLOPs = 4*T*T*d per attention call (half when causal), 2*m*n*k per GEMM\n",
              a.reps > 0 ? (std::to_string(a.reps) + " runs").c_str() : "3..5 runs (about --seconds per config)",
              a.seconds / 5);
  std::printf("\n");
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// Inputs: deterministic pseudo-random, uniform in [-1, 1], the same for every run of one shape.

template <typename T>
void fill(Mat<T>& m, unsigned seed) {
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (Idx i = 0; i < m.size(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    m.data()[i] = T(double(s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

template <typename T>
struct Inputs {
  Mat<T> q, k, v;
  Inputs(Idx t, Idx d) : q(t, d), k(t, d), v(t, d) {
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
  }
};

template <typename T>
double max_abs_diff(const Mat<T>& a, const Mat<T>& b) {
  return static_cast<double>((a - b).cwiseAbs().maxCoeff());
}

template <typename T>
double tolerance() {
  return sizeof(T) == 4 ? 1e-4 : 1e-10;
}

volatile double g_sink = 0;  // keeps results alive

// ---------------------------------------------------------------------------------------------
// GEMM reference rates

struct GemmRates {
  std::map<std::string, double> square;  // type -> GFLOP/s of the square GEMM (1 thread)
};

template <typename T>
double square_gemm(const Args& a, const char* type, Csv& csv) {
  const Idx n = a.gemm_n;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> A(n, n), B(n, n), C(n, n);
  A.setRandom();
  B.setRandom();
  const Timing t = measure(a.seconds, a.reps, [&] {
    eabench::gemm_square(A.data(), B.data(), C.data(), n);
    g_sink = g_sink + double(C(0, 0));
  });
  const double rate = gflops(2.0 * double(n) * double(n) * double(n), t);
  std::printf("  %-6s %ld^3 (%cgemm): %8.1f GFLOP/s   (%.3f s, median of %d x %d)\n", type, static_cast<long>(n),
              type[0] == 'f' ? 's' : 'd', rate, t.median, t.reps, t.inner);
  std::fflush(stdout);
  csv.add(std::string("gemm,") + type + ",square," + std::to_string(n) + "," + std::to_string(n) + "," +
          std::to_string(n) + "," + csv_num(t.median) + "," + csv_num(rate) + ",1");
  return rate;
}

template <typename T>
void shaped_gemms(const Args& a, const char* type, Idx d, double square, Csv& csv) {
  for (Idx t : a.ts) {
    if (t > a.naive_max_t) {
      print_row("  %-6s %4ld %6ld | %10s %8s | %10s %8s   (T > --naive-max-t)\n", type, long(d), long(t), "-", "-",
                "-", "-");
      continue;
    }
    Mat<T> q(t, d), k(t, d), v(t, d), o(t, d);
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
    double rate_qk, rate_pv;
    Timing tq, tp;
    {
      Mat<T> s(t, t);
      tq = measure(a.seconds, a.reps, [&] { eabench::gemm_qkt(q.data(), k.data(), s.data(), t, t, d); });
      rate_qk = gflops(2.0 * double(t) * double(t) * double(d), tq);
      s.setConstant(T(1) / T(t));  // a plausible P: the rows sum to 1
      tp = measure(a.seconds, a.reps, [&] { eabench::gemm_pv(s.data(), v.data(), o.data(), t, t, d); });
      rate_pv = gflops(2.0 * double(t) * double(t) * double(d), tp);
    }
    print_row("  %-6s %4ld %6ld | %10.1f %8.2f | %10.1f %8.2f\n", type, long(d), long(t), rate_qk, rate_qk / square,
              rate_pv, rate_pv / square);
    const std::string dims = std::to_string(t) + "," + std::to_string(t) + "," + std::to_string(d);
    csv.add(std::string("gemm,") + type + ",qkt," + dims + "," + csv_num(tq.median) + "," + csv_num(rate_qk) + "," +
            csv_num(rate_qk / square));
    csv.add(std::string("gemm,") + type + ",pv," + std::to_string(t) + "," + std::to_string(d) + "," +
            std::to_string(t) + "," + csv_num(tp.median) + "," + csv_num(rate_pv) + "," +
            csv_num(rate_pv / square));
  }
}

// ---------------------------------------------------------------------------------------------
// The attention table

struct NaiveEntry {
  Timing timing;
  std::vector<double> out;  // O of the naive path, for the check
};

template <typename T>
std::map<std::tuple<Idx, Idx, bool>, NaiveEntry>& naive_cache() {
  static std::map<std::tuple<Idx, Idx, bool>, NaiveEntry> cache;
  return cache;
}

void print_attention_header() {
  std::printf("%-6s %4s %3s %-9s %3s %6s | %9s %9s %9s %9s %9s | %7s %7s %7s %7s | %8s\n", "type", "d", "cau",
              "kernel", "thr", "T", "fused ms", "fused", "dec-into", "dec-value", "naive", "fus/nai", "fus/gem",
              "into/fu", "val/nai", "max|diff|");
  std::printf("%-6s %4s %3s %-9s %3s %6s | %9s %9s %9s %9s %9s | %7s %7s %7s %7s | %8s\n", "", "", "", "", "",
              "", "", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s", "", "", "", "", "");
  std::fflush(stdout);
}

// One row; returns false when a result check failed.
template <typename T>
bool attention_row(const Args& a, const char* type, Idx d, bool causal, ea::Kernel kernel, int threads, Idx t,
                   double gemm_rate, Csv& csv) {
  const Inputs<T> in(t, d);
  ea::Options opt;
  opt.causal = causal;
  opt.kernel = kernel;
  opt.threads = threads;
  const double flops = attention_flops(t, d, causal);

  Mat<T> out(t, d);
  out.setZero();
  Timing fused, into, value;
  if (a.m_fused) fused = measure(a.seconds, a.reps, [&] { ea::attention_into(in.q, in.k, in.v, out, opt); });
  Mat<T> dec_attn;
  if (a.m_into) {
    Mat<T> scores(t, t);
    dec_attn.resize(t, d);
    into = measure(a.seconds, a.reps, [&] { ea::attention_decomposed_into(in.q, in.k, in.v, scores, dec_attn, opt); });
  }
  if (a.m_value) {
    value = measure(a.seconds, a.reps, [&] {
      ea::DecomposedResult<T> r = ea::attention_decomposed(in.q, in.k, in.v, opt);
      g_sink = g_sink + double(r.attn(0, 0));
    });
  }

  // The naive path runs single-threaded whatever `threads` says and does not depend on the
  // kernel: measured once per (d, causal, T) and scalar type.
  const NaiveEntry* naive = nullptr;
  if (a.m_naive && t <= a.naive_max_t) {
    auto& cache = naive_cache<T>();
    const auto key = std::make_tuple(d, t, causal);
    auto it = cache.find(key);
    if (it == cache.end()) {
      Mat<T> o(t, d);
      const T scale = T(1) / std::sqrt(T(d));
      NaiveEntry e;
      e.timing = measure(a.seconds, a.reps, [&] {
        eabench::naive_attention(in.q.data(), in.k.data(), in.v.data(), t, t, d, d, causal, scale, o.data(),
                                 a.naive_variant);
      });
      e.out.assign(o.data(), o.data() + o.size());
      it = cache.emplace(key, std::move(e)).first;
    }
    naive = &it->second;
  }

  // The check: fused (or, without it, dec-into) against naive (or, without it, dec-into).
  double diff = kNaN;
  const Mat<T>* ours = a.m_fused ? &out : (a.m_into ? &dec_attn : nullptr);
  if (ours != nullptr && naive != nullptr) {
    Mat<T> o(t, d);
    for (Idx i = 0; i < o.size(); ++i) o.data()[i] = T(naive->out[static_cast<std::size_t>(i)]);
    diff = max_abs_diff(*ours, o);
  } else if (a.m_fused && a.m_into) {
    diff = max_abs_diff(out, dec_attn);
  }
  const double g_fused = a.m_fused ? gflops(flops, fused) : kNaN;
  const double g_into = a.m_into ? gflops(flops, into) : kNaN;
  const double g_value = a.m_value ? gflops(flops, value) : kNaN;
  const double g_naive = naive ? gflops(flops, naive->timing) : kNaN;
  const double r_fn = g_fused / g_naive, r_fg = g_fused / gemm_rate, r_if = g_into / g_fused,
               r_vn = g_value / g_naive;
  print_row("%-6s %4ld %3d %-9s %3d %6ld | %9s %9s %9s %9s %9s | %7s %7s %7s %7s | %8s%s\n", type, long(d),
            int(causal), resolved_name(kernel), threads, long(t), fmt(fused.median * 1e3, 2).c_str(),
            fmt(g_fused).c_str(), fmt(g_into).c_str(), fmt(g_value).c_str(), fmt(g_naive).c_str(),
            fmt(r_fn, 2).c_str(), fmt(r_fg, 2).c_str(), fmt(r_if, 2).c_str(), fmt(r_vn, 2).c_str(),
            fmt_e(diff).c_str(), (diff > tolerance<T>()) ? " !" : "");
  std::ostringstream line;
  line << "attn," << type << ',' << d << ',' << int(causal) << ',' << resolved_name(kernel) << ',' << threads << ','
       << t << ',' << csv_num(fused.median) << ',' << csv_num(g_fused) << ',' << csv_num(into.median) << ','
       << csv_num(g_into) << ',' << csv_num(value.median) << ',' << csv_num(g_value) << ','
       << csv_num(naive ? naive->timing.median : kNaN) << ',' << csv_num(g_naive) << ',' << csv_num(gemm_rate)
       << ',' << csv_num(r_fn) << ',' << csv_num(r_fg) << ',' << csv_num(r_if) << ',' << csv_num(r_vn) << ','
       << csv_num(diff) << ',' << fused.reps << ',' << fused.inner;
  csv.add(line.str());
  return !(diff > tolerance<T>());
}

template <typename T>
bool attention_table(const Args& a, const char* type, const std::vector<ea::Kernel>& kernels, double gemm_rate,
                     Csv& csv) {
  bool ok = true;
  for (Idx d : a.ds) {
    for (int c : a.causal) {
      std::printf("\n");
      print_attention_header();
      for (ea::Kernel k : kernels) {
        for (int thr : a.threads) {
          for (Idx t : a.ts) ok = attention_row<T>(a, type, d, c != 0, k, thr, t, gemm_rate, csv) && ok;
        }
      }
    }
    naive_cache<T>().clear();
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Peak memory of one fused call, in a forked child

struct ChildReport {
  int ok = 0;
  long before_kib = 0, after_kib = 0;
  double seconds = 0;
  char error[256] = {};
};

long maxrss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}

// In a child: allocate and touch Q, K, V (T x d) and O; read ru_maxrss; run attention_into (the
// first library call of the child); read it again. The difference is the extra peak resident
// memory of the call: its workspace and packing buffers, the pool threads' stacks when threads
// > 1, and the pages of library code it touches for the first time (a few hundred KiB).
// Call it before this process has started any library threads (a fork copies the pool's state
// but not its threads).
template <typename T>
ChildReport fused_memory_in_child(Idx t, Idx d, const ea::Options& opt) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork() failed");
  if (pid == 0) {
    close(fds[0]);
    ChildReport r;
    try {
      const Inputs<T> in(t, d);
      Mat<T> out(t, d);
      out.setZero();
      r.before_kib = maxrss_kib();
      const Clock::time_point t0 = Clock::now();
      ea::attention_into(in.q, in.k, in.v, out, opt);
      r.seconds = seconds_since(t0);
      r.after_kib = maxrss_kib();
      g_sink = g_sink + double(out(0, 0));
      r.ok = 1;
    } catch (const std::exception& e) {
      std::snprintf(r.error, sizeof r.error, "%s", e.what());
    }
    const char* p = reinterpret_cast<const char*>(&r);
    std::size_t left = sizeof r;
    while (left > 0) {
      const ssize_t n = write(fds[1], p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  ChildReport r;
  char* p = reinterpret_cast<char*>(&r);
  std::size_t got = 0;
  while (got < sizeof r) {
    const ssize_t n = read(fds[0], p + got, sizeof r - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof r) {
    r = ChildReport{};
    std::snprintf(r.error, sizeof r.error, "child died (%s %d)", WIFSIGNALED(status) ? "signal" : "status",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  return r;
}

double extra_mib(const ChildReport& r) { return r.ok ? double(r.after_kib - r.before_kib) / 1024.0 : kNaN; }

struct ScalingGroup {
  std::string type;
  ea::Options opt;
  Idx d = 0;
  std::vector<ChildReport> mem;  // one per T
};

// Phase 1 of --scaling: the groups of one scalar type and their memory children.
template <typename T>
void scaling_children(const Args& a, const std::vector<ea::Kernel>& kernels, const char* type,
                      std::vector<ScalingGroup>& groups) {
  for (ea::Kernel k : kernels) {
    for (Idx d : a.ds) {
      for (int c : a.causal) {
        for (int thr : a.threads) {
          ScalingGroup g;
          g.type = type;
          g.opt.causal = c != 0;
          g.opt.kernel = k;
          g.opt.threads = thr;
          g.d = d;
          std::fprintf(stderr, "[%s d = %ld causal = %d %d thread(s): extra peak memory, one child per T]\n", type,
                       long(d), c, thr);
          for (Idx t : a.ts) g.mem.push_back(fused_memory_in_child<T>(t, d, g.opt));
          groups.push_back(g);
        }
      }
    }
  }
}

// Phase 2: the timings, in this process.
template <typename T>
bool scaling_timings(const Args& a, const std::vector<ScalingGroup>& groups, Csv& csv) {
  bool all_ok = true;
  for (const ScalingGroup& g : groups) {
    if (g.type != (sizeof(T) == 4 ? "float" : "double")) continue;
    const char* type = g.type.c_str();
    const Idx d = g.d;
    const int c = int(g.opt.causal);
    std::printf("\nfused attention_into: %s, d = %ld, causal = %d, kernel %s, %d thread(s)\n", type, long(d), c,
                resolved_name(g.opt.kernel), g.opt.threads);
    std::printf("%7s | %10s %9s %12s | %14s %14s %16s\n", "T", "time s", "GFLOP/s", "time/T^2", "extra peak",
                "Q,K,V,O", "naive S (T^2)");
    std::printf("%7s | %10s %9s %12s | %14s %14s %16s\n", "", "(median)", "", "(vs first)", "MiB (fused)", "MiB",
                "MiB");
    double first = kNaN;
    for (std::size_t i = 0; i < a.ts.size(); ++i) {
      const Idx t = a.ts[i];
      const ChildReport& mem = g.mem[i];
      Timing tm;
      {
        const Inputs<T> in(t, d);
        Mat<T> out(t, d);
        tm = measure(a.seconds, a.reps, [&] { ea::attention_into(in.q, in.k, in.v, out, g.opt); });
      }
      const double per_t2 = tm.median / (double(t) * double(t));
      if (i == 0) first = per_t2;
      const double rate = gflops(attention_flops(t, d, g.opt.causal), tm);
      const double io_mib = 4.0 * double(t) * double(d) * sizeof(T) / kMiB;
      const double naive_mib = double(t) * double(t) * sizeof(T) / kMiB;
      const std::string extra = mem.ok ? fmt(extra_mib(mem), 2) : std::string("failed");
      print_row("%7ld | %10.4f %9.1f %12.3f | %14s %14.1f %16.0f\n", long(t), tm.median, rate, per_t2 / first,
                extra.c_str(), io_mib, naive_mib);
      if (!mem.ok) {
        std::printf("        memory child: %s\n", mem.error);
        all_ok = false;
      }
      std::ostringstream line;
      line << "scaling," << type << ',' << d << ',' << c << ',' << resolved_name(g.opt.kernel) << ','
           << g.opt.threads << ',' << t << ',' << csv_num(tm.median) << ',' << csv_num(rate) << ','
           << csv_num(per_t2 / first) << ',' << csv_num(extra_mib(mem)) << ',' << csv_num(io_mib) << ','
           << csv_num(naive_mib);
      csv.add(line.str());
    }
  }
  return all_ok;
}

template <typename T>
int memory_probe(const Args& a, const std::vector<ea::Kernel>& kernels, const char* type, Csv& csv) {
  constexpr double kTargetMiB = 64;
  bool within = true;
  for (ea::Kernel k : kernels) {
    for (Idx d : a.ds) {
      for (Idx t : a.ts) {
        for (int thr : a.threads) {
         for (int c : a.causal) {
          ea::Options opt;
          opt.kernel = k;
          opt.threads = thr;
          opt.causal = c != 0;
          const ChildReport r = fused_memory_in_child<T>(t, d, opt);
          const double io_mib = 4.0 * double(t) * double(d) * sizeof(T) / kMiB;
          if (!r.ok) {
            std::printf("memory probe %s T = %ld d = %ld: FAILED: %s\n", type, long(t), long(d), r.error);
            within = false;
            continue;
          }
          const double extra = extra_mib(r);
          const bool ok = extra <= kTargetMiB;
          within = within && ok;
          std::printf("memory probe: fused attention_into, %s, T = %ld, d = %ld, causal = %d, kernel %s, %d thread(s)\n"
                      "  Q, K, V, O (allocated and touched before): %.1f MiB\n"
                      "  peak RSS before the call: %.1f MiB; after: %.1f MiB\n"
                      "  extra peak resident memory of the call: %.2f MiB (target <= %.0f MiB: %s)\n"
                      "  the call took %.2f s; the naive way would hold a %.0f MiB T x T matrix\n",
                      type, long(t), long(d), int(opt.causal), resolved_name(k), thr, io_mib, r.before_kib / 1024.0,
                      r.after_kib / 1024.0, extra, kTargetMiB, ok ? "met" : "NOT MET", r.seconds,
                      double(t) * double(t) * sizeof(T) / kMiB);
          std::fflush(stdout);
          std::ostringstream line;
          line << "memory," << type << ',' << d << ',' << int(opt.causal) << ',' << resolved_name(k) << ',' << thr
               << ',' << t << ',' << csv_num(r.seconds) << ',' << csv_num(extra) << ',' << csv_num(io_mib);
          csv.add(line.str());
         }
        }
      }
    }
  }
  return within ? 0 : 1;
}

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
      eabench::naive_attention(in.q.data(), in.k.data(), in.v.data(), t, t, d, d, causal, T(1) / std::sqrt(T(d)),
                               o.data(), v);
      const double diff = max_abs_diff(fused, o);
      const bool good = diff <= tolerance<T>();
      ok = ok && good;
      std::printf("  smoke: %s causal=%d naive %-13s vs fused: max|diff| = %.1e %s\n", type, int(causal),
                  eabench::naive_variant_name(v), diff, good ? "ok" : "MISMATCH");
    }
  }
  return ok;
}

void write_csv(const Args& a, const Csv& csv) {
  if (!a.csv) return;
  std::string text =
      "# kind=attn: kind,type,d,causal,kernel,threads,T,fused_s,fused_gflops,decinto_s,decinto_gflops,"
      "decvalue_s,decvalue_gflops,naive_s,naive_gflops,gemm_square_gflops,fused_over_naive,fused_over_gemm,"
      "decinto_over_fused,decvalue_over_naive,max_abs_diff,reps,inner\n"
      "# kind=gemm: kind,type,shape,m,n,k,seconds,gflops,over_square\n"
      "# kind=scaling: kind,type,d,causal,kernel,threads,T,seconds,gflops,time_over_T2_vs_first,extra_peak_mib,"
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

  if (a.memory_probe || a.scaling) {
    if (!a.t_given) a.ts = a.memory_probe ? std::vector<Idx>{65536}
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
        if (type == "float") scaling_children<float>(a, kernels, "float", groups);
        else scaling_children<double>(a, kernels, "double", groups);
      }
      for (const std::string& type : a.types) {
        const bool ok = type == "float" ? scaling_timings<float>(a, groups, csv) : scaling_timings<double>(a, groups, csv);
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

  std::printf("Eigen GEMM reference rates (1 thread):\n");
  GemmRates rates;
  for (const std::string& type : a.types) {
    rates.square[type] = type == "float" ? square_gemm<float>(a, "float", csv) : square_gemm<double>(a, "double", csv);
  }
  if (a.m_shapes) {
    std::printf("\nattention-shaped Eigen GEMMs (1 thread; ratios to the square GEMM of that type):\n");
    std::printf("  %-6s %4s %6s | %10s %8s | %10s %8s\n", "type", "d", "T", "Q*K^T", "/square", "P*V", "/square");
    std::printf("  %-6s %4s %6s | %10s %8s | %10s %8s\n", "", "", "", "GFLOP/s", "", "GFLOP/s", "");
    for (const std::string& type : a.types) {
      for (Idx d : a.ds) {
        if (type == "float") shaped_gemms<float>(a, "float", d, rates.square[type], csv);
        else shaped_gemms<double>(a, "double", d, rates.square[type], csv);
      }
    }
  }

  std::printf("\nattention (GFLOP/s; ratios: fus/nai = fused/naive, fus/gem = fused/square GEMM (1 thread),\n"
              "into/fu = dec-into/fused, val/nai = dec-value/naive; max|diff| = fused vs naive ATTN)\n");
  for (const std::string& type : a.types) {
    ok = (type == "float" ? attention_table<float>(a, "float", kernels, rates.square[type], csv)
                          : attention_table<double>(a, "double", kernels, rates.square[type], csv)) &&
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

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_bench: %s\n", e.what());
    return 1;
  }
}
