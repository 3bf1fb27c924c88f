//===- SegmentText.cpp - a segment as a dtensor-dialect function ---------===//
#include "SegmentText.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <unordered_map>

namespace dtorch::client {
namespace {

const char *mlirElementType(wire::DType dt) {
  switch (dt) {
  case wire::F32:
    return "f32";
  case wire::F64:
    return "f64";
  case wire::F16:
    return "f16";
  case wire::BF16:
    return "bf16";
  case wire::I32:
    return "i32";
  case wire::I64:
    return "i64";
  case wire::BOOL:
    return "i1";
  default:
    return "?";
  }
}

std::string floatText(double v) {
  if (std::isnan(v))
    return "0x7FF8000000000000";
  if (std::isinf(v))
    return v > 0 ? "0x7FF0000000000000" : "0xFFF0000000000000";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // MLIR's float literals need a dot: 1e-08 is written 1.0e-08.
  if (s.find('.') == std::string::npos) {
    size_t e = s.find_first_of("eE");
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

std::string intList(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// A quoted MLIR string: quotes, backslashes and bytes that are not
/// printable ASCII become \XX hex escapes, as MLIR's printer writes them.
std::string quoted(const std::string &text) {
  static const char *hex = "0123456789ABCDEF";
  std::string s = "\"";
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      s += '\\';
      s += hex[c >> 4];
      s += hex[c & 15];
    }
  }
  return s + "\"";
}

const AttrValue *findAttr(const Attrs &attrs, const char *name) {
  for (const auto &[k, v] : attrs)
    if (k == name)
      return &v;
  return nullptr;
}

// The op's attributes in MLIR's attr-dict syntax; an Int named keepdim is a
// unit attribute (present when nonzero).
std::string attrDict(const Attrs &attrs) {
  std::string s = "{";
  bool first = true;
  for (const auto &[name, v] : attrs) {
    if (name == "keepdim" && v.kind == AttrValue::Kind::Int) {
      if (v.i) {
        s += (first ? "" : ", ") + name;
        first = false;
      }
      continue;
    }
    s += (first ? "" : ", ") + name + " = ";
    first = false;
    switch (v.kind) {
    case AttrValue::Kind::Int:
      s += std::to_string(v.i) + " : i64";
      break;
    case AttrValue::Kind::Float:
      s += floatText(v.f) + " : f64";
      break;
    case AttrValue::Kind::String:
      s += "\"" + v.s + "\"";
      break;
    case AttrValue::Kind::Ints:
      s += "array<i64";
      for (size_t k = 0; k < v.ints.size(); ++k)
        s += (k ? ", " : ": ") + std::to_string(v.ints[k]);
      s += ">";
      break;
    }
  }
  return s + "}";
}

} // namespace

std::string typeText(const TensorMeta &meta, const Mesh &mesh) {
  std::string s = "!dtensor.tensor<";
  for (int64_t d : meta.shape)
    s += std::to_string(d) + "x";
  s += mlirElementType(meta.dtype);
  s += ", #dtensor.mesh<" + intList(mesh.shape);
  if (!mesh.dimNames.empty()) {
    s += ", names = [";
    for (size_t i = 0; i < mesh.dimNames.size(); ++i)
      s += (i ? ", " : "") + quoted(mesh.dimNames[i]);
    s += "]";
  }
  if (mesh.device != "cpu")
    s += ", device = " + quoted(mesh.device);
  s += ">, " + placementsStr(meta.placements) + ">";
  return s;
}

std::string scalarFullKey(const Node &n) {
  std::string key;
  auto append = [&](const void *data, size_t bytes) {
    key.append(static_cast<const char *>(data), bytes);
  };
  append(&n.scalar.value, sizeof n.scalar.value);
  int32_t dtype = static_cast<int32_t>(n.meta.dtype);
  append(&dtype, sizeof dtype);
  int64_t rank = static_cast<int64_t>(n.meta.shape.size());
  append(&rank, sizeof rank);
  for (int64_t d : n.meta.shape)
    append(&d, sizeof d);
  for (const Placement &p : n.scalar.placements) {
    char kind = static_cast<char>(p.kind), op = static_cast<char>(p.op);
    append(&kind, 1);
    append(&p.dim, sizeof p.dim);
    append(&op, 1);
  }
  return key;
}

bool movesBetweenMeshes(const Segment &seg) {
  for (const Node &n : seg.nodes)
    if (n.op == "send" || n.op == "recv")
      return true;
  return false;
}

std::string segmentText(const Segment &seg, const Mesh &mesh,
                        const std::string &name, std::vector<int64_t> *seeds) {
  std::unordered_map<Handle, std::string> names;
  std::unordered_map<Handle, std::string> types;
  std::ostringstream os;
  os << "func.func @" << name << "(";
  for (size_t i = 0; i < seg.args.size(); ++i) {
    std::string n = "%a" + std::to_string(i);
    names[seg.args[i]] = n;
    types[seg.args[i]] = typeText(seg.argMetas[i], mesh);
    os << (i ? ", " : "") << n << ": " << types[seg.args[i]];
  }
  os << ") -> (";
  std::unordered_map<Handle, const Node *> byId;
  for (const Node &n : seg.nodes)
    byId[n.id] = &n;
  for (size_t i = 0; i < seg.results.size(); ++i)
    os << (i ? ", " : "") << typeText(byId.at(seg.results[i])->meta, mesh);
  os << ")";
  if (movesBetweenMeshes(seg)) {
    os << " attributes {dtensor.global_ranks = array<i64";
    for (size_t i = 0; i < mesh.ranks.size(); ++i)
      os << (i ? ", " : ": ") << mesh.ranks[i];
    os << ">}";
  }
  os << " {\n";

  // Ops with several results: the metas of results 1, 2, ... by the op's
  // node id (the kResultOfNode nodes that follow it).
  std::unordered_map<Handle, std::vector<const TensorMeta *>> moreResults;
  for (const Node &n : seg.nodes)
    if (n.op == kResultOfNode)
      moreResults[n.inputs[0]].push_back(&n.meta);

  size_t counter = 0;
  // One full per distinct scalar (scalarFullKey): its name and type.
  std::unordered_map<std::string, std::pair<std::string, std::string>> fulls;
  for (const Node &n : seg.nodes) {
    if (n.scalar.index >= 0) {
      // A Python number operand: a full tensor of the node's shape.
      auto [full, added] = fulls.try_emplace(scalarFullKey(n));
      if (added) {
        TensorMeta sm{n.meta.shape, n.meta.dtype, n.meta.meshId,
                      n.scalar.placements};
        full->second = {"%" + std::to_string(counter++), typeText(sm, mesh)};
        os << "  " << full->second.first << " = dtensor.full "
           << floatText(n.scalar.value) << " : " << full->second.second << "\n";
      }
      names[0] = full->second.first;
      types[0] = full->second.second;
    }
    std::string self = "%" + std::to_string(counter++);
    std::string ty = typeText(n.meta, mesh);
    if (n.op == kResultOfNode) {
      // Result `index` of the op named by the input: a comment line keeps
      // node k at line k + 2.
      const std::string &op = names.at(n.inputs[0]);
      self = op.substr(0, op.size() - 1) +
             std::to_string(findAttr(n.attrs, "index")->i);
      os << "  // " << self << "\n";
      names[n.id] = self;
      types[n.id] = ty;
      continue;
    }
    auto more = moreResults.find(n.id);
    if (more != moreResults.end()) {
      // "%k:R = ...", its results "%k#0", "%k#1", ...
      os << "  " << self << ":" << more->second.size() + 1 << " = dtensor."
         << n.op;
      self += "#0";
      std::string all = "(" + ty;
      for (const TensorMeta *m : more->second)
        all += ", " + typeText(*m, mesh);
      ty = all + ")";
    } else {
      os << "  " << self << " = dtensor." << n.op;
    }
    if (n.op == "full") {
      os << " " << floatText(findAttr(n.attrs, "value")->f) << " : " << ty;
    } else if (n.op == "random") {
      int64_t seed = findAttr(n.attrs, "seed")->i;
      if (seeds) {
        seeds->push_back(seed);
        seed = static_cast<int64_t>(seeds->size()) - 1; // the slot
      }
      os << " seed = " << seed << " distribution = \""
         << findAttr(n.attrs, "distribution")->s << "\" : " << ty;
    } else {
      for (size_t i = 0; i < n.inputs.size(); ++i)
        os << (i ? ", " : " ") << names.at(n.inputs[i]);
      if (const AttrValue *dims = findAttr(n.attrs, "dims")) {
        os << " dims = " << intList(dims->ints);
        if (const AttrValue *k = findAttr(n.attrs, "keepdim"); k && k->i)
          os << " keepdim";
      } else if (const AttrValue *perm = findAttr(n.attrs, "perm")) {
        os << " perm = " << intList(perm->ints);
      } else if (!n.attrs.empty()) {
        os << " " << attrDict(n.attrs);
      }
      if (n.op == "redistribute") {
        os << " : " << types.at(n.inputs[0]) << " -> " << ty;
      } else if (n.op == "transfer" || n.op == "send" || n.op == "recv") {
        os << " : " << ty;
      } else {
        os << " : (";
        for (size_t i = 0; i < n.inputs.size(); ++i)
          os << (i ? ", " : "") << types.at(n.inputs[i]);
        os << ") -> " << ty;
      }
    }
    os << "\n";
    names[n.id] = self;
    types[n.id] = more != moreResults.end() ? typeText(n.meta, mesh) : ty;
  }
  os << "  return";
  for (size_t i = 0; i < seg.results.size(); ++i)
    os << (i ? ", " : " ") << names.at(seg.results[i]);
  if (!seg.results.empty()) {
    os << " : ";
    for (size_t i = 0; i < seg.results.size(); ++i)
      os << (i ? ", " : "") << types.at(seg.results[i]);
  }
  os << "\n}\n";
  return os.str();
}

} // namespace dtorch::client
