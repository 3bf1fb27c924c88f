#include "dtorch/runtime/Kernels.h"

#include "dtorch/runtime/Shape.h"

#include <algorithm>

namespace dtorch::rt {

// The multi-tensor optimizer kernels (OptimizerKernels.cpp); kept out of
// Kernels.h, which every kernel file includes.
void registerOptimizerKernels(KernelRegistry &registry);

KernelRegistry &KernelRegistry::global() {
  static KernelRegistry *registry = [] {
    auto *created = new KernelRegistry(); // never destroyed
    registerCreationKernels(*created);
    registerElementwiseKernels(*created);
    registerReductionKernels(*created);
    registerLinalgKernels(*created);
    registerLayoutKernels(*created);
    registerCastKernels(*created);
    registerTopkKernels(*created);
    registerOptimizerKernels(*created);
    registerComparisonKernels(*created);
    registerArgReductionKernels(*created);
    registerIndexingKernels(*created);
    registerTriangularKernels(*created);
    return created;
  }();
  return *registry;
}

void KernelRegistry::add(const std::string &op, DType dtype,
                         const std::string &device, Kernel kernel) {
  if (!kernel.run)
    throw RuntimeError("kernel '" + op + "' registered without a run function");
  std::lock_guard<std::mutex> lock(mutex_);
  kernels_[op][device][static_cast<int>(dtype)] =
      std::make_unique<Kernel>(std::move(kernel));
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

const Kernel *KernelRegistry::lookup(const std::string &op, DType dtype,
                                     const std::string &device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto byOp = kernels_.find(op);
  if (byOp == kernels_.end())
    return nullptr;
  auto byDevice = byOp->second.find(device);
  if (byDevice == byOp->second.end())
    return nullptr;
  auto it = byDevice->second.find(static_cast<int>(dtype));
  return it == byDevice->second.end() ? nullptr : it->second.get();
}

bool KernelRegistry::hasOp(const std::string &op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kernels_.count(op) != 0;
}

std::vector<DType> KernelRegistry::dtypesFor(const std::string &op,
                                             const std::string &device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<DType> dtypes;
  auto byOp = kernels_.find(op);
  if (byOp == kernels_.end())
    return dtypes;
  auto byDevice = byOp->second.find(device);
  if (byDevice == byOp->second.end())
    return dtypes;
  for (const auto &[dtype, kernel] : byDevice->second)
    dtypes.push_back(static_cast<DType>(dtype)); // ascending: a std::map
  return dtypes;
}

std::vector<std::pair<std::string, DType>>
KernelRegistry::entriesFor(const std::string &device) const {
  std::vector<std::pair<std::string, DType>> entries;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto &[op, byDevice] : kernels_) {
      auto it = byDevice.find(device);
      if (it == byDevice.end())
        continue;
      for (const auto &[dtype, kernel] : it->second)
        entries.emplace_back(op, static_cast<DType>(dtype));
    }
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

const Kernel *lookupKernel(const std::string &op, DType dtype,
                           const std::string &device) {
  return KernelRegistry::global().lookup(op, dtype, device);
}

void registerKernel(const std::string &op, DType dtype,
                    const std::string &device, Kernel kernel) {
  KernelRegistry::global().add(op, dtype, device, std::move(kernel));
}

void requireSameDescs(const TensorDesc &a, const TensorDesc &b,
                      const char *what) {
  if (a.dtype != b.dtype || a.shape != b.shape)
    throw RuntimeError(std::string(what) + ": expected " + dtypeName(a.dtype) +
                       shapeToString(a.shape) + ", got " + dtypeName(b.dtype) +
                       shapeToString(b.shape));
}

void requireDtype(const TensorDesc &d, DType dtype, const char *what) {
  if (d.dtype != dtype)
    throw RuntimeError(std::string(what) + " must be " + dtypeName(dtype) +
                       ", got " + dtypeName(d.dtype));
}

} // namespace dtorch::rt
