// tril and triu over the last two dims of a (possibly sharded) tensor.
#include "KernelSupport.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace dtorch::rt {

using namespace detail;

namespace {

struct TriangleAttrs {
  int64_t diagonal;
  int64_t rowOffset; // global row of local row 0
  int64_t colOffset; // global column of local column 0
};

TriangleAttrs readTriangleAttrs(const AttrReader &attrs) {
  return TriangleAttrs{attrs.getInt("diagonal", 0),
                       attrs.getInt("row_offset", 0),
                       attrs.getInt("col_offset", 0)};
}

// With global i = row + row_offset and j = col + col_offset, tril keeps
// j - i <= diagonal and triu keeps j - i >= diagonal; the rest becomes 0.
Kernel triangleKernel(const char *op, bool lower) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [op](const AttrReader &attrs,
                      const std::vector<TensorDesc> &inputs,
                      const std::vector<TensorDesc> &outputs) {
    checkAllSame(inputs, outputs);
    if (inputs[0].shape.size() < 2)
      throw RuntimeError(std::string(op) + ": input " +
                         shapeToString(inputs[0].shape) +
                         " must have rank >= 2");
    readTriangleAttrs(attrs);
  };
  kernel.run = [lower](const AttrReader &attrs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    if (out.numel() == 0)
      return;
    TriangleAttrs a = readTriangleAttrs(attrs);
    const Shape &shape = x.shape();
    int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
    int64_t matrices = out.numel() / (rows * cols);
    size_t elementSize = dtypeSize(x.dtype());
    size_t rowBytes = static_cast<size_t>(cols) * elementSize;
    const auto *xs = static_cast<const char *>(x.data());
    auto *os = static_cast<char *>(out.data());
    for (int64_t m = 0; m < matrices; ++m)
      for (int64_t r = 0; r < rows; ++r) {
        // Local columns [keepBegin, keepEnd) are kept.
        int64_t edge = a.diagonal + (r + a.rowOffset) - a.colOffset;
        int64_t keepBegin = 0, keepEnd = cols;
        if (lower)
          keepEnd = std::clamp<int64_t>(edge + 1, 0, cols);
        else
          keepBegin = std::clamp<int64_t>(edge, 0, cols);
        size_t row = static_cast<size_t>(m * rows + r) * rowBytes;
        std::memset(os + row, 0, rowBytes);
        if (keepBegin < keepEnd)
          std::memcpy(os + row + keepBegin * elementSize,
                      xs + row + keepBegin * elementSize,
                      static_cast<size_t>(keepEnd - keepBegin) * elementSize);
      }
  };
  return kernel;
}

} // namespace

void registerTriangularKernels(KernelRegistry &registry) {
  forEachType(AllTypes{}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    addCpuKernel<T>(registry, "tril", triangleKernel("tril", true));
    addCpuKernel<T>(registry, "triu", triangleKernel("triu", false));
  });
}

} // namespace dtorch::rt
