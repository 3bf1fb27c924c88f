//===- PrintShardingRules.cpp - --dtensor-print-sharding-rules -----------===//
#include "dtensor/Transforms/Passes.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_PRINTSHARDINGRULES
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch::dtensor;

namespace {
struct PrintShardingRulesPass
    : public dtorch::dtensor::impl::PrintShardingRulesBase<
          PrintShardingRulesPass> {
  void runOnOperation() override {
    getOperation().walk([](ShardingRuleOpInterface op) {
      op->emitRemark() << "sharding rule: " << op.getShardingRule().str();
    });
    markAllAnalysesPreserved();
  }
};
} // namespace
