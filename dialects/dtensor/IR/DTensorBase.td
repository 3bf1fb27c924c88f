//===- DTensorBase.td - the dtensor dialect ----------------*- tablegen -*-===//
#ifndef DTENSOR_BASE
#define DTENSOR_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def DTensor_Dialect : Dialect {
  let name = "dtensor";
  let cppNamespace = "::dtorch::dtensor";
  let summary = "Distributed tensors with a global view and explicit layouts";
  let description = [{
    The `dtensor` dialect is what the DTorch client records: every value is a
    `!dtensor.tensor` whose type carries its global shape, element type,
    device mesh and one placement per mesh dim (`S(d)`, `R` or `P(op)`).
    Because the layout is part of the type, a change of layout is always an
    explicit op (`dtensor.redistribute`, and after lowering the collective
    steps `dtensor.all_reduce`, `dtensor.all_gather`, ...).

    Compute ops implement `ShardingRuleOpInterface`: a factor-based rule that
    says how the op may be split. The sharding propagation pass chooses a
    strategy for each op from it and materialises the redistributions it
    needs; the SPMD lowering then turns the global program into one per-rank
    program in the `rank` dialect.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();
  }];
}

#endif // DTENSOR_BASE
