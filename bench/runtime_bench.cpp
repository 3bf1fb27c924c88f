// runtime_bench: round-trip latency of an empty program through Cluster and
// all_reduce bandwidth through our runtime next to Gloo used directly.
//
//   runtime_bench [out.json]      (default: bench/results/runtime_bench.json)
//
// Rows: 4 ranks in 2 worker processes (shared memory between them), 4 ranks in
// one worker process (shared memory), and gloo::allreduce in 4 plain processes.
// Bandwidth is algorithm bandwidth: tensor bytes / time per all_reduce.
#include "dtorch/runtime/Cluster.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace dtorch::rt;
namespace wire = ::dtorch::wire;
using Clock = std::chrono::steady_clock;

namespace {

const int64_t kSizes[] = {4 << 10, 1 << 20, 64 << 20};

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int repeatsFor(int64_t bytes) {
  return bytes <= (4 << 10) ? 50 : bytes <= (1 << 20) ? 10 : 2;
}
int itersFor(int64_t bytes) {
  return bytes <= (4 << 10) ? 20 : bytes <= (1 << 20) ? 10 : 3;
}

// A program that every position of the 1-D mesh of 4 ranks runs.
wire::Program meshProgram(const std::string &name) {
  wire::Program p;
  p.set_version(wire::PROGRAM_FORMAT_VERSION);
  p.set_name(name);
  p.add_mesh_shape(4);
  p.add_positions()->add_lo(0);
  p.mutable_positions(0)->add_hi(4);
  return p;
}

// `repeats` independent all_reduces of x (f32[n]) over the 4 ranks.
wire::Program allReduceProgram(int64_t n, int repeats) {
  wire::Program p = meshProgram("bench_all_reduce");
  auto *x = p.add_buffers();
  x->set_dtype(wire::F32);
  x->add_shape(n);
  p.add_inputs(0);
  for (int i = 0; i < repeats; ++i) {
    auto *out = p.add_buffers();
    out->set_dtype(wire::F32);
    out->add_shape(n);
    auto *inst = p.add_instructions();
    inst->set_op("all_reduce");
    inst->add_inputs(0);
    inst->add_outputs(i + 1);
    inst->set_stream(wire::COMM);
    inst->set_record_event(-1);
    auto &attrs = *inst->mutable_attrs();
    attrs["axis"].set_i(0);
    attrs["reduce"].set_s("sum");
  }
  p.add_outputs(repeats);
  return p;
}

struct Row {
  std::string name;
  double latencyUs = 0;
  std::vector<double> bandwidth; // GB/s per size
};

Row benchCluster(const std::string &name, int processes) {
  Row row{name};
  ClusterOptions options;
  options.worldSize = 4;
  options.numProcesses = processes;
  options.workerExecutable = DTORCH_WORKER_PATH;
  Cluster cluster(options);
  const std::vector<int64_t> meshRanks = {0, 1, 2, 3};
  wire::Program empty = meshProgram("empty");
  cluster.uploadPrograms(1, {&empty}, meshRanks);
  auto roundTrip = [&] {
    for (int r = 0; r < 4; ++r)
      cluster.run(r, 1, {}, {});
    cluster.synchronize();
  };
  for (int i = 0; i < 20; ++i)
    roundTrip();
  const int iters = 300;
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i)
    roundTrip();
  row.latencyUs = seconds(Clock::now() - start) / iters * 1e6;

  uint64_t programId = 10;
  for (int64_t bytes : kSizes) {
    int64_t n = bytes / 4;
    int repeats = repeatsFor(bytes);
    ++programId;
    wire::Program allReduce = allReduceProgram(n, repeats);
    cluster.uploadPrograms(programId, {&allReduce}, meshRanks);
    for (int r = 0; r < 4; ++r) {
      Tensor x = Tensor::empty(wire::F32, {n});
      for (int64_t i = 0; i < n; ++i)
        x.data_as<float>()[i] = static_cast<float>(r + i % 7);
      cluster.put(r, 1, x);
    }
    auto step = [&] {
      for (int r = 0; r < 4; ++r)
        cluster.run(r, programId, {1}, {2});
      cluster.synchronize();
    };
    step(); // warm-up (and Gloo connection)
    Tensor check = cluster.fetch(3, 2).get();
    if (check.data_as<float>()[1] != 4 * 1.f + 6)
      std::fprintf(stderr, "wrong all_reduce result\n");
    int iters2 = itersFor(bytes);
    auto t0 = Clock::now();
    for (int i = 0; i < iters2; ++i)
      step();
    double perOp = seconds(Clock::now() - t0) / (iters2 * repeats);
    row.bandwidth.push_back(bytes / perOp / 1e9);
  }
  cluster.shutdown();
  return row;
}

