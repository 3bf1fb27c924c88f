// The "cuda" twins of the layout and indexing kernels (reshape, copy,
// lead_or_zero, transpose, slice, broadcast_to, bucket_pack, bucket_unpack,
// extract_slice, concat, tril, triu, index_select, gather, scatter_add,
// topk_indices) and of the reductions (sum, max, min, argmax, argmin). Data
// movement is one strided copy kernel or a device-to-device memcpy on the
// current stream.
#include "CudaRegistrationSupport.h"

#include <cuda_runtime_api.h>

namespace dtorch::rt::cuda {

namespace {

void copyBytes(LaunchContext &c, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src)
    return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.stream),
        "cudaMemcpyAsync");
}

void requireRank(size_t rank, const char *op) {
  if (rank > static_cast<size_t>(kMaxRank))
    throw RuntimeError(std::string(op) + ": rank " + std::to_string(rank) +
                       " is above the CUDA kernels' " +
                       std::to_string(kMaxRank));
}

void wholeCopyRun(const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "copy");
  copyBytes(c, outputs[0]->data(), inputs[0]->data(), outputs[0]->nbytes());
}

void leadOrZeroRun(const AttrReader &attrs,
                   const std::vector<const Tensor *> &inputs,
                   const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "lead_or_zero");
  if (attrs.getInt("coord") == 0)
    copyBytes(c, outputs[0]->data(), inputs[0]->data(), outputs[0]->nbytes());
  else if (outputs[0]->nbytes())
    check(
        cudaMemsetAsync(outputs[0]->data(), 0, outputs[0]->nbytes(), c.stream),
        "cudaMemsetAsync");
}

void stridedRun(LaunchContext &c, const Tensor &x, Tensor &out,
                const StridedCopy &copy) {
  launchStridedCopy(static_cast<int>(dtypeSize(out.dtype())), copy, x.data(),
                    out.data(), c.stream);
}

void transposeRun(const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "transpose");
  const Tensor &x = *inputs[0];
  Tensor &out = *outputs[0];
  size_t rank = out.shape().size();
  requireRank(rank, "transpose");
  std::vector<int64_t> perm = attrs.getInts("perm");
  std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
  std::vector<int64_t> outStrides = rowMajorStrides(out.shape());
  StridedCopy copy;
  copy.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t p = perm[d] < 0 ? perm[d] + static_cast<int64_t>(rank) : perm[d];
    copy.shape[d] = out.shape()[d];
    copy.srcStrides[d] = inStrides[p];
    copy.dstStrides[d] = outStrides[d];
  }
  stridedRun(c, x, out, copy);
}

void sliceRun(const AttrReader &attrs,
              const std::vector<const Tensor *> &inputs,
              const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "slice");
  const Tensor &x = *inputs[0];
  Tensor &out = *outputs[0];
  requireRank(out.shape().size(), "slice");
  int64_t dim = normalizeDim(attrs.getInt("dim"), x.dim(), "slice dim");
  Shape offset(out.shape().size(), 0);
  offset[dim] = attrs.getInt("start");
  stridedRun(c, x, out,
             denseCopy(out.shape(), x.shape(), offset, out.shape(),
                       Shape(offset.size(), 0)));
}

void broadcastToRun(const AttrReader &,
                    const std::vector<const Tensor *> &inputs,
                    const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "broadcast_to");
  const Tensor &x = *inputs[0];
  Tensor &out = *outputs[0];
  size_t rank = out.shape().size(), lead = rank - x.shape().size();
  requireRank(rank, "broadcast_to");
  std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
  std::vector<int64_t> outStrides = rowMajorStrides(out.shape());
  StridedCopy copy;
  copy.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    copy.shape[d] = out.shape()[d];
    copy.dstStrides[d] = outStrides[d];
    copy.srcStrides[d] =
        d < lead || x.shape()[d - lead] == 1 ? 0 : inStrides[d - lead];
  }
  stridedRun(c, x, out, copy);
}

void bucketPackRun(const AttrReader &,
                   const std::vector<const Tensor *> &inputs,
                   const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "bucket_pack");
  char *at = static_cast<char *>(outputs[0]->data());
  for (const Tensor *in : inputs) {
    copyBytes(c, at, in->data(), in->nbytes());
    at += in->nbytes();
  }
}

