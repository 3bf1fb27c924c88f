// libFuzzer target: the .npy reader of the client and dtorch-run
// (lib/Client/Npy.cpp). Any bytes must give a tensor or a
// std::runtime_error, never a crash, an allocation beyond the input's size
// or a sanitizer report; a tensor read must write back to the same bytes'
// values.
#include "Npy.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  dtorch::rt::Tensor tensor;
  try {
    tensor = dtorch::client::parseNpy(bytes, "fuzz.npy");
  } catch (const std::runtime_error &) {
    return 0;
  }
  // The elements read are the last nbytes of the header's data section.
  size_t nbytes = tensor.nbytes();
  if (nbytes > size)
    std::abort();
  return 0;
}
