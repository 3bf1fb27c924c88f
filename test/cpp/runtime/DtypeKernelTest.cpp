// The dtypes added to the existing kernels (int32, float16, bfloat16): cast
// between every pair, 16-bit rounding, int32 wrap-around, full; and iota.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Kernels.h"

#include <cstdint>
#include <limits>

namespace dtorch::rt::test {
namespace {

const std::vector<DType> kAllDtypes = {F32, F64, F16, BF16, I32, I64, BOOL};

// A tensor of `dtype` holding `values` (converted the way a C++ cast would).
Tensor tensorOf(DType dtype, const std::vector<double> &values) {
  Tensor t = Tensor::empty(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    switch (dtype) {
    case F32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case F64:
      t.data_as<double>()[i] = v;
      break;
    case F16:
      t.data_as<Half>()[i] = Half(static_cast<float>(v));
      break;
    case BF16:
      t.data_as<BFloat16>()[i] = BFloat16(static_cast<float>(v));
      break;
    case I32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case I64:
      t.data_as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    default:
      t.data_as<bool>()[i] = v != 0;
    }
  }
  return t;
}

std::vector<double> doublesOf(const Tensor &t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
    case F32:
      out.push_back(t.data_as<float>()[i]);
      break;
    case F64:
      out.push_back(t.data_as<double>()[i]);
      break;
    case F16:
      out.push_back(static_cast<float>(t.data_as<Half>()[i]));
      break;
    case BF16:
      out.push_back(static_cast<float>(t.data_as<BFloat16>()[i]));
      break;
    case I32:
      out.push_back(t.data_as<int32_t>()[i]);
      break;
    case I64:
      out.push_back(static_cast<double>(t.data_as<int64_t>()[i]));
      break;
    default:
      out.push_back(t.data_as<bool>()[i] ? 1.0 : 0.0);
    }
  }
  return out;
}

std::vector<double> cast(const Tensor &x, DType to) {
  return doublesOf(runKernel("cast", {x}, to, x.shape()));
}

// ---- cast -------------------------------------------------------------------
TEST(CastEveryPair, SmallIntegersSurviveEveryConversion) {
  for (DType from : kAllDtypes)
    for (DType to : kAllDtypes) {
      std::vector<double> values = {0, 1, 3, -2};
      if (from == BOOL)
        values = {0, 1, 1, 0};
      std::vector<double> want = values;
      if (to == BOOL)
        for (double &w : want)
          w = w != 0;
      EXPECT_EQ(cast(tensorOf(from, values), to), want)
          << dtypeName(from) << " -> " << dtypeName(to);
    }
}

TEST(CastEveryPair, FollowsTorchRules) {
  Tensor f64 = tensorOf(F64, {-2.7, -0.5, 0.0, 1.9, 3.0});
  EXPECT_EQ(cast(f64, I32), (std::vector<double>{-2, 0, 0, 1, 3}));
  EXPECT_EQ(cast(f64, BOOL), (std::vector<double>{1, 1, 0, 1, 1}));
  // Nearest 16-bit values (hand-computed: steps of 2^-9 and 2^-6 in [2, 4)).
  EXPECT_EQ(cast(f64, F16),
            (std::vector<double>{-2.69921875, -0.5, 0, 1.900390625, 3}));
  EXPECT_EQ(cast(f64, BF16),
            (std::vector<double>{-2.703125, -0.5, 0, 1.8984375, 3}));
  // Integers above 2^11 (float16) and 2^8 (bfloat16) round to nearest even.
  EXPECT_EQ(cast(tensorOf(I32, {2049, 2051, -2049}), F16),
            (std::vector<double>{2048, 2052, -2048}));
  EXPECT_EQ(cast(tensorOf(I64, {257, 259}), BF16),
            (std::vector<double>{256, 260}));
  // float16 -> integers truncates; -0 and NaN -> bool.
  Tensor f16 = tensorOf(F16, {-2.5, -0.0, 65504, 7.75});
  EXPECT_EQ(cast(f16, I64), (std::vector<double>{-2, 0, 65504, 7}));
  EXPECT_EQ(cast(f16, I32), (std::vector<double>{-2, 0, 65504, 7}));
  Tensor special = tensorOf(BF16, {-0.0, std::nan(""), 0.5});
  EXPECT_EQ(cast(special, BOOL), (std::vector<double>{0, 1, 1}));
  // Overflow and underflow of float16.
  std::vector<double> edges = cast(tensorOf(F32, {70000, 1e-8, -70000}), F16);
  EXPECT_EQ(edges,
            (std::vector<double>{std::numeric_limits<double>::infinity(), 0.0,
                                 -std::numeric_limits<double>::infinity()}));
  // int64 -> int32 keeps the low 32 bits.
  EXPECT_EQ(cast(tensorOf(I64, {4294967296.0 + 5, -1}), I32),
            (std::vector<double>{5, -1}));
  // 0.1 is not representable: the bit patterns of the nearest values.
  Tensor tenth = tensorOf(F32, {0.1});
  EXPECT_EQ(runKernel("cast", {tenth}, F16, {1}).data_as<Half>()[0].bits,
            0x2e66);
  EXPECT_EQ(runKernel("cast", {tenth}, BF16, {1}).data_as<BFloat16>()[0].bits,
            0x3dcd);
  expectRuntimeError([] { runKernel("cast", {tensorOf(F16, {1})}, I32, {2}); },
                     {"differ in shape"});
}

