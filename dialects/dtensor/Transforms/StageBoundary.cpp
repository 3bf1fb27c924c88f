//===- StageBoundary.cpp - --dtensor-stage-boundary ----------------------===//
//
// Ends a stage of the dtensor-to-rank pipeline: verifies the module and
// changes nothing (Passes.td).
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Verifier.h"

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
    if (failed(verify(getOperation())))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
  StringRef stageName() const { return stage; }
};

} // namespace

std::unique_ptr<Pass> dtorch::dtensor::createStageBoundary(StringRef stage) {
  return createStageBoundary(StageBoundaryOptions{stage.str()});
}

std::optional<StringRef> dtorch::dtensor::stageBoundaryName(const Pass *pass) {
  if (pass->getTypeID() != TypeID::get<StageBoundaryPass>())
    return std::nullopt;
  return static_cast<const StageBoundaryPass *>(pass)->stageName();
}
