// The kernel registry, keyed by (op name, dtype, device). The dtype of a key
// is the dtype of the instruction's first output. Every kernel has a `check`
// (run by the program validator before anything executes; it sees only
// dtypes, shapes and attributes) and a `run` (which may assume check passed).
#pragma once

#include "dtorch/runtime/Attrs.h"
#include "dtorch/runtime/Tensor.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtorch::rt {

struct TensorDesc {
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  std::vector<int64_t> shape;
};

// Throws RuntimeError describing what is wrong.
using KernelCheckFn = std::function<void(
    const AttrReader &attrs, const std::vector<TensorDesc> &inputs,
    const std::vector<TensorDesc> &outputs)>;
using KernelRunFn = std::function<void(
    const AttrReader &attrs, const std::vector<const Tensor *> &inputs,
    const std::vector<Tensor *> &outputs)>;

// Kernel::numInputs of a kernel that takes one or more inputs (concat).
constexpr int kVariadicInputs = -1;

struct Kernel {
  int numInputs = 0; // kVariadicInputs: one or more
  int numOutputs = 1;
  KernelCheckFn check; // may be empty: arity and nothing else is checked
  KernelRunFn run;
};

constexpr const char *kCpuDevice = "cpu";
constexpr const char *kCudaDevice = "cuda";

class KernelRegistry {
public:
  // The process-wide registry with every built-in CPU kernel registered.
  static KernelRegistry &global();

  // Replaces an existing entry with the same key.
  void add(const std::string &op, DType dtype, const std::string &device,
           Kernel kernel);
  // nullptr when absent. The pointer stays valid until the entry is replaced.
  const Kernel *lookup(const std::string &op, DType dtype,
                       const std::string &device) const;
  // Whether any kernel (any dtype, any device) is registered under `op`.
  bool hasOp(const std::string &op) const;
  // Dtypes registered for (op, device), ascending.
  std::vector<DType> dtypesFor(const std::string &op,
                               const std::string &device) const;
  // Every (op, dtype) registered for `device`, sorted.
  std::vector<std::pair<std::string, DType>>
  entriesFor(const std::string &device) const;
  // Bumped by every add(): a kernel pointer looked up before may have been
  // replaced (execution plans check it before each run).
  uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }

private:
  // op -> device -> dtype -> kernel: a lookup hashes the op and device
  // strings it is given and copies nothing (it runs once per instruction of
  // every run and every validation).
  using ByDtype = std::map<int, std::unique_ptr<Kernel>>;
  using ByDevice = std::unordered_map<std::string, ByDtype>;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, ByDevice> kernels_;
  std::atomic<uint64_t> generation_{0};
};

// Shorthands on the global registry.
const Kernel *lookupKernel(const std::string &op, DType dtype,
                           const std::string &device = kCpuDevice);
void registerKernel(const std::string &op, DType dtype,
                    const std::string &device, Kernel kernel);

// Sets the thread count of every later GEMM (blas::setThreads, Blas.h).
// Until called (or blas::configureForHost), GEMMs use DTORCH_BLAS_THREADS
// from the environment (default 1).
void setBlasThreads(int threads);

// The elementwise-random hash (docs/program-format.md, `random`).
uint64_t randomBits(uint64_t seed, uint64_t linearIndex, uint64_t stream);
double randomUniform(uint64_t seed, uint64_t linearIndex); // [0, 1)
double randomNormal(uint64_t seed, uint64_t linearIndex);

// Built-in registration, called once by KernelRegistry::global().
void registerCreationKernels(KernelRegistry &registry);
void registerElementwiseKernels(KernelRegistry &registry);
void registerReductionKernels(KernelRegistry &registry);
void registerLinalgKernels(KernelRegistry &registry);
void registerLayoutKernels(KernelRegistry &registry);
void registerCastKernels(KernelRegistry &registry);
void registerComparisonKernels(KernelRegistry &registry);
void registerArgReductionKernels(KernelRegistry &registry);
void registerIndexingKernels(KernelRegistry &registry);
void registerTriangularKernels(KernelRegistry &registry);
void registerTopkKernels(KernelRegistry &registry);

// Check helpers for kernel implementations (throw RuntimeError).
void requireSameDescs(const TensorDesc &a, const TensorDesc &b,
                      const char *what);
void requireDtype(const TensorDesc &d, DType dtype, const char *what);

} // namespace dtorch::rt
