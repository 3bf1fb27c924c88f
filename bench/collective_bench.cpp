// all_reduce (sum, float32) between 2 processes of this host: the runtime's
// shared-memory communicator between processes next to the Gloo
// communicator the runtime builds (connectGloo, over loopback TCP), in one
// run. Transports: shared_memory (as in dtorch-worker: tensors in the
// shared arena, peer access in place for large all_reduce),
// shared_memory_staged (peer access off: the staged rounds every tensor went
// through before), shared_memory_cma (no arena: peer access through
// process_vm_readv/writev) and gloo. Each transport runs in 2 fresh
// processes (one rank each, rendezvous through a file store); the
// transports alternate `--repeats` times so that they see the same noise;
// per size, the median and the best time of one all_reduce over the
// iterations of every repeat. Prints one JSON object (sizes, per transport
// the seconds per call, median and best, the CPU seconds per call of rank
// 0's process and of all ranks' processes together, each with all its
// threads, and bus bandwidth in GB/s).
//
//   collective_bench [--sizes 4096,65536,...] [--repeats 3] [--ranks 2]
//                    [--chunk-bytes B]   (shared memory's chunk per round)
//                    [--transports shared_memory,shared_memory_staged,gloo]
//                    [--direct-bytes B] [--streaming-bytes B]
//                    [--peer-access-bytes B]
//
// bench/collective_bench.py drives it and writes the table and the plot.
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/SharedHostArena.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace dtorch::rt;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int64_t> parseSizes(const std::string &text) {
  std::vector<int64_t> sizes;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    sizes.push_back(std::stoll(item));
  return sizes;
}

// CPU time of every thread of this process (Gloo's I/O threads included):
// the work a call costs, which the host's load does not inflate as much as
// the wall-clock time (a waiting member sleeps after a short spin).
double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

int iterationsFor(int64_t bytes) {
  // About 64 MiB moved per size and transport, at least 5 calls.
  return static_cast<int>(
      std::clamp<int64_t>((int64_t(64) << 20) / bytes, 5, 2000));
}

