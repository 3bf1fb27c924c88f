// The inputs and attributes each CUDA kernel is run on against its CPU
// twin (CudaKernelParityTest), with how closely they must agree.
#pragma once

#include "TestSupport.h"

#include <functional>
#include <string>
#include <vector>

namespace dtorch::rt::test {

struct ParityCase {
  std::string name; // "sum f32 dims {0,2}"
  std::vector<Tensor> inputs;
  std::function<void(Instruction &)> attrs;
  DType outDtype = ::dtorch::wire::DTYPE_INVALID;
  std::vector<int64_t> outShape;
  // |cuda - cpu| <= atol + rtol |cpu| for floats; bitwise when both are 0
  // (integers and bool are always compared exactly).
  double rtol = 0, atol = 0;
};

// Every case of (op, dtype); empty when there is none (a test fails then).
std::vector<ParityCase> parityCases(const std::string &op, DType dtype);

} // namespace dtorch::rt::test
