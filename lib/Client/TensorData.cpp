//===- TensorData.cpp - global values <-> per-rank pieces ----------------===//
#include "TensorData.h"

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

template <class T>
void combine(T *acc, const T *x, int64_t count, ReduceOp op) {
  for (int64_t i = 0; i < count; ++i) {
    switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      acc[i] = acc[i] + x[i];
      break;
    case ReduceOp::Max:
      acc[i] = x[i] > acc[i] ? x[i] : acc[i];
      break;
    case ReduceOp::Min:
      acc[i] = x[i] < acc[i] ? x[i] : acc[i];
      break;
    }
  }
}

template <class T> void divide(T *acc, int64_t count, int64_t n) {
  for (int64_t i = 0; i < count; ++i)
    acc[i] = static_cast<T>(acc[i] / static_cast<T>(n));
}

void combineTyped(rt::Tensor &acc, const rt::Tensor &x, ReduceOp op) {
  int64_t c = acc.numel();
  switch (acc.dtype()) {
  case wire::F32:
    combine(acc.data_as<float>(), x.data_as<float>(), c, op);
    break;
  case wire::F64:
    combine(acc.data_as<double>(), x.data_as<double>(), c, op);
    break;
  case wire::I32:
    combine(acc.data_as<int32_t>(), x.data_as<int32_t>(), c, op);
    break;
  case wire::I64:
    combine(acc.data_as<int64_t>(), x.data_as<int64_t>(), c, op);
    break;
  case wire::BOOL: {
    auto *a = static_cast<uint8_t *>(acc.data());
    auto *b = static_cast<const uint8_t *>(x.data());
    for (int64_t i = 0; i < c; ++i)
      a[i] = (op == ReduceOp::Min) ? (a[i] && b[i]) : (a[i] || b[i]);
    break;
  }
  default:
    throw DTorchError(std::string("cannot reduce partial values of dtype ") +
                      rt::dtypeName(acc.dtype()));
  }
}

void divideTyped(rt::Tensor &acc, int64_t n) {
  int64_t c = acc.numel();
  switch (acc.dtype()) {
  case wire::F32:
    divide(acc.data_as<float>(), c, n);
    break;
  case wire::F64:
    divide(acc.data_as<double>(), c, n);
    break;
  case wire::I32:
    divide(acc.data_as<int32_t>(), c, n);
    break;
  case wire::I64:
    divide(acc.data_as<int64_t>(), c, n);
    break;
  default:
    break;
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
        combineTyped(acc, pieces[meshLinear(meshShape, c)], placements[a].op);
      }
      if (placements[a].op == ReduceOp::Avg)
        divideTyped(acc, meshShape[a]);
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
