//===- DTensorRegistry.td - the op registry's fields -------*- tablegen -*-===//
//
// Every op is declared once, in DTensorOps.td. Besides its ODS definition an
// op carries the fields below; tools/gen_op_registry.py reads them (with
// `llvm-tblgen --dump-json`) and generates the client's op table
// (OpRegistry.inc: Python names, rule family, partial pass-through, kernel
// name, dtypes), the Python surface built from it, docs/ops.md and the
// sample list of the generated end-to-end test.
//
// Ops of torch's API that are not dialect ops are DTorch_Decomposition
// records (DTensorDecompositions.td): their Python function emits dialect
// ops, named in `uses`.
//
//===----------------------------------------------------------------------===//
#ifndef DTENSOR_REGISTRY
#define DTENSOR_REGISTRY

class DTorch_RegistryEntry {
  // How the client builds the op and which rule builder it uses: creation,
  // unary, binary, compare, where, cast, reduction, argreduce, matmul,
  // shape, slice, concat, index, triangle, layout, layout_step,
  // decomposition.
  string family = "";
  // torch names: `dtorch.<f>`, `Tensor.<m>`, Python operators.
  list<string> torchFunctions = [];
  list<string> tensorMethods = [];
  list<string> pyOperators = [];
  // Partial placements that pass through (include/dtorch/ShardingRule.h):
  // jointPartial: all operands P(op) give P(op); linearOperands: the op is
  // linear in these operands.
  list<string> jointPartial = [];
  list<int> linearOperands = [];
  // Integer and bool inputs are converted to float32 first (exp(int)).
  bit floatOnly = 0;
  // The runtime kernel the SPMD lowering emits ("" for none).
  string kernel = "";
  // Element types of the result that the op supports.
  list<string> dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64", "i1"];
  // numpy reference for the generated end-to-end test: a Python expression
  // over the sample's names (x; a, b; c; index, src; dims, dim, keepdim, ...).
  string reference = "";
  // A test that covers the entry beyond the generated ones (path, optionally
  // ::function); test_op_coverage.py checks that it exists.
  string test = "";
  // Gradient formulas (python/dtorch/autograd.py evaluates them): one Python
  // expression per tensor operand, in operand order (a variadic operand has
  // one formula, evaluated for each of its tensors with `i` its position),
  // giving that operand's gradient from `g` (the result's gradient). Names:
  // `g`, `result`, the op's operand names (a Python number operand arrives
  // as a tensor like `g`), its attributes, every dtorch function, and the
  // helpers of autograd.py (expand_to, sum_to, kept_shape, scatter_slice,
  // pad_to, concat_offset, reduced_count, like_placements); dtorch's names
  // shadow Python's builtins (sum, max, min, abs, float, bool). "" marks an
  // operand that is not differentiable; an op with an empty list has no
  // gradient.
  list<string> gradient = [];
}

class DTorch_Decomposition<string name> : DTorch_RegistryEntry {
  string opName = name;
  string summary = "";
  // The dialect ops its Python function emits.
  list<string> uses = [];
  let family = "decomposition";
}

#endif // DTENSOR_REGISTRY
