//===- RedistributeExactnessTest.cpp - every redistribution is exact -----===//
//
// For meshes (2), (4), (2,2) and (2,3) and every pair of placements (R, S(0),
// S(1), P(sum), P(avg), P(max), P(min) per mesh axis) of an uneven 7x5 tensor,
// compiles `dtensor.redistribute` through the whole pipeline, runs the
// per-rank programs for all ranks in one process (the runtime's executor with
// the fake collective backend) and compares every rank's local piece with
// the expected piece of the full tensor.
//
//===----------------------------------------------------------------------===//
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

/// One function per source placement, returning it redistributed to every
/// destination placement.
std::string moduleText(const std::vector<int64_t> &mesh,
                       const std::vector<Placements> &all) {
  std::ostringstream os;
  for (size_t s = 0; s < all.size(); ++s) {
    os << "func.func @src" << s << "(%x: " << typeText(mesh, all[s])
       << ") -> (";
    for (size_t d = 0; d < all.size(); ++d)
      os << (d ? ", " : "") << typeText(mesh, all[d]);
    os << ") {\n";
    for (size_t d = 0; d < all.size(); ++d)
      os << "  %r" << d
         << " = dtensor.redistribute %x : " << typeText(mesh, all[s]) << " -> "
         << typeText(mesh, all[d]) << "\n";
    os << "  return ";
    for (size_t d = 0; d < all.size(); ++d)
      os << (d ? ", " : "") << "%r" << d;
    os << " : ";
    for (size_t d = 0; d < all.size(); ++d)
      os << (d ? ", " : "") << typeText(mesh, all[d]);
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

class RedistributeExactness
    : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(RedistributeExactness, AllPlacementPairs) {
  const std::vector<int64_t> mesh = GetParam();
  const int64_t world = meshSize(mesh);
  std::vector<Placements> all = allPlacements(mesh.size());
  CompileResult compiled =
      compileModule(moduleText(mesh, all), "exactness.mlir");
  ASSERT_TRUE(compiled.ok) << compiled.error;

  int pairs = 0;
  for (const CompiledFunction &fn : compiled.functions) {
    size_t s = std::stoul(fn.name.substr(3));
    ASSERT_EQ((int64_t)fn.programs.size(), world);
    std::vector<std::vector<rt::Tensor>> outputs(world);
    std::vector<std::string> errors(world);
    rt::FakeCollectiveHub hub(world, std::chrono::seconds(20));
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        try {
          auto comm = hub.communicator(r);
          rt::Executor exec(comm.get());
          outputs[r] = exec.run(fn.programs[r], {localPiece(mesh, all[s], r)});
        } catch (const std::exception &e) {
          errors[r] = e.what();
        }
      });
    for (std::thread &t : threads)
      t.join();
    for (int64_t r = 0; r < world; ++r)
      ASSERT_EQ(errors[r], "") << "source " << placementsStr(all[s]);
    for (size_t d = 0; d < all.size(); ++d) {
      std::vector<rt::Tensor> pieces;
      for (int64_t r = 0; r < world; ++r)
        pieces.push_back(outputs[r][d]);
      checkPieces(mesh, all[d], pieces,
                  placementsStr(all[s]) + " -> " + placementsStr(all[d]));
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, (int)(all.size() * all.size()));
}

INSTANTIATE_TEST_SUITE_P(Meshes, RedistributeExactness,
                         ::testing::Values(std::vector<int64_t>{2},
                                           std::vector<int64_t>{4},
                                           std::vector<int64_t>{2, 2},
                                           std::vector<int64_t>{2, 3}),
                         [](const auto &info) {
                           std::string s = "mesh";
                           for (int64_t d : info.param)
                             s += "_" + std::to_string(d);
                           return s;
                         });

} // namespace
