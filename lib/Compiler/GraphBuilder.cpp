//===- GraphBuilder.cpp - a SegmentGraph as a dtensor module -------------===//
//
// Builds the module the compiler runs its pipeline on straight from the
// client's description: no text is printed or parsed. The result prints
// exactly as parsing the segment's text does (a test checks every op
// family), with the same locations: node k at line k + 2 of the source
// name, at the column of its op name.
//
//===----------------------------------------------------------------------===//
#include "GraphBuilder.h"

#include "dtensor/IR/DTensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <limits>
#include <unordered_map>

using namespace mlir;

namespace dtorch {
namespace {

struct TypeHash {
  size_t operator()(const GraphTensorType &t) const {
    llvm::hash_code h =
        llvm::hash_combine_range(t.shape.begin(), t.shape.end());
    for (const Placement &p : t.placements)
      h = llvm::hash_combine(h, hash_value(p));
    return llvm::hash_combine(h, static_cast<int>(t.dtype));
  }
};

class GraphBuilder {
public:
  GraphBuilder(const SegmentGraph &graph, MLIRContext *ctx)
      : graph(graph), ctx(ctx), b(ctx),
        file(StringAttr::get(ctx, graph.sourceName)) {}

  OwningOpRef<ModuleOp> build();

private:
  Location lineLoc(size_t line, unsigned col) {
    return FileLineColLoc::get(file, static_cast<unsigned>(line), col);
  }
  InFlightDiagnostic error(Location loc) { return emitError(loc); }
  Type elementType(wire::DType dtype);
  /// The dtensor type, built once per distinct description.
  Type tensorType(const GraphTensorType &t, Location loc);
  FailureOr<Attribute> attribute(const GraphAttr &a, Location loc);
  FailureOr<Value> operand(int32_t index, size_t available, Location loc);
  LogicalResult buildNode(size_t k, const GraphNode &node);

