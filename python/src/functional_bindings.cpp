//===- functional_bindings.cpp - one-call recordings of nn functions -----===//
//
// dtorch._C.fast_*: the hot torch.nn.functional operators of a transformer
// forward (linear, layer_norm, softmax, scaled_dot_product_attention,
// embedding, cross_entropy) recorded in one call into the Session instead of
// one Python-to-C++ crossing (and its argument conversions) per dialect op.
// Each records exactly the ops, in the same order and with the same
// operands, scalars and attributes, that its Python definition in
// python/dtorch/_decompositions.py records, so the segment (and its cached
// program) is the same and results are bitwise equal.
//
// Each returns None, before recording anything, for an argument it does not
// handle (a non-tensor, an unusual option, an input the Python definition
// rejects): the caller then runs the Python definition, which raises its own
// error or handles the case. An error raised by the Session while recording
// (a shape mismatch in matmul, ...) is the one the Python definition would
// raise at the same op. DTORCH_FAST_FUNCTIONAL=0 turns the callers off.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Client/Errors.h"
#include "dtorch/Client/Session.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>

#include <cmath>
#include <limits>
#include <optional>

namespace nb = nanobind;
using namespace dtorch;
using namespace dtorch::client;

namespace {

bool isTensor(nb::handle h) { return nb::isinstance<TensorImpl>(h); }

bool isFloatType(wire::DType dt) {
  return dt == wire::F32 || dt == wire::F64 || dt == wire::F16 ||
         dt == wire::BF16;
}

/// A Python int (not a bool), as the Python definitions' int arguments.
std::optional<int64_t> exactInt(nb::handle h) {
  if (!PyLong_CheckExact(h.ptr()))
    return std::nullopt;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow)
    return std::nullopt;
  return static_cast<int64_t>(v);
}

/// A Python float or int as the double `float(v)` gives.
std::optional<double> number(nb::handle h) {
  if (PyFloat_CheckExact(h.ptr()))
    return PyFloat_AS_DOUBLE(h.ptr());
  if (std::optional<int64_t> i = exactInt(h))
    return static_cast<double>(*i);
  return std::nullopt;
}

/// `_as_float`: x itself when floating point, else x cast to float32.
Tensor asFloat(Session &s, const Tensor &x) {
  return isFloatType(x->meta().dtype) ? x : s.cast(x, wire::F32);
}

/// `_replicated(x)`: Replicate on every mesh dim of x.
Placements replicated(const Tensor &x) {
  return Placements(x->meta().placements.size(), Placement::replicate());
}

/// softmax(x, dim) of _decompositions.py, x already floating point.
Tensor softmaxOf(Session &s, const Tensor &x, int64_t dim) {
  Tensor m = s.reduce("max", x, {dim}, true);
  Tensor e = s.unary("exp", s.binary("sub", x, m));
  return s.binary("div", e, s.reduce("sum", e, {dim}, true));
}

} // namespace