// One rank: connects, then per size a warm-up and the timed calls; rank 0
// writes "bytes seconds seconds ..." lines to `result`.
int child(const std::string &transport, int rank, int ranks,
          const std::string &dir, const std::vector<int64_t> &sizes,
          const std::string &result) {
  auto store = std::make_shared<FileKeyValueStore>(dir);
  std::unique_ptr<Communicator> comm;
  HostSharedMemoryCommunicator *hostComm = nullptr;
  if (transport == "gloo") {
    GlooOptions options;
    options.prefix = "bench";
    comm = connectGloo(rank, ranks, store, options);
  } else {
    HostSharedMemoryOptions options;
    options.prefix = "bench";
    if (transport == "shared_memory_staged")
      options.peerAccessBytes = SIZE_MAX;
    else if (transport == "shared_memory_cma")
      options.crossMemoryAttach = true; // buffers outside the arena
    else if (!std::getenv("DTORCH_BENCH_NO_ARENA"))
      enableSharedHostArena(); // as dtorch-worker does
    else if (const char *peer = std::getenv("DTORCH_BENCH_PEER_ACCESS_BYTES"))
      options.peerAccessBytes = std::strtoull(peer, nullptr, 10);
    if (const char *chunk = std::getenv("DTORCH_BENCH_CHUNK_BYTES"))
      options.chunkBytes = std::strtoull(chunk, nullptr, 10);
    if (const char *streaming = std::getenv("DTORCH_BENCH_STREAMING_BYTES"))
      options.streamingBytes = std::strtoull(streaming, nullptr, 10);
    if (const char *direct = std::getenv("DTORCH_BENCH_DIRECT_BYTES"))
      options.directReduceBytes = std::strtoull(direct, nullptr, 10);
    auto host = makeHostSharedMemoryCommunicator(rank, store, options);
    hostComm = host.get();
    comm = std::move(host);
  }
  Group group;
  for (int r = 0; r < ranks; ++r)
    group.push_back(r);
  // Rank 0 writes its wall and CPU times, the others their CPU times.
  std::ofstream out(result + "." + std::to_string(rank));
  for (int64_t bytes : sizes) {
    int64_t n = bytes / 4;
    Tensor x = Tensor::empty(::dtorch::wire::F32, {n});
    Tensor y = Tensor::empty(::dtorch::wire::F32, {n});
    float *values = x.data_as<float>();
    for (int64_t i = 0; i < n; ++i)
      values[i] = static_cast<float>(rank + i % 7);
    std::memset(y.data(), 0, y.nbytes());         // touched before timing
    comm->all_reduce(x, y, group, ReduceOp::Sum); // warm-up
    float expected = static_cast<float>(ranks * (ranks - 1) / 2 + ranks * 1);
    if (n > 1 && y.data_as<float>()[1] != expected) {
      std::fprintf(stderr, "%s: wrong all_reduce result\n", transport.c_str());
      return 3;
    }
    int iterations = iterationsFor(bytes);
    std::vector<double> seconds, cpuSeconds;
    for (int i = 0; i < iterations; ++i) {
      double cpuStart = processCpuSeconds();
      auto start = Clock::now();
      comm->all_reduce(x, y, group, ReduceOp::Sum);
      seconds.push_back(
          std::chrono::duration<double>(Clock::now() - start).count());
      cpuSeconds.push_back(processCpuSeconds() - cpuStart);
    }
    out << bytes;
    for (double s : seconds)
      out << " " << s;
    out << " ;";
    for (double s : cpuSeconds)
      out << " " << s;
    out << "\n";
  }
  if (hostComm && rank == 0 && std::getenv("DTORCH_BENCH_VERBOSE"))
    std::fprintf(
        stderr, "%s: %llu calls, %llu through peer access\n", transport.c_str(),
        static_cast<unsigned long long>(hostComm->stats().collectives),
        static_cast<unsigned long long>(hostComm->stats().peerAccessCalls));
  return 0;
}

struct Times {
  // Seconds per call: rank 0's wall and CPU time, every rank's CPU time.
  std::vector<double> wall, cpu, cpuAll;
};

