//===- MarkDonations.cpp - --rank-mark-donations --------------------------===//
//
// Pairs results of a class function with arguments whose storage they may
// take over when the caller donates the argument (Passes.td). The live
// ranges are include/dtorch/BufferPlan.h's, as for --rank-plan-buffers.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "rank/IR/FusibleKernels.h"

#include "dtorch/BufferPlan.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_MARKDONATIONS
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;

namespace {

namespace rank = dtorch::rank;
namespace bp = dtorch::bufplan;

/// Bytes of a ranked tensor (an i1 element takes a byte), or -1.
int64_t valueBytes(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return -1;
  Type et = t.getElementType();
  int64_t width = et.isIntOrFloat() ? et.getIntOrFloatBitWidth() : 0;
  if (width == 0)
    return -1;
  return t.getNumElements() * (width == 1 ? 1 : width / 8);
}

/// True when `writer` reads `input` only at the index of the element of
/// `result` it writes (and before writing it), so `result` may live in
/// `input`'s memory: an elementwise registry kernel (BufferPlan.h's
/// inPlaceKernel), or a generated group of elementwise kernels without row
/// reductions that reads `input` at the group's shape, or the multi-tensor
/// optimizer update reading `input` in the group of the parameter `result`
/// belongs to.
bool writesElementwiseOver(Operation *writer, Value input, Value result) {
  auto inType = dyn_cast<RankedTensorType>(input.getType());
  auto outType = dyn_cast<RankedTensorType>(result.getType());
  if (!inType || !outType ||
      inType.getElementType() != outType.getElementType())
    return false;
  if (std::optional<rank::OptimizerGroups> g =
          rank::optimizerGroupsOf(writer)) {
    // Element j of parameter i's results is computed from element j of
    // parameter i's group alone, read before it is written.
    if (inType != outType)
      return false;
    int64_t i = cast<OpResult>(result).getResultNumber() % g->numParams;
    for (int64_t k = 0; k < g->inputsPerParam; ++k)
      if (writer->getOperand(g->input(k, i)) == input)
        return true;
    return false;
  }
  if (auto kernel = dyn_cast<rank::KernelOp>(writer))
    return writer->getNumResults() == 1 &&
           bp::inPlaceKernel(kernel.getKernel());
  auto fused = dyn_cast<rank::FusedOp>(writer);
  if (!fused || inType != outType)
    return false;
  for (Operation &inner : fused.getBody().front().without_terminator()) {
    auto kernel = dyn_cast<rank::KernelOp>(inner);
    if (!kernel || inner.getNumResults() != 1)
      return false;
    Type et =
        cast<RankedTensorType>(inner.getResult(0).getType()).getElementType();
    if (!rank::lookupFusibleKernel(kernel.getKernel(), et))
      return false; // a row reduction reads whole rows before writing
  }
  return true;
}

/// The inputs of `fused` that its result `index` is computed from, in the
/// order a walk back from the yielded value reaches them.
SmallVector<Value> fusedInputsReadBy(rank::FusedOp fused, unsigned index) {
  Block &body = fused.getBody().front();
  SmallVector<Value> inputs;
  SmallVector<Value> queue{body.getTerminator()->getOperand(index)};
  llvm::DenseSet<Value> seen;
  for (size_t i = 0; i < queue.size(); ++i) {
    Value v = queue[i];
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      inputs.push_back(fused.getInputs()[arg.getArgNumber()]);
      continue;
    }
    if (Operation *def = v.getDefiningOp())
      queue.append(def->operand_begin(), def->operand_end());
  }
  return inputs;
}

