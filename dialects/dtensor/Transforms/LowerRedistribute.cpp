//===- LowerRedistribute.cpp - --dtensor-lower-redistribute --------------===//
//
// Turns each redistribute into the per-axis steps of planRedistribute. A
// regather's steps keep its `dtorch.regather` attribute.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "dtorch/Redistribute.h"
#include "mlir/IR/Builders.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_LOWERREDISTRIBUTE
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch;
using namespace dtorch::dtensor;

namespace {

Value buildStep(OpBuilder &b, Location loc, const RedistributeStep &step,
                DTensorType type, Value input) {
  using K = RedistributeStep::Kind;
  IntegerAttr axis = b.getI64IntegerAttr(step.axis);
  switch (step.kind) {
  case K::AllReduce:
    return AllReduceOp::create(b, loc, type, input, axis);
  case K::ReduceScatter:
    return ReduceScatterOp::create(b, loc, type, input, axis);
  case K::AllGather:
    return AllGatherOp::create(b, loc, type, input, axis);
  case K::AllToAll:
    return AllToAllOp::create(b, loc, type, input, axis);
  case K::LocalSlice:
    return LocalSliceOp::create(b, loc, type, input, axis);
  case K::ToPartial:
    return ToPartialOp::create(b, loc, type, input, axis);
  }
  llvm_unreachable("unknown redistribute step");
}

struct LowerRedistributePass
    : public dtorch::dtensor::impl::LowerRedistributeBase<
          LowerRedistributePass> {
  void runOnOperation() override {
    SmallVector<RedistributeOp> ops;
    getOperation().walk([&](RedistributeOp op) { ops.push_back(op); });
    for (RedistributeOp op : ops) {
      DTensorType src = op.getInput().getType();
      OpBuilder b(op);
      Value v = op.getInput();
      std::vector<int64_t> shape(src.getShape().begin(), src.getShape().end());
      ArrayRef<int64_t> meshDims = src.getMesh().getShape();
      std::vector<int64_t> mesh(meshDims.begin(), meshDims.end());
      for (const RedistributeStep &step :
           planRedistribute(shape, mesh, src.getLayout(),
                            op.getResult().getType().getLayout())) {
        v = buildStep(b, op.getLoc(), step, src.withPlacements(step.after), v);
        copyRegatherAttr(op, v.getDefiningOp());
      }
      op.getResult().replaceAllUsesWith(v);
      op->erase();
    }
  }
};

} // namespace
