//===- BlasInfo.cpp - the BLAS that runs GEMMs in this process ------------===//
#include "dtorch/Client/BlasInfo.h"

#include "dtorch/runtime/Blas.h"

namespace dtorch::client {

BlasInfo blasInfo() {
  rt::blas::Info info = rt::blas::info();
  BlasInfo out;
  out.sgemm = info.sgemmLibrary;
  out.dgemm = info.dgemmLibrary;
  out.openBlasCore = info.openBlasCore;
  out.openBlasChosen = info.openBlasChosen;
  out.openBlasPreloaded = info.openBlasPreloaded;
  out.oneDnnIsa = info.oneDnnIsa;
  out.blisArch = info.blisArch;
  out.threads = info.threads;
  out.description = rt::blas::describe();
  return out;
}

} // namespace dtorch::client
