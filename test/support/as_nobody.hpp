// SPDX-License-Identifier: MIT
/// \file as_nobody.hpp
/// Runs a function as the unprivileged user nobody (POSIX), from a test that runs as root (CI
/// does): a forked child drops its groups and ids to 65534 and calls the function, whose text
/// comes back through a pipe. Root ignores file permissions, so what a permission must stop can only be
/// seen without it. POSIX allows only async-signal-safe calls in the child of a process with
/// threads (the library's pool may have started workers); the child runs library code all the
/// same, as test/threads.cpp's forked child does and the library supports (glibc's fork leaves
/// malloc and the loader's locks usable in the child, and the pool starts over there): the
/// function must not use doctest's assertions, and the child ends with _exit (an alarm ends it
/// after 30 s if it hangs).
#pragma once

#include <cerrno>
#include <exception>
#include <string>

#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ea_test {

/// How the child ended.
struct ChildOutcome {
  bool exited = false;  ///< ended by _exit (not by a signal)
  int status = -1;      ///< its exit status: 0 the function returned, 2 the ids were not dropped,
                        ///< 3 the function threw
  std::string text;     ///< what the function returned (or why the ids were not dropped)
};

constexpr uid_t kNobody = 65534;  ///< nobody's uid and nogroup's gid (Debian)

/// Calls f() (std::string()) in a child process with uid, gid and groups nobody's and returns its
/// text. Call as root (setuid fails otherwise: status 2).
template <class F>
ChildOutcome run_as_nobody(F&& f) {
  ChildOutcome out;
  int fds[2];
  if (::pipe(fds) != 0) {
    out.text = "pipe failed";
    return out;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::alarm(30);
    int status = 0;
    std::string text;
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0 ||
        ::geteuid() != kNobody || ::getegid() != kNobody) {
      status = 2;
      text = "cannot become nobody (run as root?)";
    } else {
      try {
        text = f();
      } catch (const std::exception& e) {
        status = 3;
        text = e.what();
      } catch (...) {
        status = 3;
        text = "an exception";
      }
    }
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
      const ::ssize_t n = ::write(fds[1], p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    ::_exit(status);
  }
  ::close(fds[1]);
  if (child < 0) {
    ::close(fds[0]);
    out.text = "fork failed";
    return out;
  }
  char buffer[4096];
  for (;;) {
    const ::ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  pid_t waited = -1;
  do {
    waited = ::waitpid(child, &status, 0);
  } while (waited < 0 && errno == EINTR);
  out.exited = waited == child && WIFEXITED(status);
  out.status = out.exited ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace ea_test
