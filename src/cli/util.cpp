// SPDX-License-Identifier: MIT
#include "util.hpp"

#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Version.hpp>

#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>

#include <unistd.h>

namespace EigenAttention {
namespace cli {

namespace {
bool g_report_errors = true;
}  // namespace

void set_error_reporting(bool on) { g_report_errors = on; }
bool error_reporting() { return g_report_errors; }

std::string version_text() {
  return std::string("eigen-attention ") + version() +
         "\nLicense: MIT (in the Debian package: /usr/share/doc/eigen-attention/copyright)"
         "\nKernels on this CPU: " +
         kernels_on_this_cpu() + " (fastest first; auto takes " + kernel_name(auto_kernel()) + ")";
}

double parse_double(const std::string& option, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || std::isspace(static_cast<unsigned char>(text[0]))) {
    throw usage_error(option, "'" + text + "' is not a number");
  }
  if (errno == ERANGE && std::isinf(v)) throw usage_error(option, "'" + text + "' is out of range");
  return v;
}

long long parse_integer(const std::string& option, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(begin, &end, 10);
  if (text.empty() || end != begin + text.size() || std::isspace(static_cast<unsigned char>(text[0]))) {
    throw usage_error(option, "'" + text + "' is not an integer");
  }
  if (errno == ERANGE) throw usage_error(option, "'" + text + "' is out of range");
  return v;
}

// ---------------------------------------------------------------------------------------------
// Temporary files, removed on SIGINT/SIGTERM/SIGHUP too.

namespace {

constexpr int kSlots = 16;
constexpr std::size_t kPathMax = 4096;
char g_temp_paths[kSlots][kPathMax];
volatile std::sig_atomic_t g_temp_used[kSlots];

extern "C" void remove_temporaries_and_die(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_temp_used[i]) ::unlink(g_temp_paths[i]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_signal_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // e.g. nohup
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_and_die;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

int claim_slot(const std::string& path) {
  if (path.size() + 1 > kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    if (!g_temp_used[i]) {
      std::memcpy(g_temp_paths[i], path.c_str(), path.size() + 1);
      g_temp_used[i] = 1;
      return i;
    }
  }
  return -1;
}

void release_slot(int slot) {
  if (slot >= 0) g_temp_used[slot] = 0;
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

OutputFiles::~OutputFiles() {
  // The files not committed remove their temporary files as they go.
  for (const Entry& e : entries_) release_slot(e.slot);
}

AtomicFile& OutputFiles::add(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw usage_error(option, "the file name is empty");
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) throw Failure(path, "is a directory");
  const fs::path canonical = fs::weakly_canonical(fs::absolute(p, ec), ec);
  const std::string key = ec ? path : canonical.string();
  for (const Entry& e : entries_) {
    if (e.key == key) throw usage_error(option, "'" + path + "' is also the output of " + e.option);
  }
  install_signal_handlers();
  auto file = std::make_unique<AtomicFile>(path.c_str());
  const int slot = claim_slot(file->temporary());
  entries_.push_back({option, key, std::move(file), slot});
  return *entries_.back().file;
}

void OutputFiles::commit() {
  for (Entry& e : entries_) e.file->finish();  // all on disk before any is renamed
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    try {
      entries_[i].file->commit();
    } catch (...) {
      for (std::size_t j = 0; j < i; ++j) ::unlink(entries_[j].file->path());
      throw;
    }
    release_slot(entries_[i].slot);
    entries_[i].slot = -1;
  }
}

// ---------------------------------------------------------------------------------------------
// Progress

namespace {
std::mutex g_progress_mutex;
std::condition_variable g_progress_cv;
}  // namespace

Progress::Progress(bool quiet) : start_(std::chrono::steady_clock::now()) {
  if (quiet || !::isatty(STDERR_FILENO)) return;
  thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() { stop(); }

void Progress::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(g_progress_mutex);
    done_.store(true);
  }
  g_progress_cv.notify_all();
  thread_.join();
}

void Progress::loop() {
  static const char spinner[] = {'|', '/', '-', '\\'};
  bool shown = false;
  int tick = 0;
  std::unique_lock<std::mutex> lock(g_progress_mutex);
  for (;;) {
    g_progress_cv.wait_for(lock, std::chrono::milliseconds(125), [this] { return done_.load(); });
    if (done_.load()) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed < 1.0) continue;
    std::fprintf(stderr, "\r\033[Keigen-attention: %s... %.1f s %c", phase_.load(), elapsed,
                 spinner[tick++ % 4]);
    std::fflush(stderr);
    shown = true;
  }
  if (shown) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

// ---------------------------------------------------------------------------------------------

std::vector<std::string> read_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    throw Failure(path, "cannot open: " + errno_text(e));
  }
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(line);
  }
  if (in.bad()) throw Failure(path, "read error");
  return tokens;
}

std::vector<std::string> axis_labels(const std::vector<std::string>& tokens, std::int64_t count) {
  std::vector<std::string> labels;
  labels.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    labels.push_back(i < static_cast<std::int64_t>(tokens.size()) ? tokens[static_cast<std::size_t>(i)]
                                                                  : std::to_string(i));
  }
  return labels;
}

}  // namespace cli
}  // namespace EigenAttention
