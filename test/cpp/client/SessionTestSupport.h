//===- SessionTestSupport.h - helpers of the Session tests ----*- C++ -*-===//
//
// Dense 1-D tensors from and to std::vector, and a fixture with a Session
// on 4 in-process ranks and a 1-D mesh over them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/Client/Session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace dtorch::client::test {

inline rt::Tensor doubles(const std::vector<double> &values) {
  rt::Tensor t =
      rt::Tensor::empty(wire::F64, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data(), values.data(), values.size() * sizeof(double));
  return t;
}

inline rt::Tensor longs(const std::vector<int64_t> &values) {
  rt::Tensor t =
      rt::Tensor::empty(wire::I64, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

inline std::vector<double> values(const rt::Tensor &t) {
  const double *p = t.data_as<double>();
  return std::vector<double>(p, p + t.numel());
}

/// A Session on 4 in-process ranks with the mesh [4] over them.
class InProcessSessionTest : public ::testing::Test {
protected:
  InProcessSessionTest() {
    SessionOptions o;
    o.worldSize = 4;
    o.backend = "inprocess";
    session = std::make_unique<Session>(o);
    mesh = session->addMesh({4}, {}, {}, "cpu");
  }
  std::unique_ptr<Session> session;
  int mesh = 0;
};

} // namespace dtorch::client::test
