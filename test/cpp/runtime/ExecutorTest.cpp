// Executor: stream ordering with events, collectives driven from programs,
// validation of malformed programs.
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/Kernels.h"

#include <chrono>
#include <random>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::COMPUTE;
using ::dtorch::wire::F32;
using ::dtorch::wire::I64;

// A copy that first sleeps: if a consumer on the other stream did not wait for
// it, the consumer would read the buffer before it is written.
void registerSlowCopy() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                  const std::vector<Tensor *> &out) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::memcpy(out[0]->data(), in[0]->data(), in[0]->nbytes());
  };
  registerKernel("test_slow_copy", F32, kCpuDevice, kernel);
}

TEST(Executor, RunsAKernelChain) {
  ProgramBuilder b;
  int x = b.input(F32, {2, 2});
  int y = b.buffer(F32, {2, 2});
  int z = b.buffer(F32, {2, 2});
  b.add("exp", {x}, {y});
  b.add("mul", {y, x}, {z});
  b.output(z);
  b.output(x);
  Executor executor(nullptr);
  Tensor input = makeTensor<float>(F32, {2, 2}, {0, 1, 2, 3});
  auto outputs = executor.run(b.program(), {input});
  ASSERT_EQ(outputs.size(), 2u);
  std::vector<float> got = valuesOf<float>(outputs[0]);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i], std::exp(float(i)) * i, 1e-4);
  EXPECT_EQ(outputs[1].data(),
            input.data()); // an input returned as output is shared
}

TEST(Executor, CollectiveOnCommConsumesComputeOutputThroughEvents) {
  registerSlowCopy();
  const int world = 4;
  FakeCollectiveHub hub(world, std::chrono::seconds(5));
  runRanks(world, [&](int rank) {
    ProgramBuilder b;
    int x = b.input(F32, {3});
    int y = b.buffer(F32, {3});
    int reduced = b.buffer(F32, {3});
    int result = b.buffer(F32, {3});
    int produced = b.event();
    int communicated = b.event();
    b.add("test_slow_copy", {x}, {y}).set_record_event(produced);
    Instruction &allReduce = b.add("all_reduce", {y}, {reduced}, COMM);
    setInts(allReduce, "group", {0, 1, 2, 3});
    setString(allReduce, "reduce", "sum");
    allReduce.add_wait_events(produced);
    allReduce.set_record_event(communicated);
    b.add("add", {reduced, x}, {result}).add_wait_events(communicated);
    b.output(result);
    b.output(reduced);
    auto comm = hub.communicator(rank);
    Executor executor(comm.get());
    float r = static_cast<float>(rank);
    auto outputs =
        executor.run(b.program(), {makeTensor<float>(F32, {3}, {r, 2 * r, 1})});
    // sum over ranks of (r, 2r, 1) = (6, 12, 4).
    EXPECT_EQ(valuesOf<float>(outputs[1]), (std::vector<float>{6, 12, 4}));
    EXPECT_EQ(valuesOf<float>(outputs[0]),
              (std::vector<float>{6 + r, 12 + 2 * r, 5}));
  });
}

// all_to_all with uneven counts as a program instruction: the send counts
// are a tensor the program computed (data-dependent), the output has an
// upper bound of rows and the receive counts come back as a tensor.
TEST(Executor, AllToAllWithUnevenCountsFromATensor) {
  const int world = 4;
  FakeCollectiveHub hub(world, std::chrono::seconds(5));
  runRanks(world, [&](int rank) {
    ProgramBuilder b;
    int x = b.input(F32, {4, 2});
    int counts = b.input(I64, {4});
    int rows = b.buffer(F32, {8, 2});
    int received = b.buffer(I64, {4});
    Instruction &exchange =
        b.add("all_to_all_v", {x, counts}, {rows, received}, COMM);
    setInts(exchange, "group", {0, 1, 2, 3});
    b.output(rows);
    b.output(received);
    // Rank 0 sends its first two rows to rank 3, ranks 1 and 2 keep their
    // first `rank` rows, rank 3 sends nothing.
    std::vector<int64_t> sendCounts(4, 0);
    if (rank == 0)
      sendCounts[3] = 2;
    if (rank == 1 || rank == 2)
      sendCounts[rank] = rank;
    std::vector<float> data;
    for (int k = 0; k < 4; ++k)
      data.insert(data.end(), {float(rank), float(k)});
    auto comm = hub.communicator(rank);
    Executor executor(comm.get());
    auto outputs =
        executor.run(b.program(), {makeTensor<float>(F32, {4, 2}, data),
                                   makeTensor<int64_t>(I64, {4}, sendCounts)});
    std::vector<int64_t> want(4, 0);
    std::vector<float> rowsWant;
    if (rank == 3) {
      want[0] = 2;
      rowsWant = {0, 0, 0, 1};
    } else if (rank == 1 || rank == 2) {
      want[rank] = rank;
      for (int k = 0; k < rank; ++k)
        rowsWant.insert(rowsWant.end(), {float(rank), float(k)});
    }
    rowsWant.resize(16, 0.0f);
    EXPECT_EQ(valuesOf<int64_t>(outputs[1]), want) << "rank " << rank;
    EXPECT_EQ(valuesOf<float>(outputs[0]), rowsWant) << "rank " << rank;
  });
}

