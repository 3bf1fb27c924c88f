// The device layer's CPU side (Device.h) and the counter-based random
// numbers shared by the CPU and CUDA `random` kernels (CounterRandom.h).
#include "KernelTestSupport.h"

#include "dtorch/runtime/CounterRandom.h"
#include "dtorch/runtime/Device.h"
#include "dtorch/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace dtorch::rt::test {
namespace {

namespace cr = counter_random;

uint64_t bitsOf(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// The portable ln and cos are real ln and cos: within a few ulp of libm
// over the whole range Box-Muller feeds them.
TEST(CounterRandom, NaturalLogMatchesLibm) {
  double worst = 0;
  for (uint64_t i = 0; i < 200000; ++i) {
    double u = static_cast<double>((cr::bits(5, i, 0) >> 11) + 1) * 0x1.0p-53;
    double expected = std::log(u);
    double got = cr::naturalLog(u);
    if (expected != 0)
      worst = std::max(worst, std::abs(got - expected) / std::abs(expected));
    else
      EXPECT_EQ(got, 0.0);
  }
  EXPECT_LT(worst, 1e-15) << "largest relative error of naturalLog";
  EXPECT_EQ(cr::naturalLog(1.0), 0.0);
  EXPECT_NEAR(cr::naturalLog(0x1.0p-53), -53 * std::log(2.0), 1e-13);
}

TEST(CounterRandom, CosTurnsMatchesLibm) {
  double worst = 0;
  for (uint64_t i = 0; i < 200000; ++i) {
    double t = static_cast<double>(cr::bits(9, i, 1) >> 11) * 0x1.0p-53;
    worst = std::max(worst, std::abs(cr::cosTurns(t) - std::cos(2 * M_PI * t)));
  }
  EXPECT_LT(worst, 1e-15) << "largest absolute error of cosTurns";
  EXPECT_EQ(cr::cosTurns(0.0), 1.0);
  EXPECT_EQ(cr::cosTurns(0.5), -1.0);
  EXPECT_EQ(cr::cosTurns(0.25), 0.0);
}

// The documented formulas (docs/program-format.md, `random`).
TEST(CounterRandom, FollowsTheDocumentedFormula) {
  auto splitmix = [](uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  for (uint64_t g : {0ull, 1ull, 77ull, 123456789ull}) {
    EXPECT_EQ(cr::bits(42, g, 0), splitmix(splitmix(42) ^ (2 * g)));
    EXPECT_EQ(cr::bits(42, g, 1), splitmix(splitmix(42) ^ (2 * g + 1)));
    EXPECT_EQ(cr::uniform(42, g),
              static_cast<double>(cr::bits(42, g, 0) >> 11) * 0x1.0p-53);
    double u1 = static_cast<double>((cr::bits(42, g, 0) >> 11) + 1) * 0x1.0p-53;
    double u2 = static_cast<double>(cr::bits(42, g, 1) >> 11) * 0x1.0p-53;
    EXPECT_NEAR(cr::normal(42, g),
                std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2), 1e-14);
  }
}

// The CPU kernel's values are the header's, bitwise, for every element of a
// box of a global tensor (what the CUDA kernel computes too).
TEST(CounterRandom, CpuKernelIsTheHeaderBitwise) {
  const Shape global{6, 10}, offset{2, 3}, local{3, 5};
  for (const char *dist : {"uniform", "normal"}) {
    Tensor out = runKernel("random", {}, F64, local, [&](Instruction &inst) {
      setInt(inst, "seed", 1234);
      setString(inst, "dist", dist);
      setInts(inst, "global_shape", global);
      setInts(inst, "offset", offset);
    });
    const double *values = out.data_as<double>();
    for (int64_t r = 0; r < local[0]; ++r)
      for (int64_t c = 0; c < local[1]; ++c) {
        uint64_t g =
            static_cast<uint64_t>((offset[0] + r) * global[1] + offset[1] + c);
        double expected = std::string(dist) == "normal" ? cr::normal(1234, g)
                                                        : cr::uniform(1234, g);
        EXPECT_EQ(bitsOf(values[r * local[1] + c]), bitsOf(expected))
            << dist << " element (" << r << ", " << c << ")";
      }
  }
}

// Fixed values (computed independently from the documented formula): a
// change of the generator, which would break CPU/GPU and run-to-run
// reproducibility, fails here.
TEST(CounterRandom, PinnedValues) {
  EXPECT_EQ(cr::bits(0, 0, 0), 0xa706dd2f4d197e6fULL);
  EXPECT_EQ(cr::bits(7, 3, 1), 0x3a3bfc2bf948c770ULL);
}

TEST(Device, CpuDeviceAllocatesCopiesAndHasTrivialStreams) {
  Device &cpu = cpuDevice();
  EXPECT_EQ(cpu.kind(), DeviceKind::Cpu);
  EXPECT_STREQ(cpu.name(), kCpuDevice);
  EXPECT_EQ(&deviceOfType("cpu"), &cpu);
  EXPECT_EQ(deviceCount("cpu"), 1);
  auto *a = static_cast<int *>(cpu.allocate(64));
  auto *b = static_cast<int *>(cpu.allocateHostStaging(64));
  for (int i = 0; i < 16; ++i)
    a[i] = i * i;
  std::unique_ptr<Stream> stream = cpu.newStream();
  std::unique_ptr<Event> event = cpu.newEvent();
  cpu.copyDeviceToHost(b, a, 64, stream.get());
  stream->record(*event);
  stream->wait(*event);
  EXPECT_TRUE(event->done());
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(b[i], i * i);
  cpu.fillZero(a, 64, nullptr);
  EXPECT_EQ(a[15], 0);
  cpu.deallocate(a, 64);
  cpu.deallocateHostStaging(b, 64);
}

TEST(Device, TensorsKnowTheirDevice) {
  Tensor t = Tensor::empty(F32, {2, 3});
  EXPECT_EQ(&t.device(), &cpuDevice());
  t.data_as<float>()[4] = 2.5f;
  Tensor copy = t.to(cpuDevice());
  EXPECT_EQ(&copy.device(), &cpuDevice());
  EXPECT_NE(copy.data(), t.data());
  EXPECT_EQ(copy.data_as<float>()[4], 2.5f);
  Tensor view = Tensor::viewOf(t, 8, F32, {2});
  EXPECT_EQ(&view.device(), &cpuDevice());
}

// Without the CUDA backend linked (this test binary) "cuda" has no device,
// and the reason says so; an unknown type is named.
TEST(Device, CudaWithoutBackendIsAClearError) {
  std::string why;
  EXPECT_EQ(deviceCount("cuda", &why), 0);
  EXPECT_NE(why.find("no CUDA backend"), std::string::npos) << why;
  try {
    deviceOfType("cuda");
    FAIL() << "deviceOfType(\"cuda\") did not throw";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(deviceCount("tpu", &why), 0);
  EXPECT_NE(why.find("'tpu' is unknown"), std::string::npos) << why;
}

} // namespace
} // namespace dtorch::rt::test
