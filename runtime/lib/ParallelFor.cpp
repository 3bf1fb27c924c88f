#include "dtorch/runtime/ParallelFor.h"

#include "dtorch/runtime/Blas.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

namespace dtorch::rt {
namespace {

constexpr int64_t kMinSplitBytes = int64_t(1) << 20;
constexpr int kMaxHelpers = 64;

// One parallelFor call: parts are claimed by whoever runs (caller or
// helper) through `next`, so no part waits for a particular thread.
struct Job {
  const std::function<void(int)> *body = nullptr;
  int parts = 0;
  std::atomic<int> next{0};
  std::mutex mutex;
  std::condition_variable finished;
  int done = 0; // parts finished, under mutex
  std::exception_ptr error;

  // Runs parts until none is left unclaimed.
  void work() {
    for (int part = next.fetch_add(1); part < parts; part = next.fetch_add(1)) {
      std::exception_ptr failure;
      try {
        (*body)(part);
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (failure && !error)
        error = failure;
      if (++done == parts)
        finished.notify_all();
    }
  }
};

class HelperPool {
public:
  // Never destroyed (helpers may outlive main). A child process forked
  // after helpers started has none of them, and its copy of the pool's lock
  // may be held: the child starts a fresh pool (the old one is left alone).
  static HelperPool &instance() {
    static std::once_flag registered;
    std::call_once(registered, [] {
      pthread_atfork(nullptr, nullptr, [] { current() = new HelperPool(); });
    });
    HelperPool *&pool = current();
    return *pool;
  }

  // Offers `job` to `helpers` helpers (starting them as needed).
  void offer(const std::shared_ptr<Job> &job, int helpers) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (static_cast<int>(threads_) < std::min(helpers, kMaxHelpers)) {
      std::thread([this] { loop(); }).detach();
      ++threads_;
    }
    for (int i = 0; i < helpers; ++i)
      queue_.push_back(job);
    wake_.notify_all();
  }

  int helpers() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(threads_);
  }

private:
  static HelperPool *&current() {
    static HelperPool *pool = new HelperPool();
    return pool;
  }

  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->work();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  size_t threads_ = 0;
};

int threadsFromEnvironment() {
  const char *text = std::getenv("DTORCH_KERNEL_THREADS");
  if (!text || !*text)
    return 0;
  char *end = nullptr;
  long parsed = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || parsed < 1 || parsed > kMaxHelpers + 1)
    return 0;
  return static_cast<int>(parsed);
}

} // namespace

void parallelFor(int parts, const std::function<void(int)> &body) {
  if (parts <= 1) {
    if (parts == 1)
      body(0);
    return;
  }
  auto job = std::make_shared<Job>();
  job->body = &body;
  job->parts = parts;
  HelperPool::instance().offer(job, parts - 1);
  job->work();
  std::unique_lock<std::mutex> lock(job->mutex);
  job->finished.wait(lock, [&] { return job->done == job->parts; });
  if (job->error)
    std::rethrow_exception(job->error);
}

int kernelParts(int64_t rows, int64_t bytes) {
  if (rows < 2 || bytes < kMinSplitBytes)
    return 1;
  static const int fromEnvironment = threadsFromEnvironment();
  int threads = fromEnvironment > 0 ? fromEnvironment : blas::threads();
  return static_cast<int>(std::clamp<int64_t>(rows, 1, threads));
}

int parallelForHelpers() { return HelperPool::instance().helpers(); }

} // namespace dtorch::rt
