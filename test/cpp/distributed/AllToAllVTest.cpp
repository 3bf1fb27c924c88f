// all_to_all with uneven counts (runtime/include/dtorch/runtime/AllToAllV.h)
// on the fake hub, the in-process shared-memory hub and Gloo (4 ranks as
// threads): data-dependent counts with empty pieces, a subgroup, the rows
// padded with zeros, an output too small (reported, and the channels stay in
// step for the next exchange), and bad counts; and the segmented form
// (fixed slots, only the counted rows sent). HostSharedMemoryCollectivesTest
// runs it across processes.
#include "AllToAllVCheck.h"
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"

#include <cstdlib>
#include <filesystem>

namespace dtorch::rt::test {
namespace {

constexpr int kWorld = 4;

void onEveryRank(const std::vector<std::unique_ptr<Communicator>> &comms) {
  runRanks(kWorld, [&](int rank) {
    checkAllToAllV(*comms[rank], rank);
    checkAllToAllVSegments(*comms[rank], rank);
  });
}

TEST(AllToAllV, FakeHub) {
  FakeCollectiveHub hub(kWorld, std::chrono::seconds(10));
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int rank = 0; rank < kWorld; ++rank)
    comms.push_back(hub.communicator(rank));
  onEveryRank(comms);
}

TEST(AllToAllV, InProcessSharedMemory) {
  SharedMemoryHub hub({0, 1, 2, 3}, kWorld, std::chrono::seconds(10));
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int rank = 0; rank < kWorld; ++rank)
    comms.push_back(hub.communicator(rank));
  onEveryRank(comms);
}

TEST(AllToAllV, Gloo) {
  char pattern[] = "/tmp/dtorch-alltoallv-XXXXXX";
  std::string dir = mkdtemp(pattern);
  {
    auto store = std::make_shared<FileKeyValueStore>(dir);
    std::vector<std::unique_ptr<Communicator>> comms(kWorld);
    GlooOptions options;
    options.deadline = std::chrono::seconds(20);
    runRanks(kWorld, [&](int rank) {
      comms[rank] = connectGloo(rank, kWorld, store, options);
    });
    onEveryRank(comms);
  }
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace dtorch::rt::test
