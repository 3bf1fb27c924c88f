// Checkpoint requests through Cluster on dtorch-worker processes: ranks of
// both processes write their pieces (queued behind their puts), ranks of
// the other process read regions spanning pieces of both, a failed read
// poisons its handle and leaves the rank usable, and a request to a killed
// worker fails with WorkerError.
#include "DistributedTestSupport.h"

#include "dtorch/runtime/Cluster.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

namespace dtorch::rt {
namespace {

namespace wire = ::dtorch::wire;

ClusterOptions localOptions() { return test::embeddedClusterOptions(); }

Tensor rows(int64_t first, int64_t count, int64_t width) {
  Tensor t = Tensor::empty(wire::F64, {count, width});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<double>()[i] = static_cast<double>(first * width + i);
  return t;
}

wire::CheckpointRequest writeRequest(int rank, const std::string &folder,
                                     uint64_t handle) {
  wire::CheckpointRequest r;
  r.set_rank(rank);
  r.set_action(wire::CheckpointRequest::WRITE);
  r.set_directory(folder);
  r.set_file("shards-rank-" + std::to_string(rank) + ".bin");
  r.add_write_handles(handle);
  return r;
}

TEST(CheckpointCluster, RanksWriteAndReadRegionsAcrossProcesses) {
  std::string folder = (std::filesystem::temp_directory_path() /
                        ("dtorch-ckpt-cluster-" + std::to_string(::getpid())))
                           .string();
  std::filesystem::create_directories(folder);
  Cluster cluster(localOptions());
  // A 6x4 tensor as rows 0-2 on rank 1 (process 0), 3-5 on rank 2
  // (process 1); not synchronized: the writes queue behind the puts.
  cluster.put(1, 5, rows(0, 3, 4));
  cluster.put(2, 5, rows(3, 3, 4));
  wire::CheckpointReply top =
      cluster.checkpoint(writeRequest(1, folder, 5)).get();
  wire::CheckpointReply bottom =
      cluster.checkpoint(writeRequest(2, folder, 5)).get();
  ASSERT_TRUE(top.ok()) << top.error();
  ASSERT_TRUE(bottom.ok()) << bottom.error();
  ASSERT_EQ(top.written_size(), 1);
  EXPECT_EQ(top.written(0).byte_size(), 96u);

  auto source = [&](int64_t firstRow, const wire::CheckpointReply &reply,
                    int rank) {
    wire::CheckpointChunk c;
    c.add_offsets(firstRow);
    c.add_offsets(0);
    c.add_sizes(3);
    c.add_sizes(4);
    c.set_file("shards-rank-" + std::to_string(rank) + ".bin");
    c.set_byte_offset(reply.written(0).byte_offset());
    c.set_byte_size(reply.written(0).byte_size());
    c.set_checksum(reply.written(0).checksum());
    return c;
  };
  // Rank 3 reads column 1-2 of rows 2-4 (parts of both pieces), rank 0
  // the whole tensor.
  auto readRequest = [&](int rank, uint64_t handle, std::vector<int64_t> off,
                         std::vector<int64_t> size) {
    wire::CheckpointRequest r;
    r.set_rank(rank);
    r.set_action(wire::CheckpointRequest::READ);
    r.set_directory(folder);
    wire::CheckpointRead *read = r.add_reads();
    read->set_handle(handle);
    read->set_dtype(wire::F64);
    for (size_t d = 0; d < off.size(); ++d) {
      read->add_offsets(off[d]);
      read->add_sizes(size[d]);
    }
    *read->add_sources() = source(0, top, 1);
    *read->add_sources() = source(3, bottom, 2);
    return r;
  };
  wire::CheckpointReply part =
      cluster.checkpoint(readRequest(3, 9, {2, 1}, {3, 2})).get();
  ASSERT_TRUE(part.ok()) << part.error();
  Tensor got = cluster.fetch(3, 9).get();
  ASSERT_EQ(got.shape(), (std::vector<int64_t>{3, 2}));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 2; ++c)
      EXPECT_EQ(got.data_as<double>()[r * 2 + c], (r + 2) * 4 + c + 1);
  ASSERT_TRUE(cluster.checkpoint(readRequest(0, 9, {0, 0}, {6, 4})).get().ok());
  Tensor whole = cluster.fetch(0, 9).get();
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(whole.data_as<double>()[i], i);

  // A missing file: the reply says so, the handle is poisoned, the rank
  // goes on.
  std::filesystem::remove(folder + "/shards-rank-2.bin");
  wire::CheckpointReply failed =
      cluster.checkpoint(readRequest(3, 10, {0, 0}, {6, 4})).get();
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.error().find("shards-rank-2.bin"), std::string::npos)
      << failed.error();
  EXPECT_THROW(cluster.fetch(3, 10).get(), WorkerError);
  EXPECT_EQ(cluster.fetch(3, 9).get().numel(), 6);

  // A killed worker fails the request with WorkerError naming its rank.
  ::kill(static_cast<pid_t>(cluster.pidOf(2)), SIGKILL);
  std::future<wire::CheckpointReply> lost =
      cluster.checkpoint(writeRequest(2, folder, 5));
  try {
    lost.get();
    ADD_FAILURE() << "a request to a killed worker succeeded";
  } catch (const WorkerError &e) {
    EXPECT_EQ(e.rank(), 2);
  }
  cluster.shutdown();
  std::filesystem::remove_all(folder);
}

} // namespace
} // namespace dtorch::rt
