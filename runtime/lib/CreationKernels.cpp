// full, random, constant, iota.
#include "KernelSupport.h"
#include "dtorch/runtime/CounterRandom.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace dtorch::rt {

using namespace detail;

uint64_t randomBits(uint64_t seed, uint64_t linearIndex, uint64_t stream) {
  return counter_random::bits(seed, linearIndex, stream);
}

double randomUniform(uint64_t seed, uint64_t linearIndex) {
  return counter_random::uniform(seed, linearIndex);
}

double randomNormal(uint64_t seed, uint64_t linearIndex) {
  return counter_random::normal(seed, linearIndex);
}

namespace {

// ---- full -------------------------------------------------------------------
// Whether `value` is an integer that T (int32 or int64) can hold.
template <class T> bool fitsInteger(double value) {
  double low = static_cast<double>(std::numeric_limits<T>::min());
  return std::isfinite(value) && value == std::trunc(value) && value >= low &&
         value < -low;
}

template <class T> void checkFullValue(double value) {
  if constexpr (isIntegerType<T>) {
    if (!fitsInteger<T>(value))
      throw RuntimeError("full: value " + std::to_string(value) +
                         " is not an " + dtypeName(DTypeOf<T>::value));
  }
}

template <class T> void registerFull(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 0;
  kernel.check = [](const AttrReader &attrs, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &) {
    checkFullValue<T>(attrs.getFloat("value"));
  };
  kernel.run = [](const AttrReader &attrs, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &outputs) {
    T fill = convertTo<T>(attrs.getFloat("value"));
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

// The largest T below 1.
template <class T> T largestBelowOne() {
  if constexpr (std::is_same_v<T, Half>) {
    return Half(Half::toFloat(0x3bffu)); // 1 - 2^-11
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(BFloat16::toFloat(0x3f7fu)); // 1 - 2^-8
  } else {
    return std::nextafter(T(1), T(0));
  }
}

template <class T> void registerRandom(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 0;
  kernel.check = [](const AttrReader &attrs, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &outputs) {
    attrs.checkRandomSeed();
    const std::string &dist = attrs.getString("dist");
    if (dist != "uniform" && dist != "normal")
      throw RuntimeError("random: dist must be 'uniform' or 'normal', got '" +
                         dist + "'");
    readGlobalBox(attrs, outputs[0].shape, "random");
  };
  kernel.run = [](const AttrReader &attrs, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &outputs) {
    Tensor &out = *outputs[0];
    uint64_t seed = static_cast<uint64_t>(attrs.randomSeed());
    bool normal = attrs.getString("dist") == "normal";
    GlobalBox box = readGlobalBox(attrs, out.shape(), "random");
    if (out.numel() == 0)
      return;
    std::vector<int64_t> globalStrides = rowMajorStrides(box.globalShape);
    const Shape &shape = out.shape();
    size_t rank = shape.size();
    std::vector<int64_t> index(rank, 0);
    T *data = out.data_as<T>();
    const T belowOne = largestBelowOne<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) {
      uint64_t global = 0;
      for (size_t d = 0; d < rank; ++d)
        global += static_cast<uint64_t>((box.offset[d] + index[d]) *
                                        globalStrides[d]);
      if (normal) {
        data[i] = convertTo<T>(randomNormal(seed, global));
      } else {
        T value = convertTo<T>(randomUniform(seed, global));
        // Rounding to T may reach 1.
        data[i] = static_cast<ComputeType<T>>(value) < 1 ? value : belowOne;
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

// ---- iota -------------------------------------------------------------------
struct IotaAttrs {
  int64_t dim;
  std::vector<int64_t> offset;
  double start, step;
};

IotaAttrs readIotaAttrs(const AttrReader &attrs, const Shape &shape) {
  int64_t rank = static_cast<int64_t>(shape.size());
  IotaAttrs a{normalizeDim(attrs.getInt("dim"), rank, "iota dim"),
              attrs.getInts("offset", std::vector<int64_t>(rank, 0)),
              attrs.getFloat("start", 0.0), attrs.getFloat("step", 1.0)};
  if (static_cast<int64_t>(a.offset.size()) != rank)
    throw RuntimeError("iota: offset " + shapeToString(a.offset) + " needs " +
                       std::to_string(rank) + " entries for output " +
                       shapeToString(shape));
  for (int64_t o : a.offset)
    if (o < 0)
      throw RuntimeError("iota: offset " + shapeToString(a.offset) +
                         " has a negative entry");
  if (!std::isfinite(a.start) || !std::isfinite(a.step))
    throw RuntimeError("iota: start and step must be finite");
  return a;
}

// start + step * position, converted to T. Integer T computes in int64 (with
// wrap-around) when start and step are integers, else in double truncated
// toward zero.
template <class T> T iotaValue(const IotaAttrs &a, int64_t position) {
  if constexpr (isIntegerType<T>) {
    if (fitsInteger<int64_t>(a.start) && fitsInteger<int64_t>(a.step)) {
      uint64_t value = static_cast<uint64_t>(static_cast<int64_t>(a.start)) +
                       static_cast<uint64_t>(static_cast<int64_t>(a.step)) *
                           static_cast<uint64_t>(position);
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(value));
    }
    double value = std::trunc(a.start + a.step * static_cast<double>(position));
    if (!fitsInteger<T>(value))
      throw RuntimeError("iota: value " + std::to_string(value) +
                         " does not fit in " + dtypeName(DTypeOf<T>::value));
    return static_cast<T>(value);
  } else {
    return convertTo<T>(a.start + a.step * static_cast<double>(position));
  }
}

template <class T> void registerIota(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 0;
  kernel.check = [](const AttrReader &attrs, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &outputs) {
    readIotaAttrs(attrs, outputs[0].shape);
  };
  kernel.run = [](const AttrReader &attrs, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &outputs) {
    Tensor &out = *outputs[0];
    const Shape &shape = out.shape();
    IotaAttrs a = readIotaAttrs(attrs, shape);
    if (out.numel() == 0)
      return;
    int64_t outer = 1, extent = shape[a.dim], inner = 1;
    for (int64_t d = 0; d < out.dim(); ++d) {
      if (d < a.dim)
        outer *= shape[d];
      else if (d > a.dim)
        inner *= shape[d];
    }
    std::vector<T> values(static_cast<size_t>(extent));
    for (int64_t k = 0; k < extent; ++k)
      values[k] = iotaValue<T>(a, k + a.offset[a.dim]);
    T *data = out.data_as<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < extent; ++k)
        for (int64_t i = 0; i < inner; ++i)
          *data++ = values[k];
  };
  addCpuKernel<T>(registry, "iota", std::move(kernel));
}

} // namespace

void registerCreationKernels(KernelRegistry &registry) {
  forEachType(AllTypes{}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    registerFull<T>(registry);
    registerConstant<T>(registry);
  });
  forEachType(FloatTypes{}, [&](auto tag) {
    registerRandom<typename decltype(tag)::type>(registry);
  });
  forEachType(NumericTypes{}, [&](auto tag) {
    registerIota<typename decltype(tag)::type>(registry);
  });
}

} // namespace dtorch::rt
