// Static checks of a per-rank program before it runs: version, buffer and
// event ids, dtypes/shapes/attributes of every instruction, single writer per
// buffer, every read ordered after its write (same stream or through events),
// and no event deadlock. Never crashes on malformed input.
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <string>
#include <vector>

namespace dtorch::rt {

// Names of the collective ops handled by the COMM stream.
bool isCollectiveOp(const std::string &op);

// Throws RuntimeError("invalid program '<name>': ...") naming the instruction
// (index, op, location) where relevant. `communicatorRank` is the rank of
// the communicator that will run the collectives, or -1 when there is none.
void validateProgram(const ::dtorch::wire::Program &program,
                     int communicatorRank);

// "instruction 3 ('matmul' at model.py:12)".
std::string describeInstruction(const ::dtorch::wire::Program &program,
                                int index);

} // namespace dtorch::rt