// ---- 16-bit arithmetic rounds once, to nearest even -------------------------
TEST(SixteenBitKernels, AddRoundsToNearestEven) {
  const double u16 = 1.0 / 2048; // half an ulp of float16 at 1
  Tensor a = tensorOf(F16, {1, 1, 1000});
  Tensor b = tensorOf(F16, {u16, 1.5 * u16, 0.3});
  // 1 + half an ulp ties to 1 (even); 1 + 0.75 ulp goes up to 1 + 2^-10;
  // 1000.30005 is nearest to 1000.5 with float16's step of 0.5 there.
  EXPECT_EQ(doublesOf(runKernel("add", {a, b}, F16, {3})),
            (std::vector<double>{1, 1 + 2 * u16, 1000.5}));
  const double ub = 1.0 / 256; // half an ulp of bfloat16 at 1
  Tensor c = tensorOf(BF16, {1, 1});
  Tensor d = tensorOf(BF16, {ub, 1.5 * ub});
  EXPECT_EQ(doublesOf(runKernel("add", {c, d}, BF16, {2})),
            (std::vector<double>{1, 1 + 2 * ub}));
}

TEST(SixteenBitKernels, ComputedInFloat32) {
  // x * x - 1 for x = 1 + 2^-10: each op rounds to float16 (2^-10 + 2^-20
  // would round to 2^-10 in float16, which the product keeps).
  Tensor x = tensorOf(F16, {1 + 1.0 / 1024});
  std::vector<double> squared = doublesOf(runKernel("mul", {x, x}, F16, {1}));
  EXPECT_EQ(squared, (std::vector<double>{1 + 2.0 / 1024}));
  // exp and gelu against float32 results rounded to the 16-bit dtype.
  std::vector<double> xs = {-2.5, -0.3, 0.0, 0.7, 3.1};
  for (DType dtype : {F16, BF16}) {
    Tensor t = tensorOf(dtype, xs);
    std::vector<double> inputs = doublesOf(t);
    std::vector<double> got = doublesOf(runKernel("exp", {t}, dtype, {5}));
    for (size_t i = 0; i < xs.size(); ++i) {
      float want = std::exp(static_cast<float>(inputs[i]));
      double rounded = dtype == F16 ? static_cast<float>(Half(want))
                                    : static_cast<float>(BFloat16(want));
      EXPECT_EQ(got[i], rounded) << dtypeName(dtype) << " exp at " << i;
    }
  }
}

TEST(SixteenBitKernels, SumAccumulatesBeyond16Bits) {
  // Adding 2^-11 twice to 1 one float16 step at a time would stay at 1.
  const double u16 = 1.0 / 2048;
  Tensor x = tensorOf(F16, {1, u16, u16});
  EXPECT_EQ(doublesOf(runKernel("sum", {x}, F16, {})),
            (std::vector<double>{1 + 2 * u16}));
  // mean = sum with scale 1/3.
  Tensor y = tensorOf(BF16, {1, 2, 6});
  EXPECT_EQ(doublesOf(runKernel(
                "sum", {y}, BF16, {},
                [](Instruction &i) { setFloat(i, "scale", 1.0 / 3); })),
            (std::vector<double>{3}));
}

TEST(SixteenBitKernels, MatmulRoundsTheFloat32Result) {
  const double u16 = 1.0 / 2048;
  Tensor a = makeTensor<Half>(
      F16, {2, 2},
      {Half(1.0f), Half(float(u16)), Half(1.0f), Half(float(1.5 * u16))});
  Tensor ones = makeTensor<Half>(F16, {2, 1}, {Half(1.0f), Half(1.0f)});
  EXPECT_EQ(doublesOf(runKernel("matmul", {a, ones}, F16, {2, 1})),
            (std::vector<double>{1, 1 + 2 * u16}));
  Tensor batched =
      makeTensor<BFloat16>(BF16, {1, 1, 2}, {BFloat16(3.0f), BFloat16(0.5f)});
  Tensor column =
      makeTensor<BFloat16>(BF16, {1, 2, 1}, {BFloat16(2.0f), BFloat16(-4.0f)});
  EXPECT_EQ(doublesOf(runKernel("bmm", {batched, column}, BF16, {1, 1, 1})),
            (std::vector<double>{4}));
}

