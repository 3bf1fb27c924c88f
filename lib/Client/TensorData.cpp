//===- TensorData.cpp - global values <-> per-rank pieces ----------------===//
#include "TensorData.h"

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Shape.h"

#include <cstring>
#include <functional>

namespace dtorch::client {

std::vector<rt::Tensor> scatterPieces(const rt::Tensor &full,
                                      const Shape &meshShape,
                                      const Placements &placements) {
  int64_t n = meshSize(meshShape);
  size_t es = rt::dtypeSize(full.dtype());
  std::vector<rt::Tensor> pieces;
  pieces.reserve(n);
  for (int64_t p = 0; p < n; ++p) {
    Shape coords = meshCoords(meshShape, p);
    LocalBox box = localBox(full.shape(), meshShape, placements, coords);
    rt::Tensor piece = rt::Tensor::empty(full.dtype(), box.shape);
    bool zero = false;
    for (size_t a = 0; a < placements.size(); ++a)
      zero |= placements[a].isPartial() && placements[a].op == ReduceOp::Sum &&
              coords[a] != 0;
    if (zero)
      std::memset(piece.data(), 0, piece.nbytes());
    else
      rt::copyBox(full.data(), full.shape(), box.offset, piece.data(),
                  box.shape, Shape(box.shape.size(), 0), box.shape, es);
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

namespace {

/// The runtime's reduce op for a placement's, through the name a wire
/// program carries (the runtime parses reductions by name).
rt::ReduceOp toRuntimeReduceOp(ReduceOp op) {
  return rt::parseReduceOp(reduceOpName(op));
}

/// The group's pieces reduced in group order with the runtime's reduction
/// (the one every collective backend uses, so a fetched Partial value is
/// bit-identical to an all_reduce of it): max/min propagate NaN as torch does.
rt::Tensor reduceGroup(const std::vector<const rt::Tensor *> &group,
                       ReduceOp op) {
  const rt::Tensor &first = *group.front();
  std::vector<const void *> data;
  for (const rt::Tensor *x : group) {
    if (x->dtype() != first.dtype() || x->shape() != first.shape())
      throw DTorchError("cannot reduce a partial piece " + x->describe() +
                        " with " + first.describe());
    data.push_back(x->data());
  }
  rt::Tensor out = rt::Tensor::empty(first.dtype(), first.shape());
  try {
    rt::reducePieces(out.data(), data, out.numel(), out.dtype(),
                     toRuntimeReduceOp(op));
  } catch (const rt::RuntimeError &e) {
    throw DTorchError(std::string("cannot reduce partial values: ") + e.what());
  }
  return out;
}

} // namespace

rt::Tensor assemblePieces(const std::vector<rt::Tensor> &piecesIn,
                          const Shape &globalShape, wire::DType dtype,
                          const Shape &meshShape,
                          const Placements &placements) {
  std::vector<rt::Tensor> pieces = piecesIn;
  // Reduce partial axes, innermost first, into position 0 of each axis.
  for (int64_t a = (int64_t)placements.size() - 1; a >= 0; --a) {
    if (!placements[a].isPartial())
      continue;
    for (int64_t p = 0; p < (int64_t)pieces.size(); ++p) {
      Shape c = meshCoords(meshShape, p);
      if (c[a] != 0)
        continue;
      bool base = true; // only positions not yet folded into another
      for (int64_t b = a + 1; b < (int64_t)placements.size(); ++b)
        base &= !placements[b].isPartial() || c[b] == 0;
      if (!base)
        continue;
      std::vector<const rt::Tensor *> group;
      for (int64_t k = 0; k < meshShape[a]; ++k) {
        c[a] = k;
        group.push_back(&pieces[meshLinear(meshShape, c)]);
      }
      rt::Tensor acc = reduceGroup(group, placements[a].op);
      pieces[p] = acc;
    }
  }
  rt::Tensor full = rt::Tensor::empty(dtype, globalShape);
  size_t es = rt::dtypeSize(dtype);
  for (int64_t p = 0; p < (int64_t)pieces.size(); ++p) {
    Shape c = meshCoords(meshShape, p);
    bool base = true;
    for (size_t a = 0; a < placements.size(); ++a)
      base &= !placements[a].isPartial() || c[a] == 0;
    if (!base)
      continue;
    LocalBox box = localBox(globalShape, meshShape, placements, c);
    if (pieces[p].shape() != box.shape)
      throw DTorchError("a worker returned a piece of shape " +
                        pieces[p].describe() +
                        " where the layout expects another shape");
    rt::copyBox(pieces[p].data(), box.shape, Shape(box.shape.size(), 0),
                full.data(), globalShape, box.offset, box.shape, es);
  }
  return full;
}

} // namespace dtorch::client
