//===- SessionOps.cpp - comparisons, selection and indexing ops -----------===//
//
// The client side of the ops whose rule builders are rules::argReduction,
// slice, concat, gather, indexSelect, scatterAdd and the elementwise
// compare/where/triangle: shapes, dtypes and placements are inferred at the
// call, and a mistake raises there.
//
//===----------------------------------------------------------------------===//
#include "SessionSupport.h"
#include "dtorch/OpRegistry.h"
#include "dtorch/OpRules.h"
#include "dtorch/runtime/Kernels.h"

namespace dtorch::client {
namespace {

void requireIndexDtype(const Tensor &index, const char *op) {
  if (index->meta().dtype != wire::I64)
    throw TypeError(std::string(op) + ": index must be an int64 tensor, got " +
                    dtypeName(index->meta().dtype));
}

std::string dimTag(const std::string &op, std::initializer_list<int64_t> v) {
  std::string tag = op;
  for (int64_t d : v)
    tag += "," + std::to_string(d);
  return tag;
}

} // namespace

std::vector<wire::DType> kernelDtypes(const std::string &kernel) {
  return rt::KernelRegistry::global().dtypesFor(kernel, rt::kCpuDevice);
}

Tensor Session::scalarLike(const Tensor &like, double value,
                           bool isFloatValue) {
  const TensorMeta &m = like->meta();
  wire::DType dtype = m.dtype;
  if (isFloatValue && !isFloat(dtype))
    dtype = wire::F32;
  else if (!isFloatValue && dtype == wire::BOOL && value != 0 && value != 1)
    dtype = wire::I64;
  Placements rep(mesh(m.meshId).shape.size(), Placement::replicate());
  Tensor t = full({}, value, dtype, m.meshId, rep);
  t->view = like->view;
  return t;
}

Tensor Session::compare(const std::string &op, const Tensor &a0,
                        const Tensor &b0) {
  const OpInfo *info = findOp(op);
  if (!info || std::string_view(info->family) != "compare")
    throw ValueError("unknown comparison '" + op + "'");
  checkSameMesh(a0, b0, op.c_str());
  wire::DType dtype = promoteTypes(a0->meta().dtype, b0->meta().dtype);
  Tensor a = cast(a0, dtype), b = cast(b0, dtype);
  Shape shape;
  try {
    shape = broadcastShapes(a->meta().shape, b->meta().shape);
  } catch (const ValueError &e) {
    throw ValueError(op + ": " + e.what());
  }
  Tensor full = a->meta().shape == shape ? a : b;
  a = broadcastLike(a, shape, full);
  b = broadcastLike(b, shape, full);
  const rules::ElementwiseTraits &traits = *rules::elementwiseTraits(op, 2);
  Placements p = a->meta().placements;
  if (hasPartial(p) || p != b->meta().placements)
    p = inferPlacements(op, {a, b}, shape,
                        [&] { return rules::elementwise(shape, 2, traits); });
  return addNode(op, {a, b}, {}, {shape, wire::BOOL, a->meta().meshId, p});
}

Tensor Session::where(const Tensor &c0, const Tensor &a0, const Tensor &b0) {
  checkSameMesh(c0, a0, "where");
  checkSameMesh(c0, b0, "where");
  if (c0->meta().dtype != wire::BOOL)
    throw TypeError(
        std::string("where: condition must be a bool tensor, got ") +
        dtypeName(c0->meta().dtype));
  wire::DType dtype = promoteTypes(a0->meta().dtype, b0->meta().dtype);
  Tensor a = cast(a0, dtype), b = cast(b0, dtype);
  Shape shape;
  try {
    shape = broadcastShapes(broadcastShapes(c0->meta().shape, a->meta().shape),
                            b->meta().shape);
  } catch (const ValueError &e) {
    throw ValueError(std::string("where: ") + e.what());
  }
  // The operand that already has the result's shape sets the layout of
  // the broadcast ones when that is local work.
  Tensor full = a->meta().shape == shape   ? a
                : b->meta().shape == shape ? b
                                           : c0;
  Tensor c = broadcastLike(c0, shape, full);
  a = broadcastLike(a, shape, full);
  b = broadcastLike(b, shape, full);
  const rules::ElementwiseTraits &traits =
      *rules::elementwiseTraits("where", 3);
  Placements p = a->meta().placements;
  if (hasPartial(p) || p != b->meta().placements || p != c->meta().placements)
    p = inferPlacements("where", {c, a, b}, shape,
                        [&] { return rules::elementwise(shape, 3, traits); });
  return addNode("where", {c, a, b}, {}, {shape, dtype, a->meta().meshId, p});
}

Tensor Session::argReduce(const std::string &op, const Tensor &x, int64_t dim,
                          bool keepdim) {
  if (op != "argmax" && op != "argmin")
    throw ValueError("unknown arg-reduction '" + op + "'");
  const TensorMeta &m = x->meta();
  if (m.dtype == wire::BOOL)
    throw TypeError(op + ": not defined for bool tensors");
  int64_t rank = m.shape.size();
  if (rank == 0) // torch: the index of a single value is 0
    return full(
        {}, 0, wire::I64, m.meshId,
        Placements(mesh(m.meshId).shape.size(), Placement::replicate()));
  dim = normalizeDim(dim, rank, op.c_str());
  if (m.shape[dim] == 0)
    throw IndexError(op + ": cannot reduce an empty dim");
  Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim)
      out.push_back(m.shape[d]);
    else if (keepdim)
      out.push_back(1);
  Placements p = inferPlacements(dimTag(op, {dim, keepdim}), {x}, out, [&] {
    return rules::argReduction(m.shape, dim, keepdim);
  });
  return addNode(op, {x},
                 {{"dim", intAttr(dim)}, {"keepdim", intAttr(keepdim)}},
                 {out, wire::I64, m.meshId, p});
}

