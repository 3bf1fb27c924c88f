#include "dtorch/runtime/Collectives.h"

#include <cstring>
#include <set>

namespace dtorch::rt {

void Mailboxes::post(int64_t from, int64_t to, int64_t tag, const Tensor &x) {
  Tensor copy = x.clone();
  std::lock_guard<std::mutex> lock(mutex_);
  queues_[{from, to, tag}].push_back(std::move(copy));
  arrived_.notify_all();
}

void Mailboxes::take(int64_t from, int64_t to, int64_t tag,
                     std::chrono::milliseconds deadline, Tensor &out) {
  std::string what = "recv on rank " + std::to_string(to) + " from rank " +
                     std::to_string(from) + " (tag " + std::to_string(tag) +
                     ")";
  Tensor message;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto key = std::make_tuple(from, to, tag);
    auto ready = [&] {
      auto it = queues_.find(key);
      return it != queues_.end() && !it->second.empty();
    };
    if (!arrived_.wait_for(lock, deadline, ready))
      throw RuntimeError(what + ": timed out after " +
                         std::to_string(deadline.count()) +
                         " ms waiting for rank(s) " + std::to_string(from));
    auto &queue = queues_[key];
    message = std::move(queue.front());
    queue.pop_front();
    if (queue.empty())
      queues_.erase(key);
  }
  if (message.dtype() != out.dtype() || message.shape() != out.shape())
    throw RuntimeError(what + ": got " + message.describe() + ", expected " +
                       out.describe());
  if (out.nbytes())
    std::memcpy(out.data(), message.data(), out.nbytes());
}

size_t groupIndexOf(const Group &group, int64_t rank) {
  if (group.empty())
    throw RuntimeError("empty collective group");
  std::set<int64_t> seen(group.begin(), group.end());
  if (seen.size() != group.size())
    throw RuntimeError("collective group " + groupToString(group) +
                       " repeats a rank");
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] == rank)
      return i;
  throw RuntimeError("rank " + std::to_string(rank) +
                     " is not in collective group " + groupToString(group));
}

std::string groupToString(const Group &group) {
  std::string text = "[";
  for (size_t i = 0; i < group.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(group[i]);
  }
  return text + "]";
}

} // namespace dtorch::rt
