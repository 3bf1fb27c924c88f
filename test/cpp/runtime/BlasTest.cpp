// The runtime's BLAS (Blas.h): the CPUID -> OpenBLAS core type decision, the
// thread share of a rank, that the loaded OpenBLAS runs the chosen core type,
// and GEMM numerics of every library and of the matmul/bmm kernels in every
// float dtype against a float64 reference.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Blas.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <random>

namespace dtorch::rt::test {
namespace {

using blas::CpuFeatures;
using blas::Library;

CpuFeatures sse3Only() {
  CpuFeatures f;
  f.sse3 = true;
  return f;
}
CpuFeatures withSsse3() {
  CpuFeatures f = sse3Only();
  f.ssse3 = true;
  return f;
}
CpuFeatures withSse42() {
  CpuFeatures f = withSsse3();
  f.sse41 = f.sse42 = true;
  return f;
}
CpuFeatures withAvx() {
  CpuFeatures f = withSse42();
  f.avx = true;
  return f;
}
CpuFeatures withAvx2Fma() {
  CpuFeatures f = withAvx();
  f.avx2 = f.fma = true;
  return f;
}
CpuFeatures withAvx512() {
  CpuFeatures f = withAvx2Fma();
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.avx512cd = true;
  return f;
}

TEST(BlasCoreType, FollowsTheFeatureBits) {
  EXPECT_EQ(blas::openBlasCoreTypeFor(CpuFeatures{}), "");
  EXPECT_EQ(blas::openBlasCoreTypeFor(sse3Only()), "Prescott");
  EXPECT_EQ(blas::openBlasCoreTypeFor(withSsse3()), "Core2");
  EXPECT_EQ(blas::openBlasCoreTypeFor(withSse42()), "Nehalem");
  EXPECT_EQ(blas::openBlasCoreTypeFor(withAvx()), "Sandybridge");
  EXPECT_EQ(blas::openBlasCoreTypeFor(withAvx2Fma()), "Haswell");
  EXPECT_EQ(blas::openBlasCoreTypeFor(withAvx512()), "SkylakeX");
}

TEST(BlasCoreType, PartialFeatureSetsFallBackToWhatIsComplete) {
  // AVX2 without FMA (or FMA without AVX2) is no Haswell.
  CpuFeatures noFma = withAvx2Fma();
  noFma.fma = false;
  EXPECT_EQ(blas::openBlasCoreTypeFor(noFma), "Sandybridge");
  CpuFeatures noAvx2 = withAvx2Fma();
  noAvx2.avx2 = false;
  EXPECT_EQ(blas::openBlasCoreTypeFor(noAvx2), "Sandybridge");
  // Each AVX-512 subset SkylakeX's kernels use is needed (Knights Landing
  // has F and CD but neither BW, DQ nor VL).
  for (bool CpuFeatures::*bit :
       {&CpuFeatures::avx512f, &CpuFeatures::avx512bw, &CpuFeatures::avx512dq,
        &CpuFeatures::avx512vl, &CpuFeatures::avx512cd}) {
    CpuFeatures f = withAvx512();
    f.*bit = false;
    EXPECT_EQ(blas::openBlasCoreTypeFor(f), "Haswell");
  }
}

TEST(BlasCoreType, DetectedFeaturesAreConsistent) {
  CpuFeatures f = blas::detectCpuFeatures();
  // AVX-512 is only reported with the AVX state the OS saves.
  if (f.avx512f)
    EXPECT_TRUE(f.avx);
  if (f.avx2)
    EXPECT_TRUE(f.avx);
#if defined(__x86_64__)
  EXPECT_TRUE(f.sse3); // every x86-64 CPU made since 2005
#endif
}

TEST(BlasThreads, ShareOfTheHostCores) {
  EXPECT_EQ(blas::threadShare(2, 4), 1); // 4 ranks on 2 cores: never more
  EXPECT_EQ(blas::threadShare(2, 2), 1);
  EXPECT_EQ(blas::threadShare(2, 1), 2);
  EXPECT_EQ(blas::threadShare(16, 4), 4);
  EXPECT_EQ(blas::threadShare(7, 2), 3);
  EXPECT_EQ(blas::threadShare(0, 3), 1);
  EXPECT_EQ(blas::threadShare(8, 0), 8);
  EXPECT_GE(blas::affinityCores(), 1);
}

// Restores DTORCH_BLAS_THREADS and the thread count a test changed.
class BlasThreadsEnvironment : public ::testing::Test {
protected:
  void SetUp() override {
    const char *saved = std::getenv("DTORCH_BLAS_THREADS");
    had_ = saved != nullptr;
    if (had_)
      saved_ = saved;
    threads_ = blas::threads();
  }
  void TearDown() override {
    if (had_)
      setenv("DTORCH_BLAS_THREADS", saved_.c_str(), 1);
    else
      unsetenv("DTORCH_BLAS_THREADS");
    blas::setThreads(threads_);
  }
  bool had_ = false;
  std::string saved_;
  int threads_ = 1;
};

TEST_F(BlasThreadsEnvironment, ConfigureForHostUsesTheShareOrTheOverride) {
  unsetenv("DTORCH_BLAS_THREADS");
  int cores = blas::affinityCores();
  EXPECT_EQ(blas::configureForHost(1), cores);
  EXPECT_EQ(blas::threads(), cores);
  EXPECT_EQ(blas::configureForHost(4 * cores), 1);
  EXPECT_EQ(blas::threads(), 1);
  setenv("DTORCH_BLAS_THREADS", "3", 1);
  EXPECT_EQ(blas::configureForHost(4 * cores), 3);
  EXPECT_EQ(blas::threads(), 3);
  setenv("DTORCH_BLAS_THREADS", "zero", 1); // invalid: ignored
  EXPECT_EQ(blas::configureForHost(1), cores);
  EXPECT_THROW(blas::setThreads(0), RuntimeError);
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST(BlasLoaded, OpenBlasRunsTheCoreTypeChosenFromCpuid) {
  ASSERT_TRUE(blas::available(Library::OpenBlas));
  blas::Info info = blas::info();
  std::string expected = blas::openBlasCoreTypeFor(blas::detectCpuFeatures());
  if (const char *user = std::getenv("OPENBLAS_CORETYPE"); user && *user)
    expected = user;
  if (expected.empty() || info.openBlasPreloaded)
    GTEST_SKIP() << "no core type to check (chosen '" << expected
                 << "', preloaded " << info.openBlasPreloaded << ")";
  EXPECT_EQ(lower(info.openBlasChosen), lower(expected));
  // Debian's DYNAMIC_ARCH OpenBLAS has every core type up to SkylakeX.
  EXPECT_EQ(lower(info.openBlasCore), lower(expected));
  EXPECT_NE(blas::describe().find("thread"), std::string::npos);
}

TEST(BlasLoaded, DefaultIsOneDnnForFloat32AndOpenBlasForFloat64) {
  if (const char *forced = std::getenv("DTORCH_BLAS"); forced && *forced)
    GTEST_SKIP() << "DTORCH_BLAS=" << forced;
  ASSERT_TRUE(blas::available(Library::OneDnn));
  blas::Info info = blas::info();
  EXPECT_EQ(info.sgemmLibrary.rfind("oneDNN", 0), 0u) << info.sgemmLibrary;
  EXPECT_EQ(info.dgemmLibrary.rfind("OpenBLAS", 0), 0u) << info.dgemmLibrary;
  CpuFeatures f = blas::detectCpuFeatures();
  // oneDNN's JIT targets what CPUID offers, whatever the model name.
  if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl)
    EXPECT_EQ(info.oneDnnIsa.rfind("avx512_core", 0), 0u) << info.oneDnnIsa;
  else if (f.avx2)
    EXPECT_EQ(info.oneDnnIsa.rfind("avx2", 0), 0u) << info.oneDnnIsa;
}

// C = alpha * op(A) * op(B) + beta * C in float64, row-major with leading
// dimensions.
template <class T>
std::vector<double>
referenceGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const std::vector<T> &a, int64_t lda, const std::vector<T> &b,
              int64_t ldb, double beta, const std::vector<T> &c, int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        double x = ta ? a[p * lda + i] : a[i * lda + p];
        double y = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += x * y;
      }
      out[i * ldc + j] = alpha * sum + beta * double(c[i * ldc + j]);
    }
  return out;
}

