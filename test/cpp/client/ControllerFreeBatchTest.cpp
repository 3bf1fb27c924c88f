// Controller::free batches (DTORCH_BATCH_FREES): the frees made between two
// requests reach the backend as one free per mesh, before the next request
// and after every request made before them; with DTORCH_BATCH_FREES=0 each
// free is its own backend call. Both give the same values and live counts.
#include "ControllerTestSupport.h"
#include "SessionTestSupport.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

/// The in-process backend, logging the calls the controller makes in order
/// (ForwardingBackend's entries).
class LoggingBackend : public test::ForwardingBackend {
public:
  LoggingBackend() : ForwardingBackend(4) {}

  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_;
  }

private:
  void record(std::string entry) override {
    std::lock_guard<std::mutex> lock(mutex_);
    log_.push_back(std::move(entry));
  }
  std::mutex mutex_;
  std::vector<std::string> log_;
};

/// A controller on 4 in-process ranks with the meshes [4] (id 0) and [2]
/// over ranks 0-1 (id 1), built with DTORCH_BATCH_FREES set to `batch`.
struct ControllerFreeBatchTest : ::testing::TestWithParam<bool> {
  ControllerFreeBatchTest()
      : controller(test::makeControllerWith("DTORCH_BATCH_FREES", GetParam(),
                                            std::make_unique<LoggingBackend>(),
                                            backend)) {
    controller->addMesh(Mesh{0, {4}, {}, {0, 1, 2, 3}, "cpu", {}});
    controller->addMesh(Mesh{1, {2}, {}, {0, 1}, "cpu", {}});
  }
  ~ControllerFreeBatchTest() override { controller->shutdown(); }

  void putOnAll(Handle h, double first) {
    controller->put(0, h, doubles({first, first + 1, first + 2, first + 3}),
                    {Placement::shard(0)});
  }

  LoggingBackend *backend = nullptr;
  std::unique_ptr<Controller> controller;
};

TEST_P(ControllerFreeBatchTest, FreesGoBeforeTheNextRequestAfterTheOnesBefore) {
  for (Handle h = 1; h <= 4; ++h)
    putOnAll(h, 10.0 * h);
  controller->free(0, 2);
  controller->free(0, 3);
  controller->free(0, 1);
  std::vector<rt::Tensor> kept = controller->fetchPieces(0, 4);
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(values(kept[3]), std::vector<double>{43});
  controller->synchronize();
  EXPECT_EQ(controller->liveTensors(), 1u);
  std::vector<std::string> expected = {"put 1", "put 2", "put 3", "put 4"};
  if (GetParam())
    expected.push_back("free 2,3,1 on 4 ranks");
  else
    for (const char *one :
         {"free 2 on 4 ranks", "free 3 on 4 ranks", "free 1 on 4 ranks"})
      expected.push_back(one);
  expected.push_back("fetch 4");
  expected.push_back("sync");
  EXPECT_EQ(backend->log(), expected);
  ControllerStats stats = controller->stats();
  EXPECT_EQ(stats.frees, 3u);
  EXPECT_EQ(stats.freeRequests, GetParam() ? 1u : 3u);
}

TEST_P(ControllerFreeBatchTest, OneFreePerMeshAndBatchesSplitByRequests) {
  putOnAll(1, 0);
  putOnAll(2, 4);
  controller->put(1, 3, doubles({1, 2}), {Placement::shard(0)});
  controller->put(1, 4, doubles({3, 4}), {Placement::shard(0)});
  controller->free(0, 1);
  controller->free(1, 3);
  controller->free(0, 2);
  putOnAll(5, 8); // the frees before it go first, in one batch
  controller->free(1, 4);
  controller->synchronize();
  EXPECT_EQ(controller->liveTensors(), 1u);
  std::vector<std::string> log = backend->log();
  std::vector<std::string> expected = {"put 1", "put 2", "put 3", "put 4"};
  if (GetParam()) {
    expected.push_back("free 1,2 on 4 ranks");
    expected.push_back("free 3 on 2 ranks");
  } else {
    expected.push_back("free 1 on 4 ranks");
    expected.push_back("free 3 on 2 ranks");
    expected.push_back("free 2 on 4 ranks");
  }
  expected.push_back("put 5");
  expected.push_back("free 4 on 2 ranks");
  expected.push_back("sync");
  EXPECT_EQ(log, expected);
  // The freed values are gone from the ranks, the kept one is whole.
  std::vector<rt::Tensor> pieces = controller->fetchPieces(0, 5);
  EXPECT_EQ(values(pieces[2]), std::vector<double>{10});
  EXPECT_THROW(controller->fetchPieces(0, 1), std::exception);
}

TEST_P(ControllerFreeBatchTest,
       PendingFreesNeedNoWakeUpAndAreKeptUntilARequest) {
  putOnAll(1, 0);
  controller->synchronize();
  size_t before = backend->log().size();
  for (Handle h = 100; h < 1100; ++h)
    controller->free(0, h); // never put: the ranks ignore unknown handles
  controller->free(0, 1);
  if (GetParam()) {
    // Nothing is queued by a batched free: the backend sees none of them
    // and the value is still counted live until the next request.
    EXPECT_EQ(backend->log().size(), before);
    EXPECT_EQ(controller->liveTensors(), 1u);
  }
  controller->synchronize();
  EXPECT_EQ(controller->liveTensors(), 0u);
  ControllerStats stats = controller->stats();
  EXPECT_EQ(stats.frees, 1001u);
  EXPECT_EQ(stats.freeRequests, GetParam() ? 1u : 1001u);
}

INSTANTIATE_TEST_SUITE_P(BatchedAndNot, ControllerFreeBatchTest,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? std::string("Batched")
                                             : std::string("OnePerFree");
                         });

} // namespace
} // namespace dtorch::client