TEST(Executor, ComputeRunsWhileCommWaits) {
  // COMM waits on an event recorded by the second COMPUTE instruction; the
  // first COMPUTE instruction consumes nothing from COMM.
  const int world = 2;
  FakeCollectiveHub hub(world, std::chrono::seconds(5));
  runRanks(world, [&](int rank) {
    ProgramBuilder b;
    int x = b.input(I64, {2});
    int a = b.buffer(I64, {2});
    int c = b.buffer(I64, {2});
    int gathered = b.buffer(I64, {4});
    int ready = b.event();
    b.add("neg", {x}, {a});
    b.add("add", {a, x}, {c}).set_record_event(ready);
    Instruction &gather = b.add("all_gather", {a}, {gathered}, COMM);
    setInts(gather, "group", {0, 1});
    setInt(gather, "dim", 0);
    setInts(gather, "sizes", {2, 2});
    gather.add_wait_events(ready);
    b.output(gathered);
    b.output(c);
    auto comm = hub.communicator(rank);
    Executor executor(comm.get());
    auto outputs = executor.run(
        b.program(), {makeTensor<int64_t>(I64, {2}, {rank + 1, 10})});
    EXPECT_EQ(valuesOf<int64_t>(outputs[0]),
              (std::vector<int64_t>{-1, -10, -2, -10}));
    EXPECT_EQ(valuesOf<int64_t>(outputs[1]), (std::vector<int64_t>{0, 0}));
  });
}

TEST(Executor, CollectiveTimeoutNamesInstructionAndMissingRank) {
  const int world = 4;
  FakeCollectiveHub hub(world, std::chrono::milliseconds(200));
  std::vector<std::string> messages(world);
  runRanks(world, [&](int rank) {
    if (rank == 3)
      return; // never arrives
    ProgramBuilder b;
    int x = b.input(F32, {2});
    int y = b.buffer(F32, {2});
    Instruction &inst = b.add("all_reduce", {x}, {y}, COMM);
    setInts(inst, "group", {0, 1, 2, 3});
    setString(inst, "reduce", "max");
    b.output(y);
    auto comm = hub.communicator(rank);
    Executor executor(comm.get());
    expectRuntimeError(
        [&] {
          executor.run(b.program(), {makeTensor<float>(F32, {2}, {1, 2})});
        },
        {"instruction 0 ('all_reduce' at test.py:1)", "rank(s) 3", "200 ms"});
  });
}

// ---- validation ------------------------------------------------------------

ProgramBuilder simpleProgram() {
  ProgramBuilder b;
  int x = b.input(F32, {2, 3});
  int y = b.buffer(F32, {2, 3});
  b.add("relu", {x}, {y});
  b.output(y);
  return b;
}

void expectInvalid(Program &program, const std::vector<std::string> &fragments,
                   Communicator *comm = nullptr) {
  Executor executor(comm);
  std::vector<Tensor> inputs;
  for (int id : program.inputs()) {
    if (id < 0 || id >= program.buffers_size())
      break;
    try {
      inputs.push_back(Tensor::emptyLike(program.buffers(id)));
    } catch (const RuntimeError &) {
      break;
    }
  }
  expectRuntimeError([&] { executor.run(program, inputs); }, fragments);
}