Tensor Session::topkIndices(const Tensor &x, int64_t k, int64_t dim,
                            bool largest) {
  const TensorMeta &m = x->meta();
  if (m.dtype == wire::BOOL)
    throw TypeError("topk: not defined for bool tensors");
  if (m.shape.empty())
    throw ValueError("topk: needs a tensor with at least one dim");
  dim = normalizeDim(dim, m.shape.size(), "topk");
  if (k < 0 || k > m.shape[dim])
    throw IndexError("topk: k = " + std::to_string(k) +
                     " is out of range for dim " + std::to_string(dim) +
                     " of extent " + std::to_string(m.shape[dim]));
  Shape out = m.shape;
  out[dim] = k;
  Placements p = inferPlacements(dimTag("topk_indices", {dim, k}), {x}, out,
                                 [&] { return rules::topk(m.shape, dim, k); });
  return addNode(
      "topk_indices", {x},
      {{"dim", intAttr(dim)}, {"k", intAttr(k)}, {"largest", intAttr(largest)}},
      {out, wire::I64, m.meshId, p});
}

Tensor Session::allToAllV(const Tensor &x, const Tensor &counts, int64_t axis) {
  const TensorMeta &m = x->meta(), &c = counts->meta();
  const std::string where = "all_to_all_v: ";
  if (c.dtype != wire::I64)
    throw TypeError(where + "counts must be an int64 tensor, got " +
                    dtypeName(c.dtype));
  if (c.meshId != m.meshId)
    throw ValueError(where + "the rows and the counts are on different meshes");
  const Shape &meshShape = mesh(m.meshId).shape;
  int64_t axes = static_cast<int64_t>(meshShape.size());
  if (axis < 0 || axis >= axes)
    throw ValueError(where + "mesh dim " + std::to_string(axis) +
                     " is out of range for a mesh of " + std::to_string(axes) +
                     " dims");
  int64_t n = meshShape[axis];
  if (m.shape.size() < 2 || c.shape.size() != 2)
    throw ValueError(where +
                     "needs rows [n, rows, ...] and counts [n, "
                     "segments], got " +
                     shapeStr(m.shape) + " and " + shapeStr(c.shape));
  if (m.shape[0] != n || c.shape[0] != n)
    throw ValueError(where + "dim 0 of the rows (" +
                     std::to_string(m.shape[0]) + ") and of the counts (" +
                     std::to_string(c.shape[0]) + ") must be the " +
                     std::to_string(n) + " positions of mesh dim " +
                     std::to_string(axis));
  int64_t segments = c.shape[1], rows = m.shape[1];
  if (segments == 0 || segments % n != 0)
    throw ValueError(where + std::to_string(segments) +
                     " segments do not split over the " + std::to_string(n) +
                     " positions of mesh dim " + std::to_string(axis));
  if (rows % segments != 0)
    throw ValueError(where + std::to_string(rows) + " rows do not split into " +
                     std::to_string(segments) + " segments");
  for (const TensorMeta *t : {&m, &c})
    for (int64_t a = 0; a < axes; ++a) {
      const Placement &p = t->placements[a];
      bool ok = a == axis ? p.isShard(0) : !(p.isShard(0) || p.isShard(1));
      if (!ok || (t == &c && p.isPartial()))
        throw ValueError(where + (t == &m ? "the rows" : "the counts") +
                         " must be Shard(0) on mesh dim " +
                         std::to_string(axis) +
                         ", split neither dim 0 nor dim 1 on another mesh "
                         "dim, and the counts not partial; got " +
                         placementsStr(t->placements));
    }
  if (x->storage_->meta)
    return meta(m.shape, m.dtype, m.meshId, m.placements);
  return addNode("all_to_all_v", {x, counts}, {{"axis", intAttr(axis)}}, m);
}

