// dtorch-worker: the worker runtime process. See
// runtime/include/dtorch/runtime/Worker.h.
//
//   dtorch-worker --listen tcp://127.0.0.1:5555 --token-file FILE --ranks 0-1
//                 --world-size 4
//   dtorch-worker --connect tcp://127.0.0.1:PORT --token-fd 3 --ranks 2-3
//                 --world-size 4
//   dtorch-worker --generate-curve-keypair PREFIX
// (docs/guide/security.md: tokens, CURVE keys, the collective address).
#include "dtorch/runtime/Worker.h"

#ifdef DTORCH_HAVE_CUDA
#include "CudaDevice.h"
#endif

#include <cstdio>
#include <exception>
#include <unistd.h>

int main(int argc, char **argv) {
  int code = 0;
  try {
#ifdef DTORCH_HAVE_CUDA
    // The "cuda" device and kernels; touches no GPU (its Hello reports
    // how many the process sees).
    dtorch::rt::cuda::registerCudaBackend();
#endif
    dtorch::rt::WorkerOptions options = dtorch::rt::parseWorkerArgs(argc, argv);
    code = dtorch::rt::runWorker(options);
  } catch (const std::exception &error) {
    std::fprintf(stderr, "dtorch-worker: %s\n", error.what());
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // Rank threads may still be blocked in a collective: leave without
  // running destructors.
  _exit(code);
}
