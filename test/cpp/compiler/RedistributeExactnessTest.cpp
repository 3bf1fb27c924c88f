//===- RedistributeExactnessTest.cpp - every redistribution is exact -----===//
//
// For meshes (2), (4), (2,2) and (2,3) and every pair of placements (R, S(0),
// S(1), P(sum), P(avg), P(max), P(min) per mesh axis) of an uneven 7x5 tensor,
// compiles `dtensor.redistribute` through the whole pipeline, runs the
// per-rank programs for all ranks in one process (the runtime's executor with
// the fake collective backend) and compares every rank's local piece with
// the expected piece of the full tensor. On the 3-D meshes (2,2,2), (2,1,3)
// and (1,2,2) each of the 343 source placements is checked against every
// 41st destination, from an offset that moves with the source (about 2,900
// pairs per mesh, a few seconds; all 117,649 would take minutes).
//
//===----------------------------------------------------------------------===//
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <thread>

using namespace dtorch;

namespace {

const std::vector<int64_t> kShape = {7, 5};

std::vector<Placement> axisOptions() {
  return {Placement::replicate(),
          Placement::shard(0),
          Placement::shard(1),
          Placement::partial(ReduceOp::Sum),
          Placement::partial(ReduceOp::Avg),
          Placement::partial(ReduceOp::Max),
          Placement::partial(ReduceOp::Min)};
}

std::vector<Placements> allPlacements(size_t meshRank) {
  std::vector<Placements> out{{}};
  for (size_t a = 0; a < meshRank; ++a) {
    std::vector<Placements> next;
    for (const Placements &p : out)
      for (const Placement &o : axisOptions()) {
        Placements q = p;
        q.push_back(o);
        next.push_back(q);
      }
    out = next;
  }
  return out;
}

std::string meshText(const std::vector<int64_t> &mesh) {
  std::string s = "#dtensor.mesh<[";
  for (size_t i = 0; i < mesh.size(); ++i)
    s += (i ? ", " : "") + std::to_string(mesh[i]);
  return s + "]>";
}

std::string typeText(const std::vector<int64_t> &mesh, const Placements &p) {
  return "!dtensor.tensor<7x5xf64, " + meshText(mesh) + ", " +
         placementsStr(p) + ">";
}

/// The destinations checked for source `s`: all of them, or every
/// `stride`-th one, starting at an offset that varies with the source so
/// that every destination is checked against several sources.
std::vector<size_t> destinations(size_t s, size_t count, size_t stride) {
  std::vector<size_t> out;
  for (size_t d = (s * 5) % stride; d < count; d += stride)
    out.push_back(d);
  return out;
}

/// One function per source placement, returning it redistributed to each of
/// its destination placements.
std::string moduleText(const std::vector<int64_t> &mesh,
                       const std::vector<Placements> &all, size_t stride) {
  std::ostringstream os;
  for (size_t s = 0; s < all.size(); ++s) {
    std::vector<size_t> dsts = destinations(s, all.size(), stride);
    os << "func.func @src" << s << "(%x: " << typeText(mesh, all[s])
       << ") -> (";
    for (size_t i = 0; i < dsts.size(); ++i)
      os << (i ? ", " : "") << typeText(mesh, all[dsts[i]]);
    os << ") {\n";
    for (size_t i = 0; i < dsts.size(); ++i)
      os << "  %r" << i
         << " = dtensor.redistribute %x : " << typeText(mesh, all[s]) << " -> "
         << typeText(mesh, all[dsts[i]]) << "\n";
    os << "  return ";
    for (size_t i = 0; i < dsts.size(); ++i)
      os << (i ? ", " : "") << "%r" << i;
    os << " : ";
    for (size_t i = 0; i < dsts.size(); ++i)
      os << (i ? ", " : "") << typeText(mesh, all[dsts[i]]);
    os << "\n}\n";
  }
  return os.str();
}

double fullValue(int64_t i, int64_t j) {
  return (double)((i * 5 + j) % 11) - 4.0;
}

/// A rank's local piece of the full tensor under `p`. Partial axes get pieces
/// whose reduction (in any order over the axes) is the full value: sum/avg
/// scale by weights that sum (average) to one, max/min shift by a multiple of
/// the coordinate (zero at coordinate 0).
rt::Tensor localPiece(const std::vector<int64_t> &mesh, const Placements &p,
                      int64_t rank) {
  std::vector<int64_t> c = meshCoords(mesh, rank);
  LocalBox box = localBox(kShape, mesh, p, c);
  double scale = 1, shift = 0;
  for (size_t a = 0; a < mesh.size(); ++a) {
    double n = (double)mesh[a], k = (double)c[a];
    if (!p[a].isPartial())
      continue;
    switch (p[a].op) {
    case ReduceOp::Sum:
      scale *= (k + 1) / (n * (n + 1) / 2);
      break;
    case ReduceOp::Avg:
      scale *= 2 * (k + 1) / (n + 1);
      break;
    case ReduceOp::Max:
      shift -= 3 * k;
      break;
    case ReduceOp::Min:
      shift += 3 * k;
      break;
    }
  }
  rt::Tensor t = rt::Tensor::empty(wire::F64, box.shape);
  double *d = t.data_as<double>();
  for (int64_t i = 0; i < box.shape[0]; ++i)
    for (int64_t j = 0; j < box.shape[1]; ++j)
      d[i * box.shape[1] + j] =
          fullValue(box.offset[0] + i, box.offset[1] + j) * scale + shift;
  return t;
}

double combine(ReduceOp op, double a, double b, bool first) {
  if (first)
    return b;
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    return a + b;
  case ReduceOp::Max:
    return std::max(a, b);
  case ReduceOp::Min:
    return std::min(a, b);
  }
  return b;
}