// One process of the direct-Gloo baseline; writes its timings when rank 0.
int glooChild(int rank, const std::string &dir) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, 4);
  gloo::rendezvous::FileStore store(dir);
  context->connectFullMesh(store, device);
  std::ofstream out;
  if (rank == 0)
    out.open(dir + "/result.txt");
  for (int64_t bytes : kSizes) {
    int64_t n = bytes / 4;
    std::vector<float> x(n, 1.f + rank), y(n);
    auto once = [&] {
      gloo::AllreduceOptions opts(context);
      opts.setInput(x.data(), n);
      opts.setOutput(y.data(), n);
      opts.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(
              &gloo::sum<float>));
      gloo::allreduce(opts);
    };
    once();
    int iters = itersFor(bytes) * repeatsFor(bytes);
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      once();
    double perOp = seconds(Clock::now() - t0) / iters;
    if (rank == 0)
      out << bytes / perOp / 1e9 << "\n";
  }
  return 0;
}

Row benchGlooDirect(const char *self) {
  Row row{"gloo direct, 4 processes"};
  char dir[] = "/tmp/dtorch_bench_XXXXXX";
  if (!mkdtemp(dir))
    return row;
  std::vector<pid_t> children;
  for (int r = 0; r < 4; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(self, self, "--gloo-child", std::to_string(r).c_str(), dir,
            nullptr);
      _exit(127);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children)
    waitpid(pid, nullptr, 0);
  std::ifstream in(std::string(dir) + "/result.txt");
  double value;
  while (in >> value)
    row.bandwidth.push_back(value);
  std::string cleanup = std::string("rm -rf ") + dir;
  if (std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", dir);
  return row;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 4 && std::string(argv[1]) == "--gloo-child")
    return glooChild(std::atoi(argv[2]), argv[3]);
  std::string jsonPath =
      argc > 1 ? argv[1]
               : std::string(DTORCH_BENCH_DIR) + "/results/runtime_bench.json";
  std::vector<Row> rows;
  rows.push_back(benchCluster("dtorch, 2 procs x 2 ranks (host shm)", 2));
  rows.push_back(benchCluster("dtorch, 1 proc x 4 ranks (shm)", 1));
  Row gloo = benchGlooDirect(argv[0]);
  rows.push_back(gloo);

  const char *labels[] = {"4KiB", "1MiB", "64MiB"};
  std::printf("%-36s %12s", "configuration", "rtt(us)");
  for (auto *label : labels)
    std::printf(" %10s GB/s %6s", label, "xGloo");
  std::printf("\n");
  for (const Row &row : rows) {
    std::printf("%-36s %12s", row.name.c_str(),
                row.latencyUs > 0
                    ? std::to_string(static_cast<int>(row.latencyUs)).c_str()
                    : "-");
    for (size_t i = 0; i < 3; ++i) {
      double bw = i < row.bandwidth.size() ? row.bandwidth[i] : 0;
      double ratio = i < gloo.bandwidth.size() && gloo.bandwidth[i] > 0
                         ? bw / gloo.bandwidth[i]
                         : 0;
      std::printf(" %15.4f %6.2f", bw, ratio);
    }
    std::printf("\n");
  }

  std::string dir = jsonPath.substr(0, jsonPath.rfind('/'));
  if (!dir.empty())
    mkdir(dir.c_str(), 0755);
  std::ofstream json(jsonPath);
  json << "{\n  \"sizes_bytes\": [4096, 1048576, 67108864],\n  \"rows\": [\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row &row = rows[r];
    json << "    {\"name\": \"" << row.name
         << "\", \"round_trip_us\": " << row.latencyUs
         << ", \"all_reduce_GBps\": [";
    for (size_t i = 0; i < row.bandwidth.size(); ++i)
      json << (i ? ", " : "") << row.bandwidth[i];
    json << "], \"ratio_to_gloo\": [";
    for (size_t i = 0; i < row.bandwidth.size(); ++i) {
      double ratio = i < gloo.bandwidth.size() && gloo.bandwidth[i] > 0
                         ? row.bandwidth[i] / gloo.bandwidth[i]
                         : 0;
      json << (i ? ", " : "") << ratio;
    }
    json << "]}" << (r + 1 < rows.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
  std::printf("wrote %s\n", jsonPath.c_str());
  return 0;
}
