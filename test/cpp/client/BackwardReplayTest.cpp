// Backward replay (BackwardReplay.h): the walk's key is the graph's
// structure (not its tensors); a captured backward replays the same ops
// (the same pending segment) and the same .grad assignments into another
// graph of that structure; a capture that fetched, drew random numbers or
// read a value under another name is never replayed. The "Python walk" is
// played here by hand: the ops autograd.py's formula for mul would record.
#include "BackwardReplay.h"
#include "SessionTestSupport.h"

#include <cstdlib>
#include <functional>

namespace dtorch::client {
namespace {

using Start = Session::BackwardStart;

struct Graph {
  Tensor x, c, y, g;
};

class BackwardReplayTest : public test::InProcessSessionTest {
protected:
  void SetUp() override { unsetenv("DTORCH_BACKWARD_REPLAY"); }

  /// y = x * c (x a leaf that requires grad, x and c on the workers) and
  /// the root gradient g, pending.
  Graph make(const Shape &shape, bool square = false) {
    Graph gr;
    gr.x = session->full(shape, 2.0, wire::F64, mesh, {Placement::shard(0)});
    gr.c = session->full(shape, 3.0, wire::F64, mesh, {Placement::shard(0)});
    gr.x->requiresGrad = true;
    session->cutSegment();
    gr.y = session->binary("mul", gr.x, square ? gr.x : gr.c);
    gr.g = session->full(shape, 1.0, wire::F64, mesh, {Placement::shard(0)});
    return gr;
  }

  /// What autograd.py records for it: x.grad (+)= g * c.
  void walk(Graph &gr) {
    setGradEnabled(false);
    Tensor gx = session->binary("mul", gr.g, gr.c);
    gr.x->grad = gr.x->grad ? session->binary("add", gr.x->grad, gx) : gx;
    setGradEnabled(true);
  }

