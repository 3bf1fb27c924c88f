//===- Explain.h - why a redistribution happens, in the user's names -*- C++
//-*-===//
//
// The MLIR-free description of one `dtensor.redistribute` after sharding
// propagation: what needed it, the tensor, the placements before and after,
// the collective steps it lowers to and the bytes every rank sends. Filled by
// dtorch::dtensor::explainRedistributions (the IR side) and printed by
// --dtensor-explain-redistributions and dtorch.explain(); the text helpers
// use the mesh dim names when the mesh has them.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_EXPLAIN_H
#define DTORCH_EXPLAIN_H

#include "dtorch/RedistributeTraffic.h"

#include <string>
#include <vector>

namespace dtorch {

/// An operand of an op that reads the redistributed value.
struct RedistributionUse {
  std::string op; // "dtensor.matmul", "func.return"
  int64_t operand = 0;
};

struct RedistributionExplanation {
  enum class Reason : uint8_t {
    /// Inserted by propagation: an op's strategy needs this operand layout.
    Operand,
    /// Inserted by propagation: `source` computes another layout than the
    /// one its result was declared with (what the user was told).
    Result,
    /// A redistribute written in the program (`x.redistribute(...)`).
    Explicit,
  };
  Reason reason = Reason::Explicit;
  std::string source;                  // op producing the input ("" for an
                                       // argument)
  std::vector<RedistributionUse> uses; // in program order
  std::vector<int64_t> shape;
  std::string elementType; // "f32"
  int64_t elementBytes = 0;
  std::vector<int64_t> meshShape;
  std::vector<std::string> meshDimNames; // empty: the mesh has no names
  Placements before, after;
  std::vector<StepTraffic> steps;
  std::vector<int64_t> bytesSent; // by mesh position, over all steps
  /// A second gather of a released value (the op's `dtorch.regather`
  /// attribute: FSDP's backward all_gather with reshard_after_forward=True).
  bool regather = false;
};

/// Fills `steps` and `bytesSent` from the other fields.
void planTraffic(RedistributionExplanation &e);

/// `"tp"` when the mesh has names, else `mesh dim 1`.
std::string meshAxisText(const std::vector<std::string> &names, int64_t axis);
/// `dp: S(0), tp: R` with names, else `[S(0), R]`.
std::string placementsText(const Placements &placements,
                           const std::vector<std::string> &names);
/// The axes that change: `tp: S(1) -> R, dp: P(sum) -> R` (unnamed 1-D
/// mesh: `S(1) -> R`; unnamed N-D: `dim 1: S(1) -> R`).
std::string changeText(const RedistributionExplanation &e);
/// `all_reduce(sum) on "dp"`, `all_gather on "tp"`, `local_slice on mesh dim
/// 0`.
std::string stepText(const RedistributeStep &step,
                     const std::vector<std::string> &names);
/// Why it happens: `operand 1 of dtensor.matmul`, `the result of
/// dtensor.matmul (computed as [P(sum)], declared [R])`, `an explicit
/// redistribute`.
std::string reasonText(const RedistributionExplanation &e);
/// `96 bytes`, or `48 to 96 bytes` when ranks send different amounts.
std::string bytesText(const std::vector<int64_t> &bytesSent);
/// The whole explanation on one line (the remark of the pass).
std::string explanationText(const RedistributionExplanation &e);

} // namespace dtorch

#endif // DTORCH_EXPLAIN_H
