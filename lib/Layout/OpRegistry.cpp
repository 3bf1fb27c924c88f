//===- OpRegistry.cpp - the generated op table ----------------------------===//
#include "dtorch/OpRegistry.h"

#include <string_view>
#include <unordered_map>

namespace dtorch {

const std::vector<OpInfo> &opRegistry() {
  static const std::vector<OpInfo> table = {
#include "OpRegistry.inc"
  };
  return table;
}

const OpInfo *findOp(std::string_view name) {
  // Hashed: asked once per recorded op and per lowered op. The keys view
  // the static table's names.
  static const std::unordered_map<std::string_view, const OpInfo *> byName =
      [] {
        std::unordered_map<std::string_view, const OpInfo *> m;
        for (const OpInfo &op : opRegistry())
          m.emplace(op.name, &op);
        return m;
      }();
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

} // namespace dtorch
