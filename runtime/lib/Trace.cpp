#include "dtorch/runtime/Trace.h"

#include "dtorch_program.pb.h"

#include <algorithm>
#include <ctime>

namespace dtorch::rt {

const char *traceLaneName(TraceLane lane) {
  switch (lane) {
  case TraceLane::Compute:
    return "compute";
  case TraceLane::Comm:
    return "comm";
  case TraceLane::Client:
    return "client";
  case TraceLane::Controller:
    return "controller";
  case TraceLane::Replies:
    return "replies";
  }
  return "unknown";
}

int64_t traceClockNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
}

void TraceBuffer::start(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
  dropped_ = 0;
  capacity_ = capacity;
  enabled_.store(true, std::memory_order_relaxed);
}

void TraceBuffer::record(TraceEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled())
    return;
  if (events_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

void TraceBuffer::drain(size_t maxEvents, TraceChunk &chunk) {
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = std::min({maxEvents, kMaxDrainEvents, events_.size()});
  chunk.events.reserve(chunk.events.size() + n);
  for (size_t i = 0; i < n; ++i) {
    chunk.events.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  chunk.dropped = dropped_;
  chunk.remaining = events_.size();
}

size_t TraceBuffer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

TraceSpan::TraceSpan(TraceBuffer *buffer, TraceLane lane, const char *category,
                     std::string name, std::string detail, int64_t bytes)
    : buffer_(buffer && buffer->enabled() ? buffer : nullptr) {
  if (!buffer_)
    return;
  event_.name = std::move(name);
  event_.category = category;
  event_.detail = std::move(detail);
  event_.bytes = bytes;
  event_.lane = lane;
  event_.startNs = traceClockNs();
}

TraceSpan::~TraceSpan() {
  if (!buffer_)
    return;
  event_.endNs = traceClockNs();
  buffer_->record(std::move(event_));
}

void recordInstruction(TraceBuffer &buffer,
                       const ::dtorch::wire::Program &program, int index,
                       TraceLane lane, int64_t startNs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs,
                       int64_t movedBytes) {
  TraceEvent event;
  event.endNs = traceClockNs();
  event.startNs = startNs;
  const ::dtorch::wire::Instruction &inst = program.instructions(index);
  event.name = inst.op();
  event.location = inst.location();
  event.detail = program.name() + " #" + std::to_string(index);
  event.lane = lane;
  int64_t in = 0, out = 0;
  for (const Tensor *t : inputs)
    if (t && t->defined())
      in += static_cast<int64_t>(t->nbytes());
  for (const Tensor *t : outputs)
    if (t && t->defined())
      out += static_cast<int64_t>(t->nbytes());
  if (lane == TraceLane::Comm) {
    event.category = "collective";
    event.bytes = movedBytes >= 0 ? movedBytes : std::max(in, out);
  } else {
    event.category = "kernel";
    event.bytes = out;
  }
  buffer.record(std::move(event));
}

} // namespace dtorch::rt
