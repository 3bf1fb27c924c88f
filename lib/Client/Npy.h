//===- Npy.h - reading and writing .npy files ---------------------*- C++
//-*-===//
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <string>

namespace dtorch::client {

/// Reads a C-ordered .npy file (float32/64, int32/64, bool); throws
/// std::runtime_error naming the file on anything else.
rt::Tensor readNpy(const std::string &path);
void writeNpy(const std::string &path, const rt::Tensor &t);

} // namespace dtorch::client