template <class T> std::vector<T> randomValues(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (T &x : v)
    x = static_cast<T>(dist(gen));
  return v;
}

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
  int64_t pad; // extra elements per row of every operand
};

const GemmCase kGemmCases[] = {
    {false, false, 1, 1, 1, 0},   {false, false, 7, 5, 13, 0},
    {true, false, 7, 5, 13, 3},   {false, true, 33, 17, 65, 1},
    {true, true, 129, 31, 67, 2}, {false, false, 257, 129, 100, 5},
};

template <class T>
void checkLibrary(Library library, double alpha, double beta, double tol) {
  for (const GemmCase &g : kGemmCases) {
    int64_t lda = (g.ta ? g.m : g.k) + g.pad;
    int64_t ldb = (g.tb ? g.k : g.n) + g.pad;
    int64_t ldc = g.n + g.pad;
    auto a = randomValues<T>((g.ta ? g.k : g.m) * lda, 1);
    auto b = randomValues<T>((g.tb ? g.n : g.k) * ldb, 2);
    auto c = randomValues<T>(g.m * ldc, 3);
    auto want = referenceGemm(g.ta, g.tb, g.m, g.n, g.k, alpha, a, lda, b, ldb,
                              beta, c, ldc);
    if constexpr (std::is_same_v<T, float>)
      blas::sgemmWith(library, g.ta, g.tb, g.m, g.n, g.k, float(alpha),
                      a.data(), lda, b.data(), ldb, float(beta), c.data(), ldc);
    else
      blas::dgemmWith(library, g.ta, g.tb, g.m, g.n, g.k, alpha, a.data(), lda,
                      b.data(), ldb, beta, c.data(), ldc);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j)
        ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], tol * (g.k + 1))
            << "m=" << g.m << " n=" << g.n << " k=" << g.k << " ta=" << g.ta
            << " tb=" << g.tb << " at " << i << "," << j;
  }
}

