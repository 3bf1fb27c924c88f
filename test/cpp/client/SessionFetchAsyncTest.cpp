// Session::fetchAsync: the fetch is queued and returns at once; another
// thread may wait for it; many may be in flight; a fetch of a value already
// on the workers leaves the pending segment alone; a worker failure arrives
// at wait() and the session goes on.
#include "SessionTestSupport.h"
#include "dtorch/Client/Errors.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dtorch::client {
namespace {

using test::doubles;
using test::longs;
using test::values;

using SessionFetchAsync = test::InProcessSessionTest;

TEST_F(SessionFetchAsync, ManyInFlightWaitedForByAnotherThread) {
  Tensor x = session->fromData(doubles({1, 2, 3, 4, 5, 6, 7, 8}), mesh,
                               {Placement::shard(0)});
  std::vector<std::shared_ptr<PendingFetch>> pending;
  Tensor y = x;
  for (int i = 0; i < 50; ++i) {
    y = session->binaryScalar("add", y, 1.0, false);
    pending.push_back(session->fetchAsync(y));
    EXPECT_EQ(session->pendingNodes(), 0u); // y's segment was cut
  }
  std::vector<std::vector<double>> got(pending.size());
  std::thread waiter([&] {
    for (size_t i = 0; i < pending.size(); ++i)
      got[i] = values(pending[i]->wait());
  });
  waiter.join();
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t k = 0; k < 8; ++k)
      EXPECT_EQ(got[i][k], static_cast<double>(k + 1 + i + 1));
  EXPECT_THROW(pending[0]->wait(), DTorchError); // waited for once
}

TEST_F(SessionFetchAsync, AValueOnTheWorkersDoesNotCutThePendingSegment) {
  Tensor x =
      session->fromData(doubles({1, 2, 3, 4}), mesh, {Placement::replicate()});
  Tensor y = session->unary("neg", x);
  EXPECT_EQ(session->pendingNodes(), 1u);
  EXPECT_EQ(values(session->fetch(x)), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(values(session->fetchAsync(x)->wait()),
            (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(session->fetchLocal(x).size(), 4u);
  EXPECT_EQ(session->pendingNodes(), 1u); // neg is still pending
  EXPECT_EQ(values(session->fetch(y)), (std::vector<double>{-1, -2, -3, -4}));
  EXPECT_EQ(session->pendingNodes(), 0u);
}

TEST_F(SessionFetchAsync, CutSegmentSubmitsWithoutWaiting) {
  Tensor x = session->full({8}, 3.0, wire::F64, mesh, {Placement::shard(0)});
  Tensor y = session->binaryScalar("mul", x, 2.0, false);
  size_t before = session->compiles();
  session->cutSegment();
  EXPECT_EQ(session->pendingNodes(), 0u);
  session->synchronize();
  EXPECT_EQ(session->compiles(), before + 1);
  EXPECT_EQ(values(session->fetch(y)), std::vector<double>(8, 6.0));
  session->cutSegment(); // nothing pending: nothing submitted
  session->synchronize();
  EXPECT_EQ(session->compiles(), before + 1);
}

TEST_F(SessionFetchAsync, AWorkerFailureArrivesAtWait) {
  Tensor a =
      session->fromData(longs({1, 2, 3, 4}), mesh, {Placement::replicate()});
  Tensor b =
      session->fromData(longs({1, -1, 3, 4}), mesh, {Placement::replicate()});
  // int64 power with a negative exponent fails on the workers.
  std::shared_ptr<PendingFetch> bad =
      session->fetchAsync(session->binary("pow", a, b));
  EXPECT_THROW(bad->wait(), WorkerError);
  Tensor c = session->binary("add", a, b);
  rt::Tensor sum = session->fetchAsync(c)->wait();
  const int64_t *p = sum.data_as<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(p, p + 4), (std::vector<int64_t>{2, 1, 6, 8}));
}

} // namespace
} // namespace dtorch::client
