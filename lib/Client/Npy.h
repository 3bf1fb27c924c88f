//===- Npy.h - reading and writing .npy files ---------------------*- C++
//-*-===//
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <cstddef>
#include <string>
#include <string_view>

namespace dtorch::client {

/// Reads a C-ordered .npy file (float32/64, int32/64, bool); throws
/// std::runtime_error naming the file on anything else.
rt::Tensor readNpy(const std::string &path);
/// The same from the bytes of a .npy file (version 1-3); `name` names it in
/// errors. Checks the header and that the data holds the shape's elements
/// before allocating; throws std::runtime_error on anything malformed.
rt::Tensor parseNpy(std::string_view bytes, const std::string &name);
/// The longest header accepted (numpy's own reader allows 10,000 bytes
/// unless told otherwise).
inline constexpr size_t kMaxNpyHeaderBytes = size_t(1) << 16;
void writeNpy(const std::string &path, const rt::Tensor &t);

} // namespace dtorch::client
