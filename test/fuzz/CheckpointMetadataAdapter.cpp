// The checkpoint reader behind CheckpointMetadataTarget.h.
// DTORCH_CHECKPOINT_METADATA_HEADER is the runtime header that declares
// dtorch::rt::readCheckpointMetadata (found by test/fuzz/CMakeLists.txt).
#include "CheckpointMetadataTarget.h"

#include DTORCH_CHECKPOINT_METADATA_HEADER

namespace dtorch::fuzz {

void readCheckpointMetadataForFuzzing(std::string_view bytes) {
  // The result is dropped: what is fuzzed is the reading and its checks.
  (void)::dtorch::rt::readCheckpointMetadata(bytes);
}

} // namespace dtorch::fuzz
