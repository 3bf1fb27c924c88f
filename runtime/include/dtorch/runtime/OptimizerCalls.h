// The layout of a multi-tensor optimizer instruction (`fused_adam`,
// `fused_sgd`; docs/program-format.md), shared by their kernels
// (OptimizerKernels.cpp), the executor's call of their generated kernels
// and the program validator's donation rule.
#pragma once

#include "dtorch/runtime/Attrs.h"

#include <cstddef>
#include <optional>
#include <string_view>

namespace dtorch::rt {

// `scalarInputs` leading 0-d float64 inputs (fused_adam: step, lr;
// fused_sgd: lr), then `inputsPerParam` groups of `numParams` tensors
// (tensor k of parameter i is input `input(k, i)`: parameters, gradients,
// state); the outputs are `outputsPerParam` such groups (output
// k * numParams + i: parameters, state). Every element of parameter i's
// outputs is computed from the same element of its group's inputs alone.
struct OptimizerCallGroups {
  int scalarInputs = 0;
  int numParams = 0;
  int inputsPerParam = 0;
  int outputsPerParam = 0;
  int input(int k, int i) const { return scalarInputs + k * numParams + i; }
};

// Tensors per parameter among the inputs (after the scalars) and outputs of
// the optimizer op `op` with `attrs`: fused_adam 4 and 3 (5 and 4 with
// amsgrad); fused_sgd 2 and 1 without momentum, 3 and 2 with (2 and 2 on
// the first step, `first_step` = 1).
int optimizerInputsPerParam(std::string_view op, const AttrReader &attrs);
int optimizerOutputsPerParam(std::string_view op, const AttrReader &attrs);

// The groups of a call of `op` with these counts; nullopt when `op` is not
// an optimizer update or the counts do not make whole groups.
std::optional<OptimizerCallGroups> optimizerCallGroups(std::string_view op,
                                                       const AttrReader &attrs,
                                                       size_t numInputs,
                                                       size_t numOutputs);
std::optional<OptimizerCallGroups>
optimizerCallGroups(const ::dtorch::wire::Instruction &inst);

} // namespace dtorch::rt