TEST(Executor, AllToAllVCountsMustFitTheGroup) {
  ProgramBuilder b;
  int x = b.input(F32, {4, 2});
  int counts = b.input(I64, {3});
  int rows = b.buffer(F32, {8, 2});
  int received = b.buffer(I64, {4});
  setInts(b.add("all_to_all_v", {x, counts}, {rows, received}, COMM), "group",
          {0, 1, 2, 3});
  b.output(rows);
  FakeCollectiveHub hub(4, std::chrono::seconds(1));
  auto comm = hub.communicator(0);
  expectInvalid(b.program(), {"all_to_all_v counts must be int64 [4]"},
                comm.get());
}

// The segmented form: rows = counts x segment_rows, counts a multiple of
// the group, input and output of one shape.
TEST(Executor, AllToAllVSegmentsMustFitTheirSlots) {
  FakeCollectiveHub hub(4, std::chrono::seconds(1));
  auto comm = hub.communicator(0);
  auto program = [](std::vector<int64_t> x, int64_t counts,
                    std::vector<int64_t> out, int64_t slot) {
    ProgramBuilder b;
    int in = b.input(F32, x);
    int c = b.input(I64, {counts});
    int rows = b.buffer(F32, out);
    int received = b.buffer(I64, {counts});
    auto &inst = b.add("all_to_all_v", {in, c}, {rows, received}, COMM);
    setInts(inst, "group", {0, 1, 2, 3});
    setInt(inst, "segment_rows", slot);
    b.output(rows);
    return b;
  };
  ProgramBuilder rowsOff = program({12, 2}, 8, {12, 2}, 2);
  expectInvalid(rowsOff.program(),
                {"all_to_all_v with segment_rows 2", "input [12, 2]",
                 "counts [8]", "a multiple of 4"},
                comm.get());
  ProgramBuilder countsOff = program({12, 2}, 6, {12, 2}, 2);
  expectInvalid(countsOff.program(), {"counts [6]"}, comm.get());
  ProgramBuilder shapesDiffer = program({16, 2}, 8, {24, 2}, 2);
  expectInvalid(shapesDiffer.program(), {"output [24, 2]"}, comm.get());
}

TEST(Validation, WrongVersion) {
  ProgramBuilder b = simpleProgram();
  b.program().set_version(1); // version 1 named one global rank
  expectInvalid(b.program(), {"invalid program 'test'",
                              "unsupported program format version 1"});
}

TEST(Validation, BadBufferId) {
  ProgramBuilder b = simpleProgram();
  b.program().mutable_instructions(0)->set_inputs(0, 7);
  expectInvalid(b.program(), {"instruction 0 ('relu' at test.py:1)",
                              "input buffer id 7 is out of range"});
  ProgramBuilder c = simpleProgram();
  c.program().add_outputs(-1);
  expectInvalid(c.program(), {"output buffer id -1 is out of range"});
}

TEST(Validation, UnknownOp) {
  ProgramBuilder b = simpleProgram();
  b.program().mutable_instructions(0)->set_op("frobnicate");
  expectInvalid(b.program(), {"instruction 0", "unknown op 'frobnicate'"});
}

TEST(Validation, OpWithoutKernelForDtype) {
  ProgramBuilder b;
  int x = b.input(::dtorch::wire::BOOL, {2});
  int y = b.buffer(::dtorch::wire::BOOL, {2});
  b.add("exp", {x}, {y});
  expectInvalid(b.program(), {"'exp' has no cpu kernel for bool"});
}

TEST(Validation, WrongInputShapeAndCount) {
  ProgramBuilder b = simpleProgram();
  Executor executor(nullptr);
  expectRuntimeError(
      [&] { executor.run(b.program(), {Tensor::empty(F32, {3, 2})}); },
      {"input 0 (buffer 0) must be float32[2, 3], got float32[3, 2]"});
  expectRuntimeError(
      [&] { executor.run(b.program(), {Tensor::empty(I64, {2, 3})}); },
      {"must be float32[2, 3], got int64[2, 3]"});
  expectRuntimeError([&] { executor.run(b.program(), {}); },
                     {"expects 1 input(s), got 0"});
}

