#include "CollectiveSupport.h"

namespace dtorch::rt::detail {

void checkAllGather(const Tensor &x, const Tensor &out, const Group &group,
                    size_t me, int64_t &dim,
                    const std::vector<int64_t> &sizes) {
  checkSizes(sizes, group, "all_gather sizes");
  if (!x.defined())
    throw RuntimeError("all_gather input is undefined");
  dim = normalizeDim(dim, x.dim(), "all_gather dim");
  requireShape(x, x.dtype(), withExtent(x.shape(), dim, sizes[me]),
               "all_gather input");
  requireShape(out, x.dtype(), withExtent(x.shape(), dim, sumOf(sizes)),
               "all_gather output");
}

void checkReduceScatter(const Tensor &x, const Tensor &out, const Group &group,
                        size_t me, ReduceOp op, int64_t &dim,
                        const std::vector<int64_t> &sizes) {
  checkSizes(sizes, group, "reduce_scatter sizes");
  if (!x.defined())
    throw RuntimeError("reduce_scatter input is undefined");
  dim = normalizeDim(dim, x.dim(), "reduce_scatter dim");
  requireShape(x, x.dtype(), withExtent(x.shape(), dim, sumOf(sizes)),
               "reduce_scatter input");
  requireShape(out, x.dtype(), withExtent(x.shape(), dim, sizes[me]),
               "reduce_scatter output");
  checkReducible(x.dtype(), op);
}

void checkAllToAll(const Tensor &x, const Tensor &out, const Group &group,
                   int64_t &splitDim, const std::vector<int64_t> &splitSizes,
                   int64_t &concatDim,
                   const std::vector<int64_t> &concatSizes) {
  checkSizes(splitSizes, group, "all_to_all split_sizes");
  checkSizes(concatSizes, group, "all_to_all concat_sizes");
  if (!x.defined())
    throw RuntimeError("all_to_all input is undefined");
  splitDim = normalizeDim(splitDim, x.dim(), "all_to_all split_dim");
  concatDim = normalizeDim(concatDim, x.dim(), "all_to_all concat_dim");
  if (x.shape()[splitDim] != sumOf(splitSizes))
    throw RuntimeError("all_to_all input " + x.describe() + " has extent " +
                       std::to_string(x.shape()[splitDim]) +
                       " along split_dim, split_sizes sum to " +
                       std::to_string(sumOf(splitSizes)));
  if (!out.defined() || out.dtype() != x.dtype() || out.dim() != x.dim() ||
      out.shape()[concatDim] != sumOf(concatSizes))
    throw RuntimeError("all_to_all output " + out.describe() +
                       " does not match input " + x.describe() +
                       " and concat_sizes");
}

} // namespace dtorch::rt::detail
