// SPDX-License-Identifier: MIT
// EigenAttention::AtomicFile (AtomicFile.hpp): a temporary file beside the target, renamed over
// it on commit, removed otherwise.
#include <EigenAttention/AtomicFile.hpp>

#include <EigenAttention/Npy.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>
#include "index.hpp"

namespace EigenAttention {
using internal::index_t;

struct AtomicFile::State {
  std::string path, temp;
  int fd = -1;
  bool finished = false, committed = false;
};

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw npy::Error(path + ": " + problem);
}

std::string errno_text(int e) { return std::strerror(e); }

std::atomic<unsigned long> g_counter{0};

}  // namespace

AtomicFile::AtomicFile(const char* path_text) : state_(new State) {
  State& s = *state_;
  s.path = path_text != nullptr ? path_text : "";
  try {
    if (s.path.empty()) fail("AtomicFile", "empty path");
    // "<dir>/.<name>.tmp-XXXXXXXX", created exclusively (O_EXCL: never an existing file or link).
    const std::size_t slash = s.path.rfind('/');
    const std::string dir = slash == std::string::npos ? std::string() : s.path.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? s.path : s.path.substr(slash + 1);
    const char* const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::uint64_t state =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<std::uint64_t>(::getpid()) << 32) ^ (g_counter.fetch_add(1) * 0x9E3779B97F4A7C15ULL);
    int error = EEXIST;
    for (int attempt = 0; attempt < 100 && s.fd < 0 && error == EEXIST; ++attempt) {
      std::string name = dir + "." + base + ".tmp-";
      for (int k = 0; k < 8; ++k) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;  // LCG step
        name += alphabet[(state >> 33) % 36];
      }
      s.fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (s.fd >= 0) {
        s.temp = std::move(name);
      } else {
        error = errno;
      }
    }
    if (s.fd < 0) {
      const std::string where =
          dir.empty() ? std::string(".") : dir.substr(0, dir.size() > 1 ? dir.size() - 1 : 1);
      fail(s.path, "cannot create a file in '" + where + "': " + errno_text(error));
    }
  } catch (...) {
    delete state_;
    throw;
  }
}

AtomicFile::~AtomicFile() {
  if (state_->fd >= 0) ::close(state_->fd);
  if (!state_->committed && !state_->temp.empty()) ::unlink(state_->temp.c_str());
  delete state_;
}

const char* AtomicFile::path() const { return state_->path.c_str(); }

const char* AtomicFile::temporary() const { return state_->temp.c_str(); }

void AtomicFile::write(const void* data, std::size_t size) {
  State& s = *state_;
  if (s.fd < 0) fail(s.path, "write error: the file is closed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ::ssize_t n = ::write(s.fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(s.path, "write error: " + errno_text(errno));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::finish() {
  State& s = *state_;
  if (s.finished) return;
  if (s.fd < 0) fail(s.path, "write error: the file is closed");
  // A file system without fsync (EINVAL, ENOTSUP) or a read-only one has nothing to flush.
  if (::fsync(s.fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP) {
    fail(s.path, "cannot flush to disk: " + errno_text(errno));
  }
  const int closed = ::close(s.fd);
  const int error = errno;
  s.fd = -1;
  if (closed != 0) fail(s.path, "write error on close: " + errno_text(error));
  s.finished = true;
}

void AtomicFile::commit() {
  State& s = *state_;
  if (s.committed) return;
  finish();
  if (std::rename(s.temp.c_str(), s.path.c_str()) != 0) {
    fail(s.path, "cannot rename the temporary file over it: " + errno_text(errno));
  }
  s.committed = true;
}

}  // namespace EigenAttention
