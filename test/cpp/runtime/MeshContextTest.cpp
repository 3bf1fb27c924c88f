// A worker resolves a class program for its rank from its mesh coordinates:
// box offsets agree with the compiler's layout math (dtorch::localBox) on
// even and uneven splits, axes become the groups of global ranks the
// compiler's axisGroup names, and the validator refuses malformed class
// programs with a message naming what is wrong.
#include "TestSupport.h"

#include "dtorch/Layout.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"

#include <numeric>
#include <random>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::Attr;
using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;
using ::dtorch::wire::MeshValue;

std::vector<int64_t> identityRanks(const std::vector<int64_t> &mesh) {
  std::vector<int64_t> ranks(meshSize(mesh));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// Placements with Shard(d) where shardDims[a] = d >= 0, Replicate elsewhere.
Placements placementsOf(const std::vector<int64_t> &shardDims) {
  Placements ps;
  for (int64_t d : shardDims)
    ps.push_back(d >= 0 ? Placement::shard(d) : Placement::replicate());
  return ps;
}

TEST(MeshContext, PieceBoxesMatchTheCompilersLocalBox) {
  std::mt19937 random(7);
  const std::vector<std::vector<int64_t>> meshes = {
      {4}, {3}, {2, 2}, {2, 3}, {4, 8}, {3, 1, 2}, {5, 3}};
  int checked = 0, uneven = 0;
  for (const auto &mesh : meshes) {
    for (int trial = 0; trial < 60; ++trial) {
      int rank = 1 + random() % 3;
      std::vector<int64_t> shape;
      for (int d = 0; d < rank; ++d)
        shape.push_back(random() % 13); // 0..12: empty, uneven, even
      std::vector<int64_t> shardDims;
      for (size_t a = 0; a < mesh.size(); ++a)
        shardDims.push_back(static_cast<int64_t>(random() % (rank + 1)) - 1);
      for (int64_t p = 0; p < meshSize(mesh); ++p) {
        std::vector<int64_t> coords = meshCoords(mesh, p);
        PieceBox got = pieceBox(shape, mesh, shardDims, coords);
        LocalBox want = localBox(shape, mesh, placementsOf(shardDims), coords);
        ASSERT_EQ(got.offset, want.offset);
        ASSERT_EQ(got.shape, want.shape);
        ++checked;
        for (size_t d = 0; d < shape.size(); ++d)
          uneven +=
              got.shape[d] != localBox(shape, mesh, placementsOf(shardDims),
                                       meshCoords(mesh, 0))
                                  .shape[d];
      }
    }
  }
  EXPECT_GT(checked, 4000);
  EXPECT_GT(uneven, 100); // remainders and empty pieces were exercised
}

TEST(MeshContext, AxisGroupsAreTheMeshRanksOfTheCompilersAxisGroup) {
  const std::vector<int64_t> mesh = {2, 3, 2};
  std::vector<int64_t> ranks = identityRanks(mesh);
  std::mt19937 random(3);
  std::shuffle(ranks.begin(), ranks.end(), random);
  auto shared = std::make_shared<const MeshRanks>(mesh, ranks);
  EXPECT_EQ(shared->positionOf(12), -1);
  for (int64_t p = 0; p < meshSize(mesh); ++p) {
    EXPECT_EQ(shared->positionOf(ranks[p]), p);
    RankContext context = RankContext::of(shared, ranks[p]);
    EXPECT_EQ(context.coords, meshCoords(mesh, p));
    for (int64_t axis = 0; axis < 3; ++axis) {
      std::vector<int64_t> want;
      for (int64_t position : dtorch::axisGroup(mesh, context.coords, axis))
        want.push_back(ranks[position]);
      EXPECT_EQ(context.axisGroup(axis), want) << "position " << p;
    }
  }
}

TEST(MeshContext, ContextErrors) {
  expectRuntimeError([] { RankContext::of({2, 2}, {0, 1, 2}, 0); },
                     {"has 4 positions but 3 ranks"});
  expectRuntimeError([] { RankContext::of({2}, {0, 0}, 0); }, {"repeated"});
  expectRuntimeError([] { RankContext::of({2}, {0, 1}, 5); },
                     {"rank 5 is not in the mesh"});
  expectRuntimeError([] { RankContext::of({0}, {}, 0); }, {"extent below 1"});
}

// A class program of `mesh` for all positions, with one input x.
ProgramBuilder classProgram(const std::vector<int64_t> &mesh) {
  ProgramBuilder b;
  Program &p = b.program();
  for (int64_t s : mesh)
    p.add_mesh_shape(s);
  auto *box = p.add_positions();
  for (int64_t s : mesh) {
    box->add_lo(0);
    box->add_hi(s);
  }
  return b;
}

void setBoxOffset(Instruction &inst, const std::string &name,
                  const std::vector<int64_t> &shape,
                  const std::vector<int64_t> &shardDims, int64_t dim) {
  MeshValue *m = (*inst.mutable_attrs())[name].mutable_mesh();
  m->Clear();
  m->set_kind(MeshValue::BOX_OFFSET);
  for (int64_t s : shape)
    m->add_global_shape(s);
  for (int64_t d : shardDims)
    m->add_shard_dims(d);
  m->set_dim(dim);
}

TEST(MeshContext, ResolvesMeshValuesAndAxesPerRank) {
  const std::vector<int64_t> mesh = {2, 3};
  // Ranks in reverse order: groups name global ranks, not positions.
  std::vector<int64_t> ranks = {5, 4, 3, 2, 1, 0};
  ProgramBuilder b = classProgram(mesh);
  int x = b.input(F32, {4, 3});
  int y = b.buffer(F32, {4, 3});
  int z = b.buffer(F32, {4, 3});
  int w = b.buffer(F32, {4, 3});
  Instruction &iota = b.add("iota", {}, {y});
  setInt(iota, "dim", 0);
  setBoxOffset(iota, "offset", {10, 7}, {0, 1}, -1);
  Instruction &tril = b.add("tril", {x}, {z});
  setBoxOffset(tril, "row_offset", {10, 7}, {0, 1}, 0);
  setBoxOffset(tril, "col_offset", {10, 7}, {0, 1}, 1);
  Instruction &slice = b.add("slice", {x}, {w});
  setInt(slice, "dim", 1);
  MeshValue *chunk = (*slice.mutable_attrs())["start"].mutable_mesh();
  chunk->set_kind(MeshValue::CHUNK_OFFSET);
  chunk->set_axis(1);
  chunk->set_extent(8);
  MeshValue *coord = (*slice.mutable_attrs())["coord"].mutable_mesh();
  coord->set_kind(MeshValue::MESH_COORD);
  coord->set_axis(0);
  int r = b.buffer(F32, {4, 3});
  Instruction &reduce = b.add("all_reduce", {x}, {r}, COMM);
  setInt(reduce, "axis", 1);
  setString(reduce, "reduce", "sum");
  for (int64_t p = 0; p < 6; ++p) {
    RankContext context = RankContext::of(mesh, ranks, ranks[p]);
    Program resolved = resolveForRank(b.program(), context);
    LocalBox box =
        localBox({10, 7}, mesh, placementsOf({0, 1}), meshCoords(mesh, p));
    const auto &offset = resolved.instructions(0).attrs().at("offset");
    ASSERT_EQ(offset.value_case(), Attr::kInts);
    EXPECT_EQ(std::vector<int64_t>(offset.ints().values().begin(),
                                   offset.ints().values().end()),
              box.offset);
    EXPECT_EQ(resolved.instructions(1).attrs().at("row_offset").i(),
              box.offset[0]);
    EXPECT_EQ(resolved.instructions(1).attrs().at("col_offset").i(),
              box.offset[1]);
    EXPECT_EQ(resolved.instructions(2).attrs().at("start").i(),
              chunkOffset(8, 3, meshCoords(mesh, p)[1]));
    EXPECT_EQ(resolved.instructions(2).attrs().at("coord").i(),
              meshCoords(mesh, p)[0]);
    const auto &attrs = resolved.instructions(3).attrs();
    EXPECT_EQ(attrs.count("axis"), 0u);
    std::vector<int64_t> group(attrs.at("group").ints().values().begin(),
                               attrs.at("group").ints().values().end());
    EXPECT_EQ(group, context.axisGroup(1));
  }
}

TEST(MeshContext, LeadOrZeroKeepsTheValueOnlyAtCoordinateZero) {
  ProgramBuilder b = classProgram({3});
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  Instruction &lead = b.add("lead_or_zero", {x}, {y});
  MeshValue *coord = (*lead.mutable_attrs())["coord"].mutable_mesh();
  coord->set_kind(MeshValue::MESH_COORD);
  coord->set_axis(0);
  b.output(y);
  for (int64_t p = 0; p < 3; ++p) {
    Executor executor(nullptr);
    Program mine =
        resolveForRank(b.program(), RankContext::of({3}, {0, 1, 2}, p));
    std::vector<Tensor> out =
        executor.run(mine, {makeTensor<float>(F32, {2}, {1.5f, -2})});
    EXPECT_EQ(valuesOf<float>(out[0]), p == 0 ? (std::vector<float>{1.5f, -2})
                                              : (std::vector<float>{0, 0}));
  }
}

TEST(MeshContext, RankStateRunsTheClassOfItsPosition) {
  // Two classes of mesh [3]: positions 0-1 double, position 2 negates.
  auto make = [](const std::string &op, int64_t lo, int64_t hi) {
    ProgramBuilder b;
    b.program().add_mesh_shape(3);
    b.program().add_positions()->add_lo(lo);
    b.program().mutable_positions(0)->add_hi(hi);
    int x = b.input(F32, {1});
    int y = b.buffer(F32, {1});
    b.add(op, {x, x}, {y});
    b.output(y);
    return b.program();
  };
  Program first = make("add", 0, 2), last = make("sub", 2, 3);
  for (int64_t rank : {7, 8, 9}) {
    RankState state(static_cast<int>(rank), nullptr);
    state.upload(1, {&first, &last}, RankContext::of({3}, {7, 8, 9}, rank));
    state.put(1, makeTensor<float>(F32, {1}, {3}));
    ASSERT_EQ(state.run(1, {1}, {2}), std::nullopt);
    EXPECT_EQ(valuesOf<float>(state.fetch(2)),
              (std::vector<float>{rank == 9 ? 0.f : 6.f}));
  }
  // No program runs at position 2: every run of the id fails, saying so.
  RankState state(9, nullptr);
  state.upload(1, {&first}, RankContext::of({3}, {7, 8, 9}, 9));
  state.put(1, makeTensor<float>(F32, {1}, {3}));
  std::optional<std::string> error = state.run(1, {1}, {2});
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("no program of upload 1 runs at mesh position (2)"),
            std::string::npos)
      << *error;
}

