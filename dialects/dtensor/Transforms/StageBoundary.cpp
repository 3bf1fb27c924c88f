//===- StageBoundary.cpp - --dtensor-stage-boundary ----------------------===//
//
// Ends a stage of the dtensor-to-rank pipeline: verifies the module and
// changes nothing (Passes.td).
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"
#include "dtensor/Transforms/StageVerification.h"

#include "mlir/IR/Verifier.h"

#include <cstdlib>
#include <string>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_STAGEBOUNDARY
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;

namespace {

struct StageBoundaryPass
    : public dtorch::dtensor::impl::StageBoundaryBase<StageBoundaryPass> {
  using StageBoundaryBase::StageBoundaryBase;
  void runOnOperation() override {
    if (verifies && failed(verify(getOperation())))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
  StringRef stageName() const { return stage; }
  /// Off only when made by createStageBoundary(stage, false).
  bool verifies = true;
};

} // namespace

std::unique_ptr<Pass> dtorch::dtensor::createStageBoundary(StringRef stage) {
  return createStageBoundary(StageBoundaryOptions{stage.str()});
}

std::unique_ptr<Pass> dtorch::dtensor::createStageBoundary(StringRef stage,
                                                           bool verify) {
  auto pass =
      std::make_unique<StageBoundaryPass>(StageBoundaryOptions{stage.str()});
  pass->verifies = verify;
  return pass;
}

bool dtorch::dtensor::stageBoundaryVerifies(const Pass *pass) {
  return pass->getTypeID() == TypeID::get<StageBoundaryPass>() &&
         static_cast<const StageBoundaryPass *>(pass)->verifies;
}

bool dtorch::dtensor::verifyEachStageByDefault() {
  const char *value = std::getenv("DTORCH_VERIFY_STAGES");
  if (value && *value)
    return std::string(value) != "0";
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

std::optional<StringRef> dtorch::dtensor::stageBoundaryName(const Pass *pass) {
  if (pass->getTypeID() != TypeID::get<StageBoundaryPass>())
    return std::nullopt;
  return static_cast<const StageBoundaryPass *>(pass)->stageName();
}
