//===- ScheduleCollectives.cpp - --rank-schedule-collectives -------------===//
//
// Places the collectives of rank-dialect class programs so that they overlap
// compute: each is issued as soon as its operands exist (with a bound on the
// bytes of all_gathers issued ahead of their consumers), and consecutive
// all_reduces of one axis, reduction and element type are bucketed into one
// flat buffer (Passes.td).
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVES
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;

namespace {

bool isCollective(Operation *op) {
  return op->getDialect() && isa<dtorch::rank::RankDialect>(op->getDialect()) &&
         !dtorch::rank::runsOnComputeStream(op) &&
         !isa<dtorch::rank::YieldOp>(op);
}

int64_t bytesOf(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return -1;
  unsigned bits = t.getElementType().getIntOrFloatBitWidth();
  return t.getNumElements() * (bits == 1 ? 1 : bits / 8);
}

/// The later of two ops of one block (nullptr: before the first op).
Operation *later(Operation *a, Operation *b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return a->isBeforeInBlock(b) ? b : a;
}

/// Moves `op` right after `after` (nullptr: to the block's start) when
/// that is earlier than where it is; whether it moved.
bool placeAfter(Operation *op, Operation *after, Block &body) {
  if (!after) {
    if (&body.front() == op)
      return false;
    op->moveBefore(&body.front());
    return true;
  }
  if (after->getNextNode() == op || !after->isBeforeInBlock(op))
    return false;
  op->moveAfter(after);
  return true;
}

/// The first user of `op`'s results in its block (the terminator when that
/// is the only one), or nullptr when it has none.
Operation *firstUser(Operation *op) {
  Operation *first = nullptr;
  for (Operation *user : op->getUsers()) {
    Operation *inBlock = op->getBlock()->findAncestorOpInBlock(*user);
    if (inBlock && (!first || inBlock->isBeforeInBlock(first)))
      first = inBlock;
  }
  return first;
}

// ---- early issue -------------------------------------------------------

class EarlyIssue {
public:
  EarlyIssue(Block &body, int64_t prefetchBytes)
      : body(body), prefetchBytes(prefetchBytes) {
    // waitPoint[op]: the latest first consumer (in the original order) of
    // the collectives whose results `op` needs, directly or not: compute
    // waits for them there already, so `op` may run anywhere after it
    // without making the compute stream wait earlier.
    llvm::DenseMap<Operation *, size_t> position;
    for (Operation &op : body)
      position[&op] = position.size();
    auto latest = [&](Operation *a, Operation *b) {
      if (!a)
        return b;
      if (!b)
        return a;
      return position.lookup(a) < position.lookup(b) ? b : a;
    };
    for (Operation &op : body) {
      Operation *point = nullptr;
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || def->getBlock() != &body)
          continue;
        point = latest(point, isCollective(def) ? firstUser(def)
                                                : waitPoint.lookup(def));
      }
      if (point)
        waitPoint[&op] = point;
    }
  }

  /// With `keepOrder`, collectives keep their relative order; without, each
  /// goes wherever its operands allow (ties keep the original order).
  void run(bool keepOrder) {
    SmallVector<Operation *> collectives;
    for (Operation &op : body)
      if (isCollective(&op))
        collectives.push_back(&op);
    Operation *previous = nullptr;
    for (Operation *c : collectives) {
      Operation *bound = keepOrder ? previous : nullptr;
      if (isa<dtorch::rank::AllGatherOp>(c))
        bound = later(bound, prefetchBound(c, bound));
      hoist(c, bound);
      if (isa<dtorch::rank::AllGatherOp>(c))
        gathers.push_back(c);
      previous = c;
    }
  }

