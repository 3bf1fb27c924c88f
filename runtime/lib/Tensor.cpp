#include "dtorch/runtime/Tensor.h"

#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/Shape.h"

#include <cstring>
#include <limits>
#include <sstream>

namespace dtorch::rt {

using ::dtorch::wire::DType;

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return 4;
  case ::dtorch::wire::F64:
    return 8;
  case ::dtorch::wire::F16:
    return 2;
  case ::dtorch::wire::BF16:
    return 2;
  case ::dtorch::wire::I32:
    return 4;
  case ::dtorch::wire::I64:
    return 8;
  case ::dtorch::wire::BOOL:
    return 1;
  default:
    break;
  }
  throw RuntimeError(std::string("invalid dtype ") +
                     std::to_string(static_cast<int>(dtype)));
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return "float32";
  case ::dtorch::wire::F64:
    return "float64";
  case ::dtorch::wire::F16:
    return "float16";
  case ::dtorch::wire::BF16:
    return "bfloat16";
  case ::dtorch::wire::I32:
    return "int32";
  case ::dtorch::wire::I64:
    return "int64";
  case ::dtorch::wire::BOOL:
    return "bool";
  default:
    return "invalid";
  }
}

// One block of a device's allocator (the caching host allocator for the
// CPU); returned to it when the last Tensor goes away.
class Storage {
public:
  Storage(size_t bytes, Device &device)
      : device_(device), bytes_(bytes), data_(device.allocate(bytes)) {}
  ~Storage() { device_.deallocate(data_, bytes_); }
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;
  void *data() const { return data_; }
  Device &device() const { return device_; }

private:
  Device &device_;
  size_t bytes_;
  void *data_;
};

Tensor::Tensor() = default;

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  return empty(dtype, std::move(shape), cpuDevice());
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape, Device &device) {
  size_t elementSize = dtypeSize(dtype);
  int64_t numel = shapeNumel(shape);
  if (numel > 0 && static_cast<uint64_t>(numel) >
                       std::numeric_limits<int64_t>::max() / elementSize)
    throw RuntimeError("tensor of shape " + shapeToString(shape) +
                       " is too large");
  Tensor tensor;
  tensor.dtype_ = dtype;
  tensor.shape_ = std::move(shape);
  tensor.numel_ = numel;
  tensor.storage_ = std::make_shared<Storage>(
      static_cast<size_t>(numel) * elementSize, device);
  return tensor;
}

Tensor Tensor::emptyLike(const ::dtorch::wire::TensorSpec &spec) {
  return empty(spec.dtype(),
               std::vector<int64_t>(spec.shape().begin(), spec.shape().end()));
}

Tensor Tensor::viewOf(const Tensor &base, size_t byteOffset, DType dtype,
                      std::vector<int64_t> shape) {
  if (!base.defined())
    throw RuntimeError("a view of an undefined tensor");
  size_t elementSize = dtypeSize(dtype);
  int64_t numel = shapeNumel(shape);
  size_t bytes = static_cast<size_t>(numel) * elementSize;
  if (numel > 0 && static_cast<uint64_t>(numel) >
                       std::numeric_limits<int64_t>::max() / elementSize)
    throw RuntimeError("view of shape " + shapeToString(shape) +
                       " is too large");
  if (byteOffset > base.nbytes() || bytes > base.nbytes() - byteOffset)
    throw RuntimeError("a view of " + std::to_string(bytes) + " bytes at " +
                       std::to_string(byteOffset) + " does not fit in " +
                       base.describe());
  Tensor view;
  view.dtype_ = dtype;
  view.shape_ = std::move(shape);
  view.numel_ = numel;
  view.storage_ = base.storage_;
  view.offset_ = base.offset_ + byteOffset;
  return view;
}

void Tensor::assignView(const Tensor &base, size_t byteOffset, DType dtype,
                        const std::vector<int64_t> &shape, int64_t numel) {
  if (!base.defined())
    throw RuntimeError("a view of an undefined tensor");
  size_t elementSize = dtypeSize(dtype);
  if (numel > 0 && static_cast<uint64_t>(numel) >
                       std::numeric_limits<int64_t>::max() / elementSize)
    throw RuntimeError("view of shape " + shapeToString(shape) +
                       " is too large");
  size_t bytes = static_cast<size_t>(numel) * elementSize;
  if (byteOffset > base.nbytes() || bytes > base.nbytes() - byteOffset)
    throw RuntimeError("a view of " + std::to_string(bytes) + " bytes at " +
                       std::to_string(byteOffset) + " does not fit in " +
                       base.describe());
  size_t offset = base.offset_ + byteOffset;
  storage_ = base.storage_; // base may be *this: its offset is read above
  dtype_ = dtype;
  shape_.assign(shape.begin(), shape.end());
  numel_ = numel;
  offset_ = offset;
}

void Tensor::assignEmpty(DType dtype, const std::vector<int64_t> &shape,
                         int64_t numel, Device &device) {
  size_t elementSize = dtypeSize(dtype);
  if (numel > 0 && static_cast<uint64_t>(numel) >
                       std::numeric_limits<int64_t>::max() / elementSize)
    throw RuntimeError("tensor of shape " + shapeToString(shape) +
                       " is too large");
  storage_ = std::make_shared<Storage>(static_cast<size_t>(numel) * elementSize,
                                       device);
  dtype_ = dtype;
  shape_.assign(shape.begin(), shape.end());
  numel_ = numel;
  offset_ = 0;
}

size_t Tensor::nbytes() const {
  if (!defined())
    return 0;
  return static_cast<size_t>(numel_) * dtypeSize(dtype_);
}

void *Tensor::data() {
  return storage_ ? static_cast<char *>(storage_->data()) + offset_ : nullptr;
}
const void *Tensor::data() const {
  return storage_ ? static_cast<const char *>(storage_->data()) + offset_
                  : nullptr;
}

Device &Tensor::device() const {
  return storage_ ? storage_->device() : cpuDevice();
}

Tensor Tensor::clone() const {
  if (!defined())
    return Tensor();
  Tensor copy = empty(dtype_, shape_, device());
  device().copyDeviceToDevice(copy.data(), data(), nbytes(), nullptr);
  return copy;
}

Tensor Tensor::to(Device &target) const {
  if (!defined())
    return Tensor();
  Device &source = device();
  if (&source == &target)
    return clone();
  Tensor copy = empty(dtype_, shape_, target);
  if (source.kind() == DeviceKind::Cpu)
    target.copyHostToDevice(copy.data(), data(), nbytes(), nullptr);
  else if (target.kind() == DeviceKind::Cpu)
    source.copyDeviceToHost(copy.data(), data(), nbytes(), nullptr);
  else
    throw RuntimeError("a copy from " + source.describe() + " to " +
                       target.describe() + " must go through the host");
  return copy;
}

std::string Tensor::describe() const {
  if (!defined())
    return "undefined";
  return std::string(dtypeName(dtype_)) + shapeToString(shape_);
}

void Tensor::checkElementSize(size_t size) const {
  if (!defined())
    throw RuntimeError("data_as on an undefined tensor");
  if (size != dtypeSize(dtype_))
    throw RuntimeError("data_as: element type of size " + std::to_string(size) +
                       " does not match " + describe());
}

} // namespace dtorch::rt
