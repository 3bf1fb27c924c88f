#include "dtorch/runtime/Trace.h"

#include "dtorch_program.pb.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
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
  entries_.clear();
  events_ = 0;
  dropped_ = 0;
  capacity_ = capacity;
  enabled_.store(true, std::memory_order_relaxed);
}

void TraceBuffer::record(TraceEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled())
    return;
  if (events_ >= capacity_) {
    ++dropped_;
    return;
  }
  entries_.emplace_back();
  entries_.back().event = std::move(event);
  ++events_;
}

void TraceBuffer::recordInstructions(
    std::shared_ptr<const InstructionLabels> labels,
    std::vector<InstructionSpan> spans) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled() || spans.empty())
    return;
  size_t room = capacity_ > events_ ? capacity_ - events_ : 0;
  if (spans.size() > room) {
    dropped_ += spans.size() - room;
    spans.resize(room);
  }
  if (spans.empty())
    return;
  events_ += spans.size();
  entries_.emplace_back();
  entries_.back().labels = std::move(labels);
  entries_.back().spans = std::move(spans);
}

namespace {

TraceEvent instructionEvent(const InstructionLabels &labels,
                            const InstructionSpan &span) {
  TraceEvent event;
  size_t i = static_cast<size_t>(span.index);
  event.name = labels.names[i];
  event.location = labels.locations[i];
  event.detail = labels.details[i];
  event.startNs = span.startNs;
  event.endNs = span.endNs;
  event.lane = span.lane;
  if (span.lane == TraceLane::Comm) {
    event.category = "collective";
    event.bytes =
        span.movedBytes >= 0 ? span.movedBytes : labels.collectiveBytes[i];
  } else {
    event.category = "kernel";
    event.bytes = labels.kernelBytes[i];
  }
  return event;
}

} // namespace

void TraceBuffer::drain(size_t maxEvents, TraceChunk &chunk) {
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = std::min({maxEvents, kMaxDrainEvents, events_});
  chunk.events.reserve(chunk.events.size() + n);
  for (size_t taken = 0; taken < n;) {
    Entry &entry = entries_.front();
    if (!entry.labels) {
      chunk.events.push_back(std::move(entry.event));
      ++taken;
      entries_.pop_front();
      continue;
    }
    while (taken < n && entry.next < entry.spans.size()) {
      chunk.events.push_back(
          instructionEvent(*entry.labels, entry.spans[entry.next++]));
      ++taken;
    }
    if (entry.next == entry.spans.size())
      entries_.pop_front();
  }
  events_ -= n;
  chunk.dropped = dropped_;
  chunk.remaining = events_;
}

size_t TraceBuffer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
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

namespace {
std::atomic<bool> &setupRecorded() {
  static std::atomic<bool> on = [] {
    const char *value = std::getenv("DTORCH_TRACE_SETUP");
    return value && std::strcmp(value, "1") == 0;
  }();
  return on;
}
} // namespace

bool SetupTrace::recorded() {
  return setupRecorded().load(std::memory_order_relaxed);
}

void SetupTrace::setRecorded(bool on) {
  setupRecorded().store(on, std::memory_order_relaxed);
}

void SetupTrace::begin(TraceBuffer *buffer, int64_t startNs) {
  count_ = 0;
  buffer_ = buffer && buffer->enabled() && recorded() ? buffer : nullptr;
  if (buffer_)
    startNs_ = startNs >= 0 ? startNs : traceClockNs();
}

void SetupTrace::markNow(const char *phase) {
  phases_[count_] = phase;
  endNs_[count_] = traceClockNs();
  ++count_;
}

void SetupTrace::flush() {
  if (!buffer_)
    return;
  int64_t start = startNs_;
  for (int i = 0; i < count_; ++i) {
    TraceEvent event;
    event.name = phases_[i];
    event.category = "setup";
    event.startNs = start;
    event.endNs = endNs_[i];
    event.lane = TraceLane::Compute;
    buffer_->record(std::move(event));
    start = endNs_[i];
  }
  buffer_ = nullptr;
  count_ = 0;
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