void bindFunctional(nb::module_ &m, Session &(*session)()) {
  m.def(
      "fast_linear",
      [session](nb::handle x, nb::handle weight,
                nb::handle bias) -> nb::object {
        if (!isTensor(x) || !isTensor(weight) ||
            !(bias.is_none() || isTensor(bias)))
          return nb::none();
        Session &s = session();
        Tensor out = s.matmul(nb::cast<Tensor>(x),
                              s.transpose(nb::cast<Tensor>(weight), {1, 0}));
        if (!bias.is_none())
          out = s.binary("add", out, nb::cast<Tensor>(bias));
        return nb::cast(out);
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias").none());

  m.def(
      "fast_layer_norm",
      [session](nb::handle xh, nb::handle normalizedShape, nb::handle weight,
                nb::handle bias, nb::handle epsh) -> nb::object {
        if (!isTensor(xh) || !(weight.is_none() || isTensor(weight)) ||
            !(bias.is_none() || isTensor(bias)))
          return nb::none();
        std::optional<double> eps = number(epsh);
        if (!eps)
          return nb::none();
        Tensor x = nb::cast<Tensor>(xh);
        const Shape &shape = x->meta().shape;
        // _norm_dims: the normalized shape must be the input's last dims.
        Shape normalized;
        if (std::optional<int64_t> n = exactInt(normalizedShape)) {
          normalized.push_back(*n);
        } else if (PyTuple_CheckExact(normalizedShape.ptr()) ||
                   PyList_CheckExact(normalizedShape.ptr())) {
          for (nb::handle d : normalizedShape) {
            std::optional<int64_t> v = exactInt(d);
            if (!v)
              return nb::none();
            normalized.push_back(*v);
          }
        } else {
          return nb::none();
        }
        int64_t rank = static_cast<int64_t>(shape.size());
        int64_t count = static_cast<int64_t>(normalized.size());
        if (count > rank || !std::equal(normalized.begin(), normalized.end(),
                                        shape.end() - count))
          return nb::none();
        std::vector<int64_t> dims;
        for (int64_t d = rank - count; d < rank; ++d)
          dims.push_back(d);
        Session &s = session();
        Tensor mean = s.reduce("mean", x, dims, true);
        Tensor centered = s.binary("sub", x, mean);
        Tensor v =
            s.reduce("mean", s.binary("mul", centered, centered), dims, true);
        Tensor out = s.binary(
            "mul", centered,
            s.unary("rsqrt", s.binaryScalar("add", v, *eps, false, true)));
        if (!weight.is_none())
          out = s.binary("mul", out, nb::cast<Tensor>(weight));
        if (!bias.is_none())
          out = s.binary("add", out, nb::cast<Tensor>(bias));
        return nb::cast(out);
      },
      nb::arg("x"), nb::arg("normalized_shape").none(),
      nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps").none());

  m.def(
      "fast_softmax",
      [session](nb::handle xh, nb::handle dimh) -> nb::object {
        std::optional<int64_t> dim = exactInt(dimh);
        if (!isTensor(xh) || !dim)
          return nb::none();
        Session &s = session();
        return nb::cast(softmaxOf(s, asFloat(s, nb::cast<Tensor>(xh)), *dim));
      },
      nb::arg("x"), nb::arg("dim").none());

  // Without a mask and without dropout (is_causal or not).
  m.def(
      "fast_scaled_dot_product_attention",
      [session](nb::handle qh, nb::handle kh, nb::handle vh, bool isCausal,
                nb::handle scaleh) -> nb::object {
        if (!isTensor(qh) || !isTensor(kh) || !isTensor(vh))
          return nb::none();
        Tensor query = nb::cast<Tensor>(qh), key = nb::cast<Tensor>(kh),
               value = nb::cast<Tensor>(vh);
        const Shape &qs = query->meta().shape, &ks = key->meta().shape;
        if (qs.size() < 3 || ks.size() < 2)
          return nb::none();
        int64_t L = qs[qs.size() - 2], E = qs.back(), S = ks[ks.size() - 2];
        if (E <= 0 && scaleh.is_none()) // 1 / sqrt(0) raises in Python
          return nb::none();
        double scale;
        if (scaleh.is_none()) {
          scale = 1.0 / std::sqrt(static_cast<double>(E));
        } else if (std::optional<double> given = number(scaleh)) {
          scale = *given;
        } else {
          return nb::none();
        }
        Session &s = session();
        std::vector<int64_t> perm(ks.size());
        for (size_t i = 0; i < perm.size(); ++i)
          perm[i] = static_cast<int64_t>(i);
        std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
        Tensor scores = s.binaryScalar(
            "mul", s.matmul(query, s.transpose(key, perm)), scale, false, true);
        if (isCausal) {
          const TensorMeta &qm = query->meta();
          Placements rep = replicated(query);
          Tensor rows = s.iota({L, S}, 0, 0.0, 1.0, wire::I64, qm.meshId, rep);
          rows->view = query->view;
          Tensor cols = s.iota({L, S}, 1, 0.0, 1.0, wire::I64, qm.meshId, rep);
          cols->view = query->view;
          Tensor mask = s.compare("ge", rows, cols);
          scores = s.where(
              mask, scores,
              s.scalarLike(scores, -std::numeric_limits<double>::infinity(),
                           true));
        }
        Tensor p = softmaxOf(s, asFloat(s, scores), -1);
        return nb::cast(s.matmul(p, value));
      },
      nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("is_causal"),
      nb::arg("scale").none());

  m.def(
      "fast_embedding",
      [session](nb::handle ih, nb::handle wh) -> nb::object {
        if (!isTensor(ih) || !isTensor(wh))
          return nb::none();
        Tensor input = nb::cast<Tensor>(ih), weight = nb::cast<Tensor>(wh);
        if (weight->meta().shape.size() < 2)
          return nb::none();
        Session &s = session();
        Shape out = input->meta().shape;
        out.push_back(weight->meta().shape[1]);
        Tensor flat = out.size() == 2 ? input : s.reshape(input, {-1});
        return nb::cast(s.reshape(s.indexSelect(weight, 0, flat), out));
      },
      nb::arg("input"), nb::arg("weight"));

  // Class-index targets, no class weights, reduction="mean", no label
  // smoothing, logits not sharded on the class dim.
  m.def(
      "fast_cross_entropy",
      [session](nb::handle ih, nb::handle th,
                nb::handle ignoreh) -> nb::object {
        std::optional<int64_t> ignoreIndex = exactInt(ignoreh);
        if (!isTensor(ih) || !isTensor(th) || !ignoreIndex)
          return nb::none();
        Tensor input = nb::cast<Tensor>(ih), target = nb::cast<Tensor>(th);
        const TensorMeta &im = input->meta(), &tm = target->meta();
        if (tm.dtype != wire::I64 || im.shape.size() != 2 ||
            tm.shape.size() != 1 || tm.shape[0] != im.shape[0])
          return nb::none();
        for (const Placement &p : im.placements)
          if (p.isShard() && p.dim == 1)
            return nb::none();
        int64_t n = im.shape[0];
        double ignore = static_cast<double>(*ignoreIndex);
        Session &s = session();
        // log_softmax(input, 1)
        Tensor x = asFloat(s, input);
        Tensor m = s.reduce("max", x, {1}, true);
        Tensor shifted = s.binary("sub", x, m);
        Tensor lse =
            s.unary("log", s.reduce("sum", s.unary("exp", shifted), {1}, true));
        Tensor logp = s.binary("sub", shifted, lse);
        Tensor valid =
            s.compare("ne", target, s.scalarLike(target, ignore, false));
        Tensor safe = s.where(valid, target, s.scalarLike(target, 0.0, false));
        Tensor picked =
            s.reshape(s.gather(logp, 1, s.reshape(safe, {n, 1})), Shape{n});
        valid = s.compare("ne", target, s.scalarLike(target, ignore, false));
        Tensor nll = s.unary("neg", picked);
        nll = s.where(valid, nll, s.scalarLike(nll, 0.0, true));
        Tensor total = s.reduce("sum", nll, {}, false);
        Tensor count =
            s.reduce("sum", s.cast(valid, nll->meta().dtype), {}, false);
        return nb::cast(s.binary("div", total, count));
      },
      nb::arg("input"), nb::arg("target"), nb::arg("ignore_index").none());
}
