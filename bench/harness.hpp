// SPDX-License-Identifier: MIT
// What the benchmark programs share: the command-line helpers, timing (warm-up, samples,
// medians), and a description of the machine and the build for the header of their output.
#pragma once

#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef EA_BENCH_BUILD_TYPE
#define EA_BENCH_BUILD_TYPE "(unknown)"
#endif

namespace bench {

namespace ea = EigenAttention;

// ---------------------------------------------------------------------------------------------
// Command line. A program that uses these defines bench::kProgram (its name, which starts its
// error messages) and bench::kUsage (its --help text).

extern const char* const kProgram;
extern const char* const kUsage;

// "<program>: <what>" and the usage on stderr; exit status 2.
[[noreturn]] inline void usage_error(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n%s", kProgram, what.c_str(), kUsage);
  std::exit(2);
}

// The arguments one option at a time: "--name value", "--name=value" or a flag.
class ArgReader {
 public:
  ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}

  // Moves to the next option; false after the last.
  bool next() {
    if (++i_ >= argc_) return false;
    given_ = argv_[i_];
    name_ = given_;
    inline_value_.clear();
    has_value_ = false;
    const std::size_t eq = name_.find('=');
    if (name_.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value_ = name_.substr(eq + 1);
      name_ = name_.substr(0, eq);
      has_value_ = true;
    }
    return true;
  }
  const std::string& name() const { return name_; }  // without "=value"
  const char* given() const { return given_; }       // as given, with "=value"
  bool has_value() const { return has_value_; }      // given as --name=value
  // The value after '=', else the next argument (which next() then skips); a usage error when
  // there is none.
  std::string value() {
    if (has_value_) return inline_value_;
    if (i_ + 1 >= argc_) usage_error(name_ + " needs a value");
    return argv_[++i_];
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  const char* given_ = nullptr;
  std::string name_, inline_value_;
  bool has_value_ = false;
};

// The non-empty items of a `sep`-separated list; a usage error when there are none.
inline std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  if (out.empty()) usage_error("empty list '" + s + "'");
  return out;
}

// --sections LIST: each flag on when its name is in the comma list, off otherwise; a usage error
// for an unknown name.
inline void parse_sections(const std::string& list,
                           std::initializer_list<std::pair<const char*, bool*>> sections) {
  for (const auto& section : sections) *section.second = false;
  for (const std::string& name : split(list)) {
    bool known = false;
    for (const auto& section : sections) {
      if (name == section.first) *section.second = known = true;
    }
    if (!known) usage_error("unknown section '" + name + "'");
  }
}

inline long long parse_int(const std::string& s, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0')
    usage_error(std::string("bad ") + what + " '" + s + "'");
  return v;
}

// A comma list of integers, each in [lo, hi].
template <typename I>
std::vector<I> parse_ints(const std::string& s, const char* what, long long lo, long long hi) {
  std::vector<I> out;
  for (const std::string& item : split(s)) {
    const long long v = parse_int(item, what);
    if (v < lo || v > hi) usage_error(std::string(what) + " " + item + " out of range");
    out.push_back(static_cast<I>(v));
  }
  return out;
}

// --type: float, double or both.
inline std::vector<std::string> parse_types(const std::string& s) {
  std::vector<std::string> types = split(s);
  for (const std::string& t : types) {
    if (t != "float" && t != "double") usage_error("unknown type '" + t + "'");
  }
  return types;
}

// --reps: at least 1.
inline int parse_reps(const std::string& s) {
  const int reps = static_cast<int>(parse_int(s, "reps"));
  if (reps < 1) usage_error("--reps must be >= 1");
  return reps;
}

// --seconds: not negative (read with atof, so a word is 0).
inline double parse_seconds(const std::string& s) {
  const double seconds = std::atof(s.c_str());
  if (!(seconds >= 0)) usage_error("bad --seconds");
  return seconds;
}

// --kernel: auto, reference, portable, avx2, avx512, avx512bf16 or amx; exit status 2 when that kernel is not
// available on this machine.
inline ea::Kernel parse_kernel(const std::string& name) {
  const std::vector<ea::Kernel> available = ea::available_kernels();
  for (ea::Kernel k : {ea::Kernel::Auto, ea::Kernel::Reference, ea::Kernel::Portable, ea::Kernel::Avx2,
                       ea::Kernel::Avx512, ea::Kernel::Avx512Bf16, ea::Kernel::Amx}) {
    if (name == ea::kernel_name(k)) {
      if (k != ea::Kernel::Auto && std::find(available.begin(), available.end(), k) == available.end()) {
        std::fprintf(stderr, "%s: kernel '%s' is not available here\n", kProgram, name.c_str());
        std::exit(2);
      }
      return k;
    }
  }
  usage_error("unknown kernel '" + name + "'");
}

// ---------------------------------------------------------------------------------------------
// Timing

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Timing {
  double median = std::numeric_limits<double>::quiet_NaN();  // seconds per call
  int reps = 0;                                              // samples
  int inner = 1;                                             // calls per sample
};

