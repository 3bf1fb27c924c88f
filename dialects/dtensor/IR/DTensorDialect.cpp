//===- DTensorDialect.cpp - dialect, attributes and types ----------------===//
#include "dtensor/IR/DTensor.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dtorch;
using namespace dtorch::dtensor;

#include "dtensor/IR/DTensorOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dtensor/IR/DTensorAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dtensor/IR/DTensorOpsTypes.cpp.inc"

namespace {
/// Prints meshes once at the top of a module as `#mesh = ...`.
struct DTensorOpAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;
  AliasResult getAlias(Attribute attr, raw_ostream &os) const override {
    if (isa<MeshAttr>(attr)) {
      os << "mesh";
      return AliasResult::FinalAlias;
    }
    return AliasResult::NoAlias;
  }
};
} // namespace

void DTensorDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "dtensor/IR/DTensorOps.cpp.inc"
      >();
  addInterfaces<DTensorOpAsmInterface>();
}

void DTensorDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dtensor/IR/DTensorAttrs.cpp.inc"
      >();
}

void DTensorDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dtensor/IR/DTensorOpsTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

int64_t MeshAttr::getNumDevices() const {
  return meshSize(std::vector<int64_t>(getShape().begin(), getShape().end()));
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<int64_t> shape,
                               ArrayRef<StringAttr> dimNames,
                               StringRef device) {
  if (shape.empty())
    return emitError() << "mesh must have at least one dim";
  // As many positions as the runtime accepts (kMaxMeshPositions in
  // runtime/include/dtorch/runtime/WireLimits.h): a larger mesh could never
  // run, and compiling for it walks every position.
  constexpr int64_t kMaxMeshDevices = int64_t(1) << 20;
  int64_t devices = 1;
  for (int64_t s : shape) {
    if (s <= 0)
      return emitError() << "mesh dims must be positive, got " << s;
    if (s > kMaxMeshDevices / devices)
      return emitError() << "mesh has more than " << kMaxMeshDevices
                         << " devices";
    devices *= s;
  }
  if (!dimNames.empty() && dimNames.size() != shape.size())
    return emitError() << "mesh has " << shape.size() << " dims but "
                       << dimNames.size() << " dim names";
  for (size_t i = 0; i < dimNames.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (dimNames[i] == dimNames[j])
        return emitError() << "mesh dim name \"" << dimNames[i].getValue()
                           << "\" is used twice";
  if (device != "cpu" && device != "cuda")
    return emitError() << "unknown device type \"" << device
                       << "\" (expected \"cpu\" or \"cuda\")";
  return success();
}

// #dtensor.mesh<[2, 2], names = ["dp", "tp"], device = "cuda">
Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<int64_t> shape;
  SmallVector<StringAttr> names;
  std::string device = "cpu";
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        return parser.parseInteger(shape.emplace_back());
      }))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return {};
    if (key == "names") {
      if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
            std::string n;
            if (parser.parseString(&n))
              return failure();
            names.push_back(StringAttr::get(parser.getContext(), n));
            return success();
          }))
        return {};
    } else if (key == "device") {
      if (parser.parseString(&device))
        return {};
    } else {
      parser.emitError(parser.getCurrentLocation())
          << "unknown mesh key '" << key << "' (expected names or device)";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return MeshAttr::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), ArrayRef<int64_t>(shape),
      ArrayRef<StringAttr>(names), StringRef(device));
}

void MeshAttr::print(AsmPrinter &p) const {
  p << "<[";
  llvm::interleaveComma(getShape(), p);
  p << "]";
  if (!getDimNames().empty()) {
    p << ", names = [";
    llvm::interleaveComma(getDimNames(), p,
                          [&](StringAttr n) { p.printString(n.getValue()); });
    p << "]";
  }
  if (getDevice() != "cpu")
    p << ", device = \"" << getDevice() << "\"";
  p << ">";
}

//===----------------------------------------------------------------------===//
// PlacementAttr: S(d), R, P(op)
//===----------------------------------------------------------------------===//

static FailureOr<Placement> parsePlacementBody(AsmParser &parser) {
  StringRef kind;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseKeyword(&kind))
    return failure();
  if (kind == "R")
    return Placement::replicate();
  if (kind == "S") {
    int64_t dim;
    if (parser.parseLParen() || parser.parseInteger(dim) ||
        parser.parseRParen())
      return failure();
    return Placement::shard(dim);
  }
  if (kind == "P") {
    StringRef op;
    if (parser.parseLParen())
      return failure();
    SMLoc opLoc = parser.getCurrentLocation();
    if (parser.parseKeyword(&op) || parser.parseRParen())
      return failure();
    std::optional<ReduceOp> r = parseReduceOp(op.str());
    if (!r)
      return parser.emitError(opLoc) << "unknown partial reduction '" << op
                                     << "' (expected sum, avg, max or min)";
    return Placement::partial(*r);
  }
  return parser.emitError(loc)
         << "unknown placement '" << kind << "' (expected S(dim), R or P(op))";
}