// A rank-independent class program is prepared once for the ranks that
// share a SharedPreparation; one with a mesh value is prepared per rank; an
// invalid one fails on every rank with the reason.
TEST(MeshContext, SharedPreparationPreparesRankIndependentProgramsOnce) {
  ProgramBuilder plain = classProgram({3});
  int x = plain.input(F32, {2});
  int y = plain.buffer(F32, {2});
  plain.add("add", {x, x}, {y});
  plain.output(y);
  ProgramBuilder lead = classProgram({3});
  x = lead.input(F32, {2});
  y = lead.buffer(F32, {2});
  MeshValue *coord =
      (*lead.add("lead_or_zero", {x}, {y}).mutable_attrs())["coord"]
          .mutable_mesh();
  coord->set_kind(MeshValue::MESH_COORD);
  coord->set_axis(0);
  lead.output(y);
  ProgramBuilder bad = classProgram({3});
  x = bad.input(F32, {2});
  y = bad.buffer(F32, {2});
  bad.add("no_such_kernel", {x}, {y});
  bad.output(y);

  SharedPreparation shared;
  const Program *plainProgram = &plain.program();
  const Program *leadProgram = &lead.program();
  int prepared = 0;
  auto prepare = [&] {
    ++prepared;
    return plain.program();
  };
  auto first = shared.get(plainProgram, prepare);
  auto second = shared.get(plainProgram, prepare);
  ASSERT_TRUE(first);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(prepared, 1);
  EXPECT_EQ(shared.get(leadProgram, prepare), nullptr);
  EXPECT_EQ(prepared, 1); // rank-dependent: each rank prepares its own

  SharedPreparation perUpload;
  for (int64_t rank : {0, 1, 2}) {
    RankContext context = RankContext::of({3}, {0, 1, 2}, rank);
    RankState state(static_cast<int>(rank), nullptr);
    state.upload(1, {plainProgram}, context, &perUpload);
    state.upload(2, {leadProgram}, context, &perUpload);
    state.upload(3, {&bad.program()}, context, &perUpload);
    state.put(1, makeTensor<float>(F32, {2}, {1.5f, -2}));
    ASSERT_EQ(state.run(1, {1}, {2}), std::nullopt);
    EXPECT_EQ(valuesOf<float>(state.fetch(2)), (std::vector<float>{3, -4}));
    ASSERT_EQ(state.run(2, {1}, {3}), std::nullopt);
    EXPECT_EQ(valuesOf<float>(state.fetch(3)),
              rank == 0 ? (std::vector<float>{1.5f, -2})
                        : (std::vector<float>{0, 0}));
    std::optional<std::string> error = state.run(3, {1}, {4});
    ASSERT_TRUE(error);
    EXPECT_NE(error->find("no_such_kernel"), std::string::npos) << *error;
  }
}

