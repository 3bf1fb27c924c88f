// The runtime's dense GEMM: which BLAS library runs it, with which kernels
// and how many threads. MLIR-free.
//
// The library is chosen deliberately, never from the CPU's model name:
//  - float32 GEMMs go to oneDNN's sgemm (its kernels are generated at run
//    time for the instruction set that CPUID reports: AVX-512, AVX2, ...);
//  - float64 GEMMs (and float32 when oneDNN is missing) go to OpenBLAS, whose
//    core type this module picks from CPUID feature bits
//    (`openBlasCoreTypeFor`) and hands it through OPENBLAS_CORETYPE before
//    loading the library with dlopen (OpenBLAS reads it in its constructor);
//  - DTORCH_BLAS=openblas | blis | onednn forces one library (BLIS then runs
//    both precisions; oneDNN has no dgemm, OpenBLAS runs float64 then).
// Every library is loaded with dlopen(RTLD_LOCAL), so their cblas_* symbols
// never clash. A library that is missing raises RuntimeError at the first
// GEMM that needs it.
//
// Threads: every rank gets the share of the host's cores that its place in
// the layout allows (`threadShare`: cores of this process's affinity mask /
// ranks on the host, at least 1), so four ranks on two cores never
// oversubscribe. DTORCH_BLAS_THREADS overrides. oneDNN's OpenMP thread count
// is set per calling thread (ranks are threads of a worker process); the
// OpenBLAS and BLIS counts are process-wide, which is the same value since
// every rank of a host gets the same share.
#pragma once

#include <cstdint>
#include <string>

namespace dtorch::rt::blas {

/// The CPUID feature bits the choice depends on. AVX and AVX-512 bits are
/// only set by `detectCpuFeatures` when the OS also saves the registers
/// (XGETBV), as using them needs both.
struct CpuFeatures {
  bool sse3 = false, ssse3 = false, sse41 = false, sse42 = false;
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false,
       avx512cd = false;
};

/// This CPU's features (all false on a non-x86 CPU).
CpuFeatures detectCpuFeatures();

/// The OpenBLAS core type (a name OPENBLAS_CORETYPE accepts and
/// openblas_get_corename reports) whose kernels these features run:
/// AVX512F/BW/DQ/VL/CD -> "SkylakeX", AVX2+FMA -> "Haswell", AVX ->
/// "Sandybridge", SSE4.2 -> "Nehalem", SSSE3 -> "Core2", SSE3 -> "Prescott";
/// "" without SSE3 (OpenBLAS then decides alone).
std::string openBlasCoreTypeFor(const CpuFeatures &features);

/// max(1, cores / ranksOnHost); a non-positive count counts as 1.
int threadShare(int cores, int ranksOnHost);

/// CPUs in this process's affinity mask (sched_getaffinity), at least 1.
int affinityCores();

/// Sets the threads of every later GEMM of this process from its layout:
/// DTORCH_BLAS_THREADS when set to a valid count, else
/// threadShare(affinityCores(), ranksOnHost). Returns the count. Worker
/// processes call it at start-up; until someone does, GEMMs use
/// DTORCH_BLAS_THREADS or 1.
int configureForHost(int ranksOnHost);

/// Sets the thread count of every later GEMM (>= 1).
void setThreads(int threads);
int threads();

/// Loads the chosen libraries now (the first GEMM does it otherwise), so a
/// missing library fails at start-up. Idempotent; throws RuntimeError.
void load();

/// What runs GEMMs in this process (loads the libraries).
struct Info {
  std::string sgemmLibrary;   // "oneDNN 2.6.3", "OpenBLAS 0.3.21", "BLIS 0.9.0"
  std::string dgemmLibrary;   // the float64 one
  std::string openBlasCore;   // openblas_get_corename(), "" when not loaded
  std::string openBlasChosen; // the core type chosen from CPUID ("" none)
  bool openBlasPreloaded = false; // loaded by someone else before us: the
                                  // chosen core type may not apply
  std::string oneDnnIsa;          // the instruction set oneDNN's JIT targets
  std::string blisArch;           // BLIS's active configuration ("zen3", ...)
  int threads = 1;
};
Info info();
/// One line: "sgemm: oneDNN 2.6.3 (avx512_core_bf16), dgemm: OpenBLAS
/// 0.3.21 (SkylakeX), 1 thread".
std::string describe();

/// Row-major C[m,n] = alpha * op(A) * op(B) + beta * C, where op(A) is
/// [m,k] (A stored [m,k] with row stride lda, or [k,m] when transA) and
/// op(B) is [k,n] (B stored [k,n], or [n,k] when transB).
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc);
void dgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           double alpha, const double *a, int64_t lda, const double *b,
           int64_t ldb, double beta, double *c, int64_t ldc);

/// One library by name, whatever DTORCH_BLAS chose (tests and benchmarks
/// compare them). oneDNN has no dgemm: dgemmWith(OneDnn) throws.
enum class Library { OneDnn, OpenBlas, Blis };
/// Whether `library` loads in this process (loads it).
bool available(Library library);
void sgemmWith(Library library, bool transA, bool transB, int64_t m, int64_t n,
               int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void dgemmWith(Library library, bool transA, bool transB, int64_t m, int64_t n,
               int64_t k, double alpha, const double *a, int64_t lda,
               const double *b, int64_t ldb, double beta, double *c,
               int64_t ldc);

} // namespace dtorch::rt::blas
