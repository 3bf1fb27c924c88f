//===- OpLayoutKey.h - what an op's sharding decision depends on -*- C++
//-*-===//
//
// Passes that ask an op's sharding rule (PropagateSharding to choose a
// strategy, LowerToRank to check that the layouts are a local strategy) get
// the same answer for every op with the same name, inherent attributes and
// operand and result types. The types and attributes are uniqued by the
// context, so the key compares pointers and a chain of like ops asks the
// rule once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/IR/Operation.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SmallVector.h"

namespace dtorch::dtensor {

struct OpLayoutKey {
  mlir::OperationName name;
  mlir::Attribute properties;
  llvm::SmallVector<mlir::Type, 4> types; // operands, then results

  /// The key of `op`.
  static OpLayoutKey of(mlir::Operation *op) {
    OpLayoutKey key{op->getName(), op->getPropertiesAsAttribute(), {}};
    for (mlir::Value v : op->getOperands())
      key.types.push_back(v.getType());
    for (mlir::Type t : op->getResultTypes())
      key.types.push_back(t);
    return key;
  }
  bool operator==(const OpLayoutKey &o) const {
    return name == o.name && properties == o.properties && types == o.types;
  }
};

struct OpLayoutKeyHash {
  size_t operator()(const OpLayoutKey &k) const {
    return llvm::hash_combine(
        k.name.getAsOpaquePointer(), k.properties.getAsOpaquePointer(),
        llvm::hash_combine_range(k.types.begin(), k.types.end()));
  }
};

} // namespace dtorch::dtensor
