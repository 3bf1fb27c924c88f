// The CPU side of the BLAS choice: CPUID feature bits, the OpenBLAS core type
// they call for, and the thread share of a rank (Blas.h).
#include "dtorch/runtime/Blas.h"

#include "dtorch/runtime/Tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DTORCH_BLAS_X86 1
#endif

namespace dtorch::rt::blas {

namespace {

#ifdef DTORCH_BLAS_X86
// XCR0: which register states the OS saves on a context switch.
uint64_t readXcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

// The thread count of GEMMs; 0 until set (then DTORCH_BLAS_THREADS or 1).
std::atomic<int> configuredThreads{0};

int threadsFromEnvironment() {
  const char *text = std::getenv("DTORCH_BLAS_THREADS");
  if (!text || !*text)
    return 0;
  char *end = nullptr;
  long parsed = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || parsed < 1 || parsed > 1024)
    return 0;
  return static_cast<int>(parsed);
}

} // namespace

CpuFeatures detectCpuFeatures() {
  CpuFeatures f;
#ifdef DTORCH_BLAS_X86
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
    return f;
  f.sse3 = ecx & (1u << 0);
  f.ssse3 = ecx & (1u << 9);
  f.fma = ecx & (1u << 12);
  f.sse41 = ecx & (1u << 19);
  f.sse42 = ecx & (1u << 20);
  bool osxsave = ecx & (1u << 27);
  bool avxBit = ecx & (1u << 28);
  uint64_t xcr0 = osxsave ? readXcr0() : 0;
  // SSE (bit 1) and AVX (bit 2) state; opmask, upper ZMM and high ZMM
  // (bits 5-7) for AVX-512.
  bool osYmm = (xcr0 & 0x6) == 0x6;
  bool osZmm = osYmm && (xcr0 & 0xe0) == 0xe0;
  f.avx = avxBit && osYmm;
  f.fma = f.fma && osYmm;
  unsigned maxLeaf = __get_cpuid_max(0, nullptr);
  if (maxLeaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    f.avx2 = osYmm && (ebx & (1u << 5));
    f.avx512f = osZmm && (ebx & (1u << 16));
    f.avx512dq = osZmm && (ebx & (1u << 17));
    f.avx512cd = osZmm && (ebx & (1u << 28));
    f.avx512bw = osZmm && (ebx & (1u << 30));
    f.avx512vl = osZmm && (ebx & (1u << 31));
  }
#endif
  return f;
}

std::string openBlasCoreTypeFor(const CpuFeatures &f) {
  if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512cd &&
      f.avx2 && f.fma)
    return "SkylakeX";
  if (f.avx2 && f.fma && f.avx)
    return "Haswell";
  if (f.avx)
    return "Sandybridge";
  if (f.sse42 && f.sse41 && f.ssse3 && f.sse3)
    return "Nehalem";
  if (f.ssse3 && f.sse3)
    return "Core2";
  if (f.sse3)
    return "Prescott";
  return "";
}

int threadShare(int cores, int ranksOnHost) {
  return std::max(1, std::max(1, cores) / std::max(1, ranksOnHost));
}

int affinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return 1;
  return std::max(1, CPU_COUNT(&set));
}

int configureForHost(int ranksOnHost) {
  int count = threadsFromEnvironment();
  if (count == 0)
    count = threadShare(affinityCores(), ranksOnHost);
  setThreads(count);
  return count;
}

void setThreads(int count) {
  if (count < 1)
    throw RuntimeError("BLAS thread count must be at least 1");
  configuredThreads.store(count, std::memory_order_relaxed);
}

int threads() {
  int count = configuredThreads.load(std::memory_order_relaxed);
  if (count > 0)
    return count;
  count = threadsFromEnvironment();
  return count > 0 ? count : 1;
}

} // namespace dtorch::rt::blas
