//===- EmittedAttributesTest.cpp - attributes of emitted instructions ----===//
//
// The emitter writes every attribute the runtime's validator reads, empty
// lists included: a reduction of a 0-d tensor has `dims = []`, which must
// reach the worker as an empty int list, not as an unset attribute. Each
// instruction carries its op's location as MLIR prints it.
//
//===----------------------------------------------------------------------===//

#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace dtorch;

namespace {

const char *kZeroDimReductions = R"(
#m = #dtensor.mesh<[2]>
func.func @f(%x: !dtensor.tensor<f32, #m, [R]>) -> (!dtensor.tensor<f32, #m, [R]>, !dtensor.tensor<f32, #m, [R]>) {
  %s = dtensor.sum %x dims = [] : (!dtensor.tensor<f32, #m, [R]>) -> !dtensor.tensor<f32, #m, [R]>
  %m = dtensor.max %x dims = [] : (!dtensor.tensor<f32, #m, [R]>) -> !dtensor.tensor<f32, #m, [R]>
  return %s, %m : !dtensor.tensor<f32, #m, [R]>, !dtensor.tensor<f32, #m, [R]>
}
)";

TEST(EmittedAttributes, AnEmptyDimsListIsAnEmptyIntList) {
  CompileResult result = compileModule(kZeroDimReductions, "zero_dim.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.functions.size(), 1u);
  ASSERT_EQ(result.functions[0].programs.size(), 1u); // replicated: 1 class
  for (const wire::Program &program :
       emitted::programsByPosition(result.functions[0])) {
    int reductions = 0;
    for (const wire::Instruction &inst : program.instructions()) {
      if (inst.op() != "sum" && inst.op() != "max")
        continue;
      ++reductions;
      auto dims = inst.attrs().find("dims");
      ASSERT_NE(dims, inst.attrs().end()) << inst.op();
      EXPECT_EQ(dims->second.value_case(), wire::Attr::kInts) << inst.op();
      EXPECT_EQ(dims->second.ints().values_size(), 0) << inst.op();
    }
    EXPECT_EQ(reductions, 2);
    EXPECT_NO_THROW(rt::validateProgram(program, -1));
  }
}

TEST(EmittedAttributes, EachInstructionCarriesItsOpsLocationText) {
  CompileResult result = compileModule(kZeroDimReductions, "zero_dim.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.functions.size(), 1u);
  for (const wire::Program &program : result.functions[0].programs) {
    std::map<std::string, std::string> locationOf;
    for (const wire::Instruction &inst : program.instructions())
      locationOf[inst.op()] = inst.location();
    // The kernels keep the dtensor ops' locations: lines 4 and 5, column 8
    // (the op name; the text's first line is empty).
    EXPECT_EQ(locationOf["sum"], "loc(\"zero_dim.mlir\":4:8)");
    EXPECT_EQ(locationOf["max"], "loc(\"zero_dim.mlir\":5:8)");
  }
}

} // namespace
