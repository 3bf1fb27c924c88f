// Helpers shared by the runtime tests: tensors from values, a small program
// builder and programs built with it (a buffer plan, donors, a unary op, an
// SGD-like update written over its parameter), the validator's refusals,
// and running N ranks as threads.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dtorch::rt::test {

using ::dtorch::wire::Instruction;
using ::dtorch::wire::Program;

template <class T>
Tensor makeTensor(DType dtype, std::vector<int64_t> shape,
                  const std::vector<T> &values) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(tensor.numel()), values.size());
  T *data = tensor.data_as<T>();
  for (size_t i = 0; i < values.size(); ++i)
    data[i] = values[i];
  return tensor;
}

template <class T> std::vector<T> valuesOf(const Tensor &tensor) {
  const T *data = tensor.data_as<T>();
  return std::vector<T>(data, data + tensor.numel());
}

inline void setInt(Instruction &inst, const std::string &name, int64_t value) {
  (*inst.mutable_attrs())[name].set_i(value);
}
inline void setFloat(Instruction &inst, const std::string &name, double value) {
  (*inst.mutable_attrs())[name].set_f(value);
}
inline void setString(Instruction &inst, const std::string &name,
                      const std::string &value) {
  (*inst.mutable_attrs())[name].set_s(value);
}
inline void setInts(Instruction &inst, const std::string &name,
                    const std::vector<int64_t> &values) {
  auto *list = (*inst.mutable_attrs())[name].mutable_ints();
  list->clear_values();
  for (int64_t v : values)
    list->add_values(v);
}
inline void setData(Instruction &inst, const std::string &name,
                    const void *bytes, size_t size) {
  (*inst.mutable_attrs())[name].set_data(
      std::string(static_cast<const char *>(bytes), size));
}

// `program` as the class program of a one-position mesh (mesh [1]): uploaded
// with mesh ranks {r}, it runs on rank r. Collectives keep their explicit
// `group`s of global ranks.
inline Program onOneRankMesh(Program program) {
  program.clear_mesh_shape();
  program.clear_positions();
  program.add_mesh_shape(1);
  auto *box = program.add_positions();
  box->add_lo(0);
  box->add_hi(1);
  return program;
}

class ProgramBuilder {
public:
  ProgramBuilder() {
    program_.set_version(::dtorch::wire::PROGRAM_FORMAT_VERSION);
    program_.set_name("test");
  }

  int buffer(DType dtype, const std::vector<int64_t> &shape) {
    auto *spec = program_.add_buffers();
    spec->set_dtype(dtype);
    for (int64_t extent : shape)
      spec->add_shape(extent);
    return program_.buffers_size() - 1;
  }
  int input(DType dtype, const std::vector<int64_t> &shape) {
    int id = buffer(dtype, shape);
    program_.add_inputs(id);
    return id;
  }
  void output(int id) { program_.add_outputs(id); }
  int event() {
    program_.set_num_events(program_.num_events() + 1);
    return program_.num_events() - 1;
  }
  Instruction &add(const std::string &op, const std::vector<int> &inputs,
                   const std::vector<int> &outputs,
                   ::dtorch::wire::Stream stream = ::dtorch::wire::COMPUTE) {
    Instruction *inst = program_.add_instructions();
    inst->set_op(op);
    for (int id : inputs)
      inst->add_inputs(id);
    for (int id : outputs)
      inst->add_outputs(id);
    inst->set_stream(stream);
    inst->set_record_event(-1);
    inst->set_location("test.py:" +
                       std::to_string(program_.instructions_size()));
    return *inst;
  }
  Program &program() { return program_; }

private:
  Program program_;
};

// Sets the program's buffer plan: the arena offset of every buffer (-1:
// storage of its own) and the arena's size.
inline void setBufferPlan(Program &program, const std::vector<int64_t> &offsets,
                          int64_t arenaBytes) {
  program.clear_buffer_offsets();
  for (int64_t offset : offsets)
    program.add_buffer_offsets(offset);
  program.set_arena_bytes(arenaBytes);
}

// Sets the input whose storage each output may take (-1: none).
inline void setOutputDonors(Program &program, const std::vector<int> &donors) {
  program.clear_output_donors();
  for (int donor : donors)
    program.add_output_donors(donor);
}

// One float32 input of shape {n}, one output: op(input).
inline Program unaryProgram(const std::string &op, int64_t n = 3) {
  ProgramBuilder b;
  int x = b.input(::dtorch::wire::F32, {n});
  int y = b.buffer(::dtorch::wire::F32, {n});
  b.add(op, {x}, {y});
  b.output(y);
  return b.program();
}

// An SGD-like update of 4 floats: gg = g * g; out = p - gg, written over
// the donated parameter (out's donor: input 0, p; output 1, gg, has none).
struct DonatedUpdate {
  ProgramBuilder b;
  int p, g, gg, out;
  DonatedUpdate() {
    p = b.input(::dtorch::wire::F32, {4});
    g = b.input(::dtorch::wire::F32, {4});
    gg = b.buffer(::dtorch::wire::F32, {4});
    out = b.buffer(::dtorch::wire::F32, {4});
    b.add("mul", {g, g}, {gg});
    b.add("sub", {p, gg}, {out});
    b.output(out);
    b.output(gg);
    setOutputDonors(b.program(), {0, -1});
  }
  // Values of p and g, and the updated p.
  static inline const std::vector<float> kP = {1, 2, 3, 4};
  static inline const std::vector<float> kG = {1, 0.5, -1, 2};
  static inline const std::vector<float> kUpdated = {0, 1.75, 2, 0};
};

// c = x + y (COMPUTE), then d = all_reduce_sum(c) over global ranks 0-3
// (COMM, after the add's event): float32 of shape {n}, the output d.
inline Program addThenAllReduceProgram(int64_t n) {
  using ::dtorch::wire::F32;
  ProgramBuilder b;
  int x = b.input(F32, {n});
  int y = b.input(F32, {n});
  int c = b.buffer(F32, {n});
  int d = b.buffer(F32, {n});
  int ready = b.event();
  b.add("add", {x, y}, {c}).set_record_event(ready);
  auto &reduce = b.add("all_reduce", {c}, {d}, ::dtorch::wire::COMM);
  reduce.add_wait_events(ready);
  setInts(reduce, "group", {0, 1, 2, 3});
  setString(reduce, "reduce", "sum");
  b.output(d);
  return b.program();
}

// Runs fn(rank) on `worldSize` threads; rethrows the first failure.
inline void runRanks(int worldSize, const std::function<void(int)> &fn) {
  std::vector<std::exception_ptr> errors(worldSize);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < worldSize; ++rank)
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto &thread : threads)
    thread.join();
  for (auto &error : errors)
    if (error)
      std::rethrow_exception(error);
}

// Expects `body` to throw RuntimeError whose message contains every fragment.
template <class Body>
void expectRuntimeError(Body body, const std::vector<std::string> &fragments) {
  try {
    body();
    ADD_FAILURE() << "expected a RuntimeError";
  } catch (const RuntimeError &error) {
    std::string message = error.what();
    for (const auto &fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "message '" << message << "' lacks '" << fragment << "'";
  }
}

// Expects the validator to refuse `program` with a message containing every
// fragment.
inline void expectInvalidProgram(const Program &program,
                                 const std::vector<std::string> &fragments,
                                 int communicatorRank = -1) {
  expectRuntimeError([&] { validateProgram(program, communicatorRank); },
                     fragments);
}

} // namespace dtorch::rt::test
