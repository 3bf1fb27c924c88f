//===- Errors.h - the exceptions the client raises -------------*- C++ -*-===//
//
// Everything the Python extension maps to a Python exception comes from here,
// so the extension needs no runtime header: the backends translate the
// runtime's errors (rt::WorkerError of the cluster, a failed fetch of the
// in-process backend) into client::WorkerError at their boundary.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stdexcept>
#include <string>

namespace dtorch::client {

/// A user mistake: raised as ValueError / TypeError in Python.
struct ValueError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
struct TypeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
/// An index value out of range: raised as IndexError in Python.
struct IndexError : std::out_of_range {
  using std::out_of_range::out_of_range;
};
/// Something failed in the system (compilation, a worker): DTorchError.
struct DTorchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A rank failed, died or stopped answering: dtorch.WorkerError (or the
/// subclass its message calls for) naming the rank and its host.
class WorkerError : public DTorchError {
public:
  WorkerError(int rank, std::string host, const std::string &what)
      : DTorchError(what), rank_(rank), host_(std::move(host)) {}
  int rank() const { return rank_; }
  const std::string &host() const { return host_; }

private:
  int rank_;
  std::string host_;
};

} // namespace dtorch::client