Tensor Session::slice(const Tensor &x, Shape offsets, Shape sizes,
                      Shape strides) {
  const TensorMeta &m = x->meta();
  size_t rank = m.shape.size();
  if (offsets.size() != rank || sizes.size() != rank || strides.size() != rank)
    throw ValueError("slice: expected " + std::to_string(rank) +
                     " offsets, sizes and strides");
  bool whole = true;
  for (size_t d = 0; d < rank; ++d) {
    if (strides[d] < 1)
      throw ValueError("slice: step must be positive, got " +
                       std::to_string(strides[d]) + " in dim " +
                       std::to_string(d));
    if (offsets[d] < 0 || sizes[d] < 0 ||
        (sizes[d] > 0 &&
         offsets[d] + (sizes[d] - 1) * strides[d] >= m.shape[d]))
      throw IndexError("slice: " + std::to_string(sizes[d]) +
                       " elements from " + std::to_string(offsets[d]) +
                       " with step " + std::to_string(strides[d]) +
                       " do not fit in dim " + std::to_string(d) +
                       " of extent " + std::to_string(m.shape[d]));
    if (sizes[d] == 0)
      offsets[d] = 0, strides[d] = 1;
    whole &= offsets[d] == 0 && strides[d] == 1 && sizes[d] == m.shape[d];
  }
  if (whole)
    return x;
  std::string tag = "slice";
  for (const Shape *v : {&offsets, &sizes, &strides}) {
    for (int64_t d : *v)
      tag += "," + std::to_string(d);
    tag += ";";
  }
  Placements p = inferPlacements(tag, {x}, sizes, [&] {
    return rules::slice(m.shape, offsets, sizes, strides);
  });
  Shape out = sizes;
  return addNode("slice", {x},
                 {{"offsets", intsAttr(std::move(offsets))},
                  {"sizes", intsAttr(sizes)},
                  {"strides", intsAttr(std::move(strides))}},
                 {out, m.dtype, m.meshId, p});
}

Tensor Session::concat(const std::vector<Tensor> &xs0, int64_t dim) {
  if (xs0.empty())
    throw ValueError("cat: expected a non-empty list of tensors");
  wire::DType dtype = xs0[0]->meta().dtype;
  for (const Tensor &t : xs0) {
    checkSameMesh(xs0[0], t, "cat");
    dtype = promoteTypes(dtype, t->meta().dtype);
  }
  std::vector<Tensor> xs;
  for (const Tensor &t : xs0)
    xs.push_back(cast(t, dtype));
  const Shape &first = xs[0]->meta().shape;
  int64_t rank = first.size();
  if (rank == 0)
    throw ValueError("cat: zero-dimensional tensors cannot be concatenated");
  dim = normalizeDim(dim, rank, "cat");
  Shape out = first;
  out[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape &s = xs[i]->meta().shape;
    if ((int64_t)s.size() != rank)
      throw ValueError("cat: tensor " + std::to_string(i) + " has rank " +
                       std::to_string(s.size()) + ", expected " +
                       std::to_string(rank));
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && s[d] != first[d])
        throw ValueError("cat: sizes of tensors must match except in dim " +
                         std::to_string(dim) + ": tensor " + std::to_string(i) +
                         " has shape " + shapeStr(s) + ", tensor 0 has " +
                         shapeStr(first));
    out[dim] += s[dim];
  }
  if (xs.size() == 1)
    return xs[0];
  std::vector<Shape> shapes;
  for (const Tensor &t : xs)
    shapes.push_back(t->meta().shape);
  Placements p = inferPlacements(dimTag("concat", {dim}), xs, out,
                                 [&] { return rules::concat(shapes, dim); });
  return addNode("concat", xs, {{"dim", intAttr(dim)}},
                 {out, dtype, xs[0]->meta().meshId, p});
}

Tensor Session::gather(const Tensor &x, int64_t dim, const Tensor &index) {
  checkSameMesh(x, index, "gather");
  requireIndexDtype(index, "gather");
  const TensorMeta &m = x->meta();
  const Shape &is = index->meta().shape;
  int64_t rank = m.shape.size();
  if ((int64_t)is.size() != rank)
    throw ValueError("gather: index has rank " + std::to_string(is.size()) +
                     " but the input has rank " + std::to_string(rank));
  dim = normalizeDim(dim, rank, "gather");
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim && is[d] > m.shape[d])
      throw ValueError("gather: index extent " + std::to_string(is[d]) +
                       " exceeds the input's " + std::to_string(m.shape[d]) +
                       " in dim " + std::to_string(d));
  Placements p = inferPlacements(dimTag("gather", {dim}), {x, index}, is, [&] {
    return rules::gather(m.shape, is, dim);
  });
  return addNode("gather", {x, index}, {{"dim", intAttr(dim)}},
                 {is, m.dtype, m.meshId, p});
}

