// A rendezvous store held in this process's memory: for ranks that run as
// threads of one process (tests, benchmarks). Thread-safe.
#pragma once

#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/Tensor.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dtorch::rt {

class InMemoryKeyValueStore final : public KeyValueStore {
public:
  void set(const std::string &key, const std::string &value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
    changed_.notify_all();
  }
  std::string get(const std::string &key,
                  std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key); }))
      throw RuntimeError("key '" + key + "' did not appear");
    return values_[key];
  }
  // Every key set so far, in order.
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> all;
    for (const auto &entry : values_)
      all.push_back(entry.first);
    return all;
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

} // namespace dtorch::rt