TEST(BlasNumerics, EveryLibraryMatchesTheReference) {
  for (Library library : {Library::OneDnn, Library::OpenBlas, Library::Blis}) {
    ASSERT_TRUE(blas::available(library)) << int(library);
    SCOPED_TRACE(int(library));
    checkLibrary<float>(library, 1.0, 0.0, 1e-6);
    checkLibrary<float>(library, 0.5, -2.0, 1e-6);
    if (library != Library::OneDnn) {
      checkLibrary<double>(library, 1.0, 0.0, 1e-14);
      checkLibrary<double>(library, -1.5, 0.25, 1e-14);
    }
  }
  std::vector<double> x(1, 1.0), y(1, 1.0), z(1, 0.0);
  EXPECT_THROW(blas::dgemmWith(Library::OneDnn, false, false, 1, 1, 1, 1.0,
                               x.data(), 1, y.data(), 1, 0.0, z.data(), 1),
               RuntimeError);
}

TEST(BlasNumerics, ThreadedGemmMatchesTheReference) {
  int saved = blas::threads();
  blas::setThreads(2);
  for (Library library : {Library::OneDnn, Library::OpenBlas, Library::Blis})
    checkLibrary<float>(library, 1.0, 0.0, 1e-6);
  checkLibrary<double>(Library::OpenBlas, 1.0, 0.0, 1e-14);
  blas::setThreads(saved);
}

// The matmul and bmm kernels in every dtype: the float ones go through the
// BLAS, float16/bfloat16 through the float32 sgemm.
// The tolerance is per unit of k for float32/float64 (accumulated rounding)
// and flat for the 16-bit types (one rounding of the float32 result).
template <class T> void checkKernels(DType dtype, double tolerance, bool perK) {
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {65, 33, 17}};
  for (auto &s : shapes) {
    int64_t m = s[0], k = s[1], n = s[2];
    double tol = perK ? tolerance * k : tolerance;
    auto av = randomValues<T>(m * k, 4), bv = randomValues<T>(k * n, 5);
    std::vector<T> zero(m * n, T(0));
    auto want =
        referenceGemm(false, false, m, n, k, 1.0, av, k, bv, n, 0.0, zero, n);
    Tensor out = runKernel(
        "matmul",
        {makeTensor<T>(dtype, {m, k}, av), makeTensor<T>(dtype, {k, n}, bv)},
        dtype, {m, n});
    expectClose(valuesOf<T>(out), want, tol, "matmul");
    // bmm: two batches, the second with other values.
    auto av2 = randomValues<T>(m * k, 6), bv2 = randomValues<T>(k * n, 7);
    auto want2 =
        referenceGemm(false, false, m, n, k, 1.0, av2, k, bv2, n, 0.0, zero, n);
    std::vector<T> as(av), bs(bv);
    as.insert(as.end(), av2.begin(), av2.end());
    bs.insert(bs.end(), bv2.begin(), bv2.end());
    Tensor batched = runKernel("bmm",
                               {makeTensor<T>(dtype, {2, m, k}, as),
                                makeTensor<T>(dtype, {2, k, n}, bs)},
                               dtype, {2, m, n});
    want.insert(want.end(), want2.begin(), want2.end());
    expectClose(valuesOf<T>(batched), want, tol, "bmm");
  }
}

TEST(BlasKernels, MatmulAndBmmInEveryFloatDtype) {
  checkKernels<float>(F32, 1e-6, true);
  checkKernels<double>(F64, 1e-14, true);
  checkKernels<Half>(F16, 1e-3, false);
  checkKernels<BFloat16>(BF16, 8e-3, false);
}

} // namespace
} // namespace dtorch::rt::test
