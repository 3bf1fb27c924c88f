//===- RematerializeBroadcasts.cpp - --rank-rematerialize-broadcasts -----===//
//
// Gives each later fusible reader of a constant (`full`, `iota`) or of a
// `broadcast_to` its own copy, placed right before it, so that
// --rank-fuse-elementwise computes the value inside the reader's group
// instead of storing the whole tensor as a result of the first group and
// loading it again.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"
#include "rank/IR/FusibleKernels.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_REMATERIALIZEBROADCASTS
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch;

namespace {

/// A kernel whose value costs nothing to make again inside a fused group:
/// a `full`, an `iota` or a `broadcast_to` that the fusion pass takes in.
bool isCheapProducer(Operation *op) {
  auto kernel = dyn_cast<rank::KernelOp>(op);
  if (!kernel || op->getNumResults() != 1)
    return false;
  StringRef name = kernel.getKernel();
  if (name != "full" && name != "iota" && name != "broadcast_to")
    return false;
  const rank::FusibleKernel *entry = rank::lookupFusibleKernel(op);
  return entry && (entry->kind == rank::FusibleKind::Creation ||
                   entry->kind == rank::FusibleKind::Broadcast);
}

/// A reader that may land in a fused group: a fusible kernel that computes
/// (not itself a constant or a broadcast), or a float reduction.
bool isFusibleReader(Operation *op) {
  auto kernel = dyn_cast<rank::KernelOp>(op);
  if (!kernel)
    return false;
  StringRef name = kernel.getKernel();
  if (name == "sum" || name == "max" || name == "min")
    return true;
  const rank::FusibleKernel *entry = rank::lookupFusibleKernel(op);
  return entry && entry->kind != rank::FusibleKind::Creation &&
         entry->kind != rank::FusibleKind::Broadcast;
}

struct RematerializeBroadcastsPass
    : dtensor::impl::RematerializeBroadcastsBase<RematerializeBroadcastsPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn.getBody().hasOneBlock() || fn->hasAttr(rank::kArenaBytesAttrName))
      return;
    Block &block = fn.getBody().front();
    SmallVector<Operation *> producers;
    for (Operation &op : block)
      if (isCheapProducer(&op))
        producers.push_back(&op);
    for (Operation *producer : producers) {
      Value value = producer->getResult(0);
      // Readers in this block, in program order; the first keeps the
      // original.
      SmallVector<Operation *> readers;
      for (Operation *user : value.getUsers())
        if (user->getBlock() == &block && !llvm::is_contained(readers, user))
          readers.push_back(user);
      if (readers.size() < 2)
        continue;
      llvm::sort(readers, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
      for (Operation *reader : llvm::drop_begin(readers)) {
        if (!isFusibleReader(reader))
          continue;
        OpBuilder b(reader);
        Operation *copy = b.clone(*producer);
        reader->replaceUsesOfWith(value, copy->getResult(0));
      }
    }
  }
};

} // namespace
