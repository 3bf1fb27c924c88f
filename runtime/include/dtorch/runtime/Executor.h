// Runs one per-rank program: a COMPUTE stream (kernels from the registry) and
// a COMM stream (collectives through the Communicator), each on its own
// thread, instructions of a stream in program order, synchronized only by the
// program's events.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <vector>

namespace dtorch::rt {

class Executor {
public:
  // `comm` may be nullptr when the program has no collectives. Not owned.
  explicit Executor(Communicator *comm);

  // Validates the program (ProgramValidator.h), binds `inputs` to
  // program.inputs() in order (dtype and shape are checked), runs it and
  // returns the output buffers in program.outputs() order. Throws
  // RuntimeError whose message names the failing instruction index, its op
  // and its location field. `seeds` are the run's random seeds: a random
  // instruction with a `seed_slot` attribute reads its seed from them.
  std::vector<Tensor> run(const ::dtorch::wire::Program &program,
                          const std::vector<Tensor> &inputs,
                          const std::vector<int64_t> &seeds = {});

  // The two halves of run(), for callers that keep programs: validate once
  // when a program arrives, then run it as often as asked without
  // re-validating (the steady-state path of a training loop).
  void validate(const ::dtorch::wire::Program &program) const;

  // A class program made ready for the rank of `context` (MeshContext.h):
  // checked, resolved for the rank's coordinates and validated. Throws
  // RuntimeError. The communicator, when there is one, must be that rank's.
  ::dtorch::wire::Program prepare(const ::dtorch::wire::Program &program,
                                  const RankContext &context) const;
  std::vector<Tensor> runValidated(const ::dtorch::wire::Program &program,
                                   const std::vector<Tensor> &inputs,
                                   const std::vector<int64_t> &seeds = {});

  // Where each instruction run is recorded while `trace` is recording
  // (Trace.h); nullptr: nowhere. Not owned.
  void setTrace(TraceBuffer *trace) { trace_ = trace; }

private:
  Communicator *comm_;
  TraceBuffer *trace_ = nullptr;
};

} // namespace dtorch::rt
