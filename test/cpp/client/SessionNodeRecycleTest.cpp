// Recycled nodes (Controller::takeSpareNodes, DTORCH_RECYCLE_NODES): once a
// segment runs from the program cache, its nodes come back to the session,
// which records later segments into them. Every field must be written
// anew: a stale input, operand, attribute, scalar or placement would change
// the structure (a cache miss) or the values.
#include "ScopedEnvironment.h"
#include "SessionTestSupport.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

/// A Session on 4 in-process ranks, built with DTORCH_RECYCLE_NODES set to
/// `recycle`.
struct SessionNodeRecycle : ::testing::TestWithParam<bool> {
  SessionNodeRecycle() {
    SessionOptions o;
    o.worldSize = 4;
    o.backend = "inprocess";
    {
      testsupport::ScopedEnvironment recycle("DTORCH_RECYCLE_NODES",
                                             GetParam() ? "1" : "0");
      session = std::make_unique<Session>(o);
    }
    mesh = session->addMesh({4}, {}, {}, "cpu");
  }
  ~SessionNodeRecycle() override { session->shutdown(); }

  /// A: (x + 1) * x, six nodes fewer than B and no attributes.
  std::vector<double> stepA(double base) {
    Tensor x = session->fromData(doubles({base, base + 1, base + 2, base + 3}),
                                 mesh, {Placement::shard(0)});
    Tensor y =
        session->binary("mul", session->binaryScalar("add", x, 1.0, false), x);
    return values(session->fetch(y));
  }

  /// B: sum over dim 1 of reshape(2 - x, [2, 2]) * 3, minus the max: attrs
  /// (reduce dims, reshape shape), a scalar first and a scalar second.
  std::vector<double> stepB(double base) {
    Tensor x = session->fromData(doubles({base, base + 1, base + 2, base + 3}),
                                 mesh, {Placement::shard(0)});
    Tensor r =
        session->reshape(session->binaryScalar("sub", x, 2.0, true), {2, 2});
    Tensor s = session->reduce(
        "sum", session->binaryScalar("mul", r, 3.0, false), {1}, false);
    Tensor m = session->reduce("max", s, {}, true);
    return values(session->fetch(session->binary("sub", s, m)));
  }

  std::unique_ptr<Session> session;
  int mesh = 0;
};

TEST_P(SessionNodeRecycle, RepeatedStepsHitTheCacheWithTheSameValues) {
  for (int step = 0; step < 8; ++step) {
    double b = step;
    EXPECT_EQ(stepA(b),
              (std::vector<double>{(b + 1) * b, (b + 2) * (b + 1),
                                   (b + 3) * (b + 2), (b + 4) * (b + 3)}))
        << "step " << step;
  }
  ControllerStats stats = session->controllerStats();
  EXPECT_EQ(stats.compiles, 1u);
  EXPECT_EQ(stats.memoryHits, 7u);
}

TEST_P(SessionNodeRecycle, AlternatingSegmentsReuseEachOthersNodes) {
  for (int step = 0; step < 10; ++step) {
    double b = step;
    if (step % 2 == 0) {
      EXPECT_EQ(stepA(b),
                (std::vector<double>{(b + 1) * b, (b + 2) * (b + 1),
                                     (b + 3) * (b + 2), (b + 4) * (b + 3)}))
          << "step " << step;
    } else {
      // rows [2-b, 1-b] and [-b, -1-b], each times 3 and summed.
      double s0 = 3 * ((2 - b) + (1 - b)), s1 = 3 * (-b + (-1 - b));
      double m = std::max(s0, s1);
      EXPECT_EQ(stepB(b), (std::vector<double>{s0 - m, s1 - m}))
          << "step " << step;
    }
  }
  ControllerStats stats = session->controllerStats();
  EXPECT_EQ(stats.compiles, 2u);
  EXPECT_EQ(stats.memoryHits, 8u);
}

INSTANTIATE_TEST_SUITE_P(RecycledAndNot, SessionNodeRecycle, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? std::string("Recycled")
                                             : std::string("Fresh");
                         });

} // namespace
} // namespace dtorch::client
