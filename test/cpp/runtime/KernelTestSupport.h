// Helpers for the kernel tests: run one kernel as a one-instruction program,
// random values, tolerant comparison, and one "case" type per dtype for typed
// test suites.
#pragma once

#include "TestSupport.h"

#include "dtorch/runtime/Half.h"

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dtorch::rt::test {

using ::dtorch::wire::BF16;
using ::dtorch::wire::BOOL;
using ::dtorch::wire::F16;
using ::dtorch::wire::F32;
using ::dtorch::wire::F64;
using ::dtorch::wire::I32;
using ::dtorch::wire::I64;
using Shape = std::vector<int64_t>;

// Runs `op` through the executor (so the program validator and the kernel's
// check run first) and returns its single output.
inline Tensor
runKernel(const std::string &op, const std::vector<Tensor> &inputs,
          DType outDtype, const Shape &outShape,
          const std::function<void(Instruction &)> &setAttrs = {}) {
  ProgramBuilder builder;
  std::vector<int> ids;
  for (const Tensor &t : inputs)
    ids.push_back(builder.input(t.dtype(), t.shape()));
  int out = builder.buffer(outDtype, outShape);
  Instruction &inst = builder.add(op, ids, {out});
  if (setAttrs)
    setAttrs(inst);
  builder.output(out);
  Executor executor(nullptr);
  return executor.run(builder.program(), inputs).at(0);
}

template <class T>
constexpr bool isSixteenBit =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// A quiet NaN of T (std::numeric_limits knows nothing of Half / BFloat16).
template <class T> T nanOf() {
  return static_cast<T>(std::numeric_limits<float>::quiet_NaN());
}
template <class T> T infinityOf() {
  return static_cast<T>(std::numeric_limits<float>::infinity());
}
template <class T> bool isNan(T value) {
  if constexpr (std::is_integral_v<T>)
    return false;
  else
    return std::isnan(static_cast<double>(value));
}

template <class T>
std::vector<T> randomValues(size_t count, double low, double high,
                            unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::vector<T> values(count);
  if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(low),
                                                static_cast<int64_t>(high));
    for (auto &v : values)
      v = static_cast<T>(dist(rng));
  } else {
    std::uniform_real_distribution<double> dist(low, high);
    for (auto &v : values)
      if constexpr (isSixteenBit<T>)
        v = static_cast<T>(static_cast<float>(dist(rng)));
      else
        v = static_cast<T>(dist(rng));
  }
  return values;
}

template <class T> std::vector<double> toDoubles(const std::vector<T> &xs) {
  std::vector<double> out;
  for (T x : xs)
    out.push_back(static_cast<double>(x));
  return out;
}

// |got - want| <= tol * max(1, |want|) element by element; NaN matches NaN.
template <class T>
void expectClose(const std::vector<T> &got, const std::vector<double> &want,
                 double tol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = static_cast<double>(got[i]);
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g)) << what << " at " << i;
      continue;
    }
    EXPECT_LE(std::abs(g - want[i]), tol * std::max(1.0, std::abs(want[i])))
        << what << " at " << i << ": got " << g << ", want " << want[i];
  }
}

// One case per dtype. `tol` is the relative tolerance of one rounded result
// (16-bit floats: a little over half an ulp).
struct F32Case {
  using T = float;
  static constexpr DType dtype = F32;
  static constexpr double tol = 2e-5;
};
struct F64Case {
  using T = double;
  static constexpr DType dtype = F64;
  static constexpr double tol = 1e-12;
};
struct F16Case {
  using T = Half;
  static constexpr DType dtype = F16;
  static constexpr double tol = 1e-3; // 2^-11 = 4.9e-4 is half an ulp
};
struct BF16Case {
  using T = BFloat16;
  static constexpr DType dtype = BF16;
  static constexpr double tol = 8e-3; // 2^-8 = 3.9e-3 is half an ulp
};
struct I32Case {
  using T = int32_t;
  static constexpr DType dtype = I32;
  static constexpr double tol = 0;
};
struct I64Case {
  using T = int64_t;
  static constexpr DType dtype = I64;
  static constexpr double tol = 0;
};
struct BoolCase {
  using T = bool;
  static constexpr DType dtype = BOOL;
  static constexpr double tol = 0;
};

using FloatCases = ::testing::Types<F32Case, F64Case, F16Case, BF16Case>;
using IntegerCases = ::testing::Types<I32Case, I64Case>;
using NumericCases =
    ::testing::Types<F32Case, F64Case, F16Case, BF16Case, I32Case, I64Case>;
using AllCases = ::testing::Types<F32Case, F64Case, F16Case, BF16Case, I32Case,
                                  I64Case, BoolCase>;

// Distinct, exactly representable values of T (bool cycles).
template <class T> std::vector<T> iota(size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, bool>)
      values[i] = (i * 7) % 3 == 0;
    else
      values[i] = static_cast<T>(static_cast<float>(i));
  }
  return values;
}

// Values from doubles (each representable in T).
template <class T> std::vector<T> valuesFrom(std::initializer_list<double> xs) {
  std::vector<T> out;
  for (double x : xs) {
    if constexpr (std::is_same_v<T, bool>)
      out.push_back(x != 0);
    else
      out.push_back(static_cast<T>(static_cast<float>(x)));
  }
  return out;
}

} // namespace dtorch::rt::test
