// Every CUDA kernel against its CPU twin on random inputs (CudaParityCases):
// per-op tolerance for float math and accumulations, bitwise for layout,
// creation (random included), casts, comparisons and integers. Skips with
// "no CUDA device: <reason>" where there is no GPU; that every CUDA kernel
// has a case is checked everywhere.
#include "CudaDevice.h"
#include "CudaParityCases.h"
#include "KernelTestSupport.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace dtorch::rt::test {
namespace {

using ::dtorch::rt::cuda::registerCudaBackend;

double elementAsDouble(const Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case F32:
    return t.data_as<float>()[i];
  case F64:
    return t.data_as<double>()[i];
  case F16:
    return static_cast<float>(t.data_as<Half>()[i]);
  case BF16:
    return static_cast<float>(t.data_as<BFloat16>()[i]);
  case I32:
    return t.data_as<int32_t>()[i];
  case I64:
    return static_cast<double>(t.data_as<int64_t>()[i]);
  default:
    return t.data_as<bool>()[i];
  }
}

// "" when they agree, else the first differences.
std::string compare(const ParityCase &c, const Tensor &cpu, const Tensor &gpu) {
  if (cpu.shape() != gpu.shape() || cpu.dtype() != gpu.dtype())
    return "shape or dtype differs: " + cpu.describe() + " vs " +
           gpu.describe();
  std::ostringstream out;
  int shown = 0;
  size_t element = dtypeSize(cpu.dtype());
  bool exact = c.rtol == 0 && c.atol == 0;
  for (int64_t i = 0; i < cpu.numel() && shown < 5; ++i) {
    const char *a = static_cast<const char *>(cpu.data()) + i * element;
    const char *b = static_cast<const char *>(gpu.data()) + i * element;
    if (std::memcmp(a, b, element) == 0)
      continue;
    double x = elementAsDouble(cpu, i), y = elementAsDouble(gpu, i);
    if (!exact) {
      if (std::isnan(x) && std::isnan(y))
        continue;
      if (std::abs(x - y) <= c.atol + c.rtol * std::abs(x))
        continue;
    }
    out << " [" << i << "] cpu " << x << " cuda " << y;
    ++shown;
  }
  return out.str();
}

Tensor runOn(const Kernel &kernel, const ParityCase &c,
             const std::vector<Tensor> &inputs, Device &device) {
  Instruction inst;
  if (c.attrs)
    c.attrs(inst);
  AttrReader attrs(inst.attrs());
  std::vector<TensorDesc> inDescs, outDescs{{c.outDtype, c.outShape}};
  std::vector<const Tensor *> in;
  for (const Tensor &t : inputs) {
    inDescs.push_back({t.dtype(), t.shape()});
    in.push_back(&t);
  }
  if (kernel.check)
    kernel.check(attrs, inDescs, outDescs);
  Tensor out = Tensor::empty(c.outDtype, c.outShape, device);
  std::vector<Tensor *> outs{&out};
  kernel.run(attrs, in, outs);
  return out;
}

// Runs here: each CUDA kernel has at least one parity case.
TEST(CudaKernelParity, EveryCudaKernelHasACase) {
  registerCudaBackend();
  std::string without;
  for (const auto &[op, dtype] :
       KernelRegistry::global().entriesFor(kCudaDevice))
    if (parityCases(op, dtype).empty())
      without += " " + op + "/" + dtypeName(dtype);
  EXPECT_EQ(without, "") << "CUDA kernels without a parity case";
}

// Runs here: every case is well formed (its CPU twin checks and runs it),
// so a failure on a GPU is the CUDA kernel's.
TEST(CudaKernelParity, EveryCaseRunsOnTheCpu) {
  registerCudaBackend();
  KernelRegistry &registry = KernelRegistry::global();
  int cases = 0;
  for (const auto &[op, dtype] : registry.entriesFor(kCudaDevice))
    for (const ParityCase &c : parityCases(op, dtype)) {
      try {
        runOn(*registry.lookup(op, dtype, kCpuDevice), c, c.inputs,
              cpuDevice());
      } catch (const std::exception &e) {
        ADD_FAILURE() << c.name << ": " << e.what();
      }
      ++cases;
    }
  std::cout << cases << " parity cases run on the CPU\n";
}

