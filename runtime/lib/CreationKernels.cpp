// full, random, constant.
#include "KernelSupport.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dtorch::rt {

using namespace detail;

uint64_t randomBits(uint64_t seed, uint64_t linearIndex, uint64_t stream) {
  auto splitmix64 = [](uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  return splitmix64(splitmix64(seed) ^ (2 * linearIndex + stream));
}

double randomUniform(uint64_t seed, uint64_t linearIndex) {
  return static_cast<double>(randomBits(seed, linearIndex, 0) >> 11) *
         0x1.0p-53;
}

double randomNormal(uint64_t seed, uint64_t linearIndex) {
  double u1 =
      static_cast<double>((randomBits(seed, linearIndex, 0) >> 11) + 1) *
      0x1.0p-53;
  double u2 =
      static_cast<double>(randomBits(seed, linearIndex, 1) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

namespace {

// ---- full -------------------------------------------------------------------
void checkFullValue(double value, DType dtype) {
  if (dtype == ::dtorch::wire::I64) {
    if (!std::isfinite(value) || value != std::trunc(value) ||
        value < -0x1.0p63 || value >= 0x1.0p63)
      throw RuntimeError("full: value " + std::to_string(value) +
                         " is not an int64");
  }
}

template <class T> void registerFull(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 0;
  kernel.check = [](const AttrReader &attrs, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &outputs) {
    checkFullValue(attrs.getFloat("value"), outputs[0].dtype);
  };
  kernel.run = [](const AttrReader &attrs, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &outputs) {
    double value = attrs.getFloat("value");
    T fill;
    if constexpr (std::is_same_v<T, bool>)
      fill = value != 0.0;
    else
      fill = static_cast<T>(value);
    T *out = outputs[0]->data_as<T>();
    for (int64_t i = 0, n = outputs[0]->numel(); i < n; ++i)
      out[i] = fill;
  };
  addCpuKernel<T>(registry, "full", std::move(kernel));
}

// ---- boxes of a global tensor (random, constant)
// ------------------------------
struct GlobalBox {
  Shape globalShape;
  Shape offset;
};

GlobalBox readGlobalBox(const AttrReader &attrs, const Shape &localShape,
                        const char *op) {
  GlobalBox box{attrs.getInts("global_shape"), attrs.getInts("offset")};
  size_t rank = localShape.size();
  if (box.globalShape.size() != rank || box.offset.size() != rank)
    throw RuntimeError(std::string(op) + ": global_shape " +
                       shapeToString(box.globalShape) + " and offset " +
                       shapeToString(box.offset) + " must have the rank of " +
                       shapeToString(localShape));
  shapeNumel(box.globalShape); // rejects negative extents and overflow
  for (size_t d = 0; d < rank; ++d)
    if (box.offset[d] < 0 || box.offset[d] + localShape[d] > box.globalShape[d])
      throw RuntimeError(
          std::string(op) + ": box " + shapeToString(localShape) + " at " +
          shapeToString(box.offset) + " does not fit in global shape " +
          shapeToString(box.globalShape));
  return box;
}

template <class T> void registerRandom(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 0;
  kernel.check = [](const AttrReader &attrs, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &outputs) {
    attrs.getInt("seed");
    const std::string &dist = attrs.getString("dist");
    if (dist != "uniform" && dist != "normal")
      throw RuntimeError("random: dist must be 'uniform' or 'normal', got '" +
                         dist + "'");
    readGlobalBox(attrs, outputs[0].shape, "random");
  };
  kernel.run = [](const AttrReader &attrs, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &outputs) {
    Tensor &out = *outputs[0];
    uint64_t seed = static_cast<uint64_t>(attrs.getInt("seed"));
    bool normal = attrs.getString("dist") == "normal";
    GlobalBox box = readGlobalBox(attrs, out.shape(), "random");
    if (out.numel() == 0)
      return;
    std::vector<int64_t> globalStrides = rowMajorStrides(box.globalShape);
    const Shape &shape = out.shape();
    size_t rank = shape.size();
    std::vector<int64_t> index(rank, 0);
    T *data = out.data_as<T>();
    const T belowOne = std::nextafter(T(1), T(0));
    for (int64_t i = 0, n = out.numel(); i < n; ++i) {
      uint64_t global = 0;
      for (size_t d = 0; d < rank; ++d)
        global += static_cast<uint64_t>((box.offset[d] + index[d]) *
                                        globalStrides[d]);
      if (normal) {
        data[i] = static_cast<T>(randomNormal(seed, global));
      } else {
        T value = static_cast<T>(randomUniform(seed, global));
        data[i] = value < T(1) ? value : belowOne; // float rounding may reach 1
      }
      for (size_t d = rank; d-- > 0;) {
        if (++index[d] < shape[d])
          break;
        index[d] = 0;
      }
    }
  };
  addCpuKernel<T>(registry, "random", std::move(kernel));
}

template <class T> void registerConstant(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 0;
  kernel.check = [](const AttrReader &attrs, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &outputs) {
    GlobalBox box = readGlobalBox(attrs, outputs[0].shape, "constant");
    uint64_t expected =
        static_cast<uint64_t>(shapeNumel(box.globalShape)) * sizeof(T);
    size_t actual = attrs.getData("data").size();
    if (actual != expected)
      throw RuntimeError(
          "constant: data has " + std::to_string(actual) +
          " bytes, global shape " + shapeToString(box.globalShape) + " of " +
          dtypeName(outputs[0].dtype) + " needs " + std::to_string(expected));
  };
  kernel.run = [](const AttrReader &attrs, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &outputs) {
    Tensor &out = *outputs[0];
    GlobalBox box = readGlobalBox(attrs, out.shape(), "constant");
    const std::string &bytes = attrs.getData("data");
    copyBox(bytes.data(), box.globalShape, box.offset, out.data(), out.shape(),
            Shape(out.shape().size(), 0), out.shape(), sizeof(T));
    if constexpr (std::is_same_v<T,
                                 bool>) { // normalize any nonzero byte to true
      auto *raw = static_cast<uint8_t *>(out.data());
      for (int64_t i = 0, n = out.numel(); i < n; ++i)
        raw[i] = raw[i] != 0;
    }
  };
  addCpuKernel<T>(registry, "constant", std::move(kernel));
}

} // namespace

void registerCreationKernels(KernelRegistry &registry) {
  registerFull<float>(registry);
  registerFull<double>(registry);
  registerFull<int64_t>(registry);
  registerFull<bool>(registry);
  registerRandom<float>(registry);
  registerRandom<double>(registry);
  registerConstant<float>(registry);
  registerConstant<double>(registry);
  registerConstant<int64_t>(registry);
  registerConstant<bool>(registry);
}

} // namespace dtorch::rt
