// SPDX-License-Identifier: MIT
// A small persistent pool of worker threads for splitting one call over query tiles. Internal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>
#include "index.hpp"

namespace EigenAttention {
namespace internal {

/// A non-owning reference to a callable `void(std::ptrdiff_t)`: unlike std::function, making
/// one never allocates (the _into calls allocate nothing).
class TaskRef {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, TaskRef>>>
  TaskRef(const F& f)  // NOLINT: implicit on purpose
      : callable_(&f), call_([](const void* c, index_t i) { (*static_cast<const F*>(c))(i); }) {}
  void operator()(index_t i) const { call_(callable_, i); }

 private:
  const void* callable_;
  void (*call_)(const void*, index_t);
};

class ThreadPool {
 public:
  /// The process-wide pool; its workers start on first use. It is never destroyed (its
  /// workers sleep until the process ends), and a child process made by fork() gets a fresh,
  /// empty pool: the parent's workers do not exist there and its locks may be held.
  static ThreadPool& instance();

  /// Runs task(i) for every i in [0, tasks), on at most `threads` threads counting the caller,
  /// and returns when all are done. Tasks are handed out in index order. When another call is
  /// using the pool, this one runs on the calling thread alone (results do not depend on it).
  /// The first exception a task throws is rethrown here, after every task has stopped.
  void run(index_t tasks, int threads, TaskRef task);

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  struct Job;
  ThreadPool() = default;
  void worker(int id);

  std::mutex busy_;  // held by the call that owns the workers
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  std::atomic<unsigned long> generation_{0};  // written under mutex_, read by spinning workers
  int wanted_ = 0;                            // workers 0 .. wanted_-1 join the current job
};

/// The number of threads Options::threads asks for: 0 means every hardware thread.
int resolve_threads(int requested);

}  // namespace internal
}  // namespace EigenAttention
