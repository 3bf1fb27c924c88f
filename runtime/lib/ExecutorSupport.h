// What the executor's two ways of running a program share (Executor.cpp:
// resolving the program on every run; ExecutionPlan.cpp: walking a plan
// made once): the events between the streams, collectives and generated
// kernels, the current stream of a device, an instruction's failure.
// Internal to the runtime library.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Device.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtorch::rt::detail {

// Events between the streams plus the first failure of the run.
class RunState {
public:
  explicit RunState(int numEvents)
      : signalled_(static_cast<size_t>(numEvents), false) {}

  // False when the run failed elsewhere while waiting.
  bool waitFor(int event) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return signalled_[event] || failed_; });
    return !failed_;
  }
  void signal(int event) {
    std::lock_guard<std::mutex> lock(mutex_);
    signalled_[event] = true;
    changed_.notify_all();
  }
  void fail(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_) {
      failed_ = true;
      error_ = error;
      failedFlag_.store(true, std::memory_order_release);
    }
    changed_.notify_all();
  }
  // Checked before every instruction: an atomic load, no lock.
  bool failed() const { return failedFlag_.load(std::memory_order_acquire); }
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> signalled_;
  bool failed_ = false;
  std::atomic<bool> failedFlag_{false};
  std::exception_ptr error_;
};

// Makes `stream` the current stream of `device` (this thread's, where the
// device's kernels and collectives queue) for a scope; a null `stream`
// leaves it as it is (the host).
class ScopedCurrentStream {
public:
  ScopedCurrentStream(Device &device, Stream *stream)
      : device_(device), previous_(stream ? &device.currentStream() : nullptr) {
    if (stream)
      device.setCurrentStream(stream);
  }
  ~ScopedCurrentStream() {
    if (previous_)
      device_.setCurrentStream(previous_);
  }
  ScopedCurrentStream(const ScopedCurrentStream &) = delete;
  ScopedCurrentStream &operator=(const ScopedCurrentStream &) = delete;

private:
  Device &device_;
  Stream *previous_;
};

// Called in a catch block: fails the run with the exception being handled,
// as instruction `index` of `program` failing ("<prefix><instruction>
// failed: <what>").
void failRunAt(RunState &state, const std::string &prefix,
               const ::dtorch::wire::Program &program, int index);

/// Runs one collective; returns the bytes it sent when they depend on the
/// data (all_to_all_v: the rows the counts name), else -1 (the trace then
/// counts the buffers).
int64_t runCollective(Communicator &comm,
                      const ::dtorch::wire::Instruction &inst,
                      const std::vector<const Tensor *> &in,
                      const std::vector<Tensor *> &out);

// A collective of a device program through the host communicator: the
// inputs are copied to host memory, the host backend runs it, and the
// outputs are copied back (pinned staging buffers both ways).
int64_t runCollectiveThroughHost(Communicator &comm,
                                 const ::dtorch::wire::Instruction &inst,
                                 const std::vector<const Tensor *> &in,
                                 const std::vector<Tensor *> &out);

// A generated kernel: large outputs are cut into row ranges run by the
// rank's threads (kernelParts), when the kernel has a row entry.
void runGenerated(GeneratedKernelFn whole, GeneratedRowsKernelFn rows,
                  const std::vector<void *> &in, const std::vector<void *> &out,
                  const double *scalars, const Tensor &first);

// A generated multi-tensor optimizer kernel (a fused_adam or fused_sgd
// generated for its signature, `inst`): inputs the scalars, then the
// parameters' groups (OptimizerCalls.h); its rows entry takes a range of
// the elements of every parameter one after the other, so the call is cut
// there for the rank's thread share.
void runGeneratedMultiTensor(GeneratedKernelFn whole,
                             GeneratedRowsKernelFn rows,
                             const std::vector<void *> &in,
                             const std::vector<void *> &out,
                             const double *scalars,
                             const ::dtorch::wire::Instruction &inst,
                             const std::vector<const Tensor *> &inTensors,
                             const std::vector<Tensor *> &outTensors);

// The trace's labels of `program`'s instructions, given every buffer's
// bytes (ExecutionPlan.cpp; made once per plan).
std::shared_ptr<const InstructionLabels>
makeLabels(const ::dtorch::wire::Program &program,
           const std::vector<int64_t> &bufferBytes);

} // namespace dtorch::rt::detail
