// One long-lived thread that runs the tasks posted to it, one at a time, in
// the order they were posted: the executor's communication stream. It is
// started once (by the first post), fed runs through a small queue and
// joined when it is destroyed, so no thread is created per run.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace dtorch::rt {

class StreamThread {
public:
  StreamThread() = default;
  StreamThread(const StreamThread &) = delete;
  StreamThread &operator=(const StreamThread &) = delete;
  // Runs the tasks still queued, then joins the thread.
  ~StreamThread();

  // Queues `task`; the future becomes ready when it has run (with its
  // exception, if it threw). Starts the thread on the first call.
  std::future<void> post(std::function<void()> task);

  // The thread's id (default-constructed before the first post).
  std::thread::id id() const;

private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace dtorch::rt
