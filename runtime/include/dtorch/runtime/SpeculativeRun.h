// A run of an execution plan started before all of its inputs are known
// (docs/speculation.md). The controller predicts which cached program the
// segment the client is still recording will compile to; each rank then runs
// that program's instructions in order on the inputs known so far, pausing at
// the first instruction it may not run yet, and either finishes the run when
// the client's flush confirms the prediction or discards it.
//
// What a paused run may not pass (analyzeSpeculation, once per plan):
//  - an instruction reading a program input not bound yet;
//  - an instruction with an effect beyond the run's own buffers: a random
//    kernel whose seed is a run parameter (`seed_slot`), or a write into an
//    output that Program.output_donors pairs with an input (donation is
//    decided at the confirmation);
//  - a plan with collectives, on a device, or that does not resolve: it is
//    not speculated at all.
// Programs never write their inputs (ProgramValidator: "writes buffer ...,
// which is a program input"), and a speculative run binds no donated
// storage, so nothing a paused run did is visible outside it: dropping it
// releases its buffers and leaves every tensor as it was.
//
// A paused run holds its plan (ExecutionPlan's one-run-at-a-time flag) and
// the executor's arena until it finishes or is dropped; the owner (RankState)
// drops it before anything else runs on the executor. MLIR-free.
#pragma once

#include "dtorch/runtime/ExecutionPlan.h"
#include "dtorch/runtime/Executor.h"

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtorch::rt {

/// How far a speculative run of a plan may go (analyzeSpeculation).
struct SpeculationLimits {
  /// Empty: the plan may be speculated; else why not.
  std::string refused;
  /// Per COMPUTE step of the plan, in order: how many leading program inputs
  /// must be bound before it runs (the largest input index it reads, plus
  /// one; 0: none).
  std::vector<int32_t> inputsNeeded;
  /// The first COMPUTE step (index into the steps) that a paused run may not
  /// run before its confirmation (a random seed slot, a donated output), or
  /// the number of steps when none.
  size_t firstEffect = 0;
  /// The per-run buffers (ascending ids) a paused run leaves unbound until
  /// its confirmation: outputs paired with an input (output_donors), which
  /// decides donation, and reshape views of them.
  std::vector<int32_t> deferredIds;
  std::vector<bool> deferred; // by buffer id
  /// By input index: whether an output may take the input (donation).
  std::vector<bool> donorInput;
};

/// The limits of speculating `plan` (see above).
SpeculationLimits analyzeSpeculation(const ExecutionPlan &plan);

class SpeculativeRun {
public:
  /// Starts a run of `plan` on `executor` with the leading inputs `known`
  /// and runs as far as it may. nullptr (nothing bound, nothing run) when
  /// the plan cannot be speculated now: `why` then says why.
  static std::unique_ptr<SpeculativeRun>
  start(Executor &executor, std::shared_ptr<ExecutionPlan> plan,
        const std::vector<Tensor> &known, std::string *why = nullptr);

  /// Binds `more` as the next inputs and runs as far as it may.
  void extend(const std::vector<Tensor> &more);

  /// Binds the rest of `inputs` (all of the run's inputs; the leading ones
  /// bound already are not rebound), runs what is left with `seeds` and
  /// returns the outputs, as Executor::runPlanned does; `donated` as there
  /// (an output paired with a donated input not yet written takes its
  /// storage). Throws the error of any instruction that failed, during
  /// speculation or now. Of the inputs bound already (boundInputs()), only
  /// the donated ones are read: the others may be left undefined.
  std::vector<Tensor> finish(const std::vector<Tensor> &inputs,
                             const std::vector<int64_t> &seeds,
                             const std::vector<bool> &donated = {});

  /// Drops the run: unbinds its buffers, releases the plan and the arena.
  ~SpeculativeRun();

  const ExecutionPlan &plan() const { return *plan_; }
  /// Inputs bound so far.
  size_t boundInputs() const { return bound_; }
  /// COMPUTE steps run so far (before finish: speculatively).
  size_t stepsRun() const { return next_; }
  /// Whether an instruction failed (its error is thrown by finish).
  bool failed() const { return static_cast<bool>(error_); }

  SpeculativeRun(const SpeculativeRun &) = delete;
  SpeculativeRun &operator=(const SpeculativeRun &) = delete;

private:
  SpeculativeRun(Executor &executor, std::shared_ptr<ExecutionPlan> plan)
      : executor_(executor), plan_(std::move(plan)) {}
  void bindInputs(const std::vector<Tensor> &inputs, size_t from);
  void bindBuffers();
  // Runs steps while they may run: up to `limit` (a step index) and while
  // their inputs are bound.
  void runSteps(size_t limit, const std::vector<int64_t> &seeds);

  Executor &executor_;
  std::shared_ptr<ExecutionPlan> plan_;
  // The plan's limits (kept by the plan with the fast setup, else made for
  // this run), and the step the run stops before until its confirmation.
  std::shared_ptr<const SpeculationLimits> limits_;
  size_t effectLimit_ = 0;
  std::unique_lock<std::mutex> arenaLock_;
  bool holdsPlan_ = false;
  size_t bound_ = 0; // leading inputs bound
  size_t next_ = 0;  // the next COMPUTE step to run
  std::exception_ptr error_;
};

} // namespace dtorch::rt
