//===- PlanBuffers.cpp - --rank-plan-buffers ------------------------------===//
//
// Places every temporary of a class function in one per-rank arena
// (Passes.td). The live ranges and the packing are include/dtorch/
// BufferPlan.h's, which the runtime's validator applies again.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "dtorch/BufferPlan.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_PLANBUFFERS
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;

namespace {

/// Bytes of a ranked tensor (an i1 element takes a byte), or -1.
int64_t tensorBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return -1;
  Type et = t.getElementType();
  int64_t width = et.isIntOrFloat() ? et.getIntOrFloatBitWidth() : 0;
  if (width == 0)
    return -1;
  int64_t elementBytes = width == 1 ? 1 : width / 8;
  return t.getNumElements() * elementBytes;
}

struct PlanBuffersPass
    : public dtorch::dtensor::impl::PlanBuffersBase<PlanBuffersPass> {
  using PlanBuffersBase::PlanBuffersBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    namespace rank = dtorch::rank;
    namespace bp = dtorch::bufplan;
    if (!fn.getBody().hasOneBlock())
      return;
    Block &body = fn.getBody().front();
    // Only functions of rank ops (after SPMD lowering) are planned.
    for (Operation &op : body)
      if (!isa<func::ReturnOp>(op) &&
          !(op.getDialect() && isa<rank::RankDialect>(op.getDialect())))
        return;

    // Values returned by the function keep their own storage.
    llvm::DenseSet<Value> returned;
    if (auto ret = dyn_cast<func::ReturnOp>(body.getTerminator()))
      returned.insert(ret.getOperands().begin(), ret.getOperands().end());
    // With result views, so does the temporary a returned reshape reads:
    // the host executor then binds the result as a view of it (its storage
    // becomes the result's) instead of copying it out of the arena.
    llvm::DenseSet<Value> ownStorage = returned;
    if (resultViews)
      for (Operation &op : body) {
        auto kernel = dyn_cast<rank::KernelOp>(op);
        if (kernel && op.getNumOperands() == 1 && op.getNumResults() == 1 &&
            bp::viewKernel(kernel.getKernel()) &&
            returned.contains(op.getResult(0)) &&
            op.getOperand(0).getDefiningOp() &&
            tensorBytes(op.getOperand(0).getType()) ==
                tensorBytes(op.getResult(0).getType()))
          ownStorage.insert(op.getOperand(0));
      }

    // Sized once: a buffer per argument and (mostly) one per op.
    size_t numOps = body.getOperations().size();
    size_t numBuffers = fn.getNumArguments() + numOps;
    llvm::DenseMap<Value, int> bufferOf(numBuffers);
    std::vector<int64_t> bytes;
    bytes.reserve(numBuffers);
    auto addBuffer = [&](Value v, bool ownStorage) {
      bufferOf[v] = static_cast<int>(bytes.size());
      int64_t size = tensorBytes(v.getType());
      bytes.push_back(ownStorage || size < 0 ? -1 : size);
    };
    for (BlockArgument arg : fn.getArguments())
      addBuffer(arg, /*ownStorage=*/true);

    // The step writing each buffer (-1: an argument).
    std::vector<int> producerOf(bytes.size(), -1);
    producerOf.reserve(numBuffers);
    std::vector<bp::Step> steps;
    steps.reserve(numOps);
    std::vector<Operation *> stepOps;
    stepOps.reserve(numOps);
    std::vector<bp::InPlaceCandidate> candidates;
    // Reshapes of a planned temporary into a planned temporary: views.
    std::vector<bp::ViewPair> viewPairs;
    for (Operation &op : body) {
      if (isa<func::ReturnOp>(op))
        continue;
      if (op.getDiscardableAttr(rank::kArenaOffsetAttrName))
        op.removeDiscardableAttr(rank::kArenaOffsetAttrName);
      bp::Step step;
      auto kernel = dyn_cast<rank::KernelOp>(op);
      step.stream = rank::runsOnComputeStream(&op) ? 0 : 1;
      int index = static_cast<int>(steps.size());
      for (Value v : op.getOperands()) {
        step.reads.push_back(bufferOf.lookup(v));
        // The emitter makes a step wait for a value made on the other
        // stream (an event); the same order is assumed here.
        int producer = producerOf[step.reads.back()];
        if (producer >= 0 && steps[producer].stream != step.stream)
          step.waitsOn.push_back(producer);
      }
      for (Value r : op.getResults()) {
        addBuffer(r, ownStorage.contains(r));
        step.writes.push_back(static_cast<int>(bytes.size()) - 1);
        producerOf.push_back(index);
      }
      if (views && kernel && op.getNumResults() == 1 &&
          op.getNumOperands() == 1 && bp::viewKernel(kernel.getKernel()) &&
          op.getOperand(0).getDefiningOp()) {
        int source = bufferOf.lookup(op.getOperand(0));
        int result = static_cast<int>(bytes.size()) - 1;
        if (bytes[source] >= 0 && bytes[result] == bytes[source])
          viewPairs.push_back({source, result});
      }
      if (kernel && op.getNumResults() == 1 &&
          bp::inPlaceKernel(kernel.getKernel()))
        for (Value v : op.getOperands())
          if (v.getDefiningOp())
            candidates.push_back(
                {index, bufferOf.lookup(v), bufferOf.lookup(op.getResult(0))});
      steps.push_back(std::move(step));
      stepOps.push_back(&op);
    }

    bp::StepOrder order(steps, /*numStreams=*/2);
    bp::Liveness live =
        bp::computeLiveness(steps, order, static_cast<int>(bytes.size()));
    std::vector<int> viewGroup;
    if (!viewPairs.empty())
      viewGroup = bp::viewAliases(live, order, viewPairs);
    bp::ArenaPlan plan =
        bp::planArena(bytes, live, order, candidates, viewGroup);

    Builder b(fn.getContext());
    StringAttr offsetName = b.getStringAttr(rank::kArenaOffsetAttrName);
    int64_t ownBytes = 0, planned = 0;
    for (Operation *op : stepOps) {
      SmallVector<int64_t> offsets;
      for (Value r : op->getResults()) {
        int64_t offset = plan.offsets[bufferOf.lookup(r)];
        offsets.push_back(offset);
        if (offset >= 0)
          ++planned;
        else
          ownBytes += std::max<int64_t>(tensorBytes(r.getType()), 0);
      }
      // One result: an i64; several (a rank.fused): one entry per result.
      if (offsets.size() == 1 && offsets[0] >= 0)
        op->setDiscardableAttr(offsetName, b.getI64IntegerAttr(offsets[0]));
      else if (offsets.size() > 1 &&
               llvm::any_of(offsets, [](int64_t o) { return o >= 0; }))
        op->setDiscardableAttr(offsetName, b.getDenseI64ArrayAttr(offsets));
    }
    fn->setAttr(rank::kArenaBytesAttrName,
                b.getI64IntegerAttr(plan.arenaBytes));
    if (report) {
      int64_t unplanned = 0;
      for (int64_t size : bytes)
        unplanned += size > 0 ? bp::alignUp(size) : 0;
      fn.emitRemark() << "arena " << plan.arenaBytes << " bytes for " << planned
                      << " temporaries (" << unplanned
                      << " bytes without planning, " << plan.inPlace
                      << " in place, " << plan.views << " views); results "
                      << ownBytes << " bytes";
    }
  }
};

} // namespace
