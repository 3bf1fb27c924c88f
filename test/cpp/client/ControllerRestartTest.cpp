// Controller::restart and automatic restarts against a backend that reports
// replaced ranks: values with a piece on a replaced rank become lost (their
// fetches raise WorkerError naming the rank), values on the other ranks
// are kept, the backend's restart runs behind the work queued before it,
// and an automatic restart runs before the next request once the backend
// knows of a dead worker.
#include "ControllerTestSupport.h"
#include "SessionTestSupport.h"
#include "dtorch/Client/Errors.h"

#include <gtest/gtest.h>

#include <atomic>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

/// The in-process backend, whose restart "replaces" the ranks the test
/// chooses; a rank replaced this way forgets what it held, as a new
/// worker process would.
class ReplacingBackend : public test::ForwardingBackend {
public:
  explicit ReplacingBackend(std::vector<int> toReplace)
      : ForwardingBackend(4), toReplace_(std::move(toReplace)) {}
  std::atomic<bool> dead{false};
  std::atomic<int> restarts{0};

  void put(int rank, Handle h, const rt::Tensor &v) override {
    ForwardingBackend::put(rank, h, v);
    held_.push_back({rank, h});
  }
  std::vector<int> restart(std::chrono::milliseconds) override {
    for (auto [rank, handle] : held_)
      for (int gone : toReplace_)
        if (rank == gone)
          inner_->free(rank, {handle});
    ++restarts;
    dead = false;
    return toReplace_;
  }
  bool hasDeadWorker() const override { return dead; }

private:
  std::vector<int> toReplace_;
  std::vector<std::pair<int, Handle>> held_;
};

struct ControllerRestartTest : ::testing::Test {
  ControllerRestartTest() {
    auto owned = std::make_unique<ReplacingBackend>(std::vector<int>{2, 3});
    backend = owned.get();
    controller = std::make_unique<Controller>(std::move(owned));
    Mesh all{0, {4}, {}, {0, 1, 2, 3}, "cpu", {}};
    Mesh low{1, {2}, {}, {0, 1}, "cpu", {}};
    controller->addMesh(all);
    controller->addMesh(low);
    controller->put(0, 1, doubles({1, 2, 3, 4}), {Placement::shard(0)});
    controller->put(1, 2, doubles({5, 6}), {Placement::shard(0)});
  }
  ~ControllerRestartTest() override { controller->shutdown(); }

  /// The message of the WorkerError the fetch of `handle` raises.
  std::string fetchError(int mesh, Handle handle) {
    try {
      controller->fetchPieces(mesh, handle);
    } catch (const WorkerError &e) {
      EXPECT_EQ(e.rank(), 2);
      return e.what();
    }
    ADD_FAILURE() << "the fetch of " << handle << " did not fail";
    return "";
  }

  ReplacingBackend *backend;
  std::unique_ptr<Controller> controller;
};

TEST_F(ControllerRestartTest, ValuesOnReplacedRanksAreLostOthersKept) {
  Controller::RestartOutcome outcome =
      controller->restart(std::chrono::milliseconds(100));
  EXPECT_EQ(outcome.replacedRanks, (std::vector<int>{2, 3}));
  ASSERT_EQ(outcome.lost.size(), 1u);
  ASSERT_TRUE(outcome.lost.count(1));
  EXPECT_EQ(outcome.lost.at(1).rank, 2);
  EXPECT_NE(outcome.lost.at(1).message.find("tensor lost"), std::string::npos);
  EXPECT_NE(outcome.lost.at(1).message.find("rank(s) 2, 3"), std::string::npos);
  EXPECT_EQ(controller->restartCount(), 1u);
  EXPECT_EQ(controller->liveTensors(), 1u);
  // The value on ranks 0-1 is intact; the one on every rank is lost.
  std::vector<rt::Tensor> kept = controller->fetchPieces(1, 2);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(values(kept[0]), std::vector<double>{5});
  EXPECT_EQ(values(kept[1]), std::vector<double>{6});
  EXPECT_NE(fetchError(0, 1).find("replaced"), std::string::npos);
  // A new value on every rank works; freeing the lost one forgets it.
  controller->put(0, 3, doubles({7, 8, 9, 10}), {Placement::shard(0)});
  EXPECT_EQ(controller->fetchPieces(0, 3).size(), 4u);
  controller->free(0, 1);
  controller->synchronize();
  EXPECT_EQ(controller->liveTensors(), 2u);
}

TEST_F(ControllerRestartTest, AutomaticRestartRunsBeforeTheNextRequest) {
  controller->setAutoRestart(true);
  EXPECT_EQ(controller->fetchPieces(0, 1).size(), 4u);
  EXPECT_EQ(backend->restarts, 0); // nothing dead: no restart
  backend->dead = true;
  EXPECT_NE(fetchError(0, 1).find("tensor lost"), std::string::npos);
  EXPECT_EQ(backend->restarts, 1);
  EXPECT_EQ(controller->autoRestartEpoch(), 1u);
  auto lost = controller->takeAutoLost();
  EXPECT_EQ(lost.size(), 1u);
  EXPECT_TRUE(lost.count(1));
  EXPECT_TRUE(controller->takeAutoLost().empty()); // handed over once
  EXPECT_EQ(controller->stats().autoRestarts, 1u);
  EXPECT_EQ(controller->stats().restarts, 1u);
  EXPECT_EQ(values(controller->fetchPieces(1, 2)[1]), std::vector<double>{6});
}

TEST_F(ControllerRestartTest, WithoutAutomaticRestartsADeadWorkerWaits) {
  backend->dead = true;
  EXPECT_EQ(controller->fetchPieces(0, 1).size(), 4u);
  controller->synchronize();
  EXPECT_EQ(backend->restarts, 0);
  EXPECT_EQ(controller->restartCount(), 0u);
}

} // namespace
} // namespace dtorch::client
