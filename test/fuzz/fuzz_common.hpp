// SPDX-License-Identifier: MIT
// Shared pieces of the fuzz targets: a byte reader that never runs dry, a PRNG, and the way a
// violated invariant is reported (a message with the decoded configuration, then a trap).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ea_fuzz {

/// Reads the fuzz input front to back; past its end every read gives 0, so that every input,
/// however short, decodes into a complete configuration.
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (unsigned(u8()) << 8)); }
  std::uint32_t u32() { return u16() | (std::uint32_t(u16()) << 16); }
  std::uint64_t u64() { return u32() | (std::uint64_t(u32()) << 32); }
  std::size_t consumed() const { return pos_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// splitmix64: element values of large tensors come from a seed taken from the input.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n) (n > 0).
  std::uint64_t below(std::uint64_t n) { return next() % n; }

 private:
  std::uint64_t state_;
};

inline std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

/// The decoded configuration of the current input, printed with any violation (and after every
/// input when EA_FUZZ_VERBOSE is set).
inline std::string& description() {
  static std::string text;
  return text;
}

inline void note(const std::string& line) {
  description() += line;
  description() += '\n';
}

[[noreturn]] inline void violation(const char* file, int line, const char* condition,
                                   const std::string& detail) {
  std::fprintf(stderr, "\n==== %s:%d: invariant violated: %s\n%s\n---- decoded configuration ----\n%s\n",
               file, line, condition, detail.c_str(), description().c_str());
  std::fflush(stderr);
  __builtin_trap();
}

}  // namespace ea_fuzz

/// Checks an invariant; on failure prints the detail (printf-style) and the configuration, then
/// traps, which libFuzzer reports as a crash and saves the input for.
#define EA_EXPECT(cond, ...)                                                                      \
  do {                                                                                            \
    if (!(cond)) ::ea_fuzz::violation(__FILE__, __LINE__, #cond, ::ea_fuzz::format(__VA_ARGS__)); \
  } while (0)