TEST(CudaKernelParity, EveryCudaKernelMatchesItsCpuTwin) {
  registerCudaBackend();
  std::string why;
  if (deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  Device &gpu = deviceOfType("cuda");
  KernelRegistry &registry = KernelRegistry::global();
  int ran = 0, failed = 0;
  for (const auto &[op, dtype] : registry.entriesFor(kCudaDevice)) {
    const Kernel *cpuKernel = registry.lookup(op, dtype, kCpuDevice);
    const Kernel *gpuKernel = registry.lookup(op, dtype, kCudaDevice);
    for (const ParityCase &c : parityCases(op, dtype)) {
      SCOPED_TRACE(c.name);
      try {
        Tensor expected = runOn(*cpuKernel, c, c.inputs, cpuDevice());
        std::vector<Tensor> onGpu;
        for (const Tensor &t : c.inputs)
          onGpu.push_back(t.to(gpu));
        Tensor got = runOn(*gpuKernel, c, onGpu, gpu).to(cpuDevice());
        std::string difference = compare(c, expected, got);
        EXPECT_EQ(difference, "") << c.name;
        failed += !difference.empty();
      } catch (const std::exception &e) {
        ADD_FAILURE() << c.name << ": " << e.what();
        ++failed;
      }
      ++ran;
    }
  }
  std::cout << "parity: " << ran << " cases, " << failed << " failed on "
            << gpu.describe() << "\n";
}

// Integer division by zero fails on CUDA as on the CPU.
TEST(CudaKernelParity, IntegerDivisionByZeroIsAnError) {
  registerCudaBackend();
  std::string why;
  if (deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  Device &gpu = deviceOfType("cuda");
  const Kernel *div = lookupKernel("div", I32, kCudaDevice);
  ASSERT_NE(div, nullptr);
  ParityCase c{"div by zero",
               {makeTensor<int32_t>(I32, {3}, {1, 2, 3}),
                makeTensor<int32_t>(I32, {3}, {1, 0, 1})},
               {},
               I32,
               {3}};
  std::vector<Tensor> onGpu{c.inputs[0].to(gpu), c.inputs[1].to(gpu)};
  EXPECT_THROW(runOn(*div, c, onGpu, gpu), RuntimeError);
}

// Streams and events order work; the caching allocator reuses blocks.
TEST(CudaDeviceLayer, StreamsEventsAndCachingAllocator) {
  registerCudaBackend();
  std::string why;
  if (deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  Device &gpu = deviceOfType("cuda");
  void *a = gpu.allocate(1000);
  gpu.deallocate(a, 1000);
  void *b = gpu.allocate(1000);
  EXPECT_EQ(a, b) << "a freed block of the same bucket is reused";
  std::vector<int32_t> host(250), back(250, 0);
  for (int i = 0; i < 250; ++i)
    host[i] = i * 3;
  std::unique_ptr<Stream> compute = gpu.newStream(), comm = gpu.newStream();
  std::unique_ptr<Event> ready = gpu.newEvent();
  auto *staging = static_cast<int32_t *>(gpu.allocateHostStaging(1000));
  std::memcpy(staging, host.data(), 1000);
  gpu.copyHostToDevice(b, staging, 1000, compute.get());
  compute->record(*ready);
  comm->wait(*ready);
  gpu.copyDeviceToHost(back.data(), b, 1000, comm.get());
  comm->synchronize();
  EXPECT_TRUE(ready->done());
  EXPECT_EQ(back, host);
  gpu.deallocateHostStaging(staging, 1000);
  gpu.deallocate(b, 1000);
}

} // namespace
} // namespace dtorch::rt::test

namespace dtorch::rt::test {
namespace {

// A small program (matmul, relu, sum over rows, random) run by the executor
// on the GPU gives what it gives on the CPU; host inputs are copied over.
TEST(CudaExecutor, RunsAProgramAsOnTheCpu) {
  registerCudaBackend();
  std::string why;
  if (deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  ProgramBuilder builder;
  int a = builder.input(F32, {16, 8});
  int b = builder.input(F32, {8, 4});
  int product = builder.buffer(F32, {16, 4});
  int relu = builder.buffer(F32, {16, 4});
  int sum = builder.buffer(F32, {16});
  int noise = builder.buffer(F32, {16});
  int out = builder.buffer(F32, {16});
  builder.add("matmul", {a, b}, {product});
  builder.add("relu", {product}, {relu});
  Instruction &reduce = builder.add("sum", {relu}, {sum});
  setInts(reduce, "dims", {1});
  Instruction &random = builder.add("random", {}, {noise});
  setInt(random, "seed", 5);
  setString(random, "dist", "normal");
  setInts(random, "global_shape", {16});
  setInts(random, "offset", {0});
  builder.add("add", {sum, noise}, {out});
  builder.output(out);
  std::vector<Tensor> inputs{
      makeTensor<float>(F32, {16, 8}, randomValues<float>(128, -1, 1, 3)),
      makeTensor<float>(F32, {8, 4}, randomValues<float>(32, -1, 1, 4))};
  Executor cpu(nullptr);
  Tensor expected = cpu.run(builder.program(), inputs).at(0);
  Executor gpu(nullptr);
  gpu.setDevice(deviceOfType("cuda"));
  Tensor result = gpu.run(builder.program(), inputs).at(0);
  EXPECT_EQ(result.device().kind(), DeviceKind::Cuda);
  Tensor back = result.to(cpuDevice());
  for (int64_t i = 0; i < 16; ++i)
    EXPECT_NEAR(back.data_as<float>()[i], expected.data_as<float>()[i], 1e-5)
        << i;
}

} // namespace
} // namespace dtorch::rt::test
