#include "dtorch/runtime/Collectives.h"

#include <cmath>
#include <cstring>
#include <set>

namespace dtorch::rt {

ReduceOp parseReduceOp(const std::string &name) {
  if (std::optional<ReduceOp> op = ::dtorch::parseReduceOp(name))
    return *op;
  throw RuntimeError("unknown reduction '" + name +
                     "' (expected sum, avg, max or min)");
}

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

namespace {

template <class T>
void reduceTyped(T *acc, const T *x, int64_t count, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, int64_t>)
        acc[i] = static_cast<int64_t>(static_cast<uint64_t>(acc[i]) +
                                      static_cast<uint64_t>(x[i])); // wraps
      else if constexpr (std::is_same_v<T, bool>)
        acc[i] = acc[i] || x[i];
      else
        acc[i] += x[i];
    }
    return;
  case ReduceOp::Max:
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x[i]))
          acc[i] = x[i];
        else if (!std::isnan(acc[i]) && acc[i] < x[i])
          acc[i] = x[i];
      } else if (acc[i] < x[i]) {
        acc[i] = x[i];
      }
    }
    return;
  case ReduceOp::Min:
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x[i]))
          acc[i] = x[i];
        else if (!std::isnan(acc[i]) && x[i] < acc[i])
          acc[i] = x[i];
      } else if (x[i] < acc[i]) {
        acc[i] = x[i];
      }
    }
    return;
  }
}

} // namespace

void reduceInto(void *acc, const void *x, int64_t count, DType dtype,
                ReduceOp op) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return reduceTyped(static_cast<float *>(acc), static_cast<const float *>(x),
                       count, op);
  case ::dtorch::wire::F64:
    return reduceTyped(static_cast<double *>(acc),
                       static_cast<const double *>(x), count, op);
  case ::dtorch::wire::I64:
    return reduceTyped(static_cast<int64_t *>(acc),
                       static_cast<const int64_t *>(x), count, op);
  case ::dtorch::wire::BOOL:
    if (op == ReduceOp::Avg)
      break;
    return reduceTyped(static_cast<bool *>(acc), static_cast<const bool *>(x),
                       count, op);
  default:
    break;
  }
  throw RuntimeError(std::string("reduction '") + reduceOpName(op) +
                     "' is not supported for " + dtypeName(dtype));
}

void finishAverage(void *acc, int64_t count, DType dtype, int64_t members) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    for (int64_t i = 0; i < count; ++i)
      static_cast<float *>(acc)[i] /= static_cast<float>(members);
    return;
  case ::dtorch::wire::F64:
    for (int64_t i = 0; i < count; ++i)
      static_cast<double *>(acc)[i] /= static_cast<double>(members);
    return;
  case ::dtorch::wire::I64:
    for (int64_t i = 0; i < count; ++i)
      static_cast<int64_t *>(acc)[i] /= members;
    return;
  default:
    throw RuntimeError(std::string("reduction 'avg' is not supported for ") +
                       dtypeName(dtype));
  }
}

} // namespace dtorch::rt
