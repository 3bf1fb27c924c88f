// extract_slice, concat, gather, index_select, scatter_add.
#include "KernelSupport.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace dtorch::rt {

using namespace detail;

namespace {

// Calls fn(TypeTag<W>{}) with the unsigned integer W of `size` bytes, so
// kernels that only move elements are instantiated once per element size.
template <class Fn> void visitElementWord(size_t size, Fn &&fn) {
  switch (size) {
  case 1:
    return fn(TypeTag<uint8_t>{});
  case 2:
    return fn(TypeTag<uint16_t>{});
  case 4:
    return fn(TypeTag<uint32_t>{});
  case 8:
    return fn(TypeTag<uint64_t>{});
  default:
    throw RuntimeError("no element word of " + std::to_string(size) + " bytes");
  }
}

void requireSameDtype(const char *op, const TensorDesc &input,
                      const char *inputName, const TensorDesc &output) {
  if (input.dtype != output.dtype)
    throw RuntimeError(std::string(op) + ": " + inputName + " is " +
                       dtypeName(input.dtype) + ", output is " +
                       dtypeName(output.dtype));
}

void requireRank(const char *op, const TensorDesc &d, size_t rank,
                 const char *name) {
  if (d.shape.size() != rank)
    throw RuntimeError(std::string(op) + ": " + name + " " +
                       shapeToString(d.shape) + " must have rank " +
                       std::to_string(rank));
}

// Shapes of rank 0 are treated as [1] by the gather-like kernels.
Shape atLeastRank1(const Shape &shape) {
  return shape.empty() ? Shape{1} : shape;
}

// ---- extract_slice ----------------------------------------------------------
struct StridedBox {
  std::vector<int64_t> offsets, sizes, strides;
};

StridedBox readStridedBox(const AttrReader &attrs, const Shape &in) {
  StridedBox box{attrs.getInts("offsets"), attrs.getInts("sizes"),
                 attrs.getInts("strides")};
  size_t rank = in.size();
  if (box.offsets.size() != rank || box.sizes.size() != rank ||
      box.strides.size() != rank)
    throw RuntimeError("extract_slice: offsets " + shapeToString(box.offsets) +
                       ", sizes " + shapeToString(box.sizes) + " and strides " +
                       shapeToString(box.strides) + " need " +
                       std::to_string(rank) + " entries each for input " +
                       shapeToString(in));
  for (size_t d = 0; d < rank; ++d) {
    int64_t offset = box.offsets[d], size = box.sizes[d],
            stride = box.strides[d];
    if (stride < 1)
      throw RuntimeError("extract_slice: stride " + std::to_string(stride) +
                         " of dim " + std::to_string(d) + " must be >= 1");
    if (size < 0 || offset < 0)
      throw RuntimeError("extract_slice: offset " + std::to_string(offset) +
                         " and size " + std::to_string(size) + " of dim " +
                         std::to_string(d) + " must be >= 0");
    // The last element read, offset + (size - 1) * stride, must be < extent.
    bool fits = size == 0 ? offset <= in[d]
                          : offset < in[d] &&
                                (size - 1) <= (in[d] - 1 - offset) / stride;
    if (!fits)
      throw RuntimeError("extract_slice: dim " + std::to_string(d) + " reads " +
                         std::to_string(size) + " element(s) from " +
                         std::to_string(offset) + " with stride " +
                         std::to_string(stride) + ", beyond extent " +
                         std::to_string(in[d]));
  }
  return box;
}

Kernel extractSliceKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireSameDtype("extract_slice", inputs[0], "input", outputs[0]);
    StridedBox box = readStridedBox(attrs, inputs[0].shape);
    if (box.sizes != outputs[0].shape)
      throw RuntimeError("extract_slice: output " +
                         shapeToString(outputs[0].shape) +
                         " differs from sizes " + shapeToString(box.sizes));
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    if (out.numel() == 0)
      return;
    StridedBox box = readStridedBox(attrs, x.shape());
    size_t rank = box.sizes.size();
    std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
    std::vector<int64_t> step(rank);
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d) {
      source += box.offsets[d] * inStrides[d];
      step[d] = box.strides[d] * inStrides[d];
    }
    visitElementWord(dtypeSize(x.dtype()), [&](auto tag) {
      using W = typename decltype(tag)::type;
      const W *xs = static_cast<const W *>(x.data());
      W *os = static_cast<W *>(out.data());
      std::vector<int64_t> index(rank, 0);
      int64_t src = source;
      for (int64_t i = 0, n = out.numel(); i < n; ++i) {
        os[i] = xs[src];
        for (size_t d = rank; d-- > 0;) {
          src += step[d];
          if (++index[d] < box.sizes[d])
            break;
          src -= step[d] * box.sizes[d];
          index[d] = 0;
        }
      }
    });
  };
  return kernel;
}

