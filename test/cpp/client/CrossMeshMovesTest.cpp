// Moves between meshes (pipeline stages) are checked, never left to hang:
// a segment that sends or receives across meshes names its mesh's global
// ranks (dtensor.global_ranks on the function, rank.global_ranks on every
// class function), so a module holding both stages is paired by
// --rank-match-p2p, a mismatch failing the compile with both programs
// named; segments compiled apart, as the controller compiles them, are
// paired in run order by the controller's MoveLedger, which refuses a
// receive without its message (or with one of another type) before it
// runs. A real move through the Session still runs and gives its values.
#include "MoveLedger.h"
#include "SegmentText.h"
#include "SessionTestSupport.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/Compiler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

AttrValue intA(int64_t v) {
  AttrValue a;
  a.i = v;
  return a;
}
AttrValue intsA(std::vector<int64_t> v) {
  AttrValue a;
  a.kind = AttrValue::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

Mesh meshOver(std::vector<int64_t> ranks) {
  Mesh m;
  m.shape = {static_cast<int64_t>(ranks.size())};
  m.ranks = std::move(ranks);
  return m;
}

/// One segment: `op` ("send" of an argument, or "recv") of a `shape`
/// tensor, Shard(0) on a 1-D mesh, with the other mesh's ranks as peers.
Segment moveSegment(const std::string &op, Shape shape,
                    std::vector<int64_t> peers, int64_t tag = 1 << 20) {
  Segment seg;
  seg.meshId = 0;
  Handle next = 1;
  Node n;
  n.op = op;
  if (op == "send") {
    seg.args.push_back(next);
    seg.argMetas.push_back(
        {shape, wire::F32, 0, Placements{Placement::shard(0)}});
    n.inputs.push_back(next++);
  }
  n.attrs = {{"peers", intsA(std::move(peers))}, {"tag", intA(tag)}};
  n.meta = {std::move(shape), wire::F32, 0, Placements{Placement::shard(0)}};
  n.id = next++;
  seg.nodes.push_back(n);
  seg.results.push_back(n.id);
  return seg;
}

CompileResult compiled(const Segment &seg, const Mesh &mesh,
                       CompileOptions options = {}) {
  CompileResult r = compileGraph(segmentGraph(seg, mesh, "segment"), options);
  EXPECT_TRUE(r.ok) << r.error;
  return r;
}

std::string stage(const CompileResult &r, const std::string &name) {
  for (const auto &[n, text] : r.stages)
    if (n == name)
      return text;
  return "";
}

TEST(CrossMeshMoves, SegmentsThatMoveNameTheirGlobalRanks) {
  CompileOptions options;
  options.recordStages = true;
  Mesh from = meshOver({0, 1}), to = meshOver({2, 3});
  Segment send = moveSegment("send", {4, 4}, {2, 3});
  CompileResult viaGraph = compiled(send, from, options);
  EXPECT_NE(
      stage(viaGraph, "input").find("dtensor.global_ranks = array<i64: 0, 1>"),
      std::string::npos)
      << stage(viaGraph, "input");
  EXPECT_NE(
      stage(viaGraph, "rank").find("rank.global_ranks = array<i64: 0, 1>"),
      std::string::npos)
      << stage(viaGraph, "rank");
  // The text path (dtorch.save_graph, dtorch-run) says the same.
  EXPECT_NE(segmentText(send, from, "segment")
                .find("attributes {dtensor.global_ranks = array<i64: 0, 1>}"),
            std::string::npos);
  CompileResult recv =
      compiled(moveSegment("recv", {4, 4}, {0, 1}), to, options);
  EXPECT_NE(stage(recv, "rank").find("rank.global_ranks = array<i64: 2, 3>"),
            std::string::npos)
      << stage(recv, "rank");

  // A segment that moves nothing between meshes carries no ranks.
  Segment plain = send;
  plain.nodes[0].op = "relu";
  plain.nodes[0].attrs.clear();
  CompileResult r = compiled(plain, from, options);
  EXPECT_EQ(stage(r, "rank").find("global_ranks"), std::string::npos);
  EXPECT_EQ(segmentText(plain, from, "segment").find("global_ranks"),
            std::string::npos);
}

/// Both stages in one module, as dtorch-opt's full pipeline sees them.
std::string twoStages(const std::string &receivedType) {
  return R"(#m = #dtensor.mesh<[2]>
func.func @stage0(%x: !dtensor.tensor<4x4xf32, #m, [S(0)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 0, 1>} {
  %0 = dtensor.send %x {peers = array<i64: 2, 3>, tag = 5 : i64} : !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [S(0)]>
}
func.func @stage1() -> !dtensor.tensor<)" +
         receivedType +
         R"(, #m, [S(0)]> attributes {dtensor.global_ranks = array<i64: 2, 3>} {
  %0 = dtensor.recv {peers = array<i64: 0, 1>, tag = 5 : i64} : !dtensor.tensor<)" +
         receivedType + R"(, #m, [S(0)]>
  return %0 : !dtensor.tensor<)" +
         receivedType + R"(, #m, [S(0)]>
}
)";
}

