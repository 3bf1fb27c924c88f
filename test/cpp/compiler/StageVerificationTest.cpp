//===- StageVerificationTest.cpp - which stage boundaries verify ---------===//
//
// A release compile verifies the built module and the last stage; a debug
// build or DTORCH_VERIFY_STAGES=1 verifies every stage boundary. Both give
// the same programs, and a verifying boundary rejects invalid IR that a
// marking one lets through.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/StageVerification.h"
#include "ScopedEnvironment.h"
#include "dtensor/IR/DTensor.h"
#include "dtensor/Transforms/Passes.h"
#include "dtorch/Compiler.h"
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace dtorch;

namespace {

/// Sets DTORCH_VERIFY_STAGES for the scope, then restores it.
struct VerifyStagesEnvironment : testsupport::ScopedEnvironment {
  explicit VerifyStagesEnvironment(const char *value)
      : ScopedEnvironment("DTORCH_VERIFY_STAGES", value) {}
};

/// matmul, relu and a sum over a mesh of 4 ranks: the sum's partial result
/// is all-reduced (a redistribution).
const char *kSample = R"(
func.func @f(%x: !dtensor.tensor<8x16xf32, #dtensor.mesh<[4]>, [S(0)]>,
             %w: !dtensor.tensor<16x8xf32, #dtensor.mesh<[4]>, [R]>)
    -> !dtensor.tensor<f32, #dtensor.mesh<[4]>, [R]> {
  %0 = dtensor.matmul %x, %w : (!dtensor.tensor<8x16xf32, #dtensor.mesh<[4]>, [S(0)]>, !dtensor.tensor<16x8xf32, #dtensor.mesh<[4]>, [R]>) -> !dtensor.tensor<8x8xf32, #dtensor.mesh<[4]>, [S(0)]>
  %1 = dtensor.relu %0 : (!dtensor.tensor<8x8xf32, #dtensor.mesh<[4]>, [S(0)]>) -> !dtensor.tensor<8x8xf32, #dtensor.mesh<[4]>, [S(0)]>
  %2 = dtensor.sum %1 dims = [0, 1] : (!dtensor.tensor<8x8xf32, #dtensor.mesh<[4]>, [S(0)]>) -> !dtensor.tensor<f32, #dtensor.mesh<[4]>, [R]>
  return %2 : !dtensor.tensor<f32, #dtensor.mesh<[4]>, [R]>
})";

std::vector<std::string> verifyPhases(const CompileResult &result) {
  std::vector<std::string> phases;
  for (const auto &[name, seconds] : result.timings)
    if (name.rfind("verify", 0) == 0)
      phases.push_back(name);
  return phases;
}

/// The same programs (maps compared as maps: their encoding's order is not
/// fixed).
bool samePrograms(const CompileResult &a, const CompileResult &b) {
  if (a.functions.size() != b.functions.size())
    return false;
  for (size_t f = 0; f < a.functions.size(); ++f) {
    const auto &pa = a.functions[f].programs, &pb = b.functions[f].programs;
    if (pa.size() != pb.size())
      return false;
    for (size_t k = 0; k < pa.size(); ++k)
      if (!google::protobuf::util::MessageDifferencer::Equals(pa[k], pb[k]))
        return false;
  }
  return true;
}

TEST(StageVerification, EveryStageOnRequestTheLastOneOtherwise) {
  CompileOptions options;
  options.profile = true;
  options.fuseElementwise = false;
  CompileResult each, last;
  {
    VerifyStagesEnvironment env("1");
    EXPECT_TRUE(dtensor::verifyEachStageByDefault());
    each = compileModule(kSample, "sample.mlir", options);
  }
  {
    VerifyStagesEnvironment env("0");
    EXPECT_FALSE(dtensor::verifyEachStageByDefault());
    last = compileModule(kSample, "sample.mlir", options);
  }
  ASSERT_TRUE(each.ok) << each.error;
  ASSERT_TRUE(last.ok) << last.error;
  EXPECT_EQ(
      verifyPhases(each),
      (std::vector<std::string>{"verify (sharded)", "verify (redistributed)",
                                "verify (rank)"}));
  EXPECT_EQ(verifyPhases(last), (std::vector<std::string>{"verify (rank)"}));
  // Verifying changes nothing.
  ASSERT_EQ(each.functions.size(), 1u);
  EXPECT_FALSE(each.functions[0].programs.empty());
  EXPECT_TRUE(samePrograms(each, last));
}

#ifdef NDEBUG
TEST(StageVerification, ReleaseBuildsVerifyTheLastStageByDefault) {
  VerifyStagesEnvironment unset(nullptr);
  EXPECT_FALSE(dtensor::verifyEachStageByDefault());
}
#endif

TEST(StageVerification, AVerifyingBoundaryRejectsInvalidIr) {
  mlir::DialectRegistry registry;
  registry.insert<dtensor::DTensorDialect, rank::RankDialect,
                  mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::string diagnostics;
  ctx.getDiagEngine().registerHandler(
      [&](mlir::Diagnostic &d) { diagnostics += d.str() + "\n"; });
  const char *text = R"(
    func.func @f(%x: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(0)]>)
        -> !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(0)]> {
      %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(0)]>) -> !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(0)]>
      return %0 : !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(0)]>
    })";
  for (bool verify : {true, false}) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
    ASSERT_TRUE(module);
    // Invalid IR, as a broken pass could leave it: a block without its
    // terminator.
    auto fn = *module->getOps<mlir::func::FuncOp>().begin();
    fn.getBody().front().getTerminator()->erase();
    mlir::PassManager pm(&ctx);
    pm.enableVerifier(false);
    pm.addPass(dtensor::createStageBoundary(dtensor::kStageSharded, verify));
    diagnostics.clear();
    bool ok = mlir::succeeded(pm.run(*module));
    EXPECT_EQ(ok, !verify) << diagnostics;
    if (verify)
      EXPECT_NE(diagnostics.find("terminator"), std::string::npos)
          << diagnostics;
  }
}

} // namespace
