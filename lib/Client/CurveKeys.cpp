#include "dtorch/Client/CurveKeys.h"

#include "dtorch/runtime/Security.h"

namespace dtorch::client {

bool curveAvailable() { return rt::curveAvailable(); }

std::string writeCurveKeyPair(const std::string &prefix) {
  return rt::writeCurveKeyPairFiles(prefix).publicKey;
}

std::string readCurveKeyFile(const std::string &path, const std::string &what) {
  return rt::readCurveKeyFile(path, what);
}

} // namespace dtorch::client
