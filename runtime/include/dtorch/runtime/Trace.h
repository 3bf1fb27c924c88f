// The profiler's event buffer (dtorch.profiler.profile). MLIR-free.
//
// Each rank keeps one TraceBuffer (RankState owns it, the Executor writes to
// it): while recording, every instruction the rank runs becomes one span on
// its compute or communication lane, with the op, the instruction's source
// location and its bytes. The client keeps one more for the session and the
// controller threads. Off, the cost is one relaxed atomic load per
// instruction; on, events go into a bounded buffer and the ones that do not
// fit are counted as dropped.
//
// Clock: traceClockNs() is CLOCK_MONOTONIC in nanoseconds, the clock that
// std::chrono::steady_clock and Python's time.monotonic_ns() read on Linux.
// Every process of one host shares it, so spans of the client, the
// controller and local workers are on one timeline as they are; a worker on
// another host reports its clock when it answers, and the client shifts its
// spans by the offset measured with that round trip (Session::collectTrace).
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtorch::wire {
class Program;
} // namespace dtorch::wire

namespace dtorch::rt {

/// Which thread of a trace an event belongs to.
enum class TraceLane : int32_t {
  Compute = 0,    // a rank's compute stream
  Comm = 1,       // a rank's communication stream
  Client = 2,     // the client's session (the thread recording ops)
  Controller = 3, // the controller thread
  Replies = 4,    // replies reaching the client (a fetch's pieces)
};

const char *traceLaneName(TraceLane lane);

struct TraceEvent {
  std::string name;     // op or phase ("matmul", "all_reduce", "compile")
  std::string category; // "kernel", "collective", "run", "op", "segment", ...
  std::string location; // the instruction's source location; may be empty
  std::string detail;   // free text (program name, cache outcome, ...)
  int64_t startNs = 0;  // traceClockNs() of the recording process
  int64_t endNs = 0;
  int64_t bytes = -1; // -1: not applicable
  TraceLane lane = TraceLane::Compute;
};

/// CLOCK_MONOTONIC, nanoseconds.
int64_t traceClockNs();

/// What one rank's buffer answers to a collection.
struct TraceChunk {
  int rank = -1;
  /// False when the backend runs nothing (simulated workers): no events.
  bool supported = true;
  std::vector<TraceEvent> events;
  uint64_t dropped = 0;   // events refused because the buffer was full
  uint64_t remaining = 0; // events still in the buffer after this chunk
  int64_t clockNs = 0;    // the rank's traceClockNs() when it answered
  std::string host;       // the host whose clock that is
  /// Added to the rank's times to put them on the client's clock (set by
  /// the client: 0 for the client's host).
  int64_t offsetNs = 0;
};

/// The labels of a program's instructions, made once per execution plan
/// (ExecutionPlan.h) so that the executor records each instruction it runs
/// as a few numbers (InstructionSpan) and the buffer turns them into
/// TraceEvents only when drained.
struct InstructionLabels {
  std::vector<std::string> names;       // the op
  std::vector<std::string> locations;   // the instruction's location
  std::vector<std::string> details;     // "<program> #<index>"
  std::vector<int64_t> kernelBytes;     // bytes of the outputs
  std::vector<int64_t> collectiveBytes; // the larger of inputs and outputs
};

/// One instruction run, as the executor's plan records it.
struct InstructionSpan {
  int32_t index = 0; // into InstructionLabels
  TraceLane lane = TraceLane::Compute;
  int64_t startNs = 0;
  int64_t endNs = 0;
  int64_t movedBytes = -1; // a collective's own count (all_to_all_v)
};

enum class TraceAction : int32_t {
  Start = 1, // clear the buffer and record, keeping at most `capacity`
  Drain = 2, // stop recording and hand over up to `maxEvents` events
};

class TraceBuffer {
public:
  static constexpr size_t kDefaultCapacity = size_t(1) << 17;
  /// The most events one Drain hands over (bounds a reply's size).
  static constexpr size_t kMaxDrainEvents = size_t(1) << 14;

