// The client's autograd tape: Session::addNode gives a result a GradRecord
// exactly when grad mode is on and an operand the op can differentiate
// requires grad; detach() is an alias of the same value; a long chain of
// records is released without recursion.
#include "dtorch/Client/Session.h"

#include <gtest/gtest.h>

namespace dtorch::client {
namespace {

struct Tape : ::testing::Test {
  void SetUp() override {
    SessionOptions o;
    o.worldSize = 2;
    o.backend = "inprocess";
    session = std::make_unique<Session>(o);
    mesh = session->addMesh({2}, {}, {}, "cpu");
  }
  Tensor full(double v, wire::DType dt = wire::F32) {
    return session->full({4}, v, dt, mesh, {Placement::shard(0)});
  }
  std::unique_ptr<Session> session;
  int mesh = 0;
};

TEST_F(Tape, RecordsOpsOnTensorsThatRequireGrad) {
  Tensor x = full(2), c = full(3);
  x->requiresGrad = true;
  Tensor y = session->binary("mul", x, c);
  ASSERT_TRUE(y->gradFn);
  EXPECT_TRUE(y->requiresGrad);
  EXPECT_EQ(y->gradFn->op, "mul");
  ASSERT_EQ(y->gradFn->inputs.size(), 2u);
  EXPECT_EQ(y->gradFn->inputs[0], x);
  Tensor s = session->binaryScalar("add", y, 1.5, false);
  ASSERT_TRUE(s->gradFn);
  EXPECT_EQ(s->gradFn->scalarIndex, 1);
  EXPECT_EQ(s->gradFn->scalarValue, 1.5);
  Tensor r = session->reduce("sum", s, {}, false);
  ASSERT_TRUE(r->gradFn);
  EXPECT_EQ(r->gradFn->attrs.at(0).first, "dims");
  // Nothing requires grad: no record.
  EXPECT_FALSE(session->binary("mul", c, c)->gradFn);
}

TEST_F(Tape, NoRecordWithoutGradModeOrForIntegerResults) {
  Tensor x = full(2);
  x->requiresGrad = true;
  setGradEnabled(false);
  Tensor y = session->unary("exp", x);
  setGradEnabled(true);
  EXPECT_FALSE(y->gradFn);
  EXPECT_FALSE(y->requiresGrad);
  Tensor b = session->compare("gt", x, full(1));
  EXPECT_FALSE(b->gradFn);
  EXPECT_FALSE(session->argReduce("argmax", x, 0, false)->requiresGrad);
  EXPECT_FALSE(session->cast(x, wire::I64)->gradFn);
  EXPECT_TRUE(session->cast(x, wire::F64)->gradFn);
}

TEST_F(Tape, WhereIsNotDifferentiableInItsCondition) {
  Tensor x = full(1);
  Tensor c = session->compare("gt", x, full(0));
  c->requiresGrad = true; // never true in Python; the formula is ""
  EXPECT_FALSE(session->where(c, x, full(2))->gradFn);
}

TEST_F(Tape, DetachIsAnAliasOfTheSameValue) {
  Tensor x = full(2);
  x->requiresGrad = true;
  Tensor y = session->unary("neg", x);
  Tensor d = session->detach(y);
  EXPECT_EQ(d->id(), y->id());
  EXPECT_FALSE(d->gradFn);
  EXPECT_FALSE(d->requiresGrad);
  y.reset(); // the alias keeps the value alive
  rt::Tensor v = session->fetch(d);
  ASSERT_EQ(v.numel(), 4);
  EXPECT_EQ(v.data_as<float>()[3], -2.0f);
  Tensor e = session->binary("add", d, d); // reads the aliased value
  EXPECT_EQ(session->fetch(e).data_as<float>()[0], -4.0f);
}

TEST_F(Tape, LongChainsAreReleasedIteratively) {
  Tensor x = full(1);
  x->requiresGrad = true;
  Tensor y = x;
  for (int i = 0; i < 50000; ++i)
    y = session->binaryScalar("mul", y, 1.0, false);
  EXPECT_TRUE(y->gradFn);
  y.reset(); // 50,000 nested records: must not overflow the stack
  SUCCEED();
}

} // namespace
} // namespace dtorch::client
