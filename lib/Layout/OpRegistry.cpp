//===- OpRegistry.cpp - the generated op table ----------------------------===//
#include "dtorch/OpRegistry.h"

#include <map>
#include <string>

namespace dtorch {

const std::vector<OpInfo> &opRegistry() {
  static const std::vector<OpInfo> table = {
#include "OpRegistry.inc"
  };
  return table;
}

const OpInfo *findOp(std::string_view name) {
  static const std::map<std::string, const OpInfo *, std::less<>> byName = [] {
    std::map<std::string, const OpInfo *, std::less<>> m;
    for (const OpInfo &op : opRegistry())
      m.emplace(op.name, &op);
    return m;
  }();
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

} // namespace dtorch
