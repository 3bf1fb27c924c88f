// Controller requests handled on the calling thread (DTORCH_INLINE_CONTROLLER):
// a request that does not compile (a run from the cache, a put, a free, a
// fetch, a synchronize) runs on the caller when nothing is queued and the
// controller thread is idle, else it is queued behind the request in
// progress; either way the backend sees the same calls in the same order,
// and an error is the same exception.
#include "ControllerTestSupport.h"
#include "SessionTestSupport.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

/// The in-process backend, logging each call the controller makes with
/// whether the test's thread made it; `synchronize` waits for open().
class ThreadLoggingBackend : public test::ForwardingBackend {
public:
  explicit ThreadLoggingBackend(std::thread::id caller)
      : ForwardingBackend(2), caller_(caller) {}

  struct Call {
    std::string what;
    bool onCaller;
  };
  std::vector<Call> log() {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_;
  }
  /// Lets a synchronize waiting in the backend finish.
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    gateOpen_ = true;
    changed_.notify_all();
  }
  void closeGate() {
    std::lock_guard<std::mutex> lock(mutex_);
    gateOpen_ = false;
  }
  /// Waits until a synchronize is waiting in the backend.
  void waitForSync() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return inSync_; });
  }

  void synchronize() override {
    record("sync");
    std::unique_lock<std::mutex> lock(mutex_);
    inSync_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return gateOpen_; });
    inSync_ = false;
    lock.unlock();
    inner_->synchronize();
  }

private:
  void record(std::string entry) override {
    std::lock_guard<std::mutex> lock(mutex_);
    log_.push_back({std::move(entry), std::this_thread::get_id() == caller_});
  }
  std::thread::id caller_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> log_;
  bool gateOpen_ = true;
  bool inSync_ = false;
};

/// Returns once the controller thread is idle: it ends a task a moment
/// after a synchronize waiting for it returned, and until then requests
/// queue behind it. With inline requests on, until one ran inline.
void settle(Controller &controller, bool on) {
  for (int i = 0; i < (on ? 1000 : 5); ++i) {
    uint64_t before = controller.stats().inlineRequests;
    controller.memoryStatsAsync().get(); // the backend logs nothing
    if (controller.stats().inlineRequests > before)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// A controller on 2 in-process ranks (mesh [2], id 0), built with
/// DTORCH_INLINE_CONTROLLER set to `on`.
std::unique_ptr<Controller> makeController(bool on,
                                           ThreadLoggingBackend *&backend) {
  auto controller = test::makeControllerWith(
      "DTORCH_INLINE_CONTROLLER", on,
      std::make_unique<ThreadLoggingBackend>(std::this_thread::get_id()),
      backend);
  controller->addMesh(Mesh{0, {2}, {}, {0, 1}, "cpu", {}});
  controller->synchronize(); // the mesh is known
  settle(*controller, on);
  return controller;
}

struct ControllerInlineTest : ::testing::TestWithParam<bool> {};

TEST_P(ControllerInlineTest, IdleControllerRequestsRunOnTheCallerInOrder) {
  ThreadLoggingBackend *backend;
  auto controller = makeController(GetParam(), backend);
  uint64_t inlinedBefore = controller->stats().inlineRequests;
  controller->put(0, 1, doubles({1, 2}), {Placement::shard(0)});
  controller->put(0, 2, doubles({3, 4}), {Placement::shard(0)});
  controller->free(0, 1);
  std::vector<rt::Tensor> pieces = controller->fetchPieces(0, 2);
  EXPECT_EQ(values(pieces[1]), std::vector<double>{4});
  controller->synchronize();
  std::vector<ThreadLoggingBackend::Call> log = backend->log();
  std::vector<std::string> expected = {
      "sync", "put 1", "put 2", "free 1 on 2 ranks", "fetch 2", "sync"};
  ASSERT_EQ(log.size(), expected.size());
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].what, expected[i]);
    // The first synchronize (makeController's) may find the mesh's request
    // still queued, and then queues too.
    if (i > 0)
      EXPECT_EQ(log[i].onCaller, GetParam()) << log[i].what;
  }
  uint64_t inlined = controller->stats().inlineRequests - inlinedBefore;
  if (GetParam())
    EXPECT_EQ(inlined, 5u); // put, put, frees, fetch, sync
  else
    EXPECT_EQ(controller->stats().inlineRequests, 0u);
  controller->shutdown();
}

TEST_P(ControllerInlineTest, ARequestWhileTheControllerIsBusyWaitsBehindIt) {
  ThreadLoggingBackend *backend;
  auto controller = makeController(GetParam(), backend);
  backend->closeGate();
  // Waits in the backend, on `other` itself (inline) or on the controller
  // thread (queued): either way the controller is busy.
  std::thread other([&] { controller->synchronize(); });
  backend->waitForSync();
  controller->put(0, 7, doubles({5, 6}), {Placement::shard(0)});
  std::vector<ThreadLoggingBackend::Call> log = backend->log();
  // Queued behind the synchronize, not handled on this thread.
  EXPECT_EQ(log.back().what, "sync");
  backend->open();
  other.join();
  controller->synchronize(); // the put has run
  settle(*controller, GetParam());
  std::vector<rt::Tensor> pieces = controller->fetchPieces(0, 7);
  EXPECT_EQ(values(pieces[0]), std::vector<double>{5});
  log = backend->log();
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[2].what, "put 7");
  EXPECT_FALSE(log[2].onCaller);
  EXPECT_EQ(log[3].what, "sync");
  EXPECT_EQ(log[4].what, "fetch 7");
  // Idle again: the fetch ran on this thread when inline is on.
  EXPECT_EQ(log[4].onCaller, GetParam());
  controller->shutdown();
}

INSTANTIATE_TEST_SUITE_P(InlineAndQueued, ControllerInlineTest,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? std::string("Inline")
                                             : std::string("Queued");
                         });

TEST(ControllerInline, SynchronizeQueuesWithItsOwnSwitchOff) {
  // DTORCH_INLINE_SYNC=0: the other requests still run on the caller,
  // synchronize on the controller thread.
  testsupport::ScopedEnvironment syncOff("DTORCH_INLINE_SYNC", "0");
  ThreadLoggingBackend *backend;
  auto controller = makeController(true, backend);
  controller->put(0, 1, doubles({1, 2}), {Placement::shard(0)});
  controller->synchronize();
  std::vector<ThreadLoggingBackend::Call> log = backend->log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].what, "put 1");
  EXPECT_TRUE(log[1].onCaller);
  EXPECT_EQ(log[2].what, "sync");
  EXPECT_FALSE(log[2].onCaller);
  controller->shutdown();
}

TEST(ControllerInline, AFailedFetchRaisesTheSameErrorEitherWay) {
  std::string messages[2];
  for (bool on : {false, true}) {
    ThreadLoggingBackend *backend;
    auto controller = makeController(on, backend);
    controller->put(0, 1, doubles({1, 2}), {Placement::shard(0)});
    try {
      controller->fetchPieces(0, 99); // never made
      ADD_FAILURE() << "no error";
    } catch (const std::exception &e) {
      messages[on] = e.what();
    }
    // The session goes on.
    EXPECT_EQ(values(controller->fetchPieces(0, 1)[0]), std::vector<double>{1});
    controller->shutdown();
  }
  EXPECT_FALSE(messages[0].empty());
  EXPECT_EQ(messages[0], messages[1]);
}

} // namespace
} // namespace dtorch::client
