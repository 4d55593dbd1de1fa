// SPDX-License-Identifier: MIT
// Shared pieces of the eigen-attention tool: its error type, output files written all or
// nothing, the progress indicator, token files.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <EigenAttention/AtomicFile.hpp>
#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Npy.hpp>
#include "../text.hpp"

namespace EigenAttention {
namespace cli {

/// A failure the tool reports as the one line `eigen-attention: <subject>: <problem>`.
/// `usage` marks a bad command line (exit status 2, with a hint to --help); otherwise the
/// exit status is 1.
class Failure : public std::runtime_error {
 public:
  Failure(const std::string& subject, const std::string& problem, bool usage = false)
      : std::runtime_error(subject + ": " + problem), usage_(usage) {}
  /// A message that names its subject already ("<subject>: <problem>").
  explicit Failure(const std::string& message) : std::runtime_error(message), usage_(false) {}
  bool usage() const { return usage_; }

 private:
  bool usage_;
};

/// Uniform numbers in [-1, 1), the same on every platform (splitmix64; std:: distributions are
/// not specified exactly): the inputs of `bench`, `decode --generate` and the demo's timing.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  float next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
  }
  /// Sets every entry of m (a dense Eigen matrix or a std::vector of float), in storage order.
  template <class M>
  void fill(M& m) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(m.size()); ++i) m.data()[i] = next();
  }

 private:
  std::uint64_t state_;
};

/// The kernels this CPU can run, fastest first, as "avx512, avx2, portable, reference"
/// (EigenAttention::available_kernels()).
/// Inline: the demo program of examples/ compiles demo.cpp without util.cpp.
inline std::string kernels_on_this_cpu() {
  std::string kernels;
  for (const Kernel k : available_kernels())
    kernels += std::string(kernels.empty() ? "" : ", ") + kernel_name(k);
  return kernels;
}

/// What `eigen-attention --version` prints: the version, the license and the kernels this CPU can
/// run, on three lines (no final newline).
std::string version_text();

/// A bad command line: exit status 2.
inline Failure usage_error(const std::string& option, const std::string& problem) {
  return Failure(option, problem, true);
}

/// Whether main() reports errors on stderr (default true). A distributed run turns it off on
/// every rank but 0: the ranks agree on one error, which rank 0 alone reports.
void set_error_reporting(bool on);
bool error_reporting();

/// "1 token", "3 tokens": a count and its noun (the library's helper).
using internal::counted;
/// "(2, 8, 128, 64)": the shape as NumPy writes it (the library's helper).
using internal::shape_string;
/// "float32", "float64", "int32", "int64", "bool" (the library's npy::dtype_name).
using npy::dtype_name;

/// Parses a whole option value; throws a usage Failure naming `option` otherwise.
double parse_double(const std::string& option, const std::string& text);
long long parse_integer(const std::string& option, const std::string& text);

/// The outputs of one run, written all or nothing: one AtomicFile each. add() creates each
/// output's temporary file at once (so an unwritable directory fails before any work) and
/// returns it to be written; commit() flushes them all to disk, then renames them all into
/// place. Until commit() succeeds, the destructor (and SIGINT, SIGTERM, SIGHUP) removes every
/// temporary file, and a commit() that fails half-way removes the outputs it had already
/// renamed.
class OutputFiles {
 public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  ~OutputFiles();

  /// Registers output `path` (given with `option`); returns its file, to write. Throws Failure
  /// when the path is empty, a directory or the same file as an earlier output, npy::Error
  /// naming the path when its directory cannot take a new file.
  AtomicFile& add(const std::string& option, const std::string& path);
  /// Commits every file. Throws npy::Error naming the output on an I/O error (and leaves no
  /// output of this run behind then).
  void commit();

 private:
  struct Entry {
    std::string option, key;
    std::unique_ptr<AtomicFile> file;
    int slot;
  };
  std::vector<Entry> entries_;
};

/// Shows "eigen-attention: <phase>... 3.2 s" with a spinner on stderr, from a helper thread,
/// once a run has taken about a second, when stderr is a terminal and not `quiet`; the line is
/// erased when the indicator stops (destructor or stop()).
class Progress {
 public:
  explicit Progress(bool quiet);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// What is happening now (a string literal: it is read by the helper thread).
  void phase(const char* what) { phase_.store(what); }
  void stop();

 private:
  void loop();
  std::atomic<const char*> phase_{"working"};
  std::atomic<bool> done_{false};
  std::chrono::steady_clock::time_point start_;
  std::thread thread_;
};

/// The tokens of a text file, one a line (a trailing '\r' dropped). Throws Failure naming the
/// file when it cannot be read.
std::vector<std::string> read_tokens(const std::string& path);

/// `count` axis labels: the tokens first, then the index of each position beyond them.
std::vector<std::string> axis_labels(const std::vector<std::string>& tokens, std::int64_t count);

}  // namespace cli
}  // namespace EigenAttention
