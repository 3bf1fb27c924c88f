// Collectives between processes that share one GPU through CUDA IPC
// (IpcDeviceCollectives.h with the DeviceIpc of runtime/cuda/CudaIpc.h):
// forked processes, each a rank on GPU 0, run the runtime's collective
// workload (CollectiveReference.h: every collective and dtype, uneven and
// empty pieces, groups out of rank order, send/recv) bit for bit against
// the reference; and all_reduce bandwidth between two processes on one GPU
// through device ipc next to the host path (pinned staging copies and the
// host shared-memory communicator) in the same run (scripts/gpu-check.sh
// prints it next to NCCL's one-rank-per-GPU figure).
//
// The parent never touches CUDA (a forked child of a process that did
// cannot use it): a child probes for a GPU, and the tests skip with its
// reason where there is none. Its own binary for the same reason.
#include "CollectiveReference.h"
#include "CudaDevice.h"
#include "CudaIpc.h"
#include "HostSharedMemoryTestSupport.h"

#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/IpcDeviceCollectives.h"
#include "dtorch/runtime/SharedDeviceCollectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fcntl.h>

namespace dtorch::rt::test {
namespace {

using ::dtorch::rt::cuda::cudaDevice;
using ::dtorch::rt::cuda::cudaDeviceIpc;
using ::dtorch::rt::cuda::registerCudaBackend;

// GPUs a child process sees; the reason in `why` when none.
int probeGpus(std::string &why) {
  int pipeFds[2];
  if (pipe(pipeFds) != 0) {
    why = "pipe failed";
    return 0;
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipeFds[0]);
    std::string reason;
    registerCudaBackend();
    int count = deviceCount("cuda", &reason);
    std::string line = std::to_string(count) + " " + reason;
    ssize_t written = write(pipeFds[1], line.data(), line.size());
    (void)written;
    _exit(0);
  }
  close(pipeFds[1]);
  char buffer[512] = {};
  ssize_t got = read(pipeFds[0], buffer, sizeof(buffer) - 1);
  close(pipeFds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got <= 0) {
    why = "the probe process failed";
    return 0;
  }
  std::string text(buffer, static_cast<size_t>(got));
  int count = std::atoi(text.c_str());
  size_t space = text.find(' ');
  why = space == std::string::npos ? "" : text.substr(space + 1);
  return count;
}

#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    std::string why;                                                           \
    if (probeGpus(why) < 1)                                                    \
      GTEST_SKIP() << "no CUDA device: " << why;                               \
  } while (0)

// Host tensors in, host tensors out: each call copies its operands to the
// GPU, runs `inner` there and copies the outputs back.
class OnTheGpu final : public Communicator {
public:
  OnTheGpu(Communicator &inner, Device &gpu) : inner_(inner), gpu_(gpu) {}
  int rank() const override { return inner_.rank(); }
  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    Tensor dx = up(x), dout = like(out);
    inner_.all_reduce(dx, dout, group, op);
    down(dout, out);
  }
  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    Tensor dx = up(x), dout = like(out);
    inner_.all_gather(dx, dout, group, dim, sizes);
    down(dout, out);
  }
  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    Tensor dx = up(x), dout = like(out);
    inner_.reduce_scatter(dx, dout, group, op, dim, sizes);
    down(dout, out);
  }
  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    Tensor dx = up(x), dout = like(out);
    inner_.all_to_all(dx, dout, group, splitDim, splitSizes, concatDim,
                      concatSizes);
    down(dout, out);
  }
  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    Tensor dx = x.defined() ? up(x) : Tensor(), dout = like(out);
    inner_.broadcast(dx, dout, group, root);
    down(dout, out);
  }
  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    Tensor dx = up(x);
    inner_.send(dx, peer, tag);
    gpu_.currentStream().synchronize(); // dx lives until the copy is done
  }
  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    Tensor dout = like(out);
    inner_.recv(dout, peer, tag);
    down(dout, out);
  }

private:
  Tensor up(const Tensor &t) { return copyToDeviceStaged(t, gpu_); }
  Tensor like(const Tensor &t) {
    return Tensor::empty(t.dtype(), t.shape(), gpu_);
  }
  void down(const Tensor &onGpu, Tensor &out) {
    gpu_.currentStream().synchronize();
    Tensor host = copyToHostStaged(onGpu);
    std::memcpy(out.data(), host.data(), out.nbytes());
  }
  Communicator &inner_;
  Device &gpu_;
};

