// An upload for a "cuda" mesh through dtorch-worker processes: the worker
// picks the device the upload names for each rank. Without a GPU (this
// machine) every run of it fails with an error naming the rank, its host,
// the device and why; the ranks stay usable for CPU programs. With a GPU the
// program computes there and matches the CPU.
#include "DistributedTestSupport.h"
#include "TestSupport.h"

#include "dtorch/runtime/Cluster.h"

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;

// y = x * x + x on every position of a mesh of two ranks.
Program squarePlusSelf() {
  ProgramBuilder b;
  int x = b.input(wire::F32, {3});
  int square = b.buffer(wire::F32, {3});
  int y = b.buffer(wire::F32, {3});
  b.add("mul", {x, x}, {square});
  b.add("add", {square, x}, {y});
  b.output(y);
  Program program = b.program();
  program.add_mesh_shape(2);
  auto *box = program.add_positions();
  box->add_lo(0);
  box->add_hi(2);
  return program;
}

TEST(DeviceUpload, TheWorkerComputesOnTheMeshsDeviceOrSaysWhyNot) {
  Cluster cluster(embeddedClusterOptions(2, 1));
  Program program = squarePlusSelf();
  std::string whyNone;
  int gpus = cluster.cudaDevicesOf(0, whyNone);
  cluster.uploadPrograms(1, {&program}, {0, 1}, "cuda", {0, gpus > 1 ? 1 : 0});
  for (int rank = 0; rank < 2; ++rank)
    cluster.put(rank, 10, makeTensor<float>(wire::F32, {3}, {1, -2, 0.5f}));
  cluster.run(std::vector<int64_t>{0, 1}, 1, {10}, {11});
  for (int rank = 0; rank < 2; ++rank) {
    if (gpus > 0) {
      EXPECT_EQ(valuesOf<float>(cluster.fetch(rank, 11).get()),
                (std::vector<float>{2, 2, 0.75f}));
      continue;
    }
    expectRuntimeError([&] { cluster.fetch(rank, 11).get(); },
                       {"rank " + std::to_string(rank) + " on host",
                        "cannot compute on cuda:0", "no CUDA device"});
  }
  // The same ranks run the CPU upload of the program.
  cluster.uploadPrograms(2, {&program}, {0, 1});
  cluster.run(std::vector<int64_t>{0, 1}, 2, {10}, {12});
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(valuesOf<float>(cluster.fetch(rank, 12).get()),
              (std::vector<float>{2, 2, 0.75f}));
  // One ordinal per mesh position.
  expectRuntimeError(
      [&] { cluster.uploadPrograms(3, {&program}, {0, 1}, "cuda", {0}); },
      {"1 device ordinals for a mesh of 2 ranks"});
}

} // namespace
} // namespace dtorch::rt::test