void bucketUnpackRun(const AttrReader &attrs,
                     const std::vector<const Tensor *> &inputs,
                     const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "bucket_unpack");
  const char *from = static_cast<const char *>(inputs[0]->data()) +
                     attrs.getInt("offset") * dtypeSize(inputs[0]->dtype());
  copyBytes(c, outputs[0]->data(), from, outputs[0]->nbytes());
}

void extractSliceRun(const AttrReader &attrs,
                     const std::vector<const Tensor *> &inputs,
                     const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "extract_slice");
  const Tensor &x = *inputs[0];
  Tensor &out = *outputs[0];
  size_t rank = x.shape().size();
  requireRank(rank, "extract_slice");
  std::vector<int64_t> offsets = attrs.getInts("offsets");
  std::vector<int64_t> steps = attrs.getInts("strides");
  std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
  std::vector<int64_t> outStrides = rowMajorStrides(out.shape());
  StridedCopy copy;
  copy.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    copy.shape[d] = out.shape()[d];
    copy.srcOffset += offsets[d] * inStrides[d];
    copy.srcStrides[d] = steps[d] * inStrides[d];
    copy.dstStrides[d] = outStrides[d];
  }
  stridedRun(c, x, out, copy);
}

void concatRun(const AttrReader &attrs,
               const std::vector<const Tensor *> &inputs,
               const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "concat");
  Tensor &out = *outputs[0];
  requireRank(out.shape().size(), "concat");
  int64_t dim = normalizeDim(attrs.getInt("dim"), out.dim(), "concat dim");
  Shape zeros(out.shape().size(), 0), offset = zeros;
  for (const Tensor *x : inputs) {
    stridedRun(c, *x, out,
               denseCopy(x->shape(), x->shape(), zeros, out.shape(), offset));
    offset[dim] += x->shape()[dim];
  }
}

KernelRunFn triangleRun(bool lower, const char *name) {
  return [lower, name](const AttrReader &attrs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name);
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    const Shape &shape = x.shape();
    launchTriangle(static_cast<int>(dtypeSize(x.dtype())), lower,
                   attrs.getInt("diagonal", 0), attrs.getInt("row_offset", 0),
                   attrs.getInt("col_offset", 0), shape[shape.size() - 2],
                   shape[shape.size() - 1], out.numel(), x.data(), out.data(),
                   c.stream);
  };
}

void indexSelectRun(const AttrReader &attrs,
                    const std::vector<const Tensor *> &inputs,
                    const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "index_select");
  const Tensor &x = *inputs[0], &index = *inputs[1];
  Tensor &out = *outputs[0];
  int64_t dim = normalizeDim(attrs.getInt("dim"), x.dim(), "index_select dim");
  bool masked = attrs.getInt("masked", 0) == 1;
  int64_t outer = 1, inner = 1, extent = x.shape()[dim];
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim)
      outer *= x.shape()[d];
    else if (d > dim)
      inner *= x.shape()[d];
  }
  launchIndexSelect(static_cast<int>(dtypeSize(x.dtype())), x.data(),
                    index.data_as<int64_t>(), out.data(), outer, extent, inner,
                    index.numel(), attrs.getInt("offset", 0), masked,
                    c.device.errorWord(), c.stream);
  if (!masked && out.numel() > 0)
    c.device.checkErrorWord(c.stream, "index_select");
}

void gatherRun(const AttrReader &attrs,
               const std::vector<const Tensor *> &inputs,
               const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "gather");
  const Tensor &x = *inputs[0], &index = *inputs[1];
  Tensor &out = *outputs[0];
  if (out.numel() == 0)
    return;
  Shape xShape = x.shape().empty() ? Shape{1} : x.shape();
  Shape indexShape = index.shape().empty() ? Shape{1} : index.shape();
  requireRank(xShape.size(), "gather");
  GatherLayout g;
  g.rank = static_cast<int>(xShape.size());
  g.dim =
      static_cast<int>(normalizeDim(attrs.getInt("dim"), g.rank, "gather dim"));
  g.extent = xShape[g.dim];
  std::vector<int64_t> strides = rowMajorStrides(xShape);
  for (int d = 0; d < g.rank; ++d) {
    g.indexShape[d] = indexShape[d];
    g.xStrides[d] = strides[d];
  }
  launchGather(static_cast<int>(dtypeSize(x.dtype())), g, x.data(),
               index.data_as<int64_t>(), out.data(), out.numel(),
               c.device.errorWord(), c.stream);
  c.device.checkErrorWord(c.stream, "gather");
}