// ---- concat -----------------------------------------------------------------
Kernel concatKernel() {
  Kernel kernel;
  kernel.numInputs = kVariadicInputs;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    const TensorDesc &out = outputs[0];
    if (inputs.empty())
      throw RuntimeError("concat: needs at least one input");
    int64_t rank = static_cast<int64_t>(out.shape.size());
    int64_t dim = normalizeDim(attrs.getInt("dim"), rank, "concat dim");
    int64_t total = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string name = "input " + std::to_string(i);
      requireSameDtype("concat", inputs[i], name.c_str(), out);
      requireRank("concat", inputs[i], out.shape.size(), name.c_str());
      for (int64_t d = 0; d < rank; ++d)
        if (d != dim && inputs[i].shape[d] != out.shape[d])
          throw RuntimeError("concat: " + name + " " +
                             shapeToString(inputs[i].shape) + " and output " +
                             shapeToString(out.shape) + " differ outside dim " +
                             std::to_string(dim));
      total += inputs[i].shape[dim];
    }
    if (total != out.shape[dim])
      throw RuntimeError("concat: the inputs add up to " +
                         std::to_string(total) + " along dim " +
                         std::to_string(dim) + ", output has " +
                         std::to_string(out.shape[dim]));
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    Tensor &out = *outputs[0];
    int64_t dim = normalizeDim(attrs.getInt("dim"), out.dim(), "concat dim");
    Shape offset(out.shape().size(), 0);
    Shape zeros(out.shape().size(), 0);
    size_t elementSize = dtypeSize(out.dtype());
    for (const Tensor *x : inputs) {
      copyBox(x->data(), x->shape(), zeros, out.data(), out.shape(), offset,
              x->shape(), elementSize);
      offset[dim] += x->shape()[dim];
    }
  };
  return kernel;
}

// ---- gather -----------------------------------------------------------------
void checkIndexValue(const char *op, int64_t value, int64_t extent,
                     int64_t dim) {
  if (value < 0 || value >= extent)
    throw RuntimeError(std::string(op) + ": index " + std::to_string(value) +
                       " is out of range [0, " + std::to_string(extent) +
                       ") of dim " + std::to_string(dim));
}

Kernel gatherKernel() {
  Kernel kernel;
  kernel.numInputs = 2;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    const TensorDesc &x = inputs[0], &index = inputs[1], &out = outputs[0];
    requireSameDtype("gather", x, "input", out);
    requireDtype(index, ::dtorch::wire::I64, "gather: index");
    size_t rank = x.shape.size();
    requireRank("gather", index, rank, "index");
    int64_t dim = normalizeDim(attrs.getInt("dim"), std::max<int64_t>(1, rank),
                               "gather dim");
    if (out.shape != index.shape)
      throw RuntimeError("gather: output " + shapeToString(out.shape) +
                         " must have the index's shape " +
                         shapeToString(index.shape));
    for (size_t d = 0; d < rank; ++d)
      if (static_cast<int64_t>(d) != dim && index.shape[d] > x.shape[d])
        throw RuntimeError("gather: index " + shapeToString(index.shape) +
                           " is larger than input " + shapeToString(x.shape) +
                           " in dim " + std::to_string(d));
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0], &index = *inputs[1];
    Tensor &out = *outputs[0];
    if (out.numel() == 0)
      return;
    Shape xShape = atLeastRank1(x.shape());
    Shape indexShape = atLeastRank1(index.shape());
    int64_t rank = static_cast<int64_t>(xShape.size());
    int64_t dim = normalizeDim(attrs.getInt("dim"), rank, "gather dim");
    std::vector<int64_t> xStrides = rowMajorStrides(xShape);
    const int64_t *indices = index.data_as<int64_t>();
    visitElementWord(dtypeSize(x.dtype()), [&](auto tag) {
      using W = typename decltype(tag)::type;
      const W *xs = static_cast<const W *>(x.data());
      W *os = static_cast<W *>(out.data());
      std::vector<int64_t> p(rank, 0);
      int64_t i = 0;
      do {
        int64_t value = indices[i];
        checkIndexValue("gather", value, xShape[dim], dim);
        int64_t source = value * xStrides[dim];
        for (int64_t d = 0; d < rank; ++d)
          if (d != dim)
            source += p[d] * xStrides[d];
        os[i++] = xs[source];
      } while (nextIndex(p, indexShape));
    });
  };
  return kernel;
}

