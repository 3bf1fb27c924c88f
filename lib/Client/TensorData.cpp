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

/// acc = acc (op) x elementwise, with the runtime's reduction (the one every
/// collective backend uses): max/min propagate NaN as torch does.
void reduceIntoPiece(rt::Tensor &acc, const rt::Tensor &x, ReduceOp op) {
  if (x.dtype() != acc.dtype() || x.shape() != acc.shape())
    throw DTorchError("cannot reduce a partial piece " + x.describe() +
                      " into " + acc.describe());
  try {
    rt::reduceInto(acc.data(), x.data(), acc.numel(), acc.dtype(),
                   toRuntimeReduceOp(op));
  } catch (const rt::RuntimeError &e) {
    throw DTorchError(std::string("cannot reduce partial values: ") + e.what());
  }
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
      rt::Tensor acc = pieces[p].clone();
      for (int64_t k = 1; k < meshShape[a]; ++k) {
        c[a] = k;
        reduceIntoPiece(acc, pieces[meshLinear(meshShape, c)],
                        placements[a].op);
      }
      if (placements[a].op == ReduceOp::Avg) {
        try {
          rt::finishAverage(acc.data(), acc.numel(), acc.dtype(), meshShape[a]);
        } catch (const rt::RuntimeError &e) {
          throw DTorchError(std::string("cannot average partial values: ") +
                            e.what());
        }
      }
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
