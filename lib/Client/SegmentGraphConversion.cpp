//===- SegmentGraphConversion.cpp - a segment as a SegmentGraph ----------===//
//
// The description the compiler builds its module from on a cache miss
// (dtorch::compileGraph): the same function segmentText writes, as data.
//
//===----------------------------------------------------------------------===//
#include "SegmentText.h"

#include <unordered_map>

namespace dtorch::client {
namespace {

GraphTensorType graphType(const TensorMeta &meta) {
  return {meta.shape, meta.dtype, meta.placements};
}

/// A node's attributes as the op's attributes: an Int named keepdim is a
/// unit attribute, present when nonzero (as segmentText writes it).
void convertAttrs(const Attrs &attrs, GraphNode &out) {
  out.attrs.reserve(attrs.size());
  for (const auto &[name, v] : attrs) {
    switch (v.kind) {
    case AttrValue::Kind::Int:
      if (name == "keepdim") {
        if (v.i)
          out.attrs.emplace_back(name, GraphAttr::unit());
      } else {
        out.attrs.emplace_back(name, GraphAttr::ofInt(v.i));
      }
      break;
    case AttrValue::Kind::Float:
      out.attrs.emplace_back(name, GraphAttr::ofFloat(v.f));
      break;
    case AttrValue::Kind::String:
      out.attrs.emplace_back(name, GraphAttr::ofString(v.s));
      break;
    case AttrValue::Kind::Ints:
      out.attrs.emplace_back(name, GraphAttr::ofInts(v.ints));
      break;
    }
  }
}

} // namespace

SegmentGraph segmentGraph(const Segment &seg, const Mesh &mesh,
                          const std::string &name,
                          std::vector<int64_t> *seeds) {
  SegmentGraph g;
  g.name = name;
  g.meshShape = mesh.shape;
  g.meshDimNames = mesh.dimNames;
  g.device = mesh.device;
  if (movesBetweenMeshes(seg))
    g.globalRanks = mesh.ranks;
  std::unordered_map<Handle, int32_t> values;
  values.reserve(seg.args.size() + seg.nodes.size());
  g.args.reserve(seg.args.size());
  for (size_t i = 0; i < seg.args.size(); ++i) {
    values[seg.args[i]] = static_cast<int32_t>(i);
    g.args.push_back(graphType(seg.argMetas[i]));
  }
  g.nodes.reserve(seg.nodes.size());
  auto nextValue = [&] {
    return static_cast<int32_t>(g.args.size() + g.nodes.size());
  };
  // One full per distinct scalar (scalarFullKey), as segmentText writes it.
  std::unordered_map<std::string, int32_t> fulls;
  for (const Node &n : seg.nodes) {
    if (n.scalar.index >= 0) {
      // A Python number operand: a full tensor of the node's shape, read
      // through the input slot that holds handle 0.
      auto [it, added] = fulls.try_emplace(scalarFullKey(n), nextValue());
      if (added) {
        GraphNode full;
        full.op = "full";
        full.attrs.emplace_back("value", GraphAttr::ofFloat(n.scalar.value));
        full.type = {n.meta.shape, n.meta.dtype, n.scalar.placements};
        g.nodes.push_back(std::move(full));
      }
      values[0] = it->second;
    }
    GraphNode node;
    node.op = n.op;
    node.operands.reserve(n.inputs.size());
    for (Handle h : n.inputs)
      node.operands.push_back(values.at(h));
    if (n.op == "random" && seeds) {
      // The slot number stands for the seed (see segmentText).
      for (const auto &[attrName, v] : n.attrs)
        if (attrName == "seed") {
          seeds->push_back(v.i);
          node.attrs.emplace_back(
              attrName,
              GraphAttr::ofInt(static_cast<int64_t>(seeds->size()) - 1));
        } else if (v.kind == AttrValue::Kind::String) {
          node.attrs.emplace_back(attrName, GraphAttr::ofString(v.s));
        }
    } else {
      convertAttrs(n.attrs, node);
    }
    node.type = graphType(n.meta);
    values[n.id] = nextValue();
    g.nodes.push_back(std::move(node));
  }
  g.results.reserve(seg.results.size());
  for (Handle h : seg.results)
    g.results.push_back(values.at(h));
  return g;
}

} // namespace dtorch::client