private:
  /// Where an all_gather may go at the earliest so that the gathers before
  /// it whose values are still unconsumed there, and it, hold at most
  /// prefetchBytes: after the first consumer of enough of the oldest ones.
  Operation *prefetchBound(Operation *gather, Operation *bound) {
    // Where it would go without the bound (its cone may still move up).
    Operation *at = bound;
    for (Value v : gather->getOperands())
      if (Operation *def = v.getDefiningOp(); def && def->getBlock() == &body)
        at = later(at, def);
    SmallVector<std::pair<Operation *, int64_t>> pending;
    int64_t inFlight =
        std::max<int64_t>(0, bytesOf(gather->getResultTypes()[0]));
    for (Operation *g : gathers) {
      Operation *user = firstUser(g);
      if (user && (!at || at->isBeforeInBlock(user))) {
        int64_t bytes = std::max<int64_t>(0, bytesOf(g->getResultTypes()[0]));
        pending.push_back({user, bytes});
        inFlight += bytes;
      }
    }
    llvm::sort(pending, [](const auto &a, const auto &b) {
      return a.first->isBeforeInBlock(b.first);
    });
    Operation *result = nullptr;
    for (auto &[user, bytes] : pending) {
      if (inFlight <= prefetchBytes)
        break;
      inFlight -= bytes;
      result = user;
    }
    return result;
  }

  /// Moves `op` to right after the latest of `bound`, its wait point and
  /// its operands' producers, first moving up the pure kernels among those
  /// producers. Each op is visited once in the whole run.
  void hoist(Operation *op, Operation *bound) {
    if (!visited.insert(op).second)
      return;
    Operation *after = bound;
    if (dtorch::rank::runsOnComputeStream(op))
      after = later(after, waitPoint.lookup(op));
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != &body)
        continue;
      // A kernel goes as early as its own operands allow, whatever the
      // bound; each op is hoisted once (its operands were before it).
      if (dtorch::rank::runsOnComputeStream(def))
        hoist(def, nullptr);
      after = later(after, def);
    }
    // Ties keep the original order: skip over the ops placed at the same
    // point before, and the collectives placed right after those.
    Operation *anchor = after;
    llvm::SmallPtrSet<Operation *, 8> tied;
    tied.insert(anchor);
    Operation *next = after ? after->getNextNode() : &body.front();
    while (next && next != op) {
      auto it = placedAt.find(next);
      if (it == placedAt.end() ||
          !(it->second == anchor ||
            (isCollective(next) && tied.contains(it->second))))
        break;
      tied.insert(next);
      after = next;
      next = next->getNextNode();
    }
    placeAfter(op, after, body);
    if (after ? after->getNextNode() == op : &body.front() == op)
      placedAt[op] = anchor;
  }

  Block &body;
  int64_t prefetchBytes;
  llvm::DenseMap<Operation *, Operation *> waitPoint;
  llvm::DenseSet<Operation *> visited;
  // The ops hoisted to their place, with the op they were ready after
  // (nullptr: the start).
  llvm::DenseMap<Operation *, Operation *> placedAt;
  SmallVector<Operation *> gathers;
};

// ---- bucketing ---------------------------------------------------------

struct BucketKey {
  int64_t axis;
  std::string reduce;
  Type element;
  bool operator==(const BucketKey &o) const {
    return axis == o.axis && reduce == o.reduce && element == o.element;
  }
};

BucketKey keyOf(dtorch::rank::AllReduceOp op) {
  return {static_cast<int64_t>(op.getAxis()), op.getReduce().str(),
          cast<RankedTensorType>(op.getInput().getType()).getElementType()};
}

/// Whether every use of the bucket's members comes after `last`.
bool usesAfter(ArrayRef<Operation *> members, Operation *last) {
  for (Operation *m : members)
    if (Operation *user = firstUser(m); user && !last->isBeforeInBlock(user))
      return false;
  return true;
}

/// Replaces `members` (all_reduces of one function, in order) by one
/// all_reduce of their packed inputs where the last one was.
void rewriteBucket(ArrayRef<Operation *> members) {
  auto last = cast<dtorch::rank::AllReduceOp>(members.back());
  OpBuilder b(last);
  SmallVector<Value> inputs;
  SmallVector<Location> locs;
  int64_t total = 0;
  for (Operation *m : members) {
    auto ar = cast<dtorch::rank::AllReduceOp>(m);
    inputs.push_back(ar.getInput());
    locs.push_back(ar.getLoc());
    total += cast<RankedTensorType>(ar.getInput().getType()).getNumElements();
  }
  Location loc = b.getFusedLoc(locs);
  auto flatType = RankedTensorType::get({total}, keyOf(last).element);
  auto pack = dtorch::rank::KernelOp::create(
      b, loc, flatType, b.getStringAttr("bucket_pack"), inputs);
  auto reduced = dtorch::rank::AllReduceOp::create(
      b, loc, flatType, pack.getResult(), last.getAxisAttr(),
      last.getReduceAttr());
  int64_t offset = 0;
  for (Operation *m : members) {
    auto ar = cast<dtorch::rank::AllReduceOp>(m);
    Operation *user = firstUser(m);
    Operation *at = user ? user : m->getBlock()->getTerminator();
    b.setInsertionPoint(at);
    auto piece = dtorch::rank::KernelOp::create(
        b, ar.getLoc(), ar.getResult().getType(),
        b.getStringAttr("bucket_unpack"), ValueRange{reduced.getResult()});
    piece->setAttr("offset", b.getI64IntegerAttr(offset));
    offset += cast<RankedTensorType>(ar.getInput().getType()).getNumElements();
    ar.getResult().replaceAllUsesWith(piece.getResult());
    ar->erase();
  }
}