// ---- index_select -----------------------------------------------------------
struct IndexSelectAttrs {
  int64_t dim;
  int64_t offset;
  bool masked;
};

IndexSelectAttrs readIndexSelectAttrs(const AttrReader &attrs, int64_t rank) {
  IndexSelectAttrs result{
      normalizeDim(attrs.getInt("dim"), rank, "index_select dim"),
      attrs.getInt("offset", 0), false};
  int64_t masked = attrs.getInt("masked", 0);
  if (masked != 0 && masked != 1)
    throw RuntimeError("index_select: masked must be 0 or 1, got " +
                       std::to_string(masked));
  result.masked = masked != 0;
  return result;
}

Kernel indexSelectKernel() {
  Kernel kernel;
  kernel.numInputs = 2;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    const TensorDesc &x = inputs[0], &index = inputs[1], &out = outputs[0];
    requireSameDtype("index_select", x, "input", out);
    requireDtype(index, ::dtorch::wire::I64, "index_select: index");
    requireRank("index_select", index, 1, "index");
    IndexSelectAttrs a =
        readIndexSelectAttrs(attrs, static_cast<int64_t>(x.shape.size()));
    Shape expected = x.shape;
    expected[a.dim] = index.shape[0];
    if (out.shape != expected)
      throw RuntimeError("index_select: output " + shapeToString(out.shape) +
                         " must be " + shapeToString(expected));
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0], &index = *inputs[1];
    Tensor &out = *outputs[0];
    IndexSelectAttrs a = readIndexSelectAttrs(attrs, x.dim());
    int64_t outer = 1, inner = 1, extent = x.shape()[a.dim];
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (d < a.dim)
        outer *= x.shape()[d];
      else if (d > a.dim)
        inner *= x.shape()[d];
    }
    int64_t count = index.numel();
    const int64_t *indices = index.data_as<int64_t>();
    // Validate every index first: a failure leaves no partial work behind.
    for (int64_t j = 0; j < count; ++j) {
      int64_t local = indices[j] - a.offset;
      if (!a.masked && (local < 0 || local >= extent))
        throw RuntimeError("index_select: index " + std::to_string(indices[j]) +
                           " is out of range [" + std::to_string(a.offset) +
                           ", " + std::to_string(a.offset + extent) +
                           ") held here along dim " + std::to_string(a.dim));
    }
    size_t blockBytes = static_cast<size_t>(inner) * dtypeSize(x.dtype());
    if (blockBytes == 0)
      return;
    const auto *xs = static_cast<const char *>(x.data());
    auto *os = static_cast<char *>(out.data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j) {
        int64_t local = indices[j] - a.offset;
        char *target = os + (o * count + j) * blockBytes;
        if (local < 0 || local >= extent)
          std::memset(target, 0, blockBytes); // masked: zeros of every dtype
        else
          std::memcpy(target, xs + (o * extent + local) * blockBytes,
                      blockBytes);
      }
  };
  return kernel;
}

// ---- scatter_add ------------------------------------------------------------
template <class T> T addWrapping(T a, T b) {
  if constexpr (isIntegerType<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    using C = ComputeType<T>;
    return static_cast<T>(static_cast<C>(a) + static_cast<C>(b));
  }
}

// Whether scatter_add adds a row of the index whose targets are all one
// row of the output (an embedding's gradient: the token's row, repeated
// along the features) as one contiguous loop; DTORCH_SCATTER_ROWS=0 keeps
// the element-by-element loop (for comparison). The same additions in the
// same order either way.
bool scatterRowsEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_SCATTER_ROWS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

// dst[j] += src[j], j < n, in the kernel's arithmetic (the output is a
// buffer of its own: it never overlaps src).
template <class T>
void addRow(T *__restrict dst, const T *__restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    dst[j] = addWrapping(dst[j], src[j]);
}

