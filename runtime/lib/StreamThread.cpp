#include "dtorch/runtime/StreamThread.h"

namespace dtorch::rt {

StreamThread::~StreamThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

std::future<void> StreamThread::post(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> done = packaged.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(packaged));
    if (!thread_.joinable())
      thread_ = std::thread([this] { loop(); });
  }
  queued_.notify_one();
  return done;
}

std::thread::id StreamThread::id() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return thread_.get_id();
}

void StreamThread::loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty())
        return; // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task(); // a packaged_task keeps the task's exception in its future
  }
}

} // namespace dtorch::rt
