// The one boundary where reductions cross from the compiler to the runtime:
// the lowering writes the `reduce` attribute of all_reduce/reduce_scatter
// with dtorch::reduceOpName (include/dtorch/Layout.h), and the runtime reads
// it into its own enum with rt::parseReduceOp
// (runtime/include/dtorch/runtime/Collectives.h). The names must agree.
#include "dtorch/Layout.h"
#include "dtorch/runtime/Collectives.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace {

TEST(ReduceOpNames, CompilerNamesParseToTheMatchingRuntimeReduction) {
  const std::pair<dtorch::ReduceOp, dtorch::rt::ReduceOp> pairs[] = {
      {dtorch::ReduceOp::Sum, dtorch::rt::ReduceOp::Sum},
      {dtorch::ReduceOp::Avg, dtorch::rt::ReduceOp::Avg},
      {dtorch::ReduceOp::Max, dtorch::rt::ReduceOp::Max},
      {dtorch::ReduceOp::Min, dtorch::rt::ReduceOp::Min}};
  for (const auto &[compiler, runtime] : pairs) {
    std::string name = dtorch::reduceOpName(compiler);
    EXPECT_EQ(dtorch::rt::parseReduceOp(name), runtime) << name;
    EXPECT_EQ(std::string(dtorch::rt::reduceOpName(runtime)), name);
    EXPECT_EQ(dtorch::parseReduceOp(dtorch::rt::reduceOpName(runtime)),
              compiler);
  }
  EXPECT_THROW(dtorch::rt::parseReduceOp("prod"), dtorch::rt::RuntimeError);
  EXPECT_FALSE(dtorch::parseReduceOp("prod").has_value());
}

} // namespace