  const SegmentGraph &graph;
  MLIRContext *ctx;
  OpBuilder b;
  StringAttr file;
  Attribute mesh;
  std::unordered_map<GraphTensorType, Type, TypeHash> types;
  llvm::StringMap<OperationName> opNames;
  std::vector<Value> values;
};

Type GraphBuilder::elementType(wire::DType dtype) {
  switch (dtype) {
  case wire::F32:
    return b.getF32Type();
  case wire::F64:
    return b.getF64Type();
  case wire::F16:
    return b.getF16Type();
  case wire::BF16:
    return b.getBF16Type();
  case wire::I32:
    return b.getI32Type();
  case wire::I64:
    return b.getI64Type();
  case wire::BOOL:
    return b.getI1Type();
  default:
    return {};
  }
}

Type GraphBuilder::tensorType(const GraphTensorType &t, Location loc) {
  auto it = types.find(t);
  if (it != types.end())
    return it->second;
  Type et = elementType(t.dtype);
  if (!et) {
    error(loc) << "unknown element type (wire dtype " << int(t.dtype) << ")";
    return {};
  }
  SmallVector<dtensor::PlacementAttr> placements;
  for (const Placement &p : t.placements)
    placements.push_back(dtensor::PlacementAttr::get(ctx, p));
  Type type = dtensor::DTensorType::getChecked(
      [&] { return error(loc); }, ctx, ArrayRef<int64_t>(t.shape), et,
      cast<dtensor::MeshAttr>(mesh),
      ArrayRef<dtensor::PlacementAttr>(placements));
  if (type)
    types.emplace(t, type);
  return type;
}

FailureOr<Attribute> GraphBuilder::attribute(const GraphAttr &a, Location loc) {
  switch (a.kind) {
  case GraphAttr::Kind::Int:
    return Attribute(b.getI64IntegerAttr(a.i));
  case GraphAttr::Kind::Float: {
    // The text writes every NaN as the positive quiet NaN.
    double v = std::isnan(a.f) ? std::numeric_limits<double>::quiet_NaN() : a.f;
    return Attribute(b.getF64FloatAttr(v));
  }
  case GraphAttr::Kind::String:
    return Attribute(b.getStringAttr(a.s));
  case GraphAttr::Kind::Ints:
    return Attribute(b.getDenseI64ArrayAttr(a.ints));
  case GraphAttr::Kind::Unit:
    return Attribute(b.getUnitAttr());
  }
  error(loc) << "unknown attribute kind " << int(a.kind);
  return failure();
}

FailureOr<Value> GraphBuilder::operand(int32_t index, size_t available,
                                       Location loc) {
  if (index < 0 || static_cast<size_t>(index) >= available) {
    error(loc) << "operand names value " << index << ", but only " << available
               << " values are defined before it";
    return failure();
  }
  return values[index];
}

LogicalResult GraphBuilder::buildNode(size_t k, const GraphNode &node) {
  // Where the text has the op's name: line k + 2, after "  %k = ".
  Location loc = lineLoc(k + 2, 7 + std::to_string(k).size());
  if (node.op == kResultOfNode) {
    // Another result of the multi-result op that an earlier node made.
    int64_t index = -1;
    for (const auto &[attrName, value] : node.attrs)
      if (attrName == "index" && value.kind == GraphAttr::Kind::Int)
        index = value.i;
    if (node.operands.size() != 1)
      return error(loc) << "a result node names one op, got "
                        << node.operands.size() << " operands";
    FailureOr<Value> of = operand(node.operands[0], values.size(), loc);
    if (failed(of))
      return failure();
    Operation *def = of->getDefiningOp();
    if (!def || index < 1 || index >= def->getNumResults())
      return error(loc) << "a result node names result " << index
                        << " of a value that is not an op with that many "
                           "results";
    values.push_back(def->getResult(index));
    return success();
  }
  // Results 1, 2, ... of a multi-result op: the result nodes after it. Its
  // text is "  %k:R = ", so its name starts further right.
  int32_t self = static_cast<int32_t>(graph.args.size() + k);
  size_t end = k + 1;
  while (end < graph.nodes.size() && graph.nodes[end].op == kResultOfNode &&
         graph.nodes[end].operands == std::vector<int32_t>{self})
    ++end;
  if (end > k + 1)
    loc = lineLoc(k + 2, 8 + std::to_string(k).size() +
                             std::to_string(end - k).size());
  auto it = opNames.find(node.op);
  if (it == opNames.end()) {
    std::string full = "dtensor." + node.op;
    std::optional<RegisteredOperationName> found =
        RegisteredOperationName::lookup(full, ctx);
    if (!found)
      return error(loc) << "unknown op '" << full << "'";
    it = opNames.try_emplace(node.op, *found).first;
  }
  OperationState state(loc, it->second);
  size_t available = values.size();
  for (int32_t index : node.operands) {
    FailureOr<Value> v = operand(index, available, loc);
    if (failed(v))
      return failure();
    state.operands.push_back(*v);
  }
  for (const auto &[attrName, value] : node.attrs) {
    FailureOr<Attribute> attr = attribute(value, loc);
    if (failed(attr))
      return failure();
    state.addAttribute(attrName, *attr);
  }
  Type type = tensorType(node.type, loc);
  if (!type)
    return failure();
  state.types.push_back(type);
  for (size_t j = k + 1; j < end; ++j) {
    Type more = tensorType(graph.nodes[j].type, loc);
    if (!more)
      return failure();
    state.types.push_back(more);
  }
  Operation *op = b.create(state);
  values.push_back(op->getResult(0));
  return success();
}

OwningOpRef<ModuleOp> GraphBuilder::build() {
  Location funcLoc = lineLoc(1, 1);
  SmallVector<StringAttr> dimNames;
  for (const std::string &n : graph.meshDimNames)
    dimNames.push_back(StringAttr::get(ctx, n));
  mesh = dtensor::MeshAttr::getChecked(
      [&] { return error(funcLoc); }, ctx, ArrayRef<int64_t>(graph.meshShape),
      ArrayRef<StringAttr>(dimNames), StringRef(graph.device));
  if (!mesh)
    return {};

  SmallVector<Type> argTypes;
  for (const GraphTensorType &t : graph.args) {
    Type type = tensorType(t, funcLoc);
    if (!type)
      return {};
    argTypes.push_back(type);
  }
  size_t numValues = graph.args.size() + graph.nodes.size();
  for (int32_t r : graph.results)
    if (r < 0 || static_cast<size_t>(r) >= numValues) {
      error(funcLoc) << "result names value " << r << ", but the graph has "
                     << numValues << " values";
      return {};
    }

  OwningOpRef<ModuleOp> module(
      ModuleOp::create(FileLineColLoc::get(file, 0, 0)));
  b.setInsertionPointToEnd(module->getBody());
  auto fn = func::FuncOp::create(b, funcLoc, graph.name,
                                 b.getFunctionType(argTypes, {}));
  if (!graph.globalRanks.empty())
    fn->setAttr(dtensor::kGlobalRanksAttrName,
                b.getDenseI64ArrayAttr(graph.globalRanks));
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToEnd(body);
  values.reserve(numValues);
  for (BlockArgument arg : body->getArguments())
    values.push_back(arg);
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    if (failed(buildNode(k, graph.nodes[k])))
      return {};
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (int32_t r : graph.results) {
    results.push_back(values[r]);
    resultTypes.push_back(values[r].getType());
  }
  fn.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  func::ReturnOp::create(b, lineLoc(graph.nodes.size() + 2, 3), results);
  if (failed(verify(*module)))
    return {};
  return module;
}

} // namespace

OwningOpRef<ModuleOp> buildGraphModule(const SegmentGraph &graph,
                                       MLIRContext *ctx) {
  return GraphBuilder(graph, ctx).build();
}

} // namespace dtorch
