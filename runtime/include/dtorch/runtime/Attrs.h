// Typed access to an instruction's attributes with clear error messages.
#pragma once

#include "dtorch_program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtorch::rt {

class AttrReader {
public:
  using AttrMap = ::google::protobuf::Map<std::string, ::dtorch::wire::Attr>;
  explicit AttrReader(const AttrMap &attrs) : attrs_(attrs) {}
  /// With the run's seeds: `seed_slot` attributes index into them.
  AttrReader(const AttrMap &attrs, const std::vector<int64_t> *runSeeds)
      : attrs_(attrs), runSeeds_(runSeeds) {}

  bool has(const std::string &name) const;
  // Each getter throws RuntimeError when the attribute is missing (for the
  // forms without a default) or has another kind.
  int64_t getInt(const std::string &name) const;
  int64_t getInt(const std::string &name, int64_t fallback) const;
  // Accepts an `f` or an `i` attribute.
  double getFloat(const std::string &name) const;
  double getFloat(const std::string &name, double fallback) const;
  const std::string &getString(const std::string &name) const;
  std::vector<int64_t> getInts(const std::string &name) const;
  std::vector<int64_t> getInts(const std::string &name,
                               const std::vector<int64_t> &fallback) const;
  // The raw bytes of a `data` attribute.
  const std::string &getData(const std::string &name) const;
  // A random kernel's seed: the run's seed at `seed_slot` when the
  // instruction names a slot (a program compiled once and run with fresh
  // seeds), else the fixed `seed`. Throws when the slot is negative or the
  // run carries fewer seeds.
  int64_t randomSeed() const;
  // What check() can verify without a run: a `seed_slot` >= 0 or a `seed`.
  void checkRandomSeed() const;

private:
  const ::dtorch::wire::Attr &require(const std::string &name) const;
  const AttrMap &attrs_;
  const std::vector<int64_t> *runSeeds_ = nullptr;
};

} // namespace dtorch::rt
