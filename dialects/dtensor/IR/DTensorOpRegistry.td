//===- DTensorOpRegistry.td - every op of the registry -----*- tablegen -*-===//
// The input of tools/gen_op_registry.py: the dialect's ops and the
// decompositions.
include "DTensorOps.td"
include "DTensorDecompositions.td"
