//===- SessionSupport.h - helpers of the client's op methods ---*- C++ -*-===//
#pragma once

#include "dtorch/Client/Session.h"

#include <algorithm>
#include <string>

namespace dtorch::client {

inline std::string shapeStr(const Shape &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline int64_t elementBytes(wire::DType dt) {
  return static_cast<int64_t>(rt::dtypeSize(dt));
}

inline bool isFloat(wire::DType dt) {
  return dt == wire::F32 || dt == wire::F64 || dt == wire::F16 ||
         dt == wire::BF16;
}

/// A dim in [-rank, rank) as a non-negative index; a 0-d tensor has dim 0.
inline int64_t normalizeDim(int64_t d, int64_t rank, const char *op) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r)
    throw ValueError(std::string(op) + ": dim " + std::to_string(d) +
                     " is out of range for a tensor of rank " +
                     std::to_string(rank));
  return d < 0 ? d + r : d;
}

inline bool hasPartial(const Placements &ps) {
  for (const Placement &p : ps)
    if (p.isPartial())
      return true;
  return false;
}

inline AttrValue intAttr(int64_t v) {
  AttrValue a;
  a.kind = AttrValue::Kind::Int;
  a.i = v;
  return a;
}

inline AttrValue floatAttr(double v) {
  AttrValue a;
  a.kind = AttrValue::Kind::Float;
  a.f = v;
  return a;
}

inline AttrValue intsAttr(std::vector<int64_t> v) {
  AttrValue a;
  a.kind = AttrValue::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

} // namespace dtorch::client