TEST(Validation, LikeInstructionsInARowAreEachChecked) {
  // The validator asks the registry once for a run of like instructions:
  // a later one of another dtype, shape or op is still refused.
  ProgramBuilder noKernel;
  int x = noKernel.input(F32, {2});
  int y = noKernel.buffer(F32, {2});
  int z = noKernel.buffer(F32, {2});
  int flags = noKernel.input(::dtorch::wire::BOOL, {2});
  int out = noKernel.buffer(::dtorch::wire::BOOL, {2});
  noKernel.add("exp", {x}, {y});
  noKernel.add("exp", {y}, {z});
  noKernel.add("exp", {flags}, {out});
  expectInvalid(noKernel.program(),
                {"instruction 2", "'exp' has no cpu kernel for bool"});

  ProgramBuilder badShape;
  x = badShape.input(F32, {2});
  y = badShape.buffer(F32, {2});
  z = badShape.buffer(F32, {3});
  badShape.add("add", {x, x}, {y});
  badShape.add("add", {y, x}, {z});
  expectInvalid(badShape.program(),
                {"instruction 1", "expected float32[3], got float32[2]"});

  ProgramBuilder unknown;
  x = unknown.input(F32, {2});
  y = unknown.buffer(F32, {2});
  z = unknown.buffer(F32, {2});
  unknown.add("relu", {x}, {y});
  unknown.add("frobnicate", {y}, {z});
  expectInvalid(unknown.program(),
                {"instruction 1", "unknown op 'frobnicate'"});
}

TEST(Executor, LikeKernelsOfTwoDtypesInARowEachRunTheirOwn) {
  // The executor resolves a run of like instructions once: an add of
  // another dtype right after must still run its own kernel.
  ProgramBuilder b;
  int x = b.input(F32, {3});
  int d = b.input(::dtorch::wire::F64, {3});
  int y = b.buffer(F32, {3});
  int z = b.buffer(F32, {3});
  int e = b.buffer(::dtorch::wire::F64, {3});
  int f = b.buffer(::dtorch::wire::F64, {3});
  int g = b.buffer(F32, {3});
  b.add("add", {x, x}, {y});
  b.add("add", {y, x}, {z});
  b.add("add", {d, d}, {e});
  b.add("add", {e, d}, {f});
  b.add("add", {z, x}, {g});
  b.output(g);
  b.output(f);
  Executor executor(nullptr);
  auto outputs = executor.run(
      b.program(),
      {makeTensor<float>(F32, {3}, {1, 2, 3}),
       makeTensor<double>(::dtorch::wire::F64, {3}, {0.5, 1e-300, 1e300})});
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(valuesOf<float>(outputs[0]), (std::vector<float>{4, 8, 12}));
  EXPECT_EQ(valuesOf<double>(outputs[1]),
            (std::vector<double>{1.5, 3e-300, 3e300}));
}

TEST(Validation, KernelShapeMismatch) {
  ProgramBuilder b;
  int x = b.input(F32, {2, 3});
  int y = b.buffer(F32, {3, 2});
  b.add("relu", {x}, {y});
  expectInvalid(b.program(),
                {"instruction 0", "expected float32[3, 2], got float32[2, 3]"});
}

TEST(Validation, MissingOrMistypedAttribute) {
  ProgramBuilder b;
  int y = b.buffer(F32, {2});
  b.add("full", {}, {y});
  expectInvalid(b.program(), {"'full'", "missing attribute 'value'"});
  setString(*b.program().mutable_instructions(0), "value", "one");
  expectInvalid(b.program(), {"attribute 'value' must be f, got s"});
}

TEST(Validation, WrongArity) {
  ProgramBuilder b;
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  b.add("add", {x}, {y});
  expectInvalid(b.program(), {"takes 2 input(s) and 1 output(s), got 1 and 1"});
}

TEST(Validation, EventIdsOutOfRange) {
  ProgramBuilder b = simpleProgram();
  b.program().mutable_instructions(0)->set_record_event(
      0); // proto default; no events declared
  expectInvalid(b.program(), {"records event 0 outside [0, 0)"});
  ProgramBuilder c = simpleProgram();
  c.program().mutable_instructions(0)->add_wait_events(3);
  expectInvalid(c.program(), {"waits on event 3"});
}