TEST(CrossMeshMoves, AMismatchedPairInOneModuleIsACompileError) {
  CompileResult ok = compileModule(twoStages("4x4xf32"), "stages.mlir");
  EXPECT_TRUE(ok.ok) << ok.error;
  CompileResult bad = compileModule(twoStages("4x8xf32"), "stages.mlir");
  ASSERT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("in @stage0_class0 sends 'tensor<2x4xf32>' from "
                           "global rank 0 to global rank 2"),
            std::string::npos)
      << bad.error;
  EXPECT_NE(bad.error.find("but @stage1_class0 receives 'tensor<2x8xf32>'"),
            std::string::npos)
      << bad.error;
}

std::vector<MoveLedger::Move> movesOf(const CompileResult &r, const Mesh &mesh,
                                      uint64_t id) {
  return MoveLedger::movesOf(r.functions.at(0).programs, mesh.ranks,
                             "program " + std::to_string(id));
}

TEST(CrossMeshMoves, LedgerPairsSegmentsCompiledApartInRunOrder) {
  Mesh from = meshOver({0, 1}), to = meshOver({2, 3});
  auto send =
      movesOf(compiled(moveSegment("send", {4, 4}, {2, 3}), from), from, 1);
  auto recv = movesOf(compiled(moveSegment("recv", {4, 4}, {0, 1}), to), to, 2);
  ASSERT_EQ(send.size(), 2u); // one message from each of ranks 0 and 1
  ASSERT_EQ(recv.size(), 2u);
  MoveLedger ledger;
  // Every microbatch runs the same two cached segments.
  for (int step = 0; step < 3; ++step) {
    ledger.admit(send);
    EXPECT_EQ(ledger.pending(), 2u);
    ledger.admit(recv);
    EXPECT_EQ(ledger.pending(), 0u);
  }
  // Two sends may run ahead of their receives.
  ledger.admit(send);
  ledger.admit(send);
  ledger.admit(recv);
  ledger.admit(recv);
  EXPECT_EQ(ledger.pending(), 0u);
}

TEST(CrossMeshMoves, LedgerRefusesAReceiveWithoutItsMessage) {
  Mesh from = meshOver({0, 1}), to = meshOver({2, 3});
  auto send =
      movesOf(compiled(moveSegment("send", {4, 4}, {2, 3}), from), from, 1);
  auto recv = movesOf(compiled(moveSegment("recv", {4, 4}, {0, 1}), to), to, 2);
  auto wide = movesOf(compiled(moveSegment("recv", {4, 8}, {0, 1}), to), to, 3);
  auto swapped =
      movesOf(compiled(moveSegment("recv", {4, 4}, {1, 0}), to), to, 4);
  MoveLedger ledger;
  try {
    ledger.admit(recv);
    FAIL() << "a receive before any send was admitted";
  } catch (const DTorchError &e) {
    std::string what = e.what();
    EXPECT_NE(what.find("@segment_class0 of program 2 at global rank 2 "
                        "receives F32[2x4] from global rank 0"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("would wait forever"), std::string::npos) << what;
  }
  ledger.admit(send);
  try {
    ledger.admit(wide);
    FAIL() << "a receive of another shape was admitted";
  } catch (const DTorchError &e) {
    std::string what = e.what();
    // Both programs are named: the receiver's and the sender's.
    EXPECT_NE(what.find("@segment_class0 of program 3 at global rank 2 "
                        "receives F32[2x8]"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("sent by @segment_class0 of program 1, is F32[2x4]"),
              std::string::npos)
        << what;
  }
  EXPECT_THROW(ledger.admit(swapped), DTorchError); // rank 2 waits for 1
  // A refused segment took nothing: the right receive still matches.
  EXPECT_EQ(ledger.pending(), 2u);
  ledger.admit(recv);
  EXPECT_EQ(ledger.pending(), 0u);
}

TEST(CrossMeshMoves, SessionMovesStillRunThroughTheLedger) {
  SessionOptions o;
  o.worldSize = 4;
  o.backend = "inprocess";
  Session session(o);
  int first = session.addMesh({2}, {}, {0, 1}, "cpu");
  int second = session.addMesh({2}, {}, {2, 3}, "cpu");
  for (int step = 0; step < 3; ++step) {
    Tensor x =
        session.fromData(doubles({1, 2, 3, 4}), first, {Placement::shard(0)});
    Tensor there = session.moveToMesh(x, second);
    Tensor back = session.moveToMesh(session.unary("neg", there), first);
    EXPECT_EQ(values(session.fetch(there)), (std::vector<double>{1, 2, 3, 4}));
    EXPECT_EQ(values(session.fetch(back)),
              (std::vector<double>{-1, -2, -3, -4}));
  }
}

} // namespace
} // namespace dtorch::client