template <class T> Kernel scatterAddKernel() {
  Kernel kernel;
  kernel.numInputs = 3;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    const TensorDesc &self = inputs[0], &index = inputs[1], &src = inputs[2];
    const TensorDesc &out = outputs[0];
    requireSameDescs(out, self, "scatter_add: self vs output");
    requireSameDtype("scatter_add", src, "src", out);
    requireDtype(index, ::dtorch::wire::I64, "scatter_add: index");
    size_t rank = self.shape.size();
    requireRank("scatter_add", index, rank, "index");
    requireRank("scatter_add", src, rank, "src");
    int64_t dim = normalizeDim(attrs.getInt("dim"), std::max<int64_t>(1, rank),
                               "scatter_add dim");
    for (size_t d = 0; d < rank; ++d) {
      if (index.shape[d] > src.shape[d])
        throw RuntimeError("scatter_add: index " + shapeToString(index.shape) +
                           " is larger than src " + shapeToString(src.shape) +
                           " in dim " + std::to_string(d));
      if (static_cast<int64_t>(d) != dim && index.shape[d] > self.shape[d])
        throw RuntimeError("scatter_add: index " + shapeToString(index.shape) +
                           " is larger than self " + shapeToString(self.shape) +
                           " in dim " + std::to_string(d));
    }
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &self = *inputs[0], &index = *inputs[1], &src = *inputs[2];
    Tensor &out = *outputs[0];
    if (out.nbytes() != 0)
      std::memcpy(out.data(), self.data(), out.nbytes());
    if (index.numel() == 0)
      return;
    Shape selfShape = atLeastRank1(self.shape());
    Shape indexShape = atLeastRank1(index.shape());
    int64_t rank = static_cast<int64_t>(selfShape.size());
    int64_t dim = normalizeDim(attrs.getInt("dim"), rank, "scatter_add dim");
    std::vector<int64_t> outStrides = rowMajorStrides(selfShape);
    std::vector<int64_t> srcStrides =
        rowMajorStrides(atLeastRank1(src.shape()));
    const int64_t *indices = index.data_as<int64_t>();
    const T *ss = src.data_as<T>();
    T *os = out.data_as<T>();
    // Row by row along the index's last dim: the offsets of the other dims
    // are computed once a row. Elements are still added in the index's
    // row-major order, so repeated targets accumulate as before.
    int64_t last = rank - 1, rowLength = indexShape[last];
    int64_t rows = index.numel() / rowLength;
    int64_t dimStride = outStrides[dim], extent = selfShape[dim];
    int64_t outStep = dim == last ? 0 : outStrides[last];
    int64_t srcStep = srcStrides[last];
    std::vector<int64_t> p(static_cast<size_t>(last), 0);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t target = 0, source = 0;
      for (int64_t d = 0; d < last; ++d) {
        source += p[d] * srcStrides[d];
        if (d != dim)
          target += p[d] * outStrides[d];
      }
      const int64_t *row = indices + r * rowLength;
      bool oneTarget = outStep == 1 && srcStep == 1 && scatterRowsEnabled();
      for (int64_t j = 1; j < rowLength && oneTarget; ++j)
        oneTarget = row[j] == row[0];
      if (oneTarget) {
        int64_t value = row[0];
        if (value < 0 || value >= extent)
          checkIndexValue("scatter_add", value, extent, dim);
        addRow(os + target + value * dimStride, ss + source, rowLength);
      } else
        for (int64_t j = 0; j < rowLength; ++j) {
          int64_t value = row[j];
          if (value < 0 || value >= extent)
            checkIndexValue("scatter_add", value, extent, dim);
          T &slot = os[target + value * dimStride + j * outStep];
          slot = addWrapping(slot, ss[source + j * srcStep]);
        }
      for (int64_t d = last; d-- > 0;) {
        if (++p[d] < indexShape[d])
          break;
        p[d] = 0;
      }
    }
  };
  return kernel;
}

} // namespace

void registerIndexingKernels(KernelRegistry &registry) {
  forEachType(AllTypes{}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    addCpuKernel<T>(registry, "extract_slice", extractSliceKernel());
    addCpuKernel<T>(registry, "concat", concatKernel());
    addCpuKernel<T>(registry, "gather", gatherKernel());
    addCpuKernel<T>(registry, "index_select", indexSelectKernel());
  });
  forEachType(NumericTypes{}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    addCpuKernel<T>(registry, "scatter_add", scatterAddKernel<T>());
  });
}

} // namespace dtorch::rt
