#include "dtorch/runtime/Attrs.h"

#include "dtorch/runtime/Tensor.h"

namespace dtorch::rt {

using ::dtorch::wire::Attr;

namespace {
const char *kindName(const Attr &attr) {
  switch (attr.value_case()) {
  case Attr::kI:
    return "i";
  case Attr::kF:
    return "f";
  case Attr::kS:
    return "s";
  case Attr::kInts:
    return "ints";
  case Attr::kData:
    return "data";
  default:
    return "empty";
  }
}

[[noreturn]] void wrongKind(const std::string &name, const Attr &attr,
                            const char *expected) {
  throw RuntimeError("attribute '" + name + "' must be " + expected + ", got " +
                     kindName(attr));
}
} // namespace

bool AttrReader::has(const std::string &name) const {
  return attrs_.count(name) != 0;
}

const Attr &AttrReader::require(const std::string &name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end())
    throw RuntimeError("missing attribute '" + name + "'");
  return it->second;
}

int64_t AttrReader::getInt(const std::string &name) const {
  const Attr &attr = require(name);
  if (attr.value_case() != Attr::kI)
    wrongKind(name, attr, "i");
  return attr.i();
}

int64_t AttrReader::getInt(const std::string &name, int64_t fallback) const {
  return has(name) ? getInt(name) : fallback;
}

double AttrReader::getFloat(const std::string &name) const {
  const Attr &attr = require(name);
  if (attr.value_case() == Attr::kF)
    return attr.f();
  if (attr.value_case() == Attr::kI)
    return static_cast<double>(attr.i());
  wrongKind(name, attr, "f");
}

double AttrReader::getFloat(const std::string &name, double fallback) const {
  return has(name) ? getFloat(name) : fallback;
}

const std::string &AttrReader::getString(const std::string &name) const {
  const Attr &attr = require(name);
  if (attr.value_case() != Attr::kS)
    wrongKind(name, attr, "s");
  return attr.s();
}

std::vector<int64_t> AttrReader::getInts(const std::string &name) const {
  const Attr &attr = require(name);
  if (attr.value_case() != Attr::kInts)
    wrongKind(name, attr, "ints");
  return std::vector<int64_t>(attr.ints().values().begin(),
                              attr.ints().values().end());
}

std::vector<int64_t>
AttrReader::getInts(const std::string &name,
                    const std::vector<int64_t> &fallback) const {
  return has(name) ? getInts(name) : fallback;
}

const std::string &AttrReader::getData(const std::string &name) const {
  const Attr &attr = require(name);
  if (attr.value_case() != Attr::kData)
    wrongKind(name, attr, "data");
  return attr.data();
}

void AttrReader::checkRandomSeed() const {
  if (!has("seed_slot")) {
    getInt("seed");
    return;
  }
  if (getInt("seed_slot") < 0)
    throw RuntimeError("attribute 'seed_slot' must be >= 0, got " +
                       std::to_string(getInt("seed_slot")));
}

int64_t AttrReader::randomSeed() const {
  if (!has("seed_slot"))
    return getInt("seed");
  int64_t slot = getInt("seed_slot");
  size_t available = runSeeds_ ? runSeeds_->size() : 0;
  if (slot < 0 || static_cast<size_t>(slot) >= available)
    throw RuntimeError("seed_slot " + std::to_string(slot) +
                       " is outside the run's " + std::to_string(available) +
                       " seed(s)");
  return (*runSeeds_)[static_cast<size_t>(slot)];
}

} // namespace dtorch::rt
