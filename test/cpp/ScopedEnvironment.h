//===- ScopedEnvironment.h - a variable set for a scope ----*- C++ -*-===//
//
// Shared by the C++ tests of every folder (test/CMakeLists.txt puts
// test/cpp on their include path).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace dtorch::testsupport {

/// Sets (or, with a null `value`, unsets) the environment variable `name`
/// until the end of the scope, then restores what it was; worker processes
/// started meanwhile inherit it.
class ScopedEnvironment {
public:
  ScopedEnvironment(const char *name, const char *value) : name_(name) {
    if (const char *previous = std::getenv(name))
      old_ = previous;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnvironment() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnvironment(const ScopedEnvironment &) = delete;
  ScopedEnvironment &operator=(const ScopedEnvironment &) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

} // namespace dtorch::testsupport