void scatterAddRun(const AttrReader &attrs,
                   const std::vector<const Tensor *> &inputs,
                   const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "scatter_add");
  const Tensor &self = *inputs[0], &index = *inputs[1], &src = *inputs[2];
  Tensor &out = *outputs[0];
  copyBytes(c, out.data(), self.data(), out.nbytes());
  if (index.numel() == 0)
    return;
  Shape selfShape = self.shape().empty() ? Shape{1} : self.shape();
  Shape indexShape = index.shape().empty() ? Shape{1} : index.shape();
  Shape srcShape = src.shape().empty() ? Shape{1} : src.shape();
  requireRank(selfShape.size(), "scatter_add");
  ScatterLayout g;
  g.rank = static_cast<int>(selfShape.size());
  g.dim = static_cast<int>(
      normalizeDim(attrs.getInt("dim"), g.rank, "scatter_add dim"));
  g.extent = selfShape[g.dim];
  std::vector<int64_t> srcStrides = rowMajorStrides(srcShape);
  std::vector<int64_t> outStrides = rowMajorStrides(selfShape);
  for (int d = 0; d < g.rank; ++d) {
    g.indexShape[d] = indexShape[d];
    g.srcStrides[d] = srcStrides[d];
    g.outStrides[d] = outStrides[d];
  }
  launchScatterAdd(elemTypeOf(out.dtype()), g, index.data_as<int64_t>(),
                   src.data(), out.data(), c.device.errorWord(), c.stream);
  c.device.checkErrorWord(c.stream, "scatter_add");
}

void topkRun(const AttrReader &attrs, const std::vector<const Tensor *> &inputs,
             const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "topk_indices");
  const Tensor &x = *inputs[0];
  int64_t rank = x.dim();
  int64_t dim = normalizeDim(attrs.getInt("dim"), rank == 0 ? 1 : rank,
                             "topk_indices dim");
  int64_t outer = 1, extent = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < dim)
      outer *= x.shape()[d];
    else if (d == dim)
      extent = x.shape()[d];
    else
      inner *= x.shape()[d];
  }
  launchTopk(elemTypeOf(x.dtype()), attrs.getInt("largest", 1) == 1, x.data(),
             outputs[0]->data_as<int64_t>(), outer, extent, inner,
             attrs.getInt("k"), c.stream);
}

// ---- reductions ----
std::vector<bool> maskOf(const AttrReader &attrs, int64_t rank) {
  std::vector<int64_t> dims = attrs.getInts("dims", {});
  std::vector<bool> mask(static_cast<size_t>(rank), dims.empty());
  for (int64_t dim : dims)
    mask[normalizeDim(dim, rank, "reduction dim")] = true;
  return mask;
}

KernelRunFn reduceRun(ReduceOp op, const char *name) {
  return [op, name](const AttrReader &attrs,
                    const std::vector<const Tensor *> &inputs,
                    const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name);
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    if (out.numel() == 0)
      return;
    std::vector<bool> mask = maskOf(attrs, x.dim());
    double scale = op == ReduceOp::Sum ? attrs.getFloat("scale", 1.0) : 1.0;
    int64_t outer, reduced, inner;
    const void *source = x.data();
    Tensor moved; // x with the reduced dims moved last, when needed
    if (!collapseReduction(x.shape(), mask, outer, reduced, inner)) {
      // Kept dims first, then reduced ones, each in their order: every
      // output's elements keep their relative (increasing) order.
      requireRank(x.shape().size(), name);
      std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
      Shape movedShape;
      std::vector<int64_t> srcStrides;
      outer = reduced = 1;
      inner = 1;
      for (int pass = 0; pass < 2; ++pass)
        for (size_t d = 0; d < mask.size(); ++d)
          if (mask[d] == (pass == 1)) {
            movedShape.push_back(x.shape()[d]);
            srcStrides.push_back(inStrides[d]);
            (pass == 1 ? reduced : outer) *= x.shape()[d];
          }
      moved = Tensor::empty(x.dtype(), movedShape, c.device);
      std::vector<int64_t> dstStrides = rowMajorStrides(movedShape);
      StridedCopy copy;
      copy.rank = static_cast<int>(movedShape.size());
      for (int d = 0; d < copy.rank; ++d) {
        copy.shape[d] = movedShape[d];
        copy.srcStrides[d] = srcStrides[d];
        copy.dstStrides[d] = dstStrides[d];
      }
      stridedRun(c, x, moved, copy);
      source = moved.data();
    }
    launchReduce(op, elemTypeOf(x.dtype()), source, out.data(), outer, reduced,
                 inner, scale, c.device.errorWord(), c.stream);
    bool integer =
        x.dtype() == ::dtorch::wire::I32 || x.dtype() == ::dtorch::wire::I64;
    if (integer && scale != 1.0)
      c.device.checkErrorWord(c.stream, name);
    // `moved` goes back to the cache now; the stream order keeps it intact
    // until the reduction read it (one stream per cached block's user).
    if (moved.defined())
      check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
  };
}