TEST(SixteenBitKernels, FullRounds) {
  auto full = [](DType dtype, double value) {
    return runKernel("full", {}, dtype, {2},
                     [&](Instruction &i) { setFloat(i, "value", value); });
  };
  Tensor h = full(F16, 0.1);
  EXPECT_EQ(h.data_as<Half>()[0].bits, 0x2e66);
  EXPECT_EQ(h.data_as<Half>()[1].bits, 0x2e66);
  EXPECT_EQ(full(BF16, 0.1).data_as<BFloat16>()[0].bits, 0x3dcd);
  EXPECT_EQ(doublesOf(full(I32, -2147483648.0)),
            (std::vector<double>{-2147483648.0, -2147483648.0}));
  expectRuntimeError([&] { full(I32, 2147483648.0); }, {"not an int32"});
  expectRuntimeError([&] { full(I32, 1.5); }, {"not an int32"});
  EXPECT_EQ(doublesOf(full(BOOL, 2)), (std::vector<double>{1, 1}));
}

// ---- int32 ------------------------------------------------------------------
TEST(Int32Kernels, WrapAround) {
  const double top = std::numeric_limits<int32_t>::max();
  const double bottom = std::numeric_limits<int32_t>::min();
  Tensor a = tensorOf(I32, {top, 65536, bottom});
  Tensor b = tensorOf(I32, {1, 65536, 1});
  EXPECT_EQ(doublesOf(runKernel("add", {a, b}, I32, {3})),
            (std::vector<double>{bottom, 131072, bottom + 1}));
  EXPECT_EQ(doublesOf(runKernel("mul", {a, b}, I32, {3})),
            (std::vector<double>{top, 0, bottom}));
  EXPECT_EQ(doublesOf(runKernel("neg", {a}, I32, {3})),
            (std::vector<double>{-top, -65536, bottom}));
  EXPECT_EQ(doublesOf(runKernel("sum", {tensorOf(I32, {top, 1, 1})}, I32, {})),
            (std::vector<double>{bottom + 1}));
  EXPECT_EQ(
      doublesOf(runKernel(
          "pow", {tensorOf(I32, {2, 2}), tensorOf(I32, {31, 32})}, I32, {2})),
      (std::vector<double>{bottom, 0}));
}

// ---- iota -------------------------------------------------------------------
template <class C> class IotaKernels : public ::testing::Test {};
TYPED_TEST_SUITE(IotaKernels, NumericCases);

Tensor runIota(DType dtype, const Shape &shape, int64_t dim,
               const Shape &offset, double start, double step) {
  return runKernel("iota", {}, dtype, shape, [&](Instruction &i) {
    setInt(i, "dim", dim);
    if (!offset.empty())
      setInts(i, "offset", offset);
    if (start != 0)
      setFloat(i, "start", start);
    if (step != 1)
      setFloat(i, "step", step);
  });
}

TYPED_TEST(IotaKernels, CountsAlongDim) {
  DType dtype = TypeParam::dtype;
  EXPECT_EQ(doublesOf(runIota(dtype, {2, 3}, 1, {}, 0, 1)),
            (std::vector<double>{0, 1, 2, 0, 1, 2}));
  // Rows 4 and 5 of a global tensor: start + step * (row + 4).
  EXPECT_EQ(doublesOf(runIota(dtype, {2, 3}, 0, {4, 0}, 1, 2)),
            (std::vector<double>{9, 9, 9, 11, 11, 11}));
  // Negative dim and a negative step.
  EXPECT_EQ(doublesOf(runIota(dtype, {1, 4}, -1, {0, 2}, 10, -3)),
            (std::vector<double>{4, 1, -2, -5}));
  std::vector<double> fractional =
      doublesOf(runIota(dtype, {5}, 0, {}, 0.5, 0.25));
  if (dtype == I32 || dtype == I64) // trunc(0.5 + 0.25 k)
    EXPECT_EQ(fractional, (std::vector<double>{0, 0, 1, 1, 1}));
  else
    EXPECT_EQ(fractional, (std::vector<double>{0.5, 0.75, 1, 1.25, 1.5}));
}

TEST(IotaKernelsCheck, RejectsBadAttributes) {
  expectRuntimeError([] { runIota(F32, {2, 3}, 2, {}, 0, 1); },
                     {"iota dim 2 is out of range for rank 2"});
  expectRuntimeError([] { runIota(F32, {2, 3}, 0, {1}, 0, 1); },
                     {"iota: offset [1] needs 2 entries"});
  expectRuntimeError(
      [] {
        runIota(F32, {2}, 0, {}, std::numeric_limits<double>::infinity(), 1);
      },
      {"start and step must be finite"});
  expectRuntimeError([] { runIota(I32, {2}, 0, {}, 3e9, 0.5); },
                     {"does not fit in int32"});
  expectRuntimeError([] { runIota(BOOL, {2}, 0, {}, 0, 1); },
                     {"no cpu kernel for bool"});
}

} // namespace
} // namespace dtorch::rt::test
