// SPDX-License-Identifier: MIT
// What the sections of eigen_attention_bench share (attention_bench.cpp says what it measures):
// the options, timing and formatting helpers, the deterministic inputs, and the entry points of
// the sections, one file each:
//   attention_bench_options.cpp  the command line and the machine's description
//   attention_bench_gemm.cpp     Eigen GEMM reference rates (square and attention-shaped)
//   attention_bench_table.cpp    the attention table (fused, dec-into, dec-value, naive)
//   attention_bench_memory.cpp   peak memory of one fused call in a forked child: --scaling and
//                                --memory-probe
//   attention_bench.cpp          --smoke, the CSV, the order of the sections, main
#pragma once

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
#include <thread>
#include <tuple>
#include <vector>

#include "baseline.hpp"
#include "fma_peak.hpp"

namespace ea = EigenAttention;
using Clock = bench::Clock;
using eabench::Idx;
using eabench::NaiveVariant;

namespace ea_attention_bench {

template <typename T>
using Mat = ea::RowMatrix<T>;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kMiB = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// Options

struct Args {
  std::vector<Idx> ts{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<Idx> ds{64, 128};
  std::vector<std::string> types{"float", "double"};
  std::vector<int> threads{1, 2};
  std::vector<int> causal{0, 1};
  std::string kernel = "auto";
  int reps = 0;          // 0: chosen per config (3..5, about `seconds` per config)
  double seconds = 1.0;  // time budget of one measured config
  Idx naive_max_t = 16384;
  Idx gemm_n = 2048;
  NaiveVariant naive_variant = NaiveVariant::RowLoop;
  bool m_fused = true, m_into = true, m_value = true, m_naive = true, m_shapes = true;
  bool csv = false;
  std::string csv_path;  // empty: CSV to stdout
  bool scaling = false, memory_probe = false, smoke = false, explain = false;
  bool t_given = false, d_given = false, type_given = false, threads_given = false, causal_given = false;
};

using bench::kUsage;
using bench::parse_int;
using bench::parse_ints;
using bench::resolved_name;
using bench::split;
using bench::usage_error;

// ---------------------------------------------------------------------------------------------
// Timing

using bench::measure;
using bench::seconds_since;
using bench::Timing;

inline double attention_flops(Idx t, Idx d, bool causal) {
  const double f = 4.0 * double(t) * double(t) * double(d);
  return causal ? f / 2 : f;
}

inline double gflops(double flops, const Timing& t) { return flops / t.median / 1e9; }

// ---------------------------------------------------------------------------------------------
// Formatting

inline std::string fmt(double v, int prec = 1) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

inline std::string fmt_e(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

inline std::string csv_num(double v) {
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

using bench::load_average;

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

inline volatile double g_sink = 0;  // keeps results alive

struct GemmRates {
  std::map<std::string, double> square;  // type -> GFLOP/s of the square GEMM (1 thread)
};

/// What a row's rates are judged against, measured in the same run: the square GEMM of its
/// type (1 thread) and the host's FMA peak of its type for each thread count.
struct Yardsticks {
  double gemm = kNaN;
  std::map<int, double> peak;  // threads -> GFLOP/s
  double peak_at(int threads) const {
    const auto it = peak.find(threads);
    return it == peak.end() ? kNaN : it->second;
  }
};

struct ChildReport {
  int ok = 0;
  long before_kib = 0, after_kib = 0;
  double seconds = 0;
  char error[256] = {};
};

struct ScalingGroup {
  std::string type;
  ea::Options opt;
  Idx d = 0;
  std::vector<ChildReport> mem;  // one per T
};

// Options and the machine (attention_bench_options.cpp).
Args parse_args(int argc, char** argv);
std::vector<ea::Kernel> kernels_to_run(const std::string& name);
void print_machine(const Args& a, const std::vector<ea::Kernel>& kernels);

// GEMM reference rates (attention_bench_gemm.cpp).
template <typename T>
double square_gemm(const Args& a, const char* type, Csv& csv);
template <typename T>
void shaped_gemms(const Args& a, const char* type, Idx d, double square, Csv& csv);

// The attention table (attention_bench_table.cpp).
template <typename T>
bool attention_table(const Args& a, const char* type, const std::vector<ea::Kernel>& kernels,
                     const Yardsticks& y, Csv& csv);

// Peak memory, --scaling and --memory-probe (attention_bench_memory.cpp).
template <typename T>
ChildReport fused_memory_in_child(Idx t, Idx d, const ea::Options& opt);

/// Runs measure(report) in a forked child, so that the peak resident size it reads is the
/// child's own, and returns the Report (trivially copyable, with a `char error[]`) through a
/// pipe: an exception in the child goes into report.error, and a child that dies gives an empty
/// Report whose error says how. Call it before this process has started any library threads (a
/// fork copies the pool's state but not its threads).
template <class Report, class Measure>
Report in_child(Measure measure) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork() failed");
  if (pid == 0) {
    close(fds[0]);
    Report r;
    try {
      measure(r);
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
  Report r;
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
    r = Report{};
    std::snprintf(r.error, sizeof r.error, "child died (%s %d)", WIFSIGNALED(status) ? "signal" : "status",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  return r;
}
double extra_mib(const ChildReport& r);
template <typename T>
void scaling_children(const Args& a, const std::vector<ea::Kernel>& kernels, const char* type,
                      std::vector<ScalingGroup>& groups);
template <typename T>
bool scaling_timings(const Args& a, const std::vector<ScalingGroup>& groups, Csv& csv);
template <typename T>
int memory_probe(const Args& a, const std::vector<ea::Kernel>& kernels, const char* type, Csv& csv);

}  // namespace ea_attention_bench
