// The in-process backend keeps each rank's state in rt::RankState, as the
// workers do: a failed run poisons its outputs, the failure travels down the
// chain and a fetch raises the client's WorkerError naming the rank.
#include "dtorch/Client/Backend.h"
#include "dtorch/Client/Errors.h"

#include <gtest/gtest.h>

#include <cstring>

namespace dtorch::client {
namespace {

// neg (or `op`) of a float vector of `n` elements, on a one-position mesh.
wire::Program unaryProgram(const std::string &op, int64_t n) {
  wire::Program program;
  program.set_version(wire::PROGRAM_FORMAT_VERSION);
  program.set_name("unary");
  program.add_mesh_shape(1);
  program.add_positions()->add_lo(0);
  program.mutable_positions(0)->add_hi(1);
  for (int b = 0; b < 2; ++b) {
    auto *spec = program.add_buffers();
    spec->set_dtype(wire::F32);
    spec->add_shape(n);
  }
  program.add_inputs(0);
  program.add_outputs(1);
  wire::Instruction *inst = program.add_instructions();
  inst->set_op(op);
  inst->add_inputs(0);
  inst->add_outputs(1);
  inst->set_stream(wire::COMPUTE);
  inst->set_record_event(-1);
  return program;
}

rt::Tensor floats(const std::vector<float> &values) {
  rt::Tensor t =
      rt::Tensor::empty(wire::F32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

TEST(InProcessBackend, RunsProgramsUploadedOnce) {
  std::unique_ptr<Backend> backend = makeInProcessBackend(2);
  backend->put(1, 10, floats({1, -2}));
  backend->uploadPrograms(5, {unaryProgram("neg", 2)}, {1});
  backend->run(1, 5, {10}, {11});
  backend->run(1, 5, {11}, {12});
  rt::Tensor got = backend->fetch(1, 12).get();
  EXPECT_EQ(std::vector<float>(got.data_as<float>(), got.data_as<float>() + 2),
            (std::vector<float>{1, -2}));
}

TEST(InProcessBackend, FailureBecomesAWorkerErrorNamingTheRank) {
  std::unique_ptr<Backend> backend = makeInProcessBackend(2);
  backend->put(1, 10, floats({1, 2}));
  backend->uploadPrograms(5, {unaryProgram("no_such_op", 2)}, {1});
  backend->uploadPrograms(6, {unaryProgram("neg", 2)}, {1});
  backend->run(1, 5, {10}, {11}); // refused: the program is invalid
  backend->run(1, 6, {11}, {12}); // reads the poisoned output
  for (Handle handle : {Handle(11), Handle(12)}) {
    try {
      backend->fetch(1, handle).get();
      ADD_FAILURE() << "fetch of a poisoned tensor succeeded";
    } catch (const WorkerError &e) {
      EXPECT_EQ(e.rank(), 1);
      EXPECT_EQ(e.host(), "in-process");
      std::string message = e.what();
      EXPECT_EQ(message.rfind("rank 1: invalid program 'unary'", 0), 0u)
          << message;
      EXPECT_NE(message.find("no_such_op"), std::string::npos) << message;
    }
  }
  // Freed, a handle is unknown; the backend stays usable.
  backend->free(1, {11, 12});
  EXPECT_THROW(backend->fetch(1, 12).get(), WorkerError);
  backend->run(1, 6, {10}, {13});
  EXPECT_EQ(backend->fetch(1, 13).get().data_as<float>()[1], -2.0f);
}

// Backend::memoryStats reads each rank's RankState behind its earlier
// tasks (no synchronize); the simulated backend says it cannot tell.
TEST(InProcessBackend, MemoryStatsFollowTheRanksWork) {
  std::unique_ptr<Backend> backend = makeInProcessBackend(2);
  backend->put(1, 10, floats({1, -2, 3}));
  backend->uploadPrograms(5, {unaryProgram("neg", 3)}, {1});
  backend->run(1, 5, {10}, {11});
  rt::MemoryStats one = backend->memoryStats(1).get();
  EXPECT_EQ(one.rank, 1);
  EXPECT_TRUE(one.known);
  EXPECT_EQ(one.tensors, 2u);
  EXPECT_EQ(one.bytes, 24u);
  ASSERT_EQ(one.held.size(), 2u);
  EXPECT_EQ(one.held[1].handle, 11u);
  rt::MemoryStats zero = backend->memoryStats(0).get();
  EXPECT_EQ(zero.tensors, 0u);
  EXPECT_EQ(zero.bytes, 0u);
  backend->free(std::vector<int64_t>{0, 1}, {10});
  EXPECT_EQ(backend->memoryStats(1).get().bytes, 12u);
  EXPECT_THROW(backend->memoryStats(2), std::exception);

  std::unique_ptr<Backend> simulated = makeSimulatedBackend(4, 1);
  simulated->put(3, 10, floats({1, 2}));
  rt::MemoryStats unknown = simulated->memoryStats(3).get();
  EXPECT_EQ(unknown.rank, 3);
  EXPECT_FALSE(unknown.known);
  EXPECT_EQ(unknown.tensors, 0u);
  EXPECT_EQ(unknown.bytes, 0u);
}

} // namespace
} // namespace dtorch::client