/// Buckets the all_reduces of the class functions `fns` of one segment
/// with the same decisions in each.
void bucketAllReduces(ArrayRef<func::FuncOp> fns, int64_t capBytes,
                      int64_t floorBytes, int64_t minBuckets) {
  if (capBytes <= 0)
    return;
  SmallVector<SmallVector<dtorch::rank::AllReduceOp>> lists;
  for (func::FuncOp fn : fns) {
    auto &list = lists.emplace_back();
    fn.getBody().front().walk(
        [&](dtorch::rank::AllReduceOp op) { list.push_back(op); });
  }
  size_t n = lists.front().size();
  for (auto &list : lists)
    if (list.size() != n)
      return;
  // Bytes of each member: the largest over the classes; -1 when a member
  // cannot be bucketed (dynamic shape, keys that differ between classes).
  SmallVector<int64_t> bytes(n, 0);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    BucketKey key = keyOf(lists.front()[i]);
    for (auto &list : lists) {
      int64_t b = bytesOf(list[i].getInput().getType());
      if (b < 0 || !(keyOf(list[i]) == key)) {
        bytes[i] = -1;
        break;
      }
      bytes[i] = std::max(bytes[i], b);
    }
    if (bytes[i] > 0)
      total += bytes[i];
  }
  int64_t cap = capBytes;
  if (minBuckets > 1)
    cap = std::min(cap,
                   std::max(floorBytes, (total + minBuckets - 1) / minBuckets));

  // Decide the buckets on indices, then rewrite each function.
  SmallVector<SmallVector<size_t>> buckets;
  SmallVector<size_t> current;
  int64_t currentBytes = 0;
  auto close = [&] {
    if (current.size() > 1)
      buckets.push_back(current);
    current.clear();
    currentBytes = 0;
  };
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] < 0) {
      close();
      continue;
    }
    bool fits =
        !current.empty() &&
        keyOf(lists.front()[current.front()]) == keyOf(lists.front()[i]) &&
        currentBytes + bytes[i] <= cap;
    if (fits)
      for (auto &list : lists) {
        SmallVector<Operation *> members;
        for (size_t j : current)
          members.push_back(list[j]);
        fits &= usesAfter(members, list[i]);
      }
    if (!fits)
      close();
    current.push_back(i);
    currentBytes += bytes[i];
  }
  close();
  for (auto &list : lists)
    for (auto &bucket : buckets) {
      SmallVector<Operation *> members;
      for (size_t j : bucket)
        members.push_back(list[j]);
      rewriteBucket(members);
    }
}

/// The segment a class function belongs to: its name without `_class<k>`.
StringRef segmentOf(func::FuncOp fn) {
  StringRef name = fn.getSymName();
  size_t at = name.rfind("_class");
  if (at == StringRef::npos)
    return name;
  StringRef digits = name.drop_front(at + 6);
  if (digits.empty() ||
      !llvm::all_of(digits, [](char c) { return c >= '0' && c <= '9'; }))
    return name;
  return name.take_front(at);
}

/// Whether the class functions issue their collectives in the same order
/// (by original index).
bool sameCollectiveOrder(
    ArrayRef<func::FuncOp> fns,
    ArrayRef<llvm::DenseMap<Operation *, unsigned>> indices) {
  SmallVector<SmallVector<unsigned>> orders;
  for (size_t f = 0; f < fns.size(); ++f) {
    auto &order = orders.emplace_back();
    func::FuncOp fn = fns[f];
    for (Operation &op : fn.getBody().front())
      if (isCollective(&op))
        order.push_back(indices[f].lookup(&op));
  }
  return llvm::all_of(orders, [&](const auto &o) { return o == orders[0]; });
}

struct ScheduleCollectivesPass
    : public dtorch::dtensor::impl::ScheduleCollectivesBase<
          ScheduleCollectivesPass> {
  using ScheduleCollectivesBase::ScheduleCollectivesBase;
  void runOnOperation() override {
    llvm::MapVector<StringRef, SmallVector<func::FuncOp>> segments;
    for (func::FuncOp fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal() || !fn.getBody().hasOneBlock())
        continue;
      bool any = false;
      fn.getBody().front().walk(
          [&](Operation *op) { any |= isCollective(op); });
      if (!any)
        continue;
      segments[segmentOf(fn)].push_back(fn);
    }
    for (auto &[name, fns] : segments) {
      // Collectives go wherever their operands allow when every class
      // function of the segment ends up with them in the same order (the
      // ranks of a group must issue them alike); otherwise they keep the
      // order they had.
      SmallVector<func::FuncOp> saved;
      SmallVector<llvm::DenseMap<Operation *, unsigned>> indices;
      for (func::FuncOp fn : fns) {
        auto &index = indices.emplace_back();
        for (Operation &op : fn.getBody().front())
          if (isCollective(&op))
            index[&op] = index.size();
        saved.push_back(fns.size() > 1 ? fn.clone() : func::FuncOp());
        EarlyIssue(fn.getBody().front(), prefetchBytes).run(false);
      }
      if (!sameCollectiveOrder(fns, indices))
        for (size_t f = 0; f < fns.size(); ++f) {
          fns[f].getBody().takeBody(saved[f].getBody());
          EarlyIssue(fns[f].getBody().front(), prefetchBytes).run(true);
        }
      for (func::FuncOp copy : saved)
        if (copy)
          copy.erase();
      bucketAllReduces(fns, bucketCapBytes, bucketFloorBytes, minBuckets);
      for (func::FuncOp fn : fns)
        fn->setAttr(dtorch::rank::kScheduledAttrName,
                    UnitAttr::get(fn.getContext()));
    }
  }
};

} // namespace