// Given the owner of the class programs (the upload message), a
// rank-independent one is checked where it lies and shared without a copy,
// kept alive by the ranks that hold it; a rank-dependent one is still
// prepared per rank, and an invalid or misplaced one fails on every rank.
TEST(MeshContext, SharedPreparationWithAnOwnerSharesTheClassProgramItself) {
  auto owner = std::make_shared<std::vector<Program>>();
  {
    ProgramBuilder plain = classProgram({3});
    int x = plain.input(F32, {2});
    int y = plain.buffer(F32, {2});
    plain.add("mul", {x, x}, {y});
    plain.output(y);
    owner->push_back(plain.program());
    ProgramBuilder lead = classProgram({3});
    x = lead.input(F32, {2});
    y = lead.buffer(F32, {2});
    MeshValue *coord =
        (*lead.add("lead_or_zero", {x}, {y}).mutable_attrs())["coord"]
            .mutable_mesh();
    coord->set_kind(MeshValue::MESH_COORD);
    coord->set_axis(0);
    lead.output(y);
    owner->push_back(lead.program());
    ProgramBuilder bad = classProgram({3});
    x = bad.input(F32, {2});
    y = bad.buffer(F32, {2});
    bad.add("no_such_kernel", {x}, {y});
    bad.output(y);
    owner->push_back(bad.program());
    ProgramBuilder elsewhere = classProgram({3});
    elsewhere.program().mutable_positions(0)->set_lo(0, 2); // position 2 only
    x = elsewhere.input(F32, {2});
    y = elsewhere.buffer(F32, {2});
    elsewhere.add("add", {x, x}, {y});
    elsewhere.output(y);
    owner->push_back(elsewhere.program());
  }
  const Program *plain = &(*owner)[0], *lead = &(*owner)[1],
                *bad = &(*owner)[2], *elsewhere = &(*owner)[3];
  EXPECT_TRUE(rankIndependent(*plain));
  EXPECT_FALSE(rankIndependent(*lead));

  SharedPreparation shared(owner);
  int prepared = 0, checked = 0;
  auto prepare = [&] {
    ++prepared;
    return *plain;
  };
  auto check = [&](const Program &) { ++checked; };
  auto first = shared.get(plain, prepare, check);
  EXPECT_EQ(first.get(), plain); // the class program itself, no copy
  EXPECT_EQ(shared.get(plain, prepare, check).get(), plain);
  EXPECT_EQ(prepared, 0);
  EXPECT_EQ(checked, 1);
  EXPECT_EQ(shared.get(lead, prepare, check), nullptr);

  std::vector<std::unique_ptr<RankState>> states;
  {
    SharedPreparation perUpload(owner);
    for (int64_t rank : {0, 1, 2}) {
      RankContext context = RankContext::of({3}, {0, 1, 2}, rank);
      states.push_back(
          std::make_unique<RankState>(static_cast<int>(rank), nullptr));
      RankState &state = *states.back();
      state.upload(1, {plain}, context, &perUpload);
      state.upload(2, {lead}, context, &perUpload);
      state.upload(3, {bad}, context, &perUpload);
      state.upload(4, {elsewhere}, context, &perUpload);
    }
  }
  first.reset();
  long holders = owner.use_count();
  EXPECT_GE(holders, 2); // the ranks keep the message alive
  owner.reset();         // ... after the upload is gone
  for (int64_t rank : {0, 1, 2}) {
    RankState &state = *states[static_cast<size_t>(rank)];
    state.put(1, makeTensor<float>(F32, {2}, {1.5f, -2}));
    ASSERT_EQ(state.run(1, {1}, {2}), std::nullopt);
    EXPECT_EQ(valuesOf<float>(state.fetch(2)), (std::vector<float>{2.25f, 4}));
    ASSERT_EQ(state.run(2, {1}, {3}), std::nullopt);
    EXPECT_EQ(valuesOf<float>(state.fetch(3)),
              rank == 0 ? (std::vector<float>{1.5f, -2})
                        : (std::vector<float>{0, 0}));
    std::optional<std::string> error = state.run(3, {1}, {4});
    ASSERT_TRUE(error);
    EXPECT_NE(error->find("no_such_kernel"), std::string::npos) << *error;
    error = state.run(4, {1}, {5});
    if (rank == 2) {
      EXPECT_EQ(error, std::nullopt);
    } else {
      ASSERT_TRUE(error);
      EXPECT_NE(error->find("runs at mesh position"), std::string::npos)
          << *error;
    }
  }
}

