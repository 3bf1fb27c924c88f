// The structural key of a segment: built while recording, blind to random
// seeds and to handles, sensitive to everything that changes the program;
// colliding hashes are told apart by the structural comparison; the
// simulated backend answers at once with zeros of the local shape.
#include "SegmentKey.h"
#include "dtorch/Client/Session.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dtorch::client {
namespace {

Node node(std::string op, std::vector<int32_t> operands, Shape shape) {
  Node n;
  n.op = std::move(op);
  n.operands = std::move(operands);
  n.meta.shape = std::move(shape);
  n.meta.placements = {Placement::shard(0)};
  return n;
}

/// random -> mul by a scalar -> add of the argument; result: the add.
Segment segment(int64_t seed, double scalar, Handle firstHandle) {
  Segment s;
  s.args = {firstHandle};
  s.argMetas = {TensorMeta{{8, 4}, wire::F32, 0, {Placement::shard(0)}}};
  s.structureHash = hashArgument(0, s.argMetas[0]);
  Node r = node("random", {}, {8, 4});
  AttrValue seedValue, dist;
  seedValue.i = seed;
  dist.kind = AttrValue::Kind::String;
  dist.s = "normal";
  r.attrs = {{"seed", seedValue}, {"distribution", dist}};
  Node m = node("mul", {0, kScalarOperand}, {8, 4});
  m.scalar.index = 1;
  m.scalar.value = scalar;
  m.scalar.placements = {Placement::shard(0)};
  Node a = node("add", {1, -1}, {8, 4});
  for (Node *n : {&r, &m, &a}) {
    n->id = firstHandle + s.nodes.size() + 1;
    s.structureHash = hashNode(s.structureHash, *n);
    s.nodes.push_back(*n);
  }
  s.resultNodes = {2};
  s.structureHash = hashResults(s.structureHash, s.resultNodes);
  return s;
}

TEST(SegmentKey, SeedsAndHandlesAreNotStructure) {
  Segment a = segment(1, 0.5, 100), b = segment(99, 0.5, 7);
  EXPECT_EQ(a.structureHash, b.structureHash);
  EXPECT_TRUE(sameStructure(a, b));
  Mesh mesh{0, {4}, {}, {0, 1, 2, 3}, "cpu", {}};
  EXPECT_EQ(structureBytes(a, mesh), structureBytes(b, mesh));
}

TEST(SegmentKey, ScalarsShapesOperandsResultsAndMeshesAre) {
  Segment a = segment(1, 0.5, 100);
  std::vector<Segment> others;
  others.push_back(segment(1, 0.25, 100)); // scalar
  others.push_back(a);
  others.back().nodes[2].operands = {-1, 1}; // operand order
  others.push_back(a);
  others.back().nodes[1].meta.placements = {Placement::replicate()};
  others.push_back(a);
  others.back().resultNodes = {1, 2};
  others.push_back(a);
  others.back().argMetas[0].dtype = wire::F64;
  for (size_t i = 0; i < others.size(); ++i)
    EXPECT_FALSE(sameStructure(a, others[i])) << "variant " << i;
  EXPECT_NE(a.structureHash, others[0].structureHash);
  Mesh m1{0, {2, 2}, {}, {0, 1, 2, 3}, "cpu", {}};
  Mesh m2{1, {2, 2}, {}, {3, 2, 1, 0}, "cpu", {}};
  EXPECT_FALSE(sameMesh(m1, m2));
  EXPECT_NE(meshHash(m1), meshHash(m2));
  EXPECT_NE(structureBytes(a, m1), structureBytes(a, m2));
}

TEST(SegmentKey, CollidingHashesCompileApartAndHitAfterwards) {
  SessionOptions o;
  o.worldSize = 4;
  o.backend = "inprocess";
  Session session(o);
  int mesh = session.addMesh({4}, {}, {}, "cpu");
  Placements shard0 = {Placement::shard(0)};
  Tensor x = session.full({8, 2}, 2.0, wire::F32, mesh, shard0);
  session.synchronize();
  setSegmentHashMaskForTesting(0);
  size_t before = session.compiles();
  for (int round = 0; round < 3; ++round) {
    rt::Tensor e = session.fetch(session.unary("exp", x));
    rt::Tensor n = session.fetch(session.unary("neg", x));
    EXPECT_FLOAT_EQ(e.data_as<float>()[0], std::exp(2.0f));
    EXPECT_FLOAT_EQ(n.data_as<float>()[0], -2.0f);
  }
  setSegmentHashMaskForTesting(~0ULL);
  EXPECT_EQ(session.compiles() - before, 2u);
  ControllerStats stats = session.controllerStats();
  EXPECT_GE(stats.memoryHits, 4u);
}

TEST(SimulatedBackend, LargeWorldCompilesOnceAndFetchesZeros) {
  SessionOptions o;
  o.worldSize = 1024;
  o.numProcesses = 128;
  o.backend = "simulated";
  Session session(o);
  int mesh = session.addMesh({1024}, {}, {}, "cpu");
  Tensor x =
      session.full({2048, 3}, 1.0, wire::F32, mesh, {Placement::shard(0)});
  session.synchronize();
  size_t before = session.compiles();
  for (int step = 0; step < 3; ++step) {
    session.synchronize(); // the last step's frees are counted before
    uint64_t sent = session.messagesSent();
    Tensor r =
        session.random({2048, 3}, true, wire::F32, mesh, {Placement::shard(0)});
    Tensor y = session.binary("add", x, r);
    session.synchronize();
    EXPECT_EQ(session.messagesSent() - sent, step == 0 ? 128u + 256u : 256u)
        << "uploads once per process, then per process a run and a sync";
    std::map<int, rt::Tensor> pieces = session.fetchLocal(y);
    ASSERT_EQ(pieces.size(), 1024u);
    EXPECT_EQ(pieces.at(1023).shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(pieces.at(5).data_as<float>()[0], 0.0f);
  }
  EXPECT_EQ(session.compiles() - before, 1u);
}

} // namespace
} // namespace dtorch::client
