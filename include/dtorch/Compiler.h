//===- Compiler.h - dtensor graphs to per-rank programs -----------*- C++
//-*-===//
//
// The compiler's MLIR-free entry point, used by the client, the controller,
// dtorch-run and the tests: parse a module in the dtensor dialect, run the
// dtensor-to-rank pipeline and emit, for every function, one wire::Program
// per local-shape class of its mesh (evenly sharded: one for all ranks).
// Nothing MLIR leaks through this header.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_COMPILER_H
#define DTORCH_COMPILER_H

#include "dtorch/Explain.h"
#include "dtorch/Layout.h"
#include "dtorch_program.pb.h"

#include <string>
#include <utility>
#include <vector>

namespace dtorch {

/// The global view of one function argument or result.
struct TensorInfo {
  std::vector<int64_t> shape;
  wire::DType dtype = wire::DTYPE_INVALID;
  std::vector<int64_t> meshShape;
  Placements placements;
};

struct CompiledFunction {
  std::string name;
  std::vector<int64_t> meshShape;
  std::vector<TensorInfo> inputs, outputs;
  /// The class programs; each names the mesh positions that run it
  /// (Program::positions), and every position is in exactly one.
  std::vector<wire::Program> programs;
  /// Index into `programs` of the program that the mesh position `position`
  /// (row-major linear index) runs; -1 when none does.
  int programAt(int64_t position) const;
};

/// Whether `coords` lies in one of the program's position boxes.
bool programRunsAt(const wire::Program &program,
                   const std::vector<int64_t> &coords);

struct CompileOptions {
  /// Keep the IR after each stage ("input", "sharded", "redistributed",
  /// "rank") in CompileResult::stages.
  bool recordStages = false;
  /// Explain every redistribution after sharding propagation (as
  /// --dtensor-explain-redistributions does) in CompileResult::explanations.
  bool explain = false;
};

struct CompileResult {
  bool ok = false;
  std::string error; // diagnostics, when !ok
  std::vector<CompiledFunction> functions;
  std::vector<std::pair<std::string, std::string>> stages;
  std::vector<RedistributionExplanation> explanations; // in program order
};

/// `source` is dtensor-dialect text or bytecode; `sourceName` names it in
/// diagnostics.
CompileResult compileModule(const std::string &source,
                            const std::string &sourceName,
                            const CompileOptions &options = {});

} // namespace dtorch

#endif // DTORCH_COMPILER_H