  /// The flag check of the hot path.
  bool enabled() const noexcept {
    return enabled_.load(std::memory_order_relaxed);
  }
  /// Forgets every event and the dropped count, then records.
  void start(size_t capacity = kDefaultCapacity);
  void stop() noexcept { enabled_.store(false, std::memory_order_relaxed); }
  /// Keeps `event` when recording and there is room; counts it dropped when
  /// the buffer is full; ignores it when not recording.
  void record(TraceEvent event);
  /// Keeps `spans` (what record would keep of them one by one, in order),
  /// as one entry whose events are made from `labels` when drained.
  void recordInstructions(std::shared_ptr<const InstructionLabels> labels,
                          std::vector<InstructionSpan> spans);
  /// Stops recording and moves the oldest min(maxEvents, kMaxDrainEvents)
  /// events into `chunk` (events, dropped, remaining).
  void drain(size_t maxEvents, TraceChunk &chunk);
  size_t size() const;

private:
  // One event, or a run's instructions (the first `next` already drained).
  struct Entry {
    TraceEvent event;
    std::shared_ptr<const InstructionLabels> labels; // set for instructions
    std::vector<InstructionSpan> spans;
    size_t next = 0;
  };

  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;
  size_t events_ = 0; // in entries_
  size_t capacity_ = kDefaultCapacity;
  uint64_t dropped_ = 0;
};

/// Records one span on `lane` from construction to destruction when `buffer`
/// is recording at construction (nullptr: never).
class TraceSpan {
public:
  TraceSpan(TraceBuffer *buffer, TraceLane lane, const char *category,
            std::string name, std::string detail = {}, int64_t bytes = -1);
  ~TraceSpan();
  TraceSpan(TraceSpan &&other) noexcept
      : buffer_(other.buffer_), event_(std::move(other.event_)) {
    other.buffer_ = nullptr;
  }
  TraceSpan(const TraceSpan &) = delete;
  TraceSpan &operator=(const TraceSpan &) = delete;
  TraceSpan &operator=(TraceSpan &&) = delete;
  bool active() const { return buffer_ != nullptr; }
  void setDetail(std::string detail) { event_.detail = std::move(detail); }
  void setBytes(int64_t bytes) { event_.bytes = bytes; }

private:
  TraceBuffer *buffer_;
  TraceEvent event_;
};

/// The phases of a run's setup, from the worker's receipt of the message to
/// the run's first kernel, as spans of category "setup" on the compute lane
/// (bench/executor_overhead.py breaks the setup down with them); a
/// RunProgram's also go on after it: "run" (the run's span), "table bytes"
/// and "outputs" (registering them). Recorded
/// only while the trace records and DTORCH_TRACE_SETUP is "1" (read once
/// per process; setRecorded changes it), so a profile holds none by
/// default. Cheap: off, each mark is one branch; on, one clock read, and
/// the spans are recorded at flush, after the run.
class SetupTrace {
public:
  /// Whether traced runs record their setup's phases (DTORCH_TRACE_SETUP).
  static bool recorded();
  static void setRecorded(bool on);
  /// Starts when `buffer` records: the first phase begins at `startNs`
  /// (negative: now). Forgets marks not flushed.
  void begin(TraceBuffer *buffer, int64_t startNs = -1);
  /// Ends the phase that began at the previous mark (or at begin) as
  /// `phase` (a literal; kept as a pointer). Ignored when not started or
  /// when the marks are full.
  void mark(const char *phase) {
    if (buffer_ && count_ < kMaxMarks)
      markNow(phase);
  }
  bool active() const { return buffer_ != nullptr; }
  /// Records the phases marked since begin and stops.
  void flush();

private:
  static constexpr int kMaxMarks = 16;
  void markNow(const char *phase);
  TraceBuffer *buffer_ = nullptr;
  int64_t startNs_ = 0;
  int count_ = 0;
  const char *phases_[kMaxMarks] = {};
  int64_t endNs_[kMaxMarks] = {};
};

/// The executor's record of instruction `index` of `program`, run on `lane`
/// from `startNs` to now: kernels count the bytes of their outputs,
/// collectives the bytes they move for this rank (the larger of its input
/// and output, or `movedBytes` when it is not negative: the rows an
/// all_to_all_v's counts named).
void recordInstruction(TraceBuffer &buffer,
                       const ::dtorch::wire::Program &program, int index,
                       TraceLane lane, int64_t startNs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs,
                       int64_t movedBytes = -1);

} // namespace dtorch::rt
