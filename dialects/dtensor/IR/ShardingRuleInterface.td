//===- ShardingRuleInterface.td - sharding rules of ops ----*- tablegen -*-===//
#ifndef DTENSOR_SHARDING_RULE_INTERFACE
#define DTENSOR_SHARDING_RULE_INTERFACE

include "mlir/IR/OpBase.td"

def ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::dtorch::dtensor";
  let description = [{
    An op that can run sharded: it states its factor-based sharding rule
    (`dtorch::ShardingRule`, see include/dtorch/ShardingRule.h). Each op
    defines its rule beside its verifier; `--dtensor-print-sharding-rules`
    prints them.
  }];
  let methods = [
    InterfaceMethod<"The factor-based sharding rule of this op.",
      "::dtorch::ShardingRule", "getShardingRule", (ins)>,
  ];
}

#endif // DTENSOR_SHARDING_RULE_INTERFACE