TEST(Validation, ReadWithoutEventAcrossStreams) {
  FakeCollectiveHub hub(1);
  auto comm = hub.communicator(0);
  ProgramBuilder b;
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  int z = b.buffer(F32, {2});
  b.add("relu", {x}, {y});
  Instruction &inst = b.add("all_reduce", {y}, {z}, COMM); // no wait on relu
  setInts(inst, "group", {0});
  setString(inst, "reduce", "sum");
  expectInvalid(b.program(), {"instruction 1 ('all_reduce'", "missing event?"},
                comm.get());
}

TEST(Validation, EventDeadlockAndUnrecordedEvent) {
  FakeCollectiveHub hub(1);
  auto comm = hub.communicator(0);
  ProgramBuilder b;
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  int z = b.buffer(F32, {2});
  int e0 = b.event(), e1 = b.event();
  Instruction &relu = b.add("relu", {x}, {y});
  relu.add_wait_events(e1);
  relu.set_record_event(e0);
  Instruction &reduce = b.add("all_reduce", {x}, {z}, COMM);
  setInts(reduce, "group", {0});
  setString(reduce, "reduce", "sum");
  reduce.add_wait_events(e0);
  reduce.set_record_event(e1);
  expectInvalid(b.program(), {"deadlock"}, comm.get());
  b.program().mutable_instructions(1)->set_record_event(-1);
  expectInvalid(b.program(), {"waits on event 1, which no instruction records"},
                comm.get());
}

TEST(Validation, SingleWriterAndNoWritesToInputs) {
  ProgramBuilder b = simpleProgram();
  b.add("relu", {0}, {1});
  expectInvalid(b.program(),
                {"instruction 1", "already written by instruction 0"});
  ProgramBuilder c = simpleProgram();
  c.add("relu", {1}, {0});
  expectInvalid(c.program(), {"which is a program input"});
}

TEST(Validation, CollectiveNeedsCommunicatorAndMatchingRank) {
  ProgramBuilder b;
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  Instruction &inst = b.add("all_reduce", {x}, {y}, COMM);
  setInts(inst, "group", {1, 2});
  setString(inst, "reduce", "sum");
  expectInvalid(b.program(),
                {"has collectives but the executor has no communicator"});
  FakeCollectiveHub hub(2);
  auto rank0 = hub.communicator(0);
  expectInvalid(b.program(), {"rank 0 is not in collective group [1, 2]"},
                rank0.get());
  auto rank1 = hub.communicator(1);
  b.program().mutable_instructions(0)->set_stream(COMPUTE);
  expectInvalid(b.program(), {"collectives run on the COMM stream"},
                rank1.get());
  b.program().mutable_instructions(0)->set_stream(COMM);
  setString(*b.program().mutable_instructions(0), "reduce", "prod");
  expectInvalid(b.program(), {"unknown reduction 'prod'"}, rank1.get());
  setString(*b.program().mutable_instructions(0), "reduce", "sum");
  setInts(*b.program().mutable_instructions(0), "group", {0, 2});
  expectInvalid(b.program(), {"rank 1 is not in collective group [0, 2]"},
                rank1.get());
}

TEST(Validation, CollectiveShapes) {
  FakeCollectiveHub hub(2);
  auto comm = hub.communicator(0);
  ProgramBuilder b;
  int x = b.input(F32, {2, 3});
  int y = b.buffer(F32, {5, 3});
  Instruction &inst = b.add("all_gather", {x}, {y}, COMM);
  setInts(inst, "group", {0, 1});
  setInt(inst, "dim", 0);
  setInts(inst, "sizes", {2, 2});
  expectInvalid(b.program(), {"all_gather output must be float32[4, 3]"},
                comm.get());
  setInts(inst, "sizes", {2});
  expectInvalid(b.program(),
                {"all_gather sizes has 1 entries for a group of 2"},
                comm.get());
}