KernelRunFn argReduceRun(bool isMax, const char *name) {
  return [isMax, name](const AttrReader &attrs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name);
    const Tensor &x = *inputs[0];
    int64_t rank = x.dim();
    int64_t dim = normalizeDim(attrs.getInt("dim"), rank == 0 ? 1 : rank,
                               (std::string(name) + " dim").c_str());
    int64_t outer = 1, extent = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < dim)
        outer *= x.shape()[d];
      else if (d == dim)
        extent = x.shape()[d];
      else
        inner *= x.shape()[d];
    }
    launchArgReduce(isMax, elemTypeOf(x.dtype()), x.data(),
                    outputs[0]->data_as<int64_t>(), outer, extent, inner,
                    c.stream);
  };
}

} // namespace

void registerCudaLayoutKernels(KernelRegistry &registry) {
  for (const auto &[op, dtype] : registry.entriesFor(kCpuDevice)) {
    if (op == "reshape" || op == "copy")
      addCudaTwin(registry, op, dtype, wholeCopyRun);
    else if (op == "lead_or_zero")
      addCudaTwin(registry, op, dtype, leadOrZeroRun);
    else if (op == "transpose")
      addCudaTwin(registry, op, dtype, transposeRun);
    else if (op == "slice")
      addCudaTwin(registry, op, dtype, sliceRun);
    else if (op == "broadcast_to")
      addCudaTwin(registry, op, dtype, broadcastToRun);
    else if (op == "bucket_pack")
      addCudaTwin(registry, op, dtype, bucketPackRun);
    else if (op == "bucket_unpack")
      addCudaTwin(registry, op, dtype, bucketUnpackRun);
    else if (op == "extract_slice")
      addCudaTwin(registry, op, dtype, extractSliceRun);
    else if (op == "concat")
      addCudaTwin(registry, op, dtype, concatRun);
    else if (op == "index_select")
      addCudaTwin(registry, op, dtype, indexSelectRun);
    else if (op == "gather")
      addCudaTwin(registry, op, dtype, gatherRun);
    else if (op == "scatter_add")
      addCudaTwin(registry, op, dtype, scatterAddRun);
    else if (op == "topk_indices")
      addCudaTwin(registry, op, dtype, topkRun);
    else if (op == "tril")
      addCudaTwin(registry, op, dtype, triangleRun(true, "tril"));
    else if (op == "triu")
      addCudaTwin(registry, op, dtype, triangleRun(false, "triu"));
  }
}

void registerCudaReductionKernels(KernelRegistry &registry) {
  for (const auto &[op, dtype] : registry.entriesFor(kCpuDevice)) {
    if (op == "sum")
      addCudaTwin(registry, op, dtype, reduceRun(ReduceOp::Sum, "sum"));
    else if (op == "max")
      addCudaTwin(registry, op, dtype, reduceRun(ReduceOp::Max, "max"));
    else if (op == "min")
      addCudaTwin(registry, op, dtype, reduceRun(ReduceOp::Min, "min"));
    else if (op == "argmax")
      addCudaTwin(registry, op, dtype, argReduceRun(true, "argmax"));
    else if (op == "argmin")
      addCudaTwin(registry, op, dtype, argReduceRun(false, "argmin"));
  }
}

} // namespace dtorch::rt::cuda
