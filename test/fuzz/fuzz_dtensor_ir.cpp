// libFuzzer target: text in the dtensor/rank dialects through the compiler,
// as dtorch-run and the text entry point compile it: parse (with the
// verifier), the dtensor-to-rank pipeline the controller uses (sharding
// propagation, redistribution lowering, SPMD lowering, collective
// scheduling, buffer planning) and the emission of wire programs, with
// every diagnostic captured in CompileResult::error. Invalid input must end
// in diagnostics, never a crash, an assertion, a hang or a sanitizer report.
//
// What the compiler makes of a dtensor-level module must also be something
// the workers accept: every emitted class program passes
// validateMeshProgram, and, on meshes of at most kMaxCheckedPositions
// positions, resolves and validates for every position. A program the
// runtime refuses is then a compiler bug, so it aborts. A module that
// already holds rank-dialect ops passes through the pipeline as written
// (an unknown kernel name stays one): the runtime refusing it is the
// intended outcome, so such inputs skip this check.
//
// Elementwise fusion stays off: it compiles each fused body to native code
// with LLVM and ld.lld (KernelCodegen), whose cost and output are not about
// input validation.
#include "dtorch/Compiler.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

namespace {

// Inputs above this are skipped: the interesting structure of a module is
// small, and the parser's cost grows with the text.
constexpr size_t kMaxInputBytes = 4096;
constexpr int64_t kMaxCheckedPositions = 16;

[[noreturn]] void reportRefusedProgram(const dtorch::CompiledFunction &fn,
                                       size_t index, const char *what) {
  std::fprintf(stderr,
               "fuzz_dtensor_ir: the compiler accepted the input but the "
               "runtime refuses class program %zu of '%s': %s\n",
               index, fn.name.c_str(), what);
  std::abort();
}

void checkEmitted(const dtorch::CompiledFunction &fn) {
  using namespace dtorch::rt;
  for (size_t i = 0; i < fn.programs.size(); ++i) {
    const auto &program = fn.programs[i];
    try {
      validateMeshProgram(program);
    } catch (const std::exception &e) {
      reportRefusedProgram(fn, i, e.what());
    }
  }
  std::vector<int64_t> meshShape = fn.meshShape;
  if (meshShape.empty() && !fn.programs.empty())
    meshShape.assign(fn.programs[0].mesh_shape().begin(),
                     fn.programs[0].mesh_shape().end());
  int64_t positions = 0;
  try {
    positions = meshPositionCount(meshShape);
  } catch (const std::exception &) {
    return;
  }
  if (positions > kMaxCheckedPositions)
    return;
  auto mesh = std::make_shared<const MeshRanks>(
      meshShape, consecutiveMeshRanks(meshShape, 0));
  std::vector<const dtorch::wire::Program *> classes;
  for (const auto &program : fn.programs)
    classes.push_back(&program);
  for (int64_t p = 0; p < positions; ++p) {
    RankContext context = RankContext::of(mesh, p);
    int index = programIndexAt(classes, context.coords);
    if (index < 0)
      continue;
    try {
      validateProgram(resolveForRank(*classes[index], context),
                      static_cast<int>(p));
    } catch (const std::exception &e) {
      reportRefusedProgram(fn, static_cast<size_t>(index), e.what());
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > kMaxInputBytes)
    return -1; // not added to the corpus
  std::string text(reinterpret_cast<const char *>(data), size);
  dtorch::CompileOptions options;
  options.fuseElementwise = false;
  options.planBuffers = true;
  dtorch::CompileResult result =
      dtorch::compileModule(text, "fuzz.mlir", options);
  if (!result.ok || text.find("rank.") != std::string::npos)
    return 0;
  for (const dtorch::CompiledFunction &fn : result.functions)
    checkEmitted(fn);
  return 0;
}
