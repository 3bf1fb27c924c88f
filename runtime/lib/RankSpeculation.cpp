//===- RankSpeculation.cpp - a rank's paused speculative run
//---------------===//
//
// RankState's side of speculation (RankState.h, SpeculativeRun.h): one run
// paused at a time, started and extended by the controller's Speculate
// messages, finished by the RunProgram that confirms it and dropped before
// anything that could change a value it read.
//
//===----------------------------------------------------------------------===//
#include "dtorch/runtime/RankState.h"

#include "dtorch_messages.pb.h"

#include <algorithm>

namespace dtorch::rt {

bool RankState::speculate(uint64_t speculationId, uint64_t programId,
                          const std::vector<uint64_t> &inputs) {
  dropSpeculation();
  if (speculationId == 0 || !executor_.executionPlans())
    return false;
  // The phases before the speculative run's first kernel (RankState::run).
  SetupTrace &setup = executor_.setupTrace();
  setup.begin(trace_.get());
  struct Flush {
    SetupTrace &setup;
    ~Flush() { setup.flush(); }
  } flushSetup{setup};
  auto uploaded = programs_.find(programId);
  if (uploaded == programs_.end() || !uploaded->second.invalid.empty() ||
      uploaded->second.device)
    return false;
  std::vector<Tensor> values;
  values.reserve(inputs.size());
  for (uint64_t handle : inputs) {
    auto it = tensors_.find(handle);
    if (it == tensors_.end() || poisoned_.count(handle) ||
        &it->second.device() != &cpuDevice())
      return false;
    values.push_back(it->second);
  }
  setup.mark("lookup");
  std::optional<TraceSpan> span;
  if (trace_->enabled())
    span.emplace(trace_.get(), TraceLane::Compute, "run",
                 "speculate " + uploaded->second.program->name(),
                 "program id " + std::to_string(programId));
  std::shared_ptr<ExecutionPlan> &plan = uploaded->second.plan;
  try {
    if (!plan || !executor_.canRun(*plan))
      plan = executor_.makePlan(uploaded->second.program);
  } catch (const std::exception &) {
    return false; // the confirming run reports it
  }
  speculation_ = SpeculativeRun::start(executor_, plan, values);
  if (!speculation_)
    return false;
  speculationId_ = speculationId;
  speculationProgram_ = programId;
  speculationInputs_ = inputs;
  ++speculationCounts_.started;
  return true;
}

void RankState::extendSpeculation(uint64_t speculationId,
                                  const std::vector<uint64_t> &inputs) {
  if (!speculation_ || speculationId != speculationId_ || inputs.empty())
    return;
  std::vector<Tensor> values;
  values.reserve(inputs.size());
  for (uint64_t handle : inputs) {
    auto it = tensors_.find(handle);
    if (it == tensors_.end() || poisoned_.count(handle) ||
        &it->second.device() != &cpuDevice())
      return; // the confirming run binds them
    values.push_back(it->second);
  }
  std::optional<TraceSpan> span;
  if (trace_->enabled())
    span.emplace(trace_.get(), TraceLane::Compute, "run", "speculate further",
                 "program id " + std::to_string(speculationProgram_));
  try {
    speculation_->extend(values);
  } catch (const std::exception &) {
    dropSpeculation(); // the confirming run reports it
    return;
  }
  speculationInputs_.insert(speculationInputs_.end(), inputs.begin(),
                            inputs.end());
}

void RankState::dropSpeculation(uint64_t speculationId) {
  if (!speculation_ || (speculationId != 0 && speculationId != speculationId_))
    return;
  speculation_.reset();
  speculationInputs_.clear();
  speculationId_ = 0;
  ++speculationCounts_.dropped;
}

void RankState::dropSpeculationReading(const uint64_t *handles, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (std::find(speculationInputs_.begin(), speculationInputs_.end(),
                  handles[i]) != speculationInputs_.end()) {
      dropSpeculation();
      return;
    }
}

std::unique_ptr<SpeculativeRun>
RankState::takeSpeculation(uint64_t speculationId, uint64_t programId,
                           const std::vector<uint64_t> &inputs) {
  bool continues = speculationId != 0 && speculationId == speculationId_ &&
                   programId == speculationProgram_ &&
                   inputs.size() >= speculationInputs_.size() &&
                   std::equal(speculationInputs_.begin(),
                              speculationInputs_.end(), inputs.begin());
  if (!continues) {
    dropSpeculation();
    return nullptr;
  }
  speculationInputs_.clear();
  speculationId_ = 0;
  return std::move(speculation_);
}

void serveSpeculate(RankState &state,
                    const ::dtorch::wire::Speculate &message) {
  std::vector<uint64_t> inputs(message.inputs().begin(),
                               message.inputs().end());
  switch (message.action()) {
  case ::dtorch::wire::Speculate::START:
    state.speculate(message.speculation_id(), message.program_id(), inputs);
    return;
  case ::dtorch::wire::Speculate::EXTEND:
    state.extendSpeculation(message.speculation_id(), inputs);
    return;
  default:
    state.dropSpeculation(message.speculation_id());
    return;
  }
}

} // namespace dtorch::rt
