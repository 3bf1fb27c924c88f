// The NCCL communicator (runtime/cuda/NcclCommunicator.h) on real GPUs: one
// rank per GPU, the unique ids through an in-memory store. The world of four
// runs the runtime's collective workload (CollectiveReference.h: uneven and
// empty pieces, groups out of rank order, every collective) on the exact
// dtypes, bit for bit; float sums are compared with a tolerance (NCCL adds in
// its own order). One GPU runs a world of one. Skips with the reason where
// there are too few GPUs (no GPU here; one on the GPU check machine).
#include "NcclCommunicator.h"
#include "CollectiveReference.h"
#include "CudaDevice.h"

#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/InMemoryKeyValueStore.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

namespace dtorch::rt::test {
namespace {

using ::dtorch::rt::cuda::cudaDevice;
using ::dtorch::rt::cuda::makeNcclCommunicator;
using ::dtorch::rt::cuda::registerCudaBackend;

// Host tensors in, host tensors out: each call copies its operands to the
// rank's GPU, runs the NCCL communicator there and copies the outputs back,
// so the host workloads of the other backends run unchanged.
class OnTheGpu final : public Communicator {
public:
  OnTheGpu(std::unique_ptr<Communicator> nccl, Device &gpu)
      : nccl_(std::move(nccl)), gpu_(gpu) {}
  int rank() const override { return nccl_->rank(); }
  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    Tensor dx = up(x), dout = like(out);
    nccl_->all_reduce(dx, dout, group, op);
    down(dout, out);
  }
  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    Tensor dx = up(x), dout = like(out);
    nccl_->all_gather(dx, dout, group, dim, sizes);
    down(dout, out);
  }
  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    Tensor dx = up(x), dout = like(out);
    nccl_->reduce_scatter(dx, dout, group, op, dim, sizes);
    down(dout, out);
  }
  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    Tensor dx = up(x), dout = like(out);
    nccl_->all_to_all(dx, dout, group, splitDim, splitSizes, concatDim,
                      concatSizes);
    down(dout, out);
  }
  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    Tensor dx = x.defined() ? up(x) : Tensor(), dout = like(out);
    nccl_->broadcast(dx, dout, group, root);
    down(dout, out);
  }
  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    nccl_->send(up(x), peer, tag);
  }
  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    Tensor dout = like(out);
    nccl_->recv(dout, peer, tag);
    down(dout, out);
  }

private:
  Tensor up(const Tensor &t) { return copyToDeviceStaged(t, gpu_); }
  Tensor like(const Tensor &t) {
    return Tensor::empty(t.dtype(), t.shape(), gpu_);
  }
  void down(const Tensor &d, Tensor &out) {
    Tensor host = copyToHostStaged(d);
    if (out.nbytes())
      std::memcpy(out.data(), host.data(), out.nbytes());
  }
  std::unique_ptr<Communicator> nccl_;
  Device &gpu_;
};

int gpus(std::string &why) {
  registerCudaBackend();
  return deviceCount("cuda", &why);
}

// One NCCL communicator per rank, rank r on GPU r.
std::vector<std::unique_ptr<Communicator>> ncclWorld(int world) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int rank = 0; rank < world; ++rank) {
    cuda::NcclOptions options;
    options.deadline = std::chrono::seconds(60);
    comms.push_back(std::make_unique<OnTheGpu>(
        makeNcclCommunicator(rank, cudaDevice(rank), store, options),
        cudaDevice(rank)));
  }
  return comms;
}

TEST(NcclCommunicator, OneGpuRunsAWorldOfOne) {
  std::string why;
  if (gpus(why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  auto comms = ncclWorld(1);
  Communicator &comm = *comms[0];
  Tensor x = sampleTensor(::dtorch::wire::F32, {3, 5}, 7);
  Tensor out = Tensor::empty(::dtorch::wire::F32, {3, 5});
  comm.all_reduce(x, out, {0}, ReduceOp::Sum);
  expectSameBits(out, x, "all_reduce of one");
  comm.all_gather(x, out, {0}, 1, {5});
  expectSameBits(out, x, "all_gather of one");
  comm.reduce_scatter(x, out, {0}, ReduceOp::Max, 1, {5});
  expectSameBits(out, x, "reduce_scatter of one");
  comm.all_to_all(x, out, {0}, 1, {5}, 1, {5});
  expectSameBits(out, x, "all_to_all of one");
  comm.broadcast(x, out, {0}, 0);
  expectSameBits(out, x, "broadcast of one");
}

TEST(NcclCommunicator, FourGpusMatchTheReferenceOnExactDtypes) {
  std::string why;
  int n = gpus(why);
  if (n < 4)
    GTEST_SKIP() << "needs 4 GPUs, this machine has " << n
                 << (why.empty() ? "" : " (" + why + ")");
  auto comms = ncclWorld(4);
  for (DType dtype :
       {::dtorch::wire::I32, ::dtorch::wire::I64, ::dtorch::wire::BOOL})
    runRanks(4,
             [&](int rank) { runEveryCollective(*comms[rank], rank, dtype); });
}

TEST(NcclCommunicator, TwoGpusSendReceiveBothWaysAndSumFloats) {
  std::string why;
  int n = gpus(why);
  if (n < 2)
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << n
                 << (why.empty() ? "" : " (" + why + ")");
  auto comms = ncclWorld(2);
  runRanks(2, [&](int rank) {
    Communicator &comm = *comms[rank];
    int peer = 1 - rank;
    // Both send first, then receive: the directions do not block each other.
    Tensor mine = makeTensor<float>(::dtorch::wire::F32, {2},
                                    {float(rank), float(10 + rank)});
    comm.send(mine, peer, 1);
    Tensor got = Tensor::empty(::dtorch::wire::F32, {2});
    comm.recv(got, peer, 1);
    EXPECT_EQ(valuesOf<float>(got),
              (std::vector<float>{float(peer), float(10 + peer)}));
    Tensor x = sampleTensor(::dtorch::wire::F32, {4097}, 11 + rank);
    Tensor sum = Tensor::empty(::dtorch::wire::F32, {4097});
    comm.all_reduce(x, sum, {0, 1}, ReduceOp::Sum);
    Tensor a = sampleTensor(::dtorch::wire::F32, {4097}, 11);
    Tensor b = sampleTensor(::dtorch::wire::F32, {4097}, 12);
    for (int64_t i = 0; i < 4097; ++i)
      EXPECT_FLOAT_EQ(sum.data_as<float>()[i],
                      a.data_as<float>()[i] + b.data_as<float>()[i]);
  });
}

} // namespace
} // namespace dtorch::rt::test
