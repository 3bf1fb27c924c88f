//===- SegmentKey.cpp - the structural key of a segment ------------------===//
#include "SegmentKey.h"

#include <cstring>

namespace dtorch::client {
namespace {

uint64_t doubleBits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

/// Whether attribute `name` of `op` is a run parameter (not structure).
bool isRunParameter(const std::string &op, const std::string &name) {
  return name == "seed" && op == "random";
}

uint64_t hashPlacements(uint64_t h, const Placements &ps) {
  h = mixHash(h, ps.size());
  for (const Placement &p : ps)
    h = mixHash(h, (static_cast<uint64_t>(p.kind) << 56) ^
                       (static_cast<uint64_t>(p.op) << 48) ^
                       static_cast<uint64_t>(p.dim));
  return h;
}

uint64_t hashMeta(uint64_t h, const TensorMeta &m) {
  h = mixHash(h, static_cast<uint64_t>(m.dtype));
  h = mixHash(h, m.shape.size());
  for (int64_t d : m.shape)
    h = mixHash(h, static_cast<uint64_t>(d));
  return hashPlacements(h, m.placements);
}

bool sameAttrValue(const AttrValue &a, const AttrValue &b) {
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case AttrValue::Kind::Int:
    return a.i == b.i;
  case AttrValue::Kind::Float:
    return doubleBits(a.f) == doubleBits(b.f);
  case AttrValue::Kind::String:
    return a.s == b.s;
  case AttrValue::Kind::Ints:
    return a.ints == b.ints;
  }
  return false;
}

bool sameMeta(const TensorMeta &a, const TensorMeta &b) {
  return a.dtype == b.dtype && a.shape == b.shape &&
         a.placements == b.placements;
}

bool sameNode(const Node &a, const Node &b) {
  if (a.op != b.op || a.operands != b.operands || !sameMeta(a.meta, b.meta) ||
      a.attrs.size() != b.attrs.size() || a.scalar.index != b.scalar.index)
    return false;
  if (a.scalar.index >= 0 &&
      (doubleBits(a.scalar.value) != doubleBits(b.scalar.value) ||
       a.scalar.placements != b.scalar.placements))
    return false;
  for (size_t k = 0; k < a.attrs.size(); ++k) {
    const auto &[name, value] = a.attrs[k];
    if (name != b.attrs[k].first)
      return false;
    if (!isRunParameter(a.op, name) && !sameAttrValue(value, b.attrs[k].second))
      return false;
  }
  return true;
}

/// Appends fixed-width little-endian integers and length-prefixed strings.
struct ByteWriter {
  std::string out;
  void u64(uint64_t v) {
    for (int k = 0; k < 8; ++k)
      out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  void str(const std::string &s) {
    u64(s.size());
    out += s;
  }
  void ints(const std::vector<int64_t> &v) {
    u64(v.size());
    for (int64_t x : v)
      u64(static_cast<uint64_t>(x));
  }
  void placements(const Placements &ps) {
    u64(ps.size());
    for (const Placement &p : ps) {
      u64(static_cast<uint64_t>(p.kind));
      u64(static_cast<uint64_t>(p.dim));
      u64(static_cast<uint64_t>(p.op));
    }
  }
  void meta(const TensorMeta &m) {
    u64(static_cast<uint64_t>(m.dtype));
    ints(m.shape);
    placements(m.placements);
  }
};

} // namespace

uint64_t hashString(const std::string &text, uint64_t h) {
  h ^= 0xcbf29ce484222325ULL;
  for (unsigned char c : text)
    h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

uint64_t hashNode(uint64_t h, const Node &n) {
  h = mixHash(h, hashString(n.op));
  h = mixHash(h, n.operands.size());
  for (int32_t ref : n.operands)
    h = mixHash(h, static_cast<uint32_t>(ref));
  h = mixHash(h, n.attrs.size());
  for (const auto &[name, v] : n.attrs) {
    h = mixHash(h, hashString(name));
    if (isRunParameter(n.op, name))
      continue;
    h = mixHash(h, static_cast<uint64_t>(v.kind));
    switch (v.kind) {
    case AttrValue::Kind::Int:
      h = mixHash(h, static_cast<uint64_t>(v.i));
      break;
    case AttrValue::Kind::Float:
      h = mixHash(h, doubleBits(v.f));
      break;
    case AttrValue::Kind::String:
      h = mixHash(h, hashString(v.s));
      break;
    case AttrValue::Kind::Ints:
      h = mixHash(h, v.ints.size());
      for (int64_t x : v.ints)
        h = mixHash(h, static_cast<uint64_t>(x));
      break;
    }
  }
  h = hashMeta(h, n.meta);
  h = mixHash(h, static_cast<uint64_t>(static_cast<int64_t>(n.scalar.index)));
  if (n.scalar.index >= 0) {
    h = mixHash(h, doubleBits(n.scalar.value));
    h = hashPlacements(h, n.scalar.placements);
  }
  return h;
}

uint64_t hashArgument(uint64_t h, const TensorMeta &meta) {
  return hashMeta(mixHash(h, 0xA4A4A4A4ULL), meta);
}

uint64_t hashResults(uint64_t h, const std::vector<int32_t> &resultNodes) {
  h = mixHash(h, 0x5E5E5E5EULL ^ resultNodes.size());
  for (int32_t r : resultNodes)
    h = mixHash(h, static_cast<uint32_t>(r));
  return h;
}

uint64_t meshHash(const Mesh &mesh) {
  uint64_t h = mixHash(0, mesh.shape.size());
  for (int64_t d : mesh.shape)
    h = mixHash(h, static_cast<uint64_t>(d));
  for (const std::string &name : mesh.dimNames)
    h = mixHash(h, hashString(name));
  for (int64_t r : mesh.ranks)
    h = mixHash(h, static_cast<uint64_t>(r));
  return mixHash(h, hashString(mesh.device));
}

bool sameMesh(const Mesh &a, const Mesh &b) {
  return a.shape == b.shape && a.ranks == b.ranks && a.dimNames == b.dimNames &&
         a.device == b.device;
}

bool sameStructure(const Segment &a, const Segment &b) {
  if (a.nodes.size() != b.nodes.size() ||
      a.argMetas.size() != b.argMetas.size() || a.resultNodes != b.resultNodes)
    return false;
  for (size_t i = 0; i < a.argMetas.size(); ++i)
    if (!sameMeta(a.argMetas[i], b.argMetas[i]))
      return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (!sameNode(a.nodes[i], b.nodes[i]))
      return false;
  return true;
}

std::string structureBytes(const Segment &seg, const Mesh &mesh) {
  ByteWriter w;
  w.ints(mesh.shape);
  w.u64(mesh.dimNames.size());
  for (const std::string &name : mesh.dimNames)
    w.str(name);
  w.ints(mesh.ranks);
  w.str(mesh.device);
  w.u64(seg.argMetas.size());
  for (const TensorMeta &m : seg.argMetas)
    w.meta(m);
  w.u64(seg.nodes.size());
  for (const Node &n : seg.nodes) {
    w.str(n.op);
    w.u64(n.operands.size());
    for (int32_t ref : n.operands)
      w.u64(static_cast<uint32_t>(ref));
    w.u64(n.attrs.size());
    for (const auto &[name, v] : n.attrs) {
      w.str(name);
      if (isRunParameter(n.op, name))
        continue;
      w.u64(static_cast<uint64_t>(v.kind));
      w.u64(static_cast<uint64_t>(v.i));
      w.u64(doubleBits(v.f));
      w.str(v.s);
      w.ints(v.ints);
    }
    w.meta(n.meta);
    w.u64(static_cast<uint64_t>(static_cast<int64_t>(n.scalar.index)));
    if (n.scalar.index >= 0) {
      w.u64(doubleBits(n.scalar.value));
      w.placements(n.scalar.placements);
    }
  }
  w.u64(seg.resultNodes.size());
  for (int32_t r : seg.resultNodes)
    w.u64(static_cast<uint32_t>(r));
  return std::move(w.out);
}

} // namespace dtorch::client
