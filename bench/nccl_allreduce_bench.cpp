// nccl_allreduce_bench: float32 all_reduce bandwidth of DTorch's NCCL
// communicator (NcclCommunicator.h, as a worker's device collectives run it)
// with one rank per visible GPU, the unique id through an in-memory store.
//
//   nccl_allreduce_bench [--mib 1,16,256] [--iters N]
//
// Prints one row per size: "all_reduce <ranks> <MiB> <ms> <algbw GB/s>
// <busbw GB/s>" (busbw = algbw * 2 (n - 1) / n, NCCL's convention; 0 for a
// single rank, whose all_reduce moves nothing between GPUs). Exits 2 with
// "no GPU: <reason>" where there is no CUDA device.
#include "CudaDevice.h"
#include "NcclCommunicator.h"

#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/Tensor.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace dtorch::rt;

namespace {

std::vector<int64_t> parseList(const char *text) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    values.push_back(std::stoll(item));
  return values;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<int64_t> mebibytes = {1, 16, 256};
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--mib")
      mebibytes = parseList(argv[i + 1]);
    else if (flag == "--iters")
      iters = std::atoi(argv[i + 1]);
  }
  cuda::registerCudaBackend();
  std::string why;
  int ranks = deviceCount("cuda", &why);
  if (ranks == 0) {
    std::printf("no GPU: %s\n", why.c_str());
    return 2;
  }
  std::printf("nccl %s, %d rank(s), one per GPU\n",
              cuda::ncclVersionString().c_str(), ranks);
  auto store = std::make_shared<InMemoryKeyValueStore>();
  std::vector<std::unique_ptr<Communicator>> comms;
  Group world;
  for (int r = 0; r < ranks; ++r) {
    comms.push_back(
        cuda::makeNcclCommunicator(r, cuda::cudaDevice(r), store, {}));
    world.push_back(r);
  }
  for (int64_t mib : mebibytes) {
    int64_t n = mib * (1 << 20) / 4;
    std::vector<double> seconds(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        Device &gpu = cuda::cudaDevice(r);
        Tensor x = Tensor::empty(::dtorch::wire::F32, {n}, gpu);
        Tensor out = Tensor::empty(::dtorch::wire::F32, {n}, gpu);
        gpu.fillZero(x.data(), x.nbytes(), nullptr);
        comms[r]->all_reduce(x, out, world, ReduceOp::Sum); // connect, warm
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i)
          comms[r]->all_reduce(x, out, world, ReduceOp::Sum);
        seconds[r] = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count() /
                     iters;
      });
    for (auto &thread : threads)
      thread.join();
    double worst = 0;
    for (double s : seconds)
      worst = std::max(worst, s);
    double bytes = static_cast<double>(n) * 4;
    double algbw = bytes / worst / 1e9;
    double busbw = ranks > 1 ? algbw * 2 * (ranks - 1) / ranks : 0;
    std::printf("all_reduce %d %lld %.3f %.1f %.1f\n", ranks,
                static_cast<long long>(mib), worst * 1e3, algbw, busbw);
  }
  return 0;
}
