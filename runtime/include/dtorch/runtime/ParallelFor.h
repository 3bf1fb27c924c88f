// Splitting one kernel call among threads of the process: a process-wide
// pool of helper threads, started on first use and kept (no thread created
// per call). The calling thread takes parts too, so a call completes even
// when every helper is busy with another rank's work. MLIR-free.
#pragma once

#include <cstdint>
#include <functional>

namespace dtorch::rt {

// Runs body(part) for every part in [0, parts), on the calling thread and up
// to parts - 1 helpers, and returns when all parts are done. An exception of
// a part is rethrown here (the first one; the other parts still run).
void parallelFor(int parts, const std::function<void(int)> &body);

// How many parts an elementwise kernel over `rows` rows of `bytes` output
// bytes should be cut into: the rank's thread share (blas::threads(), or
// $DTORCH_KERNEL_THREADS when set), at most one per row, and 1 for outputs
// under 1 MiB (waking a helper costs more than it saves there).
int kernelParts(int64_t rows, int64_t bytes);

// Helper threads started so far (for tests).
int parallelForHelpers();

} // namespace dtorch::rt
