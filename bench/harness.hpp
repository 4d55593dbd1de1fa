// What the benchmark programs share: timing (warm-up, samples, medians) and a description of
// the machine for the header of their output.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

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
// then `reps` samples of `inner` back-to-back calls each; the median of the per-call times.
// With reps = 0: samples of about seconds / 5 each, and 3..5 of them, so that a config takes
// about `seconds` (more for a single call that already takes longer).
template <class F>
Timing measure(double seconds, int reps, F&& call) {
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
  const double sample_target = seconds / 5;
  r.inner = static_cast<int>(std::clamp(std::floor(sample_target / w), 1.0, 1e6));
  r.reps = reps > 0 ? reps : static_cast<int>(std::clamp(std::floor(seconds / (w * r.inner)), 3.0, 5.0));
  std::vector<double> samples;
  for (int rep = 0; rep < r.reps; ++rep) {
    t0 = Clock::now();
    for (int j = 0; j < r.inner; ++j) call();
    samples.push_back(seconds_since(t0) / r.inner);
  }
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  r.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  return r;
}

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

inline std::string cpu_flags_of_interest() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::string out;
      std::stringstream ss(line.substr(line.find(':') + 1));
      std::string f;
      while (ss >> f) {
        if (f == "avx2" || f == "fma" || f == "avx512f" || f == "avx512dq" || f == "avx512bw" || f == "avx512vl" ||
            f == "avx512_bf16") {
          out += (out.empty() ? "" : " ") + f;
        }
      }
      return out;
    }
  }
  return "";
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

}  // namespace bench
