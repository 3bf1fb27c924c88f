//===- OpRegistry.h - every op, declared once in ODS ---------------*- C++
//-*-===//
//
// The op registry: one entry per dialect op and per decomposition, generated
// from the ODS declarations (dialects/dtensor/IR/DTensorOps.td and
// DTensorDecompositions.td) by tools/gen-op-registry/gen_op_registry.py. The
// client looks up an op's rule family and partial pass-through here, the
// Python package builds its functions, methods and operators from it, and
// the coverage test checks every entry against the kernel registry.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_OPREGISTRY_H
#define DTORCH_OPREGISTRY_H

#include "dtorch/Layout.h"

#include <string_view>
#include <vector>

namespace dtorch {

struct OpInfo {
  const char *name;    // dialect mnemonic, or the decomposition's name
  const char *family;  // how the client builds it and which rule it has
  const char *kernel;  // runtime kernel the lowering emits ("" for none)
  const char *summary; // ODS summary
  int numOperands;     // tensor operands; -1: variadic
  std::vector<const char *> attrs;
  std::vector<const char *> functions; // dtorch.<name>
  std::vector<const char *> methods;   // Tensor.<name>
  std::vector<const char *> operators; // Python operators (__add__, ...)
  std::vector<ReduceOp> jointPartial;
  std::vector<int64_t> linearOperands;
  bool floatOnly; // integer inputs are converted to float32 first
  std::vector<const char *> dtypes; // "f32", ..., "i1"
  std::vector<const char *> uses;   // decompositions: the dialect ops used
  const char *reference;            // numpy expression for the e2e test
  const char *test;                 // a test covering it besides generated ones
  bool isDialectOp;
  /// Gradient formulas, one Python expression per tensor operand (one for a
  /// variadic operand); "" for an operand that is not differentiable; empty
  /// for an op without a gradient (python/dtorch/autograd.py evaluates them).
  std::vector<const char *> gradient;
  /// The ODS names of the tensor operands (lhs, rhs, input, cond, ...), the
  /// names the gradient formulas use.
  std::vector<const char *> operandNames;
};

/// Every entry, sorted: dialect ops by mnemonic, then decompositions.
const std::vector<OpInfo> &opRegistry();
/// The entry named `name` (a dialect mnemonic or a decomposition), or null.
const OpInfo *findOp(std::string_view name);

} // namespace dtorch

#endif // DTORCH_OPREGISTRY_H