struct MarkDonationsPass
    : public dtorch::dtensor::impl::MarkDonationsBase<MarkDonationsPass> {
  using MarkDonationsBase::MarkDonationsBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    fn->removeAttr(rank::kOutputDonorsAttrName);
    if (!fn.getBody().hasOneBlock() || fn.getNumArguments() == 0)
      return;
    Block &body = fn.getBody().front();
    auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
    if (!ret || ret.getNumOperands() == 0)
      return;
    for (Operation &op : body)
      if (!isa<func::ReturnOp>(op) &&
          !(op.getDialect() && isa<rank::RankDialect>(op.getDialect())))
        return; // only class functions of rank ops

    // Only when some result may have an argument's bytes is there anything
    // to pair (the cost of a cache miss stays low otherwise).
    llvm::DenseSet<int64_t> argumentSizes;
    for (BlockArgument arg : fn.getArguments())
      argumentSizes.insert(valueBytes(arg));
    if (llvm::none_of(ret.getOperands(), [&](Value v) {
          return !isa<BlockArgument>(v) &&
                 argumentSizes.contains(valueBytes(v));
        }))
      return;

    // Steps as the emitter orders the program's instructions, with the
    // waits of its events (a value made on the other stream): the order of
    // BufferPlan.h. Only the arguments' accesses matter here.
    std::vector<bp::Step> steps;
    llvm::DenseMap<Operation *, int> stepOf;
    std::vector<SmallVector<int, 2>> accessesOf(fn.getNumArguments());
    for (Operation &op : body.without_terminator()) {
      bp::Step step;
      step.stream = rank::runsOnComputeStream(&op) ? 0 : 1;
      int index = static_cast<int>(steps.size());
      for (Value v : op.getOperands()) {
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          auto &accesses = accessesOf[arg.getArgNumber()];
          if (accesses.empty() || accesses.back() != index)
            accesses.push_back(index);
          continue;
        }
        int producer = stepOf.lookup(v.getDefiningOp());
        if (steps[producer].stream != step.stream)
          step.waitsOn.push_back(producer);
      }
      stepOf[&op] = index;
      steps.push_back(std::move(step));
    }
    bp::StepOrder order(steps, /*numStreams=*/2);

    // Arguments that are returned as they are share their storage with a
    // result: neither donors nor takers.
    llvm::DenseSet<Value> returnedArgs;
    llvm::DenseMap<Value, int> timesReturned;
    for (Value v : ret.getOperands()) {
      ++timesReturned[v];
      if (isa<BlockArgument>(v))
        returnedArgs.insert(v);
    }

    // A donor may give its storage to `result` written by step `w` when
    // every access of it happens before w, or w writes elementwise over it
    // and every other access happens before w.
    auto mayTake = [&](Value result, BlockArgument arg) {
      if (returnedArgs.contains(arg) || valueBytes(arg) < 0 ||
          valueBytes(arg) != valueBytes(result))
        return false;
      Operation *writer = result.getDefiningOp();
      int w = stepOf.lookup(writer);
      bool readByWriter = llvm::is_contained(writer->getOperands(), arg);
      if (readByWriter && !writesElementwiseOver(writer, arg, result))
        return false;
      // Every other access of the argument happens before the write
      // (bufplan::inPlaceLegal).
      return llvm::all_of(accessesOf[arg.getArgNumber()], [&](int access) {
        return access == w || order.happensBefore(access, w);
      });
    };
    // Arguments that `result` is computed from, nearest first, within a
    // small budget of ops: the natural donors (a parameter for its update),
    // so the pairing holds when only some inputs are donated at run time.
    // Through a rank.fused, only the inputs that the yielded value reads.
    auto nearbyArguments = [&](Value result) {
      SmallVector<BlockArgument> found;
      SmallVector<Value> queue{result};
      llvm::DenseSet<Operation *> seen;
      constexpr size_t kBudget = 32;
      for (size_t i = 0; i < queue.size() && seen.size() < kBudget; ++i) {
        Operation *def = queue[i].getDefiningOp();
        if (!def || !seen.insert(def).second)
          continue;
        SmallVector<Value> operands;
        if (auto fused = dyn_cast<rank::FusedOp>(def)) {
          operands = fusedInputsReadBy(
              fused, cast<OpResult>(queue[i]).getResultNumber());
        } else if (std::optional<rank::OptimizerGroups> g =
                       rank::optimizerGroupsOf(def)) {
          // The input the result replaces, then the rest of its group.
          unsigned index = cast<OpResult>(queue[i]).getResultNumber();
          int64_t param = index % g->numParams;
          unsigned replaced = rank::replacedInputOf(def, index);
          operands.push_back(def->getOperand(replaced));
          for (int64_t k = 0; k < g->inputsPerParam; ++k)
            if (g->input(k, param) != replaced)
              operands.push_back(def->getOperand(g->input(k, param)));
        } else {
          operands.assign(def->operand_begin(), def->operand_end());
        }
        for (Value operand : operands) {
          if (auto arg = dyn_cast<BlockArgument>(operand)) {
            if (!llvm::is_contained(found, arg))
              found.push_back(arg);
          } else {
            queue.push_back(operand);
          }
        }
      }
      return found;
    };
    // Untaken arguments by byte size (the fallback's candidates).
    llvm::DenseMap<int64_t, SmallVector<BlockArgument>> argsOfSize;
    for (BlockArgument arg : fn.getArguments())
      argsOfSize[valueBytes(arg)].push_back(arg);

    SmallVector<int64_t> donors(ret.getNumOperands(), -1);
    std::vector<bool> taken(fn.getNumArguments(), false);
    bool any = false;
    for (unsigned index = 0; index < ret.getNumOperands(); ++index) {
      Value result = ret.getOperand(index);
      if (isa<BlockArgument>(result) || timesReturned[result] != 1 ||
          valueBytes(result) <= 0)
        continue;
      auto pick = [&](BlockArgument arg) {
        if (taken[arg.getArgNumber()] || !mayTake(result, arg))
          return false;
        taken[arg.getArgNumber()] = true;
        donors[index] = arg.getArgNumber();
        any = true;
        return true;
      };
      bool done = false;
      for (BlockArgument arg : nearbyArguments(result))
        if ((done = pick(arg)))
          break;
      if (!done && anyArgument)
        for (BlockArgument arg : argsOfSize[valueBytes(result)])
          if (pick(arg))
            break;
    }
    if (any)
      fn->setAttr(rank::kOutputDonorsAttrName,
                  DenseI64ArrayAttr::get(fn.getContext(), donors));
  }
};

} // namespace