Attribute PlacementAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<Placement> p = parsePlacementBody(parser);
  if (failed(p) || parser.parseGreater())
    return {};
  return PlacementAttr::get(parser.getContext(), *p);
}

void PlacementAttr::print(AsmPrinter &p) const {
  p << "<" << getValue().str() << ">";
}

//===----------------------------------------------------------------------===//
// DTensorType
//===----------------------------------------------------------------------===//

int64_t DTensorType::getNumElements() const {
  int64_t n = 1;
  for (int64_t s : getShape())
    n *= s;
  return n;
}

Placements DTensorType::getLayout() const {
  Placements ps;
  for (PlacementAttr p : getPlacements())
    ps.push_back(p.getValue());
  return ps;
}

DTensorType dtorch::dtensor::getDTensorType(ArrayRef<int64_t> shape,
                                            Type elementType, MeshAttr mesh,
                                            const Placements &placements) {
  SmallVector<PlacementAttr> attrs;
  for (const Placement &p : placements)
    attrs.push_back(PlacementAttr::get(elementType.getContext(), p));
  return DTensorType::get(elementType.getContext(), shape, elementType, mesh,
                          ArrayRef<PlacementAttr>(attrs));
}

DTensorType DTensorType::withPlacements(const Placements &placements) const {
  return getDTensorType(getShape(), getElementType(), getMesh(), placements);
}

DTensorType DTensorType::withShape(ArrayRef<int64_t> shape) const {
  return DTensorType::get(getContext(), shape, getElementType(), getMesh(),
                          getPlacements());
}

SmallVector<int64_t>
DTensorType::getLocalShape(ArrayRef<int64_t> coords) const {
  LocalBox box =
      localBox({getShape().begin(), getShape().end()},
               {getMesh().getShape().begin(), getMesh().getShape().end()},
               getLayout(), {coords.begin(), coords.end()});
  return SmallVector<int64_t>(box.shape.begin(), box.shape.end());
}

LogicalResult DTensorType::verify(function_ref<InFlightDiagnostic()> emitError,
                                  ArrayRef<int64_t> shape, Type elementType,
                                  MeshAttr mesh,
                                  ArrayRef<PlacementAttr> placements) {
  for (int64_t s : shape)
    if (s < 0)
      return emitError() << "dtensor dims must be static and non-negative";
  if (!elementType.isIntOrFloat())
    return emitError()
           << "dtensor element type must be an integer or float, got "
           << elementType;
  if (!mesh)
    return emitError() << "dtensor needs a mesh";
  Placements ps;
  for (PlacementAttr p : placements)
    ps.push_back(p.getValue());
  std::string err = validatePlacements(shape.size(), mesh.getRank(), ps);
  if (!err.empty())
    return emitError() << err;
  return success();
}

// !dtensor.tensor<7x5xf32, #mesh, [S(0), R]>
Type DTensorType::parse(AsmParser &parser) {
  SmallVector<int64_t> shape;
  Type elementType;
  MeshAttr mesh;
  SmallVector<PlacementAttr> placements;
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/false) ||
      parser.parseType(elementType) || parser.parseComma() ||
      parser.parseAttribute(mesh) || parser.parseComma() ||
      parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square,
          [&] {
            FailureOr<Placement> p = parsePlacementBody(parser);
            if (failed(p))
              return failure();
            placements.push_back(PlacementAttr::get(parser.getContext(), *p));
            return success();
          }) ||
      parser.parseGreater())
    return {};
  return DTensorType::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), ArrayRef<int64_t>(shape), elementType, mesh,
      ArrayRef<PlacementAttr>(placements));
}

void DTensorType::print(AsmPrinter &p) const {
  p << "<";
  for (int64_t s : getShape())
    p << s << "x";
  p << getElementType() << ", ";
  p.printAttribute(getMesh());
  p << ", [";
  llvm::interleaveComma(getPlacements(), p,
                        [&](PlacementAttr a) { p << a.getValue().str(); });
  p << "]>";
}

int64_t dtorch::dtensor::elementBytes(Type type) {
  return std::max<int64_t>(1, (type.getIntOrFloatBitWidth() + 7) / 8);
}