TEST(MeshContext, PointToPointPeersBecomeTheGlobalRankAtTheCoordinate) {
  // pp x dp = 3 x 2 over ranks in reverse order; the stage at pp = 1 sends
  // to pp = 2 and receives from pp = 0, each at its own dp coordinate.
  const std::vector<int64_t> mesh = {3, 2};
  std::vector<int64_t> ranks = {5, 4, 3, 2, 1, 0};
  ProgramBuilder b = classProgram(mesh);
  b.program().mutable_positions(0)->set_lo(0, 1);
  b.program().mutable_positions(0)->set_hi(0, 2);
  int x = b.input(F32, {4});
  int y = b.buffer(F32, {4});
  Instruction &send = b.add("send", {x}, {}, COMM);
  setInt(send, "axis", 0);
  setInt(send, "peer", 2);
  setInt(send, "tag", 3);
  Instruction &recv = b.add("recv", {}, {y}, COMM);
  setInt(recv, "axis", 0);
  setInt(recv, "peer", 0);
  setInt(recv, "tag", 3);
  b.output(y);
  EXPECT_NO_THROW(validateMeshProgram(b.program()));
  for (int64_t dp = 0; dp < 2; ++dp) {
    int64_t position = 1 * 2 + dp;
    RankContext context = RankContext::of(mesh, ranks, ranks[position]);
    Program resolved = resolveForRank(b.program(), context);
    const auto &sent = resolved.instructions(0).attrs();
    const auto &received = resolved.instructions(1).attrs();
    EXPECT_EQ(sent.count("axis"), 0u);
    EXPECT_EQ(sent.count("group"), 0u);
    EXPECT_EQ(sent.at("peer").i(), ranks[2 * 2 + dp]);
    EXPECT_EQ(received.at("peer").i(), ranks[0 * 2 + dp]);
    EXPECT_EQ(sent.at("tag").i(), 3);
    EXPECT_NO_THROW(validateProgram(resolved, ranks[position]));
  }
}

