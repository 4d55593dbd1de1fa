// SPDX-License-Identifier: MIT
#include "thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>

#include <pthread.h>

namespace EigenAttention {
namespace internal {

struct ThreadPool::Job {
  const TaskRef* task;
  index_t tasks;
  std::atomic<index_t> next{0};
  std::atomic<int> unfinished_workers{0};
  std::mutex error_mutex;
  std::exception_ptr error;

  void work() {
    for (index_t i; (i = next.fetch_add(1)) < tasks;) {
      try {
        (*task)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(tasks);  // hand out no more tasks
      }
    }
  }
};

namespace {

std::atomic<ThreadPool*> current_pool{nullptr};

/// How long a thread polls for the next job, or for the workers to finish one, before it sleeps on
/// the condition variable: a sleeping thread takes tens of microseconds (more in a VM) to wake,
/// which a pass that runs several short jobs in a row (the backward: two per query tile) would
/// pay each time. OpenMP runtimes poll the same way, for longer.
constexpr auto kPoll = std::chrono::microseconds(200);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Polls done() until it holds, for up to kPoll (the caller then waits on its condition variable,
/// whose predicate decides).
template <class Done>
void poll(const Done& done) {
  const auto until = std::chrono::steady_clock::now() + kPoll;
  for (unsigned i = 1; !done(); ++i) {
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return;
  }
}

}  // namespace

ThreadPool& ThreadPool::instance() {
  static const bool registered = [] {
    current_pool.store(new ThreadPool);
    // In a forked child only the forking thread exists: start over with an empty pool (the
    // old one is left behind on purpose: destroying it would join threads that are gone).
    pthread_atfork(nullptr, nullptr, [] { current_pool.store(new ThreadPool); });
    return true;
  }();
  (void)registered;
  return *current_pool.load();
}

void ThreadPool::worker(int id) {
  unsigned long seen = 0;
  for (;;) {  // workers live as long as the process
    poll([&] { return generation_.load(std::memory_order_acquire) != seen; });
    Job* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return job_ != nullptr && generation_.load() != seen && id < wanted_; });
      seen = generation_.load();
      job = job_;
    }
    job->work();
    // The last worker out wakes the caller; after the decrement a worker touches only the
    // pool (the caller may already have seen 0 and returned, ending the job).
    if (job->unfinished_workers.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

void ThreadPool::run(index_t tasks, int threads, TaskRef task) {
  threads = static_cast<int>(std::min<index_t>(threads, tasks));
  std::unique_lock<std::mutex> busy(busy_, std::defer_lock);
  if (threads > 1) busy.try_lock();
  if (!busy.owns_lock()) {
    for (index_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  Job job;
  job.task = &task;
  job.tasks = tasks;
  job.unfinished_workers.store(threads - 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (static_cast<int>(workers_.size()) < threads - 1) {
      const int id = static_cast<int>(workers_.size());
      workers_.emplace_back([this, id] { worker(id); });
    }
    job_ = &job;
    wanted_ = threads - 1;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  job.work();
  const auto finished = [&] { return job.unfinished_workers.load(std::memory_order_acquire) == 0; };
  poll(finished);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
    job_ = nullptr;
  }
  if (job.error) std::rethrow_exception(job.error);
}

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

}  // namespace internal
}  // namespace EigenAttention