Tensor Session::indexSelect(const Tensor &x, int64_t dim,
                            const Tensor &index0) {
  checkSameMesh(x, index0, "index_select");
  Tensor index = index0;
  if (index->meta().dtype == wire::I32)
    index = cast(index, wire::I64);
  requireIndexDtype(index, "index_select");
  if (index->meta().shape.size() > 1)
    throw ValueError("index_select: index must be 1-D, got shape " +
                     shapeStr(index->meta().shape));
  if (index->meta().shape.empty())
    index = reshape(index, {1});
  const TensorMeta &m = x->meta();
  int64_t rank = m.shape.size();
  if (rank == 0)
    throw ValueError("index_select: the input must have at least one dim");
  dim = normalizeDim(dim, rank, "index_select");
  Shape out = m.shape;
  out[dim] = index->meta().shape[0];
  Shape is = index->meta().shape;
  Placements p =
      inferPlacements(dimTag("index_select", {dim}), {x, index}, out,
                      [&] { return rules::indexSelect(m.shape, is, dim); });
  return addNode("index_select", {x, index}, {{"dim", intAttr(dim)}},
                 {out, m.dtype, m.meshId, p});
}

Tensor Session::scatterAdd(const Tensor &x, int64_t dim, const Tensor &index,
                           const Tensor &src0) {
  checkSameMesh(x, index, "scatter_add");
  checkSameMesh(x, src0, "scatter_add");
  requireIndexDtype(index, "scatter_add");
  const TensorMeta &m = x->meta();
  if (m.dtype == wire::BOOL)
    throw TypeError("scatter_add: not defined for bool tensors");
  Tensor src = cast(src0, m.dtype);
  const Shape &is = index->meta().shape, &ss = src->meta().shape;
  int64_t rank = m.shape.size();
  if ((int64_t)is.size() != rank || (int64_t)ss.size() != rank)
    throw ValueError("scatter_add: input, index and src must have the same "
                     "rank, got " +
                     std::to_string(rank) + ", " + std::to_string(is.size()) +
                     " and " + std::to_string(ss.size()));
  dim = normalizeDim(dim, rank, "scatter_add");
  for (int64_t d = 0; d < rank; ++d) {
    if (is[d] > ss[d])
      throw ValueError("scatter_add: index extent " + std::to_string(is[d]) +
                       " exceeds src's " + std::to_string(ss[d]) + " in dim " +
                       std::to_string(d));
    if (d != dim && is[d] > m.shape[d])
      throw ValueError("scatter_add: index extent " + std::to_string(is[d]) +
                       " exceeds the input's " + std::to_string(m.shape[d]) +
                       " in dim " + std::to_string(d));
  }
  Placements p =
      inferPlacements(dimTag("scatter_add", {dim}), {x, index, src}, m.shape,
                      [&] { return rules::scatterAdd(m.shape, is, ss, dim); });
  return addNode("scatter_add", {x, index, src}, {{"dim", intAttr(dim)}},
                 {m.shape, m.dtype, m.meshId, p});
}

Tensor Session::triangle(const std::string &op, const Tensor &x,
                         int64_t diagonal) {
  if (op != "tril" && op != "triu")
    throw ValueError("unknown triangle op '" + op + "'");
  const TensorMeta &m = x->meta();
  if (m.shape.size() < 2)
    throw ValueError(op +
                     ": input tensor must have at least 2 dimensions, "
                     "got shape " +
                     shapeStr(m.shape));
  Placements p = m.placements;
  if (hasPartial(p))
    p = inferPlacements(op, {x}, m.shape, [&] {
      return rules::elementwise(m.shape, 1, *rules::elementwiseTraits(op, 1));
    });
  return addNode(op, {x}, {{"diagonal", intAttr(diagonal)}},
                 {m.shape, m.dtype, m.meshId, p});
}

Tensor Session::iota(const Shape &shape, int64_t dim, double start, double step,
                     wire::DType dtype, int meshId,
                     const Placements &placements) {
  for (int64_t s : shape)
    if (s < 0)
      throw ValueError("negative dimension in shape " + shapeStr(shape));
  if (dtype == wire::BOOL)
    throw TypeError("arange: not defined for bool");
  dim = normalizeDim(dim, shape.size(), "arange");
  std::string err =
      validatePlacements(shape.size(), mesh(meshId).shape.size(), placements);
  if (!err.empty())
    throw ValueError(err);
  return addNode("iota", {},
                 {{"dim", intAttr(dim)},
                  {"start", floatAttr(start)},
                  {"step", floatAttr(step)}},
                 {shape, dtype, meshId, placements});
}

} // namespace dtorch::client
