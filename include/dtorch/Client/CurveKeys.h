//===- CurveKeys.h - CURVE keys for the Python package ----------*- C++ -*-===//
//
// The runtime's CURVE key helpers (runtime/include/dtorch/runtime/
// Security.h) for `dtorch.generate_curve_keypair()` and `dtorch.init(curve=)`,
// so the Python extension keeps including client headers only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace dtorch::client {

/// True when the linked libzmq supports CURVE.
bool curveAvailable();
/// Writes PREFIX.key (secret, mode 0600) and PREFIX.pub; returns the public
/// key (Z85).
std::string writeCurveKeyPair(const std::string &prefix);
/// The key in `path`; errors name the file and `what`, never the content.
std::string readCurveKeyFile(const std::string &path, const std::string &what);

} // namespace dtorch::client