// Runs one transport on `ranks` fresh processes; {bytes: times}.
std::map<int64_t, Times> runTransport(const char *self,
                                      const std::string &transport, int ranks,
                                      const std::string &sizes) {
  char pattern[] = "/tmp/dtorch-collective-bench-XXXXXX";
  std::string dir = mkdtemp(pattern);
  std::string result = dir + "/result.txt";
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(self, self, "--child", transport.c_str(), std::to_string(r).c_str(),
            std::to_string(ranks).c_str(), dir.c_str(), sizes.c_str(),
            result.c_str(), static_cast<char *>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::map<int64_t, Times> times;
  for (int r = 0; ok && r < ranks; ++r) {
    std::ifstream in(result + "." + std::to_string(r));
    std::string line;
    while (std::getline(in, line)) {
      size_t split = line.find(';');
      std::stringstream fields(line.substr(0, split));
      int64_t bytes;
      fields >> bytes;
      Times &into = times[bytes];
      double s;
      while (r == 0 && fields >> s)
        into.wall.push_back(s);
      if (split == std::string::npos)
        continue;
      std::stringstream cpu(line.substr(split + 1));
      for (size_t i = 0; cpu >> s; ++i) {
        if (r == 0)
          into.cpu.push_back(s);
        if (into.cpuAll.size() <= i)
          into.cpuAll.push_back(0);
        into.cpuAll[i] += s;
      }
    }
  }
  std::filesystem::remove_all(dir);
  if (!ok)
    std::fprintf(stderr, "%s run failed\n", transport.c_str());
  return times;
}

double best(const std::vector<double> &values) {
  return values.empty() ? 0 : *std::min_element(values.begin(), values.end());
}

double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 8 && std::string(argv[1]) == "--child") {
    try {
      return child(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), argv[5],
                   parseSizes(argv[6]), argv[7]);
    } catch (const std::exception &error) {
      std::fprintf(stderr, "%s rank %s: %s\n", argv[2], argv[3], error.what());
      return 2;
    }
  }
  std::string sizes = "4096,16384,65536,262144,1048576,4194304,16777216,"
                      "67108864";
  int repeats = 3, ranks = 2;
  std::vector<std::string> transports = {"shared_memory", "gloo"};
  auto split = [](const std::string &text) {
    std::vector<std::string> items;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ','))
      items.push_back(item);
    return items;
  };
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--sizes")
      sizes = argv[i + 1];
    else if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (flag == "--ranks")
      ranks = std::atoi(argv[i + 1]);
    else if (flag == "--only" || flag == "--transports")
      transports = split(argv[i + 1]);
    else if (flag == "--peer-access-bytes") // inherited by the children
      setenv("DTORCH_BENCH_PEER_ACCESS_BYTES", argv[i + 1], 1);
    else if (flag == "--streaming-bytes") // inherited by the children
      setenv("DTORCH_BENCH_STREAMING_BYTES", argv[i + 1], 1);
    else if (flag == "--direct-bytes") // inherited by the children
      setenv("DTORCH_BENCH_DIRECT_BYTES", argv[i + 1], 1);
    else if (flag == "--chunk-bytes") // inherited by the children
      setenv("DTORCH_BENCH_CHUNK_BYTES", argv[i + 1], 1);
    else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  std::map<std::string, std::map<int64_t, Times>> all;
  for (int r = 0; r < repeats; ++r)
    for (const auto &transport : transports)
      for (auto &[bytes, times] :
           runTransport(argv[0], transport, ranks, sizes)) {
        auto &into = all[transport][bytes];
        into.wall.insert(into.wall.end(), times.wall.begin(), times.wall.end());
        into.cpu.insert(into.cpu.end(), times.cpu.begin(), times.cpu.end());
        into.cpuAll.insert(into.cpuAll.end(), times.cpuAll.begin(),
                           times.cpuAll.end());
      }
  std::vector<int64_t> sizeList = parseSizes(sizes);
  std::printf("{\"ranks\": %d, \"repeats\": %d, \"sizes\": [", ranks, repeats);
  for (size_t i = 0; i < sizeList.size(); ++i)
    std::printf("%s%lld", i ? ", " : "", static_cast<long long>(sizeList[i]));
  std::printf("], \"transports\": {");
  for (size_t t = 0; t < transports.size(); ++t) {
    std::printf("%s\"%s\": {\"seconds\": [", t ? ", " : "",
                transports[t].c_str());
    for (size_t i = 0; i < sizeList.size(); ++i)
      std::printf("%s%.9g", i ? ", " : "",
                  median(all[transports[t]][sizeList[i]].wall));
    std::printf("], \"best_seconds\": [");
    for (size_t i = 0; i < sizeList.size(); ++i)
      std::printf("%s%.9g", i ? ", " : "",
                  best(all[transports[t]][sizeList[i]].wall));
    std::printf("], \"cpu_seconds\": [");
    for (size_t i = 0; i < sizeList.size(); ++i)
      std::printf("%s%.9g", i ? ", " : "",
                  median(all[transports[t]][sizeList[i]].cpu));
    std::printf("], \"cpu_seconds_all_ranks\": [");
    for (size_t i = 0; i < sizeList.size(); ++i)
      std::printf("%s%.9g", i ? ", " : "",
                  median(all[transports[t]][sizeList[i]].cpuAll));
    std::printf("], \"bus_gbps\": [");
    for (size_t i = 0; i < sizeList.size(); ++i) {
      double s = median(all[transports[t]][sizeList[i]].wall);
      double bus =
          s > 0 ? 2.0 * (ranks - 1) / ranks * sizeList[i] / s / 1e9 : 0;
      std::printf("%s%.6g", i ? ", " : "", bus);
    }
    std::printf("]}");
  }
  std::printf("}}\n");
  return 0;
}
