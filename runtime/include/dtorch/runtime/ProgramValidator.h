// Static checks of a per-rank program before it runs: version, buffer and
// event ids, dtypes/shapes/attributes of every instruction, single writer per
// buffer, every read ordered after its write (same stream or through events),
// and no event deadlock. Never crashes on malformed input.
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <string>
#include <string_view>
#include <vector>

namespace dtorch::rt {

// Names of the collective ops handled by the COMM stream.
bool isCollectiveOp(std::string_view op);

// The op of an instruction that calls a generated kernel of the program
// (wire::Instruction::executable names it).
inline constexpr const char *kFusedOp = "fused";

// An attribute (i = 1) of a registry op's instruction that calls the
// program's generated kernel Instruction::executable instead of the
// registry's kernel (a fused_adam generated for its signature), with the
// op's inputs and outputs and the `scalars` attribute.
inline constexpr const char *kGeneratedKernelAttr = "generated";

// Whether `inst` calls a generated kernel of its program: a "fused"
// instruction, or one marked with kGeneratedKernelAttr.
bool callsGeneratedKernel(const ::dtorch::wire::Instruction &inst);

// Throws RuntimeError("invalid program '<name>': ...") naming the instruction
// (index, op, location) where relevant. `communicatorRank` is the rank of
// the communicator that will run the collectives (it must be in each
// collective's group), or -1 when there is none. The program must be one
// rank's: no mesh value and no collective `axis` left (MeshContext.h).
void validateProgram(const ::dtorch::wire::Program &program,
                     int communicatorRank);

// The checks of a class program that need no rank: version, mesh_shape
// (extents >= 1), position boxes inside the mesh, every mesh value well
// formed (axis in range, one shard dim per mesh axis, dims in range) and
// every collective's `axis` in range with one size per rank of the axis.
// resolveForRank runs it; validateProgram checks the rest after resolution.
void validateMeshProgram(const ::dtorch::wire::Program &program);

// "instruction 3 ('matmul' at model.py:12)".
std::string describeInstruction(const ::dtorch::wire::Program &program,
                                int index);

} // namespace dtorch::rt