// One or two untimed warm-up calls (the first grows workspaces, starts threads, faults pages),
// then the sampling plan: `inner` back-to-back calls a sample, and `reps` samples. With reps = 0:
// samples of about seconds / 5 each, and 3..5 of them, so that a config takes about `seconds`
// (more for a single call that already takes longer).
template <class F>
Timing warm_up(double seconds, int reps, F& call) {
  Clock::time_point t0 = Clock::now();
  call();
  double w = seconds_since(t0);
  if (w < 0.1 && seconds > 0) {
    t0 = Clock::now();
    call();
    w = std::min(w, seconds_since(t0));
  }
  w = std::max(w, 1e-7);
  Timing r;
  r.inner = static_cast<int>(std::clamp(std::floor(seconds / 5 / w), 1.0, 1e6));
  r.reps = reps > 0 ? reps : static_cast<int>(std::clamp(std::floor(seconds / (w * r.inner)), 3.0, 5.0));
  return r;
}

// Seconds per call of one sample: `inner` back-to-back calls.
template <class F>
double sample_seconds(F& call, int inner) {
  const Clock::time_point t0 = Clock::now();
  for (int j = 0; j < inner; ++j) call();
  return seconds_since(t0) / inner;
}

inline double median_of(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// warm_up, then the median of the per-call times of its samples.
template <class F>
Timing measure(double seconds, int reps, F&& call) {
  Timing r = warm_up(seconds, reps, call);
  std::vector<double> samples;
  for (int rep = 0; rep < r.reps; ++rep) samples.push_back(sample_seconds(call, r.inner));
  r.median = median_of(samples);
  return r;
}

// Two calls timed side by side, for a ratio on a noisy host: warm_up for each, then rounds of one
// sample of `a` and one of `b`, so that both see the same minutes of the machine; the two medians.
template <class A, class B>
std::pair<Timing, Timing> measure_alternating(double seconds, int reps, A&& a, B&& b) {
  std::pair<Timing, Timing> r{warm_up(seconds, reps, a), warm_up(seconds, reps, b)};
  r.second.reps = r.first.reps = std::max(r.first.reps, r.second.reps);
  std::vector<double> sa, sb;
  for (int rep = 0; rep < r.first.reps; ++rep) {
    sa.push_back(sample_seconds(a, r.first.inner));
    sb.push_back(sample_seconds(b, r.second.inner));
  }
  r.first.median = median_of(sa);
  r.second.median = median_of(sb);
  return r;
}

// ---------------------------------------------------------------------------------------------
// The machine and the build

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "(unknown)";
}

// The flags of the first CPU in /proc/cpuinfo, in its order.
inline std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::stringstream ss(line.substr(line.find(':') + 1));
      std::string f;
      while (ss >> f) out.push_back(f);
      break;
    }
  }
  return out;
}

inline bool cpu_has_flag(const std::string& flag) {
  const std::vector<std::string> flags = cpu_flags();
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

// The vector and matrix extensions that matter here (AVX2/FMA, AVX-512, AMX), as /proc/cpuinfo
// names them, in its order.
inline std::string cpu_flags_of_interest() {
  std::string out;
  for (const std::string& f : cpu_flags()) {
    if (f == "avx2" || f == "fma" || f == "avx512f" || f == "avx512dq" || f == "avx512bw" ||
        f == "avx512vl" || f == "avx512_bf16" || f == "avx512_fp16" || f.rfind("amx", 0) == 0) {
      out += (out.empty() ? "" : " ") + f;
    }
  }
  return out;
}

inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

inline std::string now_string() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

// The name of kernel k, Kernel::Auto as the kernel it picks here.
inline const char* resolved_name(ea::Kernel k) {
  return ea::kernel_name(k == ea::Kernel::Auto ? ea::auto_kernel() : k);
}

// The first lines of a program's header: `title` and the date, the machine, the library and the
// build, the kernels available and the `measured` ones.
inline void print_machine_common(const char* title, const std::vector<ea::Kernel>& measured) {
  std::string avail;
  for (ea::Kernel k : ea::available_kernels())
    avail += (avail.empty() ? "" : ", ") + std::string(ea::kernel_name(k));
  std::string chosen;
  for (ea::Kernel k : measured) {
    chosen += (chosen.empty() ? "" : ", ") + std::string(ea::kernel_name(k));
    if (k == ea::Kernel::Auto) chosen += std::string(" = ") + resolved_name(k);
  }
  std::printf("%s  %s\n", title, now_string().c_str());
  std::printf("  cpu       %s  (%u hardware threads; %s)\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), cpu_flags_of_interest().c_str());
  std::printf("  load      %s (1/5/15 min, at start)\n", load_average().c_str());
  std::printf("  library   EigenAttention %s, Eigen %d.%d.%d, %s, bench build %s\n", ea::version(),
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
#if defined(__clang__)
              "clang " __clang_version__,
#elif defined(__GNUC__)
              "gcc " __VERSION__,
#else
              "(compiler)",
#endif
              EA_BENCH_BUILD_TYPE);
  std::printf("  kernels   available: %s; measured: %s\n", avail.c_str(), chosen.c_str());
}

}  // namespace bench
