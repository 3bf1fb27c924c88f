// The record pool (dtorch/Client/RecordPool.h): freed blocks come back to
// the next allocation of their size, blocks freed on another thread return
// through the depot, and a TensorImpl, TensorStorage or GradRecord built in
// a reused block starts clean: nothing of the tensor that held the block
// before (shape, dtype, placements, autograd fields, view, storage flags)
// shows through.
#include "dtorch/Client/RecordPool.h"
#include "dtorch/Client/Session.h"

#include "SessionTestSupport.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dtorch::client {
namespace {

using test::InProcessSessionTest;
using test::values;

/// A size class no other object of the tests uses.
struct Odd {
  char bytes[400];
};

TEST(RecordPool, FreedBlocksComeBackToTheNextAllocationOfTheirSize) {
  if (!recordPoolEnabled())
    GTEST_SKIP() << "DTORCH_RECORD_POOL=0";
  PoolAllocator<Odd> alloc;
  Odd *a = alloc.allocate(1);
  alloc.deallocate(a, 1);
  pool::Stats before = pool::threadStats();
  Odd *b = alloc.allocate(1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(pool::threadStats().reused, before.reused + 1);
  alloc.deallocate(b, 1);
  // More than kMaxBlock bytes at once come from the heap.
  pool::Stats heap = pool::threadStats();
  Odd *many = alloc.allocate(3);
  EXPECT_EQ(pool::threadStats().fresh, heap.fresh);
  alloc.deallocate(many, 3);
  EXPECT_EQ(pool::threadStats().cached, heap.cached);
}

TEST(RecordPool, BlocksFreedOnAnotherThreadReturnThroughTheDepot) {
  if (!recordPoolEnabled())
    GTEST_SKIP() << "DTORCH_RECORD_POOL=0";
  struct Other {
    char bytes[368];
  };
  PoolAllocator<Other> alloc;
  std::vector<Other *> blocks;
  for (int i = 0; i < 300; ++i)
    blocks.push_back(alloc.allocate(1));
  std::thread([&] {
    for (Other *b : blocks)
      alloc.deallocate(b, 1);
  }).join(); // the thread's own list is freed at its exit
  pool::Stats before = pool::threadStats();
  std::vector<Other *> again;
  for (int i = 0; i < 128; ++i)
    again.push_back(alloc.allocate(1));
  pool::Stats after = pool::threadStats();
  EXPECT_GE(after.reused - before.reused, 128u);
  EXPECT_EQ(after.fresh, before.fresh);
  for (Other *b : again)
    alloc.deallocate(b, 1);
}

TEST_F(InProcessSessionTest, ATensorInAReusedBlockStartsClean) {
  auto grad = session->full({8}, 7, wire::F64, mesh, {Placement::shard(0)});
  const TensorImpl *xAddress = nullptr, *yAddress = nullptr;
  Handle oldId = 0;
  {
    Tensor x = session->full({8}, 2, wire::F64, mesh, {Placement::shard(0)});
    x->requiresGrad = true;
    Tensor y = session->binary("mul", x, x);
    ASSERT_TRUE(y->gradFn);
    y->grad = grad;
    y->retainsGrad = true;
    y->view = 3;
    xAddress = x.get();
    yAddress = y.get();
    oldId = y->id();
  }
  // The next tensor takes the block x or y left (the pool is last in,
  // first out).
  Tensor z =
      session->full({2, 2}, 5, wire::F32, mesh, {Placement::replicate()});
  if (recordPoolEnabled())
    EXPECT_TRUE(z.get() == xAddress || z.get() == yAddress);
  EXPECT_NE(z->id(), oldId);
  EXPECT_EQ(z->meta().shape, (Shape{2, 2}));
  EXPECT_EQ(z->meta().dtype, wire::F32);
  EXPECT_EQ(z->meta().placements, Placements{Placement::replicate()});
  EXPECT_FALSE(z->requiresGrad);
  EXPECT_FALSE(z->gradFn);
  EXPECT_FALSE(z->grad);
  EXPECT_FALSE(z->retainsGrad);
  EXPECT_EQ(z->view, -1);
  EXPECT_FALSE(z->storage()->meta);
  EXPECT_FALSE(z->storage()->materialized);
  rt::Tensor v = session->fetch(session->cast(z, wire::F64));
  EXPECT_EQ(values(v), (std::vector<double>{5, 5, 5, 5}));
}

TEST_F(InProcessSessionTest, AStorageInAReusedBlockStartsClean) {
  { // a meta tensor's storage: metadata only
    Tensor m = session->meta({4}, wire::F32, mesh, {Placement::shard(0)});
    ASSERT_TRUE(m->storage()->meta);
  }
  Tensor t = session->full({4}, 1, wire::F32, mesh, {Placement::shard(0)});
  EXPECT_FALSE(t->storage()->meta);
  EXPECT_FALSE(t->storage()->materialized);
  EXPECT_EQ(values(session->fetch(session->cast(t, wire::F64))),
            (std::vector<double>{1, 1, 1, 1}));
}

TEST_F(InProcessSessionTest, GradRecordsInReusedBlocksStartClean) {
  Tensor x = session->full({4}, 3, wire::F64, mesh, {Placement::shard(0)});
  x->requiresGrad = true;
  for (int round = 0; round < 3; ++round) {
    // A record with attributes and a scalar, released, then one without.
    {
      Tensor s = session->binaryScalar("add", x, 1.5, false);
      Tensor r = session->reduce("sum", s, {}, false);
      ASSERT_TRUE(r->gradFn);
      r->gradFn->released = true;
    }
    Tensor y = session->binary("mul", x, x);
    ASSERT_TRUE(y->gradFn);
    EXPECT_EQ(y->gradFn->op, "mul");
    EXPECT_TRUE(y->gradFn->attrs.empty());
    EXPECT_EQ(y->gradFn->scalarIndex, -1);
    EXPECT_FALSE(y->gradFn->released);
    ASSERT_EQ(y->gradFn->inputs.size(), 2u);
    EXPECT_EQ(y->gradFn->inputs[0], x);
  }
}

TEST_F(InProcessSessionTest, AnAliasInAReusedBlockKeepsOnlyTheValue) {
  Tensor x = session->full({4}, 2, wire::F64, mesh, {Placement::shard(0)});
  x->requiresGrad = true;
  x->view = 1;
  Tensor a = session->detach(x);
  EXPECT_EQ(a->id(), x->id());
  EXPECT_EQ(a->view, 1);
  EXPECT_FALSE(a->requiresGrad);
  EXPECT_FALSE(a->gradFn);
  EXPECT_EQ(values(session->fetch(a)), (std::vector<double>{2, 2, 2, 2}));
}

} // namespace
} // namespace dtorch::client
