//===- RedistributeTrafficTest.cpp - byte counts match compiled programs -===//
//
// redistributeTraffic (lib/Layout) predicts what every rank sends from the
// plan and the piece sizes. This test checks it against an independent
// source: the per-rank programs the compiler emits for the same
// redistribution, whose collective instructions carry their buffer shapes,
// groups and split sizes. Meshes (4), (2,2), (2,3); every pair of R, S(0),
// S(1), P(sum) per axis on an uneven 7x5 f32 tensor.
//
//===----------------------------------------------------------------------===//
#include "dtorch/RedistributeTraffic.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

using namespace dtorch;

namespace {

const std::vector<int64_t> kShape = {7, 5};

std::vector<Placements> allPlacements(size_t meshRank) {
  std::vector<Placement> options = {Placement::replicate(), Placement::shard(0),
                                    Placement::shard(1), Placement::partial()};
  std::vector<Placements> out{{}};
  for (size_t a = 0; a < meshRank; ++a) {
    std::vector<Placements> next;
    for (const Placements &p : out)
      for (const Placement &o : options) {
        Placements q = p;
        q.push_back(o);
        next.push_back(q);
      }
    out = next;
  }
  return out;
}

std::string typeText(const std::vector<int64_t> &mesh, const Placements &p) {
  std::string s = "!dtensor.tensor<7x5xf32, #dtensor.mesh<[";
  for (size_t i = 0; i < mesh.size(); ++i)
    s += (i ? ", " : "") + std::to_string(mesh[i]);
  return s + "]>, " + placementsStr(p) + ">";
}

int64_t numel(const wire::TensorSpec &spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape())
    n *= d;
  return n;
}

/// Bytes the program's collectives send, read off its instructions.
int64_t bytesSentByProgram(const wire::Program &program, int64_t position) {
  int64_t total = 0;
  for (const wire::Instruction &inst : program.instructions()) {
    const std::string &op = inst.op();
    if (op != "all_gather" && op != "all_reduce" && op != "reduce_scatter" &&
        op != "all_to_all")
      continue;
    const auto &group = inst.attrs().at("group").ints().values();
    int64_t n = group.size();
    int64_t me =
        std::find(group.begin(), group.end(), position) - group.begin();
    EXPECT_LT(me, n) << "rank " << position << " is not in its group";
    const wire::TensorSpec &in = program.buffers(inst.inputs(0));
    const wire::TensorSpec &out = program.buffers(inst.outputs(0));
    int64_t count = numel(in);
    if (op == "all_gather") {
      total += (n - 1) * count;
    } else if (op == "all_reduce") {
      int64_t mine = count * (me + 1) / n - count * me / n;
      total += count - mine + (n - 1) * mine;
    } else if (op == "reduce_scatter") {
      total += count - numel(out);
    } else {
      int64_t splitDim = inst.attrs().at("split_dim").i();
      int64_t extent = in.shape(splitDim);
      int64_t kept = extent
                         ? count / extent *
                               inst.attrs().at("split_sizes").ints().values(me)
                         : 0;
      total += count - kept;
    }
  }
  return total * 4; // f32
}

void checkMesh(const std::vector<int64_t> &mesh) {
  std::vector<Placements> all = allPlacements(mesh.size());
  std::ostringstream os;
  for (size_t s = 0; s < all.size(); ++s)
    for (size_t d = 0; d < all.size(); ++d)
      os << "func.func @f_" << s << "_" << d
         << "(%x: " << typeText(mesh, all[s]) << ") -> "
         << typeText(mesh, all[d])
         << " {\n  %0 = dtensor.redistribute %x : " << typeText(mesh, all[s])
         << " -> " << typeText(mesh, all[d])
         << "\n  return %0 : " << typeText(mesh, all[d]) << "\n}\n";
  CompileResult compiled = compileModule(os.str(), "traffic.mlir");
  ASSERT_TRUE(compiled.ok) << compiled.error;
  int64_t positions = meshSize(mesh);
  size_t checked = 0, communicating = 0;
  for (const CompiledFunction &fn : compiled.functions) {
    size_t s = 0, d = 0;
    ASSERT_EQ(std::sscanf(fn.name.c_str(), "f_%zu_%zu", &s, &d), 2);
    std::vector<int64_t> predicted = totalBytesSent(
        redistributeTraffic(kShape, 4, mesh, all[s], all[d]), positions);
    std::vector<wire::Program> programs = emitted::programsByPosition(fn);
    ASSERT_EQ((int64_t)programs.size(), positions);
    bool any = false;
    for (int64_t p = 0; p < positions; ++p) {
      EXPECT_EQ(predicted[p], bytesSentByProgram(programs[p], p))
          << placementsStr(all[s]) << " -> " << placementsStr(all[d])
          << " on mesh position " << p;
      any |= predicted[p] > 0;
    }
    ++checked;
    communicating += any;
  }
  EXPECT_EQ(checked, all.size() * all.size());
  EXPECT_GT(communicating, all.size()); // the check is not vacuous
}

} // namespace

TEST(TrafficOfCompiledPrograms, MatchesCompiledProgramsOnMesh4) {
  checkMesh({4});
}
TEST(TrafficOfCompiledPrograms, MatchesCompiledProgramsOnMesh2x2) {
  checkMesh({2, 2});
}
TEST(TrafficOfCompiledPrograms, MatchesCompiledProgramsOnMesh2x3) {
  checkMesh({2, 3});
}
