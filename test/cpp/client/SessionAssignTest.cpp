// Session::assign, the in-place update of a symbolic tensor: the target
// names the value's storage (redistributed to the target's placements), a
// pending op that read the old value still sees it, old values are freed,
// and a loop of updates reuses one compiled program; meta tensors have no
// value until assigned; Session::rebind takes a value with its layout.
#include "SessionTestSupport.h"
#include "dtorch/Client/Errors.h"

#include <gtest/gtest.h>

#include <vector>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

using SessionAssign = test::InProcessSessionTest;

TEST_F(SessionAssign, TargetNamesTheValueInItsOwnLayout) {
  Tensor x = session->fromData(doubles({0, 1, 2, 3, 4, 5, 6, 7}), mesh,
                               {Placement::shard(0)});
  Tensor v = session->full({8}, 2.0, wire::F64, mesh, {Placement::replicate()});
  session->assign(x, v);
  EXPECT_EQ(x->meta().placements, Placements{Placement::shard(0)});
  EXPECT_EQ(v->meta().placements, Placements{Placement::replicate()});
  EXPECT_EQ(values(session->fetch(x)), std::vector<double>(8, 2.0));
  EXPECT_EQ(values(session->fetch(v)), std::vector<double>(8, 2.0));
  std::map<int, rt::Tensor> pieces = session->fetchLocal(x);
  EXPECT_EQ(pieces.at(3).numel(), 2);
}

TEST_F(SessionAssign, PendingReadersOfTheOldValueStillSeeIt) {
  Tensor x =
      session->fromData(doubles({1, 2, 3, 4}), mesh, {Placement::replicate()});
  Tensor y = session->unary("neg", x); // pending, reads x's old value
  session->assign(
      x, session->full({4}, 9.0, wire::F64, mesh, {Placement::replicate()}));
  EXPECT_EQ(values(session->fetch(y)), (std::vector<double>{-1, -2, -3, -4}));
  EXPECT_EQ(values(session->fetch(x)), std::vector<double>(4, 9.0));
}

TEST_F(SessionAssign, LoopOfUpdatesFreesOldValuesAndHitsTheCache) {
  Tensor x = session->fromData(doubles({1, 1, 1, 1, 1, 1, 1, 1}), mesh,
                               {Placement::shard(0)});
  std::vector<size_t> live, compiles;
  for (int step = 0; step < 5; ++step) {
    session->assign(x, session->binaryScalar("mul", x, 0.5, false));
    session->synchronize();
    live.push_back(session->liveTensors());
    compiles.push_back(session->compiles());
  }
  EXPECT_EQ(values(session->fetch(x)), std::vector<double>(8, 1.0 / 32));
  for (size_t i = 1; i < live.size(); ++i) {
    EXPECT_EQ(live[i], live[0]);
    EXPECT_EQ(compiles[i], compiles[0]);
  }
  EXPECT_EQ(live[0], 1u);
}

TEST_F(SessionAssign, MismatchesRaiseValueError) {
  Tensor x = session->full({4}, 0.0, wire::F64, mesh, {Placement::shard(0)});
  EXPECT_THROW(session->assign(x, session->full({5}, 0.0, wire::F64, mesh,
                                                {Placement::shard(0)})),
               ValueError);
  EXPECT_THROW(session->assign(x, session->full({4}, 0.0, wire::F32, mesh,
                                                {Placement::shard(0)})),
               ValueError);
  int other = session->addMesh({2}, {}, {}, "cpu");
  EXPECT_THROW(session->assign(x, session->full({4}, 0.0, wire::F64, other,
                                                {Placement::shard(0)})),
               ValueError);
}

TEST_F(SessionAssign, MetaTensorsHaveNoValueUntilAssigned) {
  Tensor m = session->meta({8}, wire::F64, mesh, {Placement::replicate()});
  EXPECT_TRUE(m->storage()->meta);
  EXPECT_THROW(session->unary("neg", m), ValueError);
  EXPECT_THROW(session->fetch(m), ValueError);
  Tensor moved = session->redistribute(m, mesh, {Placement::shard(0)});
  EXPECT_TRUE(moved->storage()->meta);
  EXPECT_EQ(session->pendingNodes(), 0u);
  session->assign(
      moved, session->full({8}, 3.0, wire::F64, mesh, {Placement::shard(0)}));
  EXPECT_FALSE(moved->storage()->meta);
  EXPECT_EQ(values(session->fetch(moved)), std::vector<double>(8, 3.0));
}

TEST_F(SessionAssign, RebindTakesTheValueWithItsLayout) {
  // How a parallel style lays a Parameter out anew: the same TensorImpl
  // names the value in the new placements (and mesh); later assigns keep
  // the new layout; autograd fields stay.
  Tensor p = session->fromData(doubles({0, 1, 2, 3, 4, 5, 6, 7}), mesh,
                               {Placement::replicate()});
  p->requiresGrad = true;
  Tensor sharded = session->redistribute(p, mesh, {Placement::shard(0)});
  session->rebind(p, sharded);
  EXPECT_EQ(p->meta().placements, Placements{Placement::shard(0)});
  EXPECT_TRUE(p->requiresGrad);
  EXPECT_EQ(session->fetchLocal(p).at(2).numel(), 2);
  EXPECT_EQ(values(session->fetch(p)),
            (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}));
  session->assign(
      p, session->full({8}, 1.0, wire::F64, mesh, {Placement::replicate()}));
  EXPECT_EQ(p->meta().placements, Placements{Placement::shard(0)});
  EXPECT_EQ(session->fetchLocal(p).at(0).numel(), 2);
  int other = session->addMesh({2}, {}, {0, 1}, "cpu");
  Tensor elsewhere =
      session->full({8}, 5.0, wire::F64, other, {Placement::shard(0)});
  session->rebind(p, elsewhere);
  EXPECT_EQ(p->meta().meshId, other);
  EXPECT_EQ(session->fetchLocal(p).at(1).numel(), 4);
  EXPECT_THROW(session->rebind(p, session->full({4}, 0.0, wire::F64, mesh,
                                                {Placement::shard(0)})),
               ValueError);
  EXPECT_THROW(session->rebind(p, session->full({8}, 0.0, wire::F32, mesh,
                                                {Placement::shard(0)})),
               ValueError);
}

} // namespace
} // namespace dtorch::client
