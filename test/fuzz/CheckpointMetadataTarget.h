// What fuzz_checkpoint_metadata needs from the checkpoint reader, in one
// function, so that the target does not depend on how the checkpoint code
// names its types.
//
// Expected from the checkpoint work (issue 11, part 3), MLIR-free, in a
// header under runtime/include/dtorch/runtime/:
//
//   <metadata type> dtorch::rt::readCheckpointMetadata(std::string_view bytes);
//
// reading the bytes of a checkpoint's metadata file and throwing an
// exception derived from std::exception on anything malformed. test/fuzz/
// CMakeLists.txt looks for a header declaring readCheckpointMetadata at
// configure time and builds the target only when it finds one
// (CheckpointMetadataAdapter.cpp defines the function below with it). Where
// the reader takes another argument type, only the adapter changes.
#pragma once

#include <string_view>

namespace dtorch::fuzz {

// Reads `bytes` as checkpoint metadata and checks what the loader checks
// before reading any shard (the sizes, offsets and counts it names are
// bounded); throws on malformed input.
void readCheckpointMetadataForFuzzing(std::string_view bytes);

} // namespace dtorch::fuzz
