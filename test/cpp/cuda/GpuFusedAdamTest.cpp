// dtensor.fused_adam on a CUDA mesh (the kernel generated through MLIR's
// NVVM path, lib/Compiler/OptimizerKernelCodegen.cpp) against the CPU's
// hand-written kernel (runtime/lib/OptimizerKernels.cpp) on the same random
// inputs, every float dtype and mode: the moments and maxima equal bit for
// bit; the parameters within 2 ulp (the bias corrections use libdevice's
// pow, which may differ from glibc's in the last bit of a float64 term).
// Skips with "no CUDA device: <reason>" where there is no GPU.
#include "CudaDevice.h"
#include "FloatBits.h"
#include "FusedAdamSources.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dtorch;
using adamsources::AdamConfig;
using adamsources::AdamParam;

namespace {

std::string adamDeviceArch() {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess)
    return "sm_90";
  return "sm_" + std::to_string(props.major * 10 + props.minor);
}

wire::DType wireOf(const std::string &dtype) {
  return dtype == "f32"   ? wire::F32
         : dtype == "f64" ? wire::F64
         : dtype == "f16" ? wire::F16
                          : wire::BF16;
}

rt::Tensor randomTensor(const AdamParam &p, std::vector<int64_t> shape,
                        double lo, double hi, std::mt19937 &rng) {
  wire::TensorSpec spec;
  spec.set_dtype(wireOf(p.dtype));
  for (int64_t e : shape)
    spec.add_shape(e);
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  std::uniform_real_distribution<double> u(lo, hi);
  size_t width = t.nbytes() / std::max<int64_t>(1, t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t bits = testsupport::floatBitsOf(u(rng), t.dtype());
    std::memcpy(static_cast<char *>(t.data()) + i * width, &bits, width);
  }
  return t;
}

uint64_t rawAt(const rt::Tensor &t, int64_t i) {
  uint64_t u = 0;
  size_t width = t.nbytes() / std::max<int64_t>(1, t.numel());
  std::memcpy(&u, static_cast<const char *>(t.data()) + i * width, width);
  return u;
}

int64_t ordered(uint64_t u, size_t width) {
  uint64_t sign = uint64_t(1) << (8 * width - 1);
  return (u & sign) ? -static_cast<int64_t>(u & (sign - 1))
                    : static_cast<int64_t>(u);
}

TEST(GpuFusedAdam, MatchesTheCpuHandWrittenKernel) {
  std::string why;
  rt::cuda::registerCudaBackend();
  if (rt::deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  rt::Device &gpu = rt::cuda::cudaDevice(0);
  std::string arch = adamDeviceArch();
  std::vector<AdamConfig> configs(4);
  configs[1].decoupled = false;
  configs[2].weightDecay = 0;
  configs[3].amsgrad = true;
  configs[3].maximize = true;
  std::mt19937 rng(21);
  for (const char *dtype : {"f32", "f64", "f16", "bf16"})
    for (const AdamConfig &c : configs) {
      std::vector<AdamParam> params = {
          {"3x37", dtype}, {"", dtype}, {"1031", dtype}, {"700x300", dtype}};
      std::vector<std::vector<int64_t>> shapes = {
          {3, 37}, {}, {1031}, {700, 300}};
      std::string source = adamsources::fusedAdamSource(params, c);
      std::vector<rt::Tensor> inputs;
      for (double v : {5.0, 1e-2}) {
        wire::TensorSpec spec;
        spec.set_dtype(wire::F64);
        inputs.push_back(rt::Tensor::emptyLike(spec));
        *inputs.back().data_as<double>() = v;
      }
      int perParam = c.amsgrad ? 5 : 4;
      for (int k = 0; k < perParam; ++k)
        for (size_t i = 0; i < params.size(); ++i)
          inputs.push_back(
              randomTensor(params[i], shapes[i], k >= 3 ? 0 : -2, 2, rng));
      CompileOptions options;
      options.fuseElementwise = true;
      options.cudaArch = arch;
      CompileResult onGpu = compileModule(source, "adam.mlir", options);
      ASSERT_TRUE(onGpu.ok) << onGpu.error;
      options.cudaArch = "";
      options.generateOptimizerKernels = false;
      CompileResult onCpu = compileModule(source, "adam.mlir", options);
      ASSERT_TRUE(onCpu.ok) << onCpu.error;
      rt::Executor gpuExecutor(nullptr);
      gpuExecutor.setDevice(gpu);
      std::vector<rt::Tensor> got = gpuExecutor.run(
          emitted::programsByPosition(onGpu.functions[0])[0], inputs);
      rt::Executor cpuExecutor(nullptr);
      std::vector<rt::Tensor> want = cpuExecutor.run(
          emitted::programsByPosition(onCpu.functions[0])[0], inputs);
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        rt::Tensor g = got[o].to(rt::cpuDevice());
        bool isParam = o < params.size();
        size_t width = g.nbytes() / std::max<int64_t>(1, g.numel());
        int bad = 0;
        for (int64_t i = 0; i < g.numel() && bad < 3; ++i) {
          uint64_t a = rawAt(g, i), b = rawAt(want[o], i);
          int64_t distance = ordered(a, width) - ordered(b, width);
          if (isParam ? std::llabs(distance) > 2 : a != b) {
            ++bad;
            ADD_FAILURE() << dtype << (c.amsgrad ? " amsgrad" : "")
                          << " output " << o << " element " << i
                          << ": GPU bits " << std::hex << a << ", CPU " << b;
          }
        }
      }
    }
}

} // namespace