  std::vector<double> grad(const Graph &gr) {
    return test::values(session->fetch(gr.x->grad));
  }
};

TEST_F(BackwardReplayTest, KeyIsTheStructure) {
  Graph a = make({8}), b = make({8}), wider = make({12}),
        square = make({8}, true);
  BackwardWalk wa = walkBackward({a.y}, {a.g}), wb = walkBackward({b.y}, {b.g});
  EXPECT_EQ(wa.key, wb.key);
  EXPECT_EQ(wa.hash, wb.hash);
  EXPECT_EQ(wa.unreplayable, nullptr);
  // y, g, x, c: each tensor once.
  EXPECT_EQ(wa.externals.size(), 4u);
  EXPECT_NE(walkBackward({wider.y}, {wider.g}).key, wa.key);
  // x * x is not x * c: the same tensor twice is told from two tensors.
  EXPECT_NE(walkBackward({square.y}, {square.g}).key, wa.key);
  // An existing gradient is part of it.
  b.x->grad = b.c;
  EXPECT_NE(walkBackward({b.y}, {b.g}).key, wa.key);
}

TEST_F(BackwardReplayTest, ReplaysTheCapturedOpsIntoAnotherGraph) {
  Graph a = make({8});
  ASSERT_EQ(session->startBackward({a.y}, {a.g}, true), Start::Capturing);
  walk(a);
  session->endBackwardCapture(true);
  uint64_t walked = session->pendingStructureHash();
  size_t walkedNodes = session->pendingNodes();
  EXPECT_EQ(grad(a), std::vector<double>(8, 3.0));

  Graph b = make({8});
  ASSERT_EQ(session->startBackward({b.y}, {b.g}, true), Start::Replayed);
  EXPECT_EQ(session->pendingStructureHash(), walked);
  EXPECT_EQ(session->pendingNodes(), walkedNodes);
  EXPECT_TRUE(b.y->gradFn->released);
  EXPECT_TRUE(b.y->gradFn->inputs.empty());
  EXPECT_EQ(grad(b), std::vector<double>(8, 3.0));

  // retain_graph: the records stay.
  Graph c = make({8});
  ASSERT_EQ(session->startBackward({c.y}, {c.g}, false), Start::Replayed);
  EXPECT_FALSE(c.y->gradFn->released);
  Session::BackwardReplayStats s = session->backwardReplayStats();
  EXPECT_EQ(s.captures, 1u);
  EXPECT_EQ(s.replays, 2u);
  EXPECT_EQ(s.entries, 1u);
}

TEST_F(BackwardReplayTest, AccumulatesIntoAnExistingGradient) {
  for (int round = 0; round < 3; ++round) {
    Graph gr = make({4});
    gr.x->grad =
        session->full({4}, 10.0, wire::F64, mesh, {Placement::shard(0)});
    session->cutSegment();
    Tensor old = gr.x->grad;
    std::weak_ptr<TensorImpl> oldWeak = old;
    old.reset();
    Start start = session->startBackward({gr.y}, {gr.g}, true);
    EXPECT_EQ(start, round == 0 ? Start::Capturing : Start::Replayed);
    if (start == Start::Capturing) {
      walk(gr);
      session->endBackwardCapture(true);
    }
    // The old gradient is let go, as the walk lets it go.
    EXPECT_TRUE(oldWeak.expired());
    EXPECT_EQ(grad(gr), std::vector<double>(4, 13.0));
  }
}

TEST_F(BackwardReplayTest, UnreplayableCapturesWalkAgain) {
  struct Case {
    const char *why;
    std::function<void(Graph &)> during;
  };
  std::vector<Case> cases = {
      {"fetched", [&](Graph &gr) { session->fetch(gr.c); }},
      {"random",
       [&](Graph &gr) {
         session->random({3}, true, wire::F64, mesh, {Placement::replicate()});
       }},
      {"cut", [&](Graph &) { session->cutSegment(); }},
      {"another name",
       [&](Graph &gr) {
         Tensor alias = session->detach(gr.c);
         Tensor t = session->binary("mul", gr.g, alias);
       }},
  };
  int64_t width = 5;
  for (const Case &k : cases) {
    SCOPED_TRACE(k.why);
    Shape shape = {width++}; // a structure of its own per case
    Graph a = make(shape);
    ASSERT_EQ(session->startBackward({a.y}, {a.g}, true), Start::Capturing);
    k.during(a);
    walk(a);
    session->endBackwardCapture(true);
    EXPECT_NE(session->backwardReplayStats().lastReason, "");
    Graph b = make(shape);
    uint64_t before = session->backwardReplayStats().notReplayable;
    EXPECT_EQ(session->startBackward({b.y}, {b.g}, true), Start::Walk);
    EXPECT_EQ(session->backwardReplayStats().notReplayable, before + 1);
  }
  // A capture that did not complete (the walk raised) keeps nothing.
  Graph a = make({20});
  ASSERT_EQ(session->startBackward({a.y}, {a.g}, true), Start::Capturing);
  session->endBackwardCapture(false);
  Graph b = make({20});
  EXPECT_EQ(session->startBackward({b.y}, {b.g}, true), Start::Capturing);
  session->endBackwardCapture(false);
}

TEST_F(BackwardReplayTest, FreedGraphsAndTheSwitchWalk) {
  Graph a = make({8});
  ASSERT_EQ(session->startBackward({a.y}, {a.g}, true), Start::Capturing);
  walk(a);
  session->endBackwardCapture(true);
  a.y->gradFn->released = true;
  EXPECT_EQ(session->startBackward({a.y}, {a.g}, true), Start::Walk);
  EXPECT_NE(session->backwardReplayStats().lastReason.find("freed"),
            std::string::npos);
  Graph b = make({8});
  setenv("DTORCH_BACKWARD_REPLAY", "0", 1);
  EXPECT_EQ(session->startBackward({b.y}, {b.g}, true), Start::Walk);
  unsetenv("DTORCH_BACKWARD_REPLAY");
  EXPECT_EQ(session->startBackward({b.y}, {b.g}, true), Start::Replayed);
}

TEST(BackwardReplayCutTest, ReplaysAcrossASegmentCut) {
  // Segments of at most 3 ops: the backward's second op starts a new one.
  SessionOptions o;
  o.worldSize = 2;
  o.backend = "inprocess";
  o.maxSegmentNodes = 3;
  Session session(o);
  int mesh = session.addMesh({2}, {}, {}, "cpu");
  std::vector<uint64_t> hashes;
  for (int round = 0; round < 3; ++round) {
    Placements p = {Placement::shard(0)};
    Tensor x = session.full({4}, 2.0, wire::F64, mesh, p);
    Tensor c = session.full({4}, 3.0, wire::F64, mesh, p);
    x->requiresGrad = true;
    x->grad = session.full({4}, 10.0, wire::F64, mesh, p);
    session.cutSegment();
    Tensor y = session.binary("mul", x, c);
    Tensor g = session.full({4}, 1.0, wire::F64, mesh, p);
    Start start = session.startBackward({y}, {g}, true);
    ASSERT_EQ(start, round == 0 ? Start::Capturing : Start::Replayed)
        << session.backwardReplayStats().lastReason;
    if (start == Start::Capturing) {
      setGradEnabled(false);
      Tensor gx = session.binary("mul", g, c);
      x->grad = session.binary("add", x->grad, gx);
      setGradEnabled(true);
      session.endBackwardCapture(true);
    }
    // The cut came before the add: it is the new segment's only op.
    EXPECT_EQ(session.pendingNodes(), 1u);
    hashes.push_back(session.pendingStructureHash());
    EXPECT_EQ(test::values(session.fetch(x->grad)),
              std::vector<double>(4, 13.0));
  }
  EXPECT_EQ(session.backwardReplayStats().replays, 2u);
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_EQ(hashes[0], hashes[2]);
}

} // namespace
} // namespace dtorch::client
