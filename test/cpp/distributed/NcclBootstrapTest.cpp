// The NCCL unique id's way through the controller's key-value store
// (NcclBootstrap.h), with an in-memory store: the first member makes and
// publishes it, the others read it; a missing creator is an error naming it
// within the deadline; ids of the wrong size are refused. NCCL itself is not
// needed (the id is opaque bytes).
#include "TestSupport.h"

#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/NcclBootstrap.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

namespace dtorch::rt::test {
namespace {

using Clock = std::chrono::steady_clock;

TEST(NcclBootstrap, TheFirstMemberMakesTheIdAndEveryMemberGetsIt) {
  InMemoryKeyValueStore store;
  const Group group = {5, 2, 7}; // group order: 5 makes it
  std::atomic<int> made{0};
  std::vector<std::string> got(3);
  runRanks(3, [&](int index) {
    got[index] = exchangeNcclUniqueId(
        store, "nccl/world", group[index], group,
        [&] {
          ++made;
          return std::string(128, '\x5a');
        },
        128, std::chrono::seconds(5));
  });
  EXPECT_EQ(made, 1);
  for (const std::string &id : got)
    EXPECT_EQ(id, std::string(128, '\x5a'));
  EXPECT_EQ(store.keys(), (std::vector<std::string>{"nccl/world/id/5,2,7"}));
  // Another group, or another generation's prefix, has its own key.
  EXPECT_NE(ncclUniqueIdKey("nccl/world", {2, 5, 7}),
            ncclUniqueIdKey("nccl/world", group));
  EXPECT_NE(ncclUniqueIdKey("nccl/world/g1", group),
            ncclUniqueIdKey("nccl/world", group));
}

TEST(NcclBootstrap, AMissingCreatorIsAnErrorNamingItWithinTheDeadline) {
  InMemoryKeyValueStore store;
  auto start = Clock::now();
  expectRuntimeError(
      [&] {
        exchangeNcclUniqueId(
            store, "nccl/world", 1, {0, 1},
            [] { return std::string(128, 'x'); }, 128,
            std::chrono::milliseconds(200));
      },
      {"NCCL communicator of group [0, 1]", "rank 1 got no unique id",
       "from rank 0 within 200 ms"});
  auto waited = Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(200));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

TEST(NcclBootstrap, IdsOfTheWrongSizeAndNonMembersAreRefused) {
  InMemoryKeyValueStore store;
  expectRuntimeError(
      [&] {
        exchangeNcclUniqueId(
            store, "p", 0, {0, 1}, [] { return std::string(12, 'x'); }, 128,
            std::chrono::milliseconds(100));
      },
      {"the unique id made here has 12 bytes, not 128"});
  store.set(ncclUniqueIdKey("p", {3, 4}), "short");
  expectRuntimeError(
      [&] {
        exchangeNcclUniqueId(
            store, "p", 4, {3, 4}, [] { return std::string(128, 'x'); }, 128,
            std::chrono::milliseconds(100));
      },
      {"the unique id in the store has 5 bytes"});
  expectRuntimeError(
      [&] {
        exchangeNcclUniqueId(
            store, "p", 9, {3, 4}, [] { return std::string(128, 'x'); }, 128,
            std::chrono::milliseconds(100));
      },
      {"9"});
}

} // namespace
} // namespace dtorch::rt::test