TEST(MeshValidation, RefusesPointToPointOutsideTheAxis) {
  ProgramBuilder b = classProgram({2, 2});
  int x = b.input(F32, {4});
  Instruction &send = b.add("send", {x}, {}, COMM);
  setInt(send, "axis", 1);
  setInt(send, "peer", 2);
  setInt(send, "tag", 0);
  expectRuntimeError([&] { validateMeshProgram(b.program()); },
                     {"instruction 0 ('send'",
                      "peer coordinate 2 is out of range for mesh axis 1 of "
                      "2 ranks"});
  setInt(send, "peer", 1);
  setInt(send, "tag", -4);
  expectRuntimeError([&] { validateMeshProgram(b.program()); },
                     {"tag must be >= 0"});
  // A rank's program may not send to itself.
  ProgramBuilder own;
  int z = own.input(F32, {4});
  Instruction &self = own.add("send", {z}, {}, COMM);
  setInt(self, "peer", 3);
  setInt(self, "tag", 0);
  expectRuntimeError([&] { validateProgram(own.program(), 3); },
                     {"peer is the rank itself (3)"});
  EXPECT_NO_THROW(validateProgram(own.program(), 2));
}

TEST(MeshValidation, RefusesMalformedClassPrograms) {
  auto invalid = [](Program program, const std::vector<std::string> &what) {
    expectRuntimeError([&] { validateMeshProgram(program); }, what);
  };
  {
    ProgramBuilder b;
    invalid(b.program(), {"it has no mesh_shape"});
  }
  {
    ProgramBuilder b = classProgram({2, 2});
    b.program().mutable_positions(0)->set_hi(1, 3);
    invalid(b.program(), {"position box 0 range [0, 3) of axis 1 is not "
                          "inside [0, 2)"});
    b.program().mutable_positions(0)->mutable_hi()->RemoveLast();
    invalid(b.program(), {"position box 0 needs 2 ranges"});
    b.program().clear_positions();
    invalid(b.program(), {"it names no mesh positions"});
  }
  {
    ProgramBuilder b = classProgram({2, 2});
    int x = b.input(F32, {4});
    int y = b.buffer(F32, {4});
    Instruction &reduce = b.add("all_reduce", {x}, {y}, COMM);
    setString(reduce, "reduce", "sum");
    setInt(reduce, "axis", 2);
    invalid(b.program(), {"instruction 0 ('all_reduce'",
                          "mesh axis 2 is out of range for a mesh of rank 2"});
    setInt(reduce, "axis", 1);
    setInts(reduce, "group", {0, 1});
    invalid(b.program(), {"names both a mesh axis and a group"});
  }
  {
    ProgramBuilder b = classProgram({3});
    int x = b.input(F32, {2, 4});
    int y = b.buffer(F32, {6, 4});
    Instruction &gather = b.add("all_gather", {x}, {y}, COMM);
    setInt(gather, "axis", 0);
    setInt(gather, "dim", 0);
    setInts(gather, "sizes", {3, 3});
    invalid(b.program(), {"sizes has 2 entries for mesh axis 0 of 3 ranks"});
  }
  {
    ProgramBuilder b = classProgram({2, 2});
    int y = b.buffer(F32, {4});
    Instruction &iota = b.add("iota", {}, {y});
    setInt(iota, "dim", 0);
    setBoxOffset(iota, "offset", {8}, {0}, -1);
    invalid(b.program(), {"mesh value 'offset' has 1 shard_dims for a mesh "
                          "of rank 2"});
    setBoxOffset(iota, "offset", {8}, {0, 1}, -1);
    invalid(b.program(), {"mesh value 'offset' shards dim 1 of a rank-1"});
    setBoxOffset(iota, "offset", {8}, {0, -1}, 1);
    invalid(b.program(), {"mesh value 'offset' dim 1 is out of range"});
    setBoxOffset(iota, "offset", {8}, {0, -1}, -1);
    EXPECT_NO_THROW(validateMeshProgram(b.program()));
    // A class program must be resolved before it is validated for a rank.
    expectRuntimeError([&] { validateProgram(b.program(), -1); },
                       {"attribute 'offset' is a mesh value"});
  }
  {
    ProgramBuilder b = classProgram({2});
    int x = b.input(F32, {4});
    int y = b.buffer(F32, {4});
    Instruction &slice = b.add("lead_or_zero", {x}, {y});
    MeshValue *coord = (*slice.mutable_attrs())["coord"].mutable_mesh();
    coord->set_kind(MeshValue::MESH_COORD);
    coord->set_axis(1);
    invalid(b.program(), {"mesh axis 1 is out of range for a mesh of rank 1"});
  }
  {
    // The program is for another mesh, or another class.
    ProgramBuilder b = classProgram({4});
    b.program().mutable_positions(0)->set_hi(0, 2);
    expectRuntimeError(
        [&] { resolveForRank(b.program(), RankContext::of({2}, {0, 1}, 0)); },
        {"it is for mesh [4] but rank 0 is on mesh [2]"});
    expectRuntimeError(
        [&] {
          resolveForRank(b.program(), RankContext::of({4}, {0, 1, 2, 3}, 3));
        },
        {"it does not run at mesh position [3] (rank 3)"});
  }
}

} // namespace
} // namespace dtorch::rt::test