IpcDeviceOptions gpuOptions() {
  IpcDeviceOptions options;
  options.deadline = 30s;
  options.chunkBytes = 64 << 10; // the workload's tensors take a few rounds
  options.directReduceBytes = 4096;
  options.p2pChunkBytes = 4096;
  return options;
}

TEST(CudaIpcCollectives, EveryCollectiveOnFourProcessesOfOneGpu) {
  SKIP_WITHOUT_GPU();
  StoreDirectory dir;
  auto codes = runProcesses(
      4,
      [&](int process) {
        registerCudaBackend();
        auto store = std::make_shared<FileKeyValueStore>(dir.path);
        Device &gpu = cudaDevice(0);
        auto comm = makeIpcDeviceCommunicator(
            process, cudaDeviceIpc(cudaDevice(0)), store, gpuOptions());
        OnTheGpu onGpu(*comm, gpu);
        for (DType dtype : everyDtype())
          runEveryCollective(onGpu, process, dtype);
        IpcDeviceStats stats = comm->stats();
        EXPECT_GT(stats.collectives, 100u);
        EXPECT_EQ(stats.peersOpened, 3u);
      },
      240s);
  expectAllSucceeded(codes);
}

// all_reduce of float32 between two processes on GPU 0: device ipc and the
// host path, interleaved, best of several calls each; rank 0 prints
// "ipc_allreduce <MiB> <ipc ms> <host ms> <ipc algbw GB/s> <host GB/s>".
TEST(CudaIpcCollectives, AllReduceBandwidthNextToTheHostPath) {
  SKIP_WITHOUT_GPU();
  StoreDirectory dir;
  auto codes = runProcesses(
      2,
      [&](int process) {
        registerCudaBackend();
        auto store = std::make_shared<FileKeyValueStore>(dir.path);
        Device &gpu = cudaDevice(0);
        IpcDeviceOptions options; // the defaults the worker uses
        auto ipc = makeIpcDeviceCommunicator(
            process, cudaDeviceIpc(cudaDevice(0)), store, options);
        HostSharedMemoryOptions hostOptions;
        hostOptions.hostIdentity = "gpu-check";
        auto hostComm =
            makeHostSharedMemoryCommunicator(process, store, hostOptions);
        DeviceCollectiveRouter hostPath(
            process, [](const Group &) { return CollectivePath::Host; },
            nullptr, nullptr, hostComm.get());
        const Group group = {0, 1};
        for (int64_t mib : {1, 16, 256}) { // nccl_allreduce_bench's sizes
          int64_t n = mib * (1 << 20) / 4;
          Tensor host = sampleTensor(::dtorch::wire::F32, {n}, 7 + process);
          Tensor x = copyToDeviceStaged(host, gpu);
          Tensor viaIpc = Tensor::empty(::dtorch::wire::F32, {n}, gpu);
          Tensor viaHost = Tensor::empty(::dtorch::wire::F32, {n}, gpu);
          double best[2] = {1e30, 1e30};
          for (int round = 0; round < 6; ++round)
            for (int path = 0; path < 2; ++path) {
              gpu.synchronize();
              ipc->all_reduce(x, viaIpc, group, ReduceOp::Sum); // align
              gpu.synchronize();
              auto start = std::chrono::steady_clock::now();
              if (path == 0)
                ipc->all_reduce(x, viaIpc, group, ReduceOp::Sum);
              else
                hostPath.all_reduce(x, viaHost, group, ReduceOp::Sum);
              gpu.synchronize();
              double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - start)
                              .count();
              best[path] = std::min(best[path], ms);
            }
          Tensor a = copyToHostStaged(viaIpc), b = copyToHostStaged(viaHost);
          expectSameBits(a, b, "device ipc vs host path");
          if (process == 0) {
            double gb = static_cast<double>(n) * 4 / 1e9;
            std::printf("ipc_allreduce %lld %.3f %.3f %.1f %.1f\n",
                        static_cast<long long>(mib), best[0], best[1],
                        gb / (best[0] / 1e3), gb / (best[1] / 1e3));
            std::fflush(stdout);
          }
        }
      },
      240s);
  expectAllSucceeded(codes);
}

} // namespace
} // namespace dtorch::rt::test
