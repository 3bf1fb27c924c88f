//===- GraphBuilder.h - a SegmentGraph as a dtensor module --------*- C++
//-*-===//
#ifndef DTORCH_LIB_COMPILER_GRAPHBUILDER_H
#define DTORCH_LIB_COMPILER_GRAPHBUILDER_H

#include "dtorch/SegmentGraph.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace dtorch {

/// Builds `module { func.func @<name>(args) -> results { nodes } }` from the
/// description with OpBuilder (each op created generically by its name)
/// and verifies it. On an invalid description, emits diagnostics on `ctx`
/// and returns null; never asserts.
mlir::OwningOpRef<mlir::ModuleOp> buildGraphModule(const SegmentGraph &graph,
                                                   mlir::MLIRContext *ctx);

} // namespace dtorch

#endif // DTORCH_LIB_COMPILER_GRAPHBUILDER_H
