// libFuzzer target: the reader of a checkpoint's metadata file
// (CheckpointMetadataTarget.h). Any bytes must give metadata or an
// exception, never a crash, an allocation sized by the input's numbers or a
// sanitizer report.
#include "CheckpointMetadataTarget.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    dtorch::fuzz::readCheckpointMetadataForFuzzing(
        std::string_view(reinterpret_cast<const char *>(data), size));
  } catch (const std::exception &) {
  }
  return 0;
}
