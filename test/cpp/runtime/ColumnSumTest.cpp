// The vectorized float32 column sum (runtime/lib/ColumnSum.h) against the
// contract of `sum`: each output summed in increasing input order in
// float64, bit for bit; directly and through the `sum` kernel, on bias
// gradients' shapes, odd sizes, tile remainders, several outer blocks and
// values whose sum depends on the order (1e30 and -1e30), infinities, NaN
// and signed zeros.
#include "../../../runtime/lib/ColumnSum.h"
#include "KernelTestSupport.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

namespace dtorch::rt::test {
namespace {

using detail::columnSumEnabled;
using detail::columnSumFloat32;

std::vector<float> orderSensitiveValues(int64_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> xs(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t kind = (i * 7 + i / 13) % 5;
    xs[i] = kind == 0 ? 1e30f : kind == 1 ? -1e30f : dist(gen);
  }
  return xs;
}

// acc[o * inner + k]: the column sums in increasing r, in float64.
std::vector<double> inOrderSums(const std::vector<float> &x, int64_t outer,
                                int64_t reduced, int64_t inner) {
  std::vector<double> acc(static_cast<size_t>(outer * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < reduced; ++r)
      for (int64_t k = 0; k < inner; ++k)
        acc[o * inner + k] +=
            static_cast<double>(x[(o * reduced + r) * inner + k]);
  return acc;
}

TEST(ColumnSum, EachColumnInOrderBitForBit) {
  if (!columnSumEnabled())
    GTEST_SKIP() << "the column sum needs an AVX-512F/VL host (and "
                    "DTORCH_COLUMN_SUM not 0)";
  const int64_t cases[][3] = {{1, 512, 64}, {1, 512, 256}, {1, 16, 2048},
                              {3, 7, 5},    {2, 1, 70},    {4, 33, 65},
                              {1, 3, 130},  {5, 2, 2},     {2, 9, 127}};
  unsigned seed = 1;
  for (const auto &c : cases) {
    int64_t outer = c[0], reduced = c[1], inner = c[2];
    std::vector<float> x =
        orderSensitiveValues(outer * reduced * inner, seed++);
    if (x.size() > 40) {
      x[3] = std::numeric_limits<float>::infinity();
      x[17] = std::numeric_limits<float>::quiet_NaN();
      x[29] = -0.0f;
    }
    std::vector<double> want = inOrderSums(x, outer, reduced, inner);
    const double sentinel = 4242.0;
    std::vector<double> got(want.size() + 3, sentinel);
    ASSERT_TRUE(columnSumFloat32(x.data(), outer, reduced, inner, got.data()));
    std::string what = std::to_string(outer) + "x" + std::to_string(reduced) +
                       "x" + std::to_string(inner);
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; ++i)
      if (!(std::isnan(got[i]) && std::isnan(want[i])) &&
          std::memcmp(&got[i], &want[i], sizeof(double)) != 0) {
        ++bad;
        ADD_FAILURE() << what << ": column " << i << " = " << got[i]
                      << ", in order " << want[i];
      }
    for (size_t i = want.size(); i < got.size(); ++i)
      EXPECT_EQ(got[i], sentinel) << what << ": wrote past the end";
  }
}

TEST(ColumnSum, TheSumKernelOverLeadingDimsIsTheInOrderSum) {
  // A bias gradient ([16, 32, 64] over dims 0 and 1) with a scale, and a
  // sum over the first dim of [5, 3, 7] (two kept dims, 21 columns).
  struct Case {
    Shape shape, dims, out;
    double scale;
  };
  const Case cases[] = {{{16, 32, 64}, {0, 1}, {64}, 0.5},
                        {{5, 3, 7}, {0}, {3, 7}, 1.0},
                        {{2, 3, 4, 70}, {1}, {2, 4, 70}, 1.0}};
  unsigned seed = 40;
  for (const Case &c : cases) {
    int64_t numel = 1;
    for (int64_t d : c.shape)
      numel *= d;
    std::vector<float> xs = orderSensitiveValues(numel, seed++);
    Tensor x = makeTensor<float>(F32, c.shape, xs);
    std::vector<float> got =
        valuesOf<float>(runKernel("sum", {x}, F32, c.out, [&](Instruction &i) {
          setInts(i, "dims", c.dims);
          if (c.scale != 1.0)
            (*i.mutable_attrs())["scale"].set_f(c.scale);
        }));
    // [outer, reduced, inner] of the case.
    int64_t outer = 1, reduced = 1, inner = 1;
    for (size_t d = 0; d < c.shape.size(); ++d) {
      bool isReduced = std::find(c.dims.begin(), c.dims.end(),
                                 static_cast<int64_t>(d)) != c.dims.end();
      bool afterReduced = static_cast<int64_t>(d) > c.dims.back();
      (isReduced ? reduced : afterReduced ? inner : outer) *= c.shape[d];
    }
    std::vector<double> want = inOrderSums(xs, outer, reduced, inner);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], static_cast<float>(want[i] * c.scale))
          << "output " << i;
  }
}

} // namespace
} // namespace dtorch::rt::test
