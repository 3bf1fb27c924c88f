//===- BlasInfo.h - the BLAS that runs GEMMs in this process ----*- C++ -*-===//
//
// What the runtime's BLAS choice (runtime/include/dtorch/runtime/Blas.h)
// resolved to in the client's process, where the in-process backend's ranks
// run their kernels; worker processes print theirs at start-up with
// DTORCH_BLAS_VERBOSE=1. For `dtorch._C.blas_info()`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace dtorch::client {

struct BlasInfo {
  std::string sgemm, dgemm;       // libraries with versions
  std::string openBlasCore;       // what OpenBLAS runs ("" when not loaded)
  std::string openBlasChosen;     // the core type chosen from CPUID
  bool openBlasPreloaded = false; // loaded before us: the choice may not apply
  std::string oneDnnIsa, blisArch;
  int threads = 1;
  std::string description; // one line
};

/// Loads the libraries if needed; throws std::runtime_error when one that is
/// needed is missing.
BlasInfo blasInfo();

} // namespace dtorch::client
