//===- ClusterBackendUnavailable.cpp - build without the worker runtime ---===//
#include "dtorch/Client/Backend.h"
#include "dtorch/Client/Session.h"

namespace dtorch::client {
std::unique_ptr<Backend> makeClusterBackend(const ClusterConfig&) {
  throw DTorchError("this build has no worker-process runtime; use backend='inprocess'");
}
}  // namespace dtorch::client