// avg is defined for floating dtypes only; programs that average integers
// or bools are rejected when validated, before anything runs.
TEST(Validation, ReductionAverageNeedsAFloatingDtype) {
  FakeCollectiveHub hub(1);
  auto comm = hub.communicator(0);
  for (DType dtype : {::dtorch::wire::I32, ::dtorch::wire::I64,
                      ::dtorch::wire::BOOL, ::dtorch::wire::F16}) {
    for (const char *op : {"all_reduce", "reduce_scatter"}) {
      ProgramBuilder b;
      int x = b.input(dtype, {2});
      int y = b.buffer(dtype, {2});
      Instruction &inst = b.add(op, {x}, {y}, COMM);
      setInts(inst, "group", {0});
      setString(inst, "reduce", "avg");
      if (std::string(op) == "reduce_scatter") {
        setInt(inst, "dim", 0);
        setInts(inst, "sizes", {2});
      }
      b.output(y);
      if (dtype == ::dtorch::wire::F16) {
        Executor(comm.get()).validate(b.program());
        continue;
      }
      expectInvalid(b.program(),
                    {"reduction 'avg' is not defined for", dtypeName(dtype),
                     "cast to a floating dtype"},
                    comm.get());
      setString(*b.program().mutable_instructions(0), "reduce", "max");
      Executor(comm.get()).validate(b.program());
    }
  }
}

TEST(Validation, BadStreamAndDtype) {
  ProgramBuilder b = simpleProgram();
  b.program().mutable_instructions(0)->set_stream(
      static_cast<::dtorch::wire::Stream>(5));
  expectInvalid(b.program(), {"unknown stream 5"});
  ProgramBuilder c = simpleProgram();
  c.program().mutable_buffers(1)->set_dtype(static_cast<DType>(42));
  expectInvalid(c.program(), {"buffer 1: invalid dtype"});
}

// Random mutations of a valid program never crash: they run or throw
// RuntimeError.
TEST(Validation, MutatedProgramsNeverCrash) {
  ProgramBuilder base;
  int x = base.input(F32, {2, 3});
  int w = base.input(F32, {3, 2});
  int y = base.buffer(F32, {2, 2});
  int s = base.buffer(F32, {2});
  int t = base.buffer(F32, {2, 2});
  base.add("matmul", {x, w}, {y});
  Instruction &sum = base.add("sum", {y}, {s});
  setInts(sum, "dims", {1});
  Instruction &sl = base.add("slice", {x}, {t});
  setInt(sl, "dim", 1);
  setInt(sl, "start", 1);
  base.output(s);
  base.output(t);

  const char *ops[] = {"matmul",     "sum",    "slice",    "relu",
                       "full",       "random", "constant", "transpose",
                       "all_reduce", "bogus",  ""};
  std::mt19937 rng(1234);
  auto pick = [&](int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(rng);
  };
  int ran = 0, rejected = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    Program program = base.program();
    int mutations = pick(1, 3);
    for (int m = 0; m < mutations; ++m) {
      Instruction *inst = program.mutable_instructions(
          pick(0, program.instructions_size() - 1));
      switch (pick(0, 9)) {
      case 0:
        inst->set_op(ops[pick(0, 10)]);
        break;
      case 1:
        if (inst->inputs_size())
          inst->set_inputs(pick(0, inst->inputs_size() - 1), pick(-2, 6));
        break;
      case 2:
        inst->add_outputs(pick(-1, 5));
        break;
      case 3:
        program.mutable_buffers(pick(0, 4))->set_shape(0, pick(-1, 4));
        break;
      case 4:
        program.mutable_buffers(pick(0, 4))
            ->set_dtype(static_cast<DType>(pick(0, 9)));
        break;
      case 5:
        inst->add_wait_events(pick(-1, 2));
        break;
      case 6:
        inst->set_record_event(pick(-2, 2));
        program.set_num_events(pick(-1, 2));
        break;
      case 7:
        setInts(*inst, "dims", {pick(-3, 3)});
        setInt(*inst, "start", pick(-2, 4));
        break;
      case 8:
        (*inst->mutable_attrs())["dim"].set_s("x");
        break;
      case 9:
        inst->set_stream(static_cast<::dtorch::wire::Stream>(pick(0, 2)));
        break;
      }
    }
    std::vector<Tensor> inputs = {Tensor::empty(F32, {2, 3}),
                                  Tensor::empty(F32, {3, 2})};
    try {
      Executor(nullptr).run(program, inputs);
      ++ran;
    } catch (const RuntimeError &) {
      ++rejected;
    }
  }
  EXPECT_EQ(ran + rejected, 3000);
  EXPECT_GT(rejected, 0);
}

} // namespace
} // namespace dtorch::rt::test