/// Checks the outputs of all ranks for destination `p`: every local piece has
/// its box's shape and, reduced over the partial axes, equals the full value.
void checkPieces(const std::vector<int64_t> &mesh, const Placements &p,
                 const std::vector<rt::Tensor> &pieces,
                 const std::string &what) {
  int64_t world = meshSize(mesh);
  for (int64_t r = 0; r < world; ++r) {
    std::vector<int64_t> c = meshCoords(mesh, r);
    LocalBox box = localBox(kShape, mesh, p, c);
    ASSERT_EQ(pieces[r].shape(), box.shape) << what << " rank " << r;
    bool representative = true;
    for (size_t a = 0; a < mesh.size(); ++a)
      representative &= !p[a].isPartial() || c[a] == 0;
    if (!representative)
      continue;
    // Reduce over the partial axes, axis by axis.
    std::function<double(std::vector<int64_t>, size_t, int64_t)> reduceAt =
        [&](std::vector<int64_t> coords, size_t axis, int64_t e) -> double {
      if (axis == mesh.size())
        return pieces[meshLinear(mesh, coords)].data_as<double>()[e];
      if (!p[axis].isPartial())
        return reduceAt(coords, axis + 1, e);
      double acc = 0;
      for (int64_t k = 0; k < mesh[axis]; ++k) {
        coords[axis] = k;
        acc = combine(p[axis].op, acc, reduceAt(coords, axis + 1, e), k == 0);
      }
      if (p[axis].op == ReduceOp::Avg)
        acc /= (double)mesh[axis];
      return acc;
    };
    for (int64_t i = 0; i < box.shape[0]; ++i)
      for (int64_t j = 0; j < box.shape[1]; ++j) {
        double got = reduceAt(c, 0, i * box.shape[1] + j);
        double want = fullValue(box.offset[0] + i, box.offset[1] + j);
        ASSERT_NEAR(got, want, 1e-9)
            << what << " rank " << r << " element (" << i << ", " << j << ")";
      }
  }
}

struct MeshCase {
  std::vector<int64_t> mesh;
  size_t stride; // check every stride-th destination of each source
};

/// Names the case in test logs: "mesh (2, 2, 2), one destination in 41".
void PrintTo(const MeshCase &c, std::ostream *os) {
  *os << "mesh (";
  for (size_t i = 0; i < c.mesh.size(); ++i)
    *os << (i ? ", " : "") << c.mesh[i];
  *os << ")";
  if (c.stride > 1)
    *os << ", one destination in " << c.stride;
}

class RedistributeExactness : public ::testing::TestWithParam<MeshCase> {};

TEST_P(RedistributeExactness, AllPlacementPairs) {
  const std::vector<int64_t> mesh = GetParam().mesh;
  const size_t stride = GetParam().stride;
  const int64_t world = meshSize(mesh);
  std::vector<Placements> all = allPlacements(mesh.size());
  CompileResult compiled =
      compileModule(moduleText(mesh, all, stride), "exactness.mlir");
  ASSERT_TRUE(compiled.ok) << compiled.error;

  int pairs = 0, expected = 0;
  for (size_t s = 0; s < all.size(); ++s)
    expected += destinations(s, all.size(), stride).size();
  for (const CompiledFunction &fn : compiled.functions) {
    size_t s = std::stoul(fn.name.substr(3));
    std::vector<size_t> dsts = destinations(s, all.size(), stride);
    std::vector<wire::Program> programs = emitted::programsByPosition(fn);
    ASSERT_EQ((int64_t)programs.size(), world);
    std::vector<std::vector<rt::Tensor>> outputs(world);
    std::vector<std::string> errors(world);
    rt::FakeCollectiveHub hub(world, std::chrono::seconds(20));
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        try {
          auto comm = hub.communicator(r);
          rt::Executor exec(comm.get());
          outputs[r] = exec.run(programs[r], {localPiece(mesh, all[s], r)});
        } catch (const std::exception &e) {
          errors[r] = e.what();
        }
      });
    for (std::thread &t : threads)
      t.join();
    for (int64_t r = 0; r < world; ++r)
      ASSERT_EQ(errors[r], "") << "source " << placementsStr(all[s]);
    for (size_t i = 0; i < dsts.size(); ++i) {
      std::vector<rt::Tensor> pieces;
      for (int64_t r = 0; r < world; ++r)
        pieces.push_back(outputs[r][i]);
      checkPieces(mesh, all[dsts[i]], pieces,
                  placementsStr(all[s]) + " -> " + placementsStr(all[dsts[i]]));
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, expected);
  if (stride == 1)
    EXPECT_EQ(pairs, (int)(all.size() * all.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, RedistributeExactness,
    ::testing::Values(MeshCase{{2}, 1}, MeshCase{{4}, 1}, MeshCase{{2, 2}, 1},
                      MeshCase{{2, 3}, 1}, MeshCase{{2, 2, 2}, 41},
                      MeshCase{{2, 1, 3}, 41}, MeshCase{{1, 2, 2}, 41}),
    [](const auto &info) {
      std::string s = "mesh";
      for (int64_t d : info.param.mesh)
        s += "_" + std::to_string(d);
      return s;
    });

} // namespace
