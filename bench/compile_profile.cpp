//===- compile_profile.cpp - where a cold compile spends its time --------===//
//
//   build/bin/compile_profile [--ops 2000] [--ranks 4] [--repeat 5] [--fuse]
//                             [--explain]
//                             [--json bench/results/compile_profile.json]
//
// Compiles a chain of `ops` elementwise adds (y = y + x, x sharded on dim 0)
// on a 1-D mesh of `ranks` ranks, once through the text path (the segment
// printed as dtensor-dialect text, parsed: compileModule) and once built
// from the description (compileGraph), and prints the time of each phase
// per op (CPU time of the compiling thread, the fastest of `repeat` runs),
// with the protobuf serialization of the programs (what an upload costs).
// Like the controller's first compile of a segment (a cache miss), it
// leaves fusion out; --fuse adds --rank-fuse-elementwise and the kernel
// generator (the second run's compile); --explain explains the
// redistributions too (what explain() asks for: a miss no longer does it,
// the chain has none, so it measures the observer's walk).
// DTORCH_VERIFY_STAGES=1 verifies every stage (a release build verifies the
// last). Not run by the tests.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Compiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

using namespace dtorch;

namespace {

SegmentGraph chainGraph(int ops, int ranks) {
  SegmentGraph g;
  g.meshShape = {ranks};
  GraphTensorType t{{64, 16}, wire::F32, {Placement::shard(0)}};
  g.args = {t};
  for (int k = 0; k < ops; ++k) {
    GraphNode n;
    n.op = "add";
    n.operands = {k, 0}; // the previous value and x
    n.type = t;
    g.nodes.push_back(std::move(n));
  }
  g.results = {ops};
  return g;
}

std::string chainText(int ops, int ranks) {
  std::string ty = "!dtensor.tensor<64x16xf32, #dtensor.mesh<[" +
                   std::to_string(ranks) + "]>, [S(0)]>";
  std::string s = "func.func @segment(%a0: " + ty + ") -> (" + ty + ") {\n";
  std::string prev = "%a0";
  for (int k = 0; k < ops; ++k) {
    std::string self = "%" + std::to_string(k);
    s += "  " + self + " = dtensor.add " + prev + ", %a0 : (" + ty + ", " + ty +
         ") -> " + ty + "\n";
    prev = self;
  }
  return s + "  return " + prev + " : " + ty + "\n}\n";
}

/// CPU seconds of this thread (the machine may be shared).
struct Clock {
  using time_point = double;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) +
           1e-9 * static_cast<double>(ts.tv_nsec);
  }
};

/// Phase -> fastest seconds over the runs; `order` keeps the first run's
/// order of phases.
struct Profile {
  std::map<std::string, double> best;
  std::vector<std::string> order;
  void add(const std::string &phase, double s) {
    auto it = best.find(phase);
    if (it == best.end()) {
      order.push_back(phase);
      best[phase] = s;
    } else {
      it->second = std::min(it->second, s);
    }
  }
};

template <typename Compile> Profile profile(Compile compile, int repeat) {
  Profile p;
  for (int r = 0; r < repeat; ++r) {
    Clock::time_point start = Clock::now();
    CompileResult result = compile();
    double total = Clock::now() - start;
    if (!result.ok) {
      std::fprintf(stderr, "compile failed:\n%s\n", result.error.c_str());
      std::exit(1);
    }
    for (const auto &[phase, s] : result.timings)
      p.add(phase, s);
    p.add("total compile", total);
    start = Clock::now();
    size_t bytes = 0;
    for (const wire::Program &program : result.functions.at(0).programs)
      bytes += program.SerializeAsString().size();
    p.add("serialize programs", Clock::now() - start);
    p.add("program bytes", static_cast<double>(bytes));
  }
  return p;
}

} // namespace

int main(int argc, char **argv) {
  int ops = 2000, ranks = 4, repeat = 5;
  bool fuse = false, explain = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--fuse"))
      fuse = true;
    if (!std::strcmp(argv[i], "--explain"))
      explain = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--fuse") || !std::strcmp(argv[i], "--explain")) {
      --i; // a flag without a value
      continue;
    }
    if (!std::strcmp(argv[i], "--json"))
      json = argv[i + 1];
    if (!std::strcmp(argv[i], "--ops"))
      ops = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ranks"))
      ranks = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeat"))
      repeat = std::atoi(argv[i + 1]);
  }
  CompileOptions options;
  options.profile = true;
  options.fuseElementwise = fuse;
  options.explain = explain;
  SegmentGraph graph = chainGraph(ops, ranks);
  std::string text = chainText(ops, ranks);
  Profile viaText = profile(
      [&] { return compileModule(text, "segment.mlir", options); }, repeat);
  Profile viaGraph =
      profile([&] { return compileGraph(graph, options); }, repeat);

  std::printf("cold compile of a %d-op add chain on %d ranks, fastest of %d "
              "(CPU us per op)\n",
              ops, ranks, repeat);
  std::printf("%-28s %12s %12s\n", "phase", "text path", "graph path");
  std::vector<std::string> phases = viaText.order;
  for (const std::string &p : viaGraph.order)
    if (!viaText.best.count(p))
      phases.insert(phases.end() - 3, p);
  for (const std::string &phase : phases) {
    auto cell = [&](const Profile &prof) {
      auto it = prof.best.find(phase);
      if (it == prof.best.end())
        return std::string("-");
      char buf[32];
      if (phase == "program bytes")
        std::snprintf(buf, sizeof buf, "%.0f", it->second / ops);
      else
        std::snprintf(buf, sizeof buf, "%.2f", it->second * 1e6 / ops);
      return std::string(buf);
    };
    std::printf(
        "%-28s %12s %12s\n",
        (phase == "program bytes" ? "program bytes per op" : phase.c_str()),
        cell(viaText).c_str(), cell(viaGraph).c_str());
  }
  if (!json.empty()) {
    FILE *f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::perror(json.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"ops\": %d,\n  \"ranks\": %d,\n  \"repeat\": %d,\n",
                 ops, ranks, repeat);
    std::fprintf(f, "  \"unit\": \"CPU us per op (bytes per op for program "
                    "bytes)\",\n");
    const char *sep = "";
    for (const auto &[label, prof] :
         {std::pair<const char *, const Profile *>{"text_path", &viaText},
          {"graph_path", &viaGraph}}) {
      std::fprintf(f, "%s  \"%s\": {", sep, label);
      const char *inner = "";
      for (const std::string &phase : prof->order) {
        double v = prof->best.at(phase);
        v = phase == "program bytes" ? v / ops : v * 1e6 / ops;
        std::fprintf(f, "%s\n    \"%s\": %.4f", inner, phase.c_str(), v);
        inner = ",";
      }
      std::fprintf(f, "\n  }");
      sep = ",\n";
    }
    std::fprintf(f, "\n}\n");
    std::fclose(f);
  }
  return 0;
}
