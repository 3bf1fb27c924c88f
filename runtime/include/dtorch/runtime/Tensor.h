// Dense, row-major, contiguous tensors whose storage belongs to a Device
// (Device.h): the CPU's caching allocator (Allocator.h) unless another device
// is named. A Tensor is a cheap handle: copies share storage.
#pragma once

#include "dtorch/runtime/Device.h"
#include "dtorch_program.pb.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtorch::rt {

using DType = ::dtorch::wire::DType;

// Bytes per element; throws RuntimeError for DTYPE_INVALID or unknown values.
size_t dtypeSize(DType dtype);
// "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool",
// or "invalid" for anything else. Never throws.
const char *dtypeName(DType dtype);

// Every runtime failure (bad program, kernel error, collective timeout).
class RuntimeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Storage; // a block from the caching allocator, returned on destruction

class Tensor {
public:
  // An undefined tensor: no storage, dtype DTYPE_INVALID, defined() false.
  Tensor();

  // Uninitialized contents. Throws RuntimeError for an invalid dtype, a
  // negative extent, or a size that overflows.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  // The same in the memory of `device` (data() is then a device pointer).
  static Tensor empty(DType dtype, std::vector<int64_t> shape, Device &device);
  static Tensor emptyLike(const ::dtorch::wire::TensorSpec &spec);
  // A tensor of `dtype` and `shape` whose elements are the bytes of `base`
  // from `byteOffset` on (it shares, and keeps alive, base's storage): how
  // the executor binds planned buffers into its arena. Throws RuntimeError
  // when base is undefined or the view does not fit inside it.
  static Tensor viewOf(const Tensor &base, size_t byteOffset, DType dtype,
                       std::vector<int64_t> shape);

  // Rebinding in place, for an execution plan's slots, which hold the same
  // dtype and shape run after run: this tensor becomes viewOf(base, ...)
  // (assignView) or a fresh empty(dtype, shape, device) (assignEmpty),
  // keeping its shape vector's storage, so a slot bound again allocates no
  // shape. `numel` is shape's element count (the caller's, precomputed).
  // The same checks and errors as viewOf and empty.
  void assignView(const Tensor &base, size_t byteOffset, DType dtype,
                  const std::vector<int64_t> &shape, int64_t numel);
  void assignEmpty(DType dtype, const std::vector<int64_t> &shape,
                   int64_t numel, Device &device);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const;

  // Never null for a defined tensor (even with zero elements).
  void *data();
  const void *data() const;

  // Throws RuntimeError when sizeof(T) differs from the element size.
  template <class T> T *data_as() {
    checkElementSize(sizeof(T));
    return static_cast<T *>(data());
  }
  template <class T> const T *data_as() const {
    checkElementSize(sizeof(T));
    return static_cast<const T *>(data());
  }

  // True when no other Tensor shares this one's storage (this handle is
  // its only holder): what lets a donated input's memory be written over.
  bool soleOwner() const { return storage_ && storage_.use_count() == 1; }

  // The device the storage belongs to (the CPU for an undefined tensor).
  Device &device() const;

  // A deep copy with fresh storage on the same device.
  Tensor clone() const;
  // A deep copy on `target` (host <-> device; a copy between two non-CPU
  // devices throws RuntimeError).
  Tensor to(Device &target) const;
  // "float32[2, 3]".
  std::string describe() const;

private:
  void checkElementSize(size_t size) const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = ::dtorch::wire::DTYPE_INVALID;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  size_t offset_ = 0; // bytes into the storage (views)
};

} // namespace dtorch::rt
