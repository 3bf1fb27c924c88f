// The module the compiler builds from a segment's description
// (segmentGraph + compileGraph) is the module parsing the segment's text
// gives (segmentText + compileModule): for one segment per dialect op of
// the op registry, every stage ("input", "sharded", "redistributed",
// "rank") prints the same and the programs are the same. An invalid
// description gives a diagnostic, not a crash.
#include "ScopedEnvironment.h"
#include "SegmentText.h"
#include "dtorch/Compiler.h"
#include "dtorch/OpRegistry.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>

namespace dtorch::client {
namespace {

Placements layout(std::initializer_list<Placement> ps) { return ps; }
const Placement R = Placement::replicate();
Placement S(int64_t d) { return Placement::shard(d); }

AttrValue intA(int64_t v) {
  AttrValue a;
  a.i = v;
  return a;
}
AttrValue floatA(double v) {
  AttrValue a;
  a.kind = AttrValue::Kind::Float;
  a.f = v;
  return a;
}
AttrValue stringA(std::string v) {
  AttrValue a;
  a.kind = AttrValue::Kind::String;
  a.s = std::move(v);
  return a;
}
AttrValue intsA(std::vector<int64_t> v) {
  AttrValue a;
  a.kind = AttrValue::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

/// Builds a segment on a 2x2 mesh named ("dp", "tp") node by node.
class SegmentMaker {
public:
  SegmentMaker() {
    mesh.shape = {2, 2};
    mesh.dimNames = {"dp", "tp"};
    mesh.ranks = {0, 1, 2, 3};
    seg.meshId = 0;
  }
  Handle arg(Shape shape, wire::DType dtype, Placements ps) {
    Handle h = next++;
    seg.args.push_back(h);
    seg.argMetas.push_back({std::move(shape), dtype, 0, std::move(ps)});
    return h;
  }
  Handle node(std::string op, std::vector<Handle> inputs, Attrs attrs,
              Shape shape, wire::DType dtype, Placements ps,
              ScalarOperand scalar = {}) {
    Node n;
    n.op = std::move(op);
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.meta = {std::move(shape), dtype, 0, std::move(ps)};
    n.id = next++;
    n.scalar = std::move(scalar);
    seg.nodes.push_back(std::move(n));
    return seg.nodes.back().id;
  }
  Segment done(std::vector<Handle> results) {
    seg.results = std::move(results);
    return seg;
  }
  Mesh mesh;

private:
  Segment seg;
  Handle next = 1;
};

constexpr wire::DType F32 = wire::F32, I64 = wire::I64, B = wire::BOOL;

/// One segment using `op` (a dialect op of the registry), by its family.
std::optional<Segment> segmentFor(const OpInfo &op, SegmentMaker &m) {
  std::string name = op.name, family = op.family;
  Placements rowS = layout({S(0), R}), colS = layout({R, S(1)}),
             rep = layout({R, R});
  auto x = [&] { return m.arg({8, 6}, F32, rowS); };
  if (name == "full")
    return m.done(
        {m.node("full", {}, {{"value", floatA(0.1)}}, {8, 6}, F32, rowS)});
  if (name == "random")
    return m.done(
        {m.node("random", {},
                {{"seed", intA(1234)}, {"distribution", stringA("normal")}},
                {8, 6}, F32, colS)});
  if (name == "iota")
    return m.done({m.node(
        "iota", {},
        {{"dim", intA(0)}, {"start", floatA(1.5)}, {"step", floatA(-0.25)}},
        {8}, F32, layout({S(0), R}))});
  if (family == "binary")
    return m.done(
        {m.node(name, {x(), m.arg({8, 6}, F32, colS)}, {}, {8, 6}, F32, rowS)});
  if (family == "compare")
    return m.done(
        {m.node(name, {x(), m.arg({8, 6}, F32, colS)}, {}, {8, 6}, B, rowS)});
  if (family == "where")
    return m.done(
        {m.node(name, {m.arg({8, 6}, B, colS), x(), m.arg({8, 6}, F32, rep)},
                {}, {8, 6}, F32, rowS)});
  if (family == "unary")
    return m.done({m.node(name, {x()}, {}, {8, 6}, F32, colS)});
  if (family == "cast")
    return m.done(
        {m.node(name, {m.arg({8, 6}, I64, rowS)}, {}, {8, 6}, F32, rowS)});
  if (name == "matmul")
    return m.done({m.node(name, {x(), m.arg({6, 4}, F32, colS)}, {}, {8, 4},
                          F32, layout({S(0), S(1)}))});
  if (name == "bmm")
    return m.done(
        {m.node(name, {m.arg({2, 8, 6}, F32, rowS), m.arg({2, 6, 4}, F32, rep)},
                {}, {2, 8, 4}, F32, layout({S(0), R}))});
  if (family == "reduction")
    return m.done(
        {m.node(name, {x()}, {{"dims", intsA({1})}, {"keepdim", intA(1)}},
                {8, 1}, F32, rowS)});
  if (family == "argreduce")
    return m.done({m.node(name, {x()}, {{"dim", intA(1)}, {"keepdim", intA(0)}},
                          {8}, I64, rowS)});
  if (family == "topk")
    return m.done({m.node(
        name, {x()}, {{"dim", intA(1)}, {"k", intA(2)}, {"largest", intA(1)}},
        {8, 2}, I64, rowS)});
  if (name == "reshape")
    return m.done({m.node(name, {x()}, {}, {4, 12}, F32, rep)});
  if (name == "transpose")
    return m.done(
        {m.node(name, {x()}, {{"perm", intsA({1, 0})}}, {6, 8}, F32, colS)});
  if (name == "broadcast_to")
    return m.done(
        {m.node(name, {m.arg({6}, F32, rep)}, {}, {8, 6}, F32, rowS)});
  if (family == "slice")
    return m.done({m.node(name, {x()},
                          {{"offsets", intsA({0, 1})},
                           {"sizes", intsA({8, 2})},
                           {"strides", intsA({1, 2})}},
                          {8, 2}, F32, rowS)});
  if (family == "concat")
    return m.done({m.node(name, {x(), m.arg({8, 6}, F32, colS)},
                          {{"dim", intA(0)}}, {16, 6}, F32, colS)});
  if (name == "gather")
    return m.done({m.node(name, {x(), m.arg({8, 6}, I64, rowS)},
                          {{"dim", intA(1)}}, {8, 6}, F32, rowS)});
  if (name == "index_select")
    return m.done({m.node(name, {x(), m.arg({3}, I64, rep)}, {{"dim", intA(0)}},
                          {3, 6}, F32, colS)});
  if (name == "scatter_add")
    return m.done(
        {m.node(name, {x(), m.arg({8, 6}, I64, rowS), m.arg({8, 6}, F32, rowS)},
                {{"dim", intA(1)}}, {8, 6}, F32, rowS)});
  if (family == "triangle")
    return m.done(
        {m.node(name, {x()}, {{"diagonal", intA(-1)}}, {8, 6}, F32, colS)});
  if (name == "redistribute")
    return m.done({m.node(name, {x()}, {}, {8, 6}, F32, colS)});
  if (name == "transfer") // rows from mesh row 0 to row 1, and back
    return m.done({m.node(name, {x()},
                          {{"axis", intA(0)},
                           {"sources", intsA({0, 1})},
                           {"destinations", intsA({1, 0})}},
                          {8, 6}, F32, rowS)});
  if (name == "all_to_all_v") // counted rows among the 2 rows of the mesh
    return m.done({m.node(
        name,
        {m.arg({2, 8, 6}, F32, layout({S(0), S(2)})), m.arg({2, 4}, I64, rowS)},
        {{"axis", intA(0)}}, {2, 8, 6}, F32, layout({S(0), S(2)}))});
  if (name == "fused_adam") { // two parameters; results 1.. by result nodes
    Placements other = layout({R, S(0)});
    Handle step = m.arg({}, wire::F64, rep), lr = m.arg({}, wire::F64, rep);
    std::vector<Handle> inputs{step, lr};
    for (int k = 0; k < 4; ++k) {
      inputs.push_back(x());
      inputs.push_back(m.arg({5}, F32, other));
    }
    Attrs attrs{{"beta1", floatA(0.9)}, {"beta2", floatA(0.999)},
                {"eps", floatA(1e-8)},  {"weight_decay", floatA(0.01)},
                {"decoupled", intA(1)}, {"amsgrad", intA(0)},
                {"maximize", intA(0)}};
    Handle first = m.node(name, inputs, attrs, {8, 6}, F32, rowS);
    std::vector<Handle> results{first};
    for (int r = 1; r < 6; ++r)
      results.push_back(m.node(kResultOfNode, {first}, {{"index", intA(r)}},
                               r % 2 ? Shape{5} : Shape{8, 6}, F32,
                               r % 2 ? other : rowS));
    return m.done(results);
  }
  if (name == "fused_sgd") { // momentum after the first step: two
                             // parameters, their gradients and buffers
    Placements other = layout({R, S(0)});
    std::vector<Handle> inputs{m.arg({}, wire::F64, rep)};
    for (int k = 0; k < 3; ++k) {
      inputs.push_back(x());
      inputs.push_back(m.arg({5}, F32, other));
    }
    Attrs attrs{{"momentum", floatA(0.9)},   {"dampening", floatA(0.0)},
                {"weight_decay", floatA(0)}, {"nesterov", intA(1)},
                {"maximize", intA(0)},       {"first_step", intA(0)}};
    Handle first = m.node(name, inputs, attrs, {8, 6}, F32, rowS);
    std::vector<Handle> results{first};
    for (int r = 1; r < 4; ++r)
      results.push_back(m.node(kResultOfNode, {first}, {{"index", intA(r)}},
                               r % 2 ? Shape{5} : Shape{8, 6}, F32,
                               r % 2 ? other : rowS));
    return m.done(results);
  }
  if (name == "send") // to the ranks of another 2x2 mesh
    return m.done(
        {m.node(name, {x()}, {{"peers", intsA({4, 5, 6, 7})}, {"tag", intA(3)}},
                {8, 6}, F32, rowS)});
  if (name == "recv")
    return m.done(
        {m.node(name, {}, {{"peers", intsA({4, 5, 6, 7})}, {"tag", intA(3)}},
                {8, 6}, F32, colS)});
  return std::nullopt;
}

/// The ops a client never records: `constant` (data goes to the workers by
/// put) and the layout steps (only the compiler makes them).
bool clientNeverRecords(const OpInfo &op) {
  return std::string(op.name) == "constant" ||
         std::string(op.family) == "layout_step";
}

/// The program's bytes with its attribute maps in key order.
std::string deterministicBytes(const wire::Program &program) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    program.SerializeToCodedStream(&coded);
  }
  return bytes;
}

void expectSameCompile(const Segment &seg, const Mesh &mesh,
                       const std::string &what) {
  CompileOptions options;
  options.recordStages = true;
  options.explain = true;
  std::vector<int64_t> textSeeds, graphSeeds;
  std::string text = segmentText(seg, mesh, "segment", &textSeeds);
  CompileResult viaText = compileModule(text, "segment.mlir", options);
  CompileResult viaGraph =
      compileGraph(segmentGraph(seg, mesh, "segment", &graphSeeds), options);
  ASSERT_TRUE(viaText.ok) << what << ":\n" << viaText.error << "\n" << text;
  ASSERT_TRUE(viaGraph.ok) << what << ":\n" << viaGraph.error;
  EXPECT_EQ(textSeeds, graphSeeds) << what;
  ASSERT_EQ(viaText.stages.size(), 4u) << what;
  ASSERT_EQ(viaGraph.stages.size(), viaText.stages.size()) << what;
  for (size_t i = 0; i < viaText.stages.size(); ++i) {
    EXPECT_EQ(viaGraph.stages[i].first, viaText.stages[i].first) << what;
    EXPECT_EQ(viaGraph.stages[i].second, viaText.stages[i].second)
        << what << " differs at stage " << viaText.stages[i].first;
  }
  EXPECT_EQ(viaGraph.explanations.size(), viaText.explanations.size()) << what;
  ASSERT_EQ(viaGraph.functions.size(), 1u) << what;
  ASSERT_EQ(viaText.functions.size(), 1u) << what;
  const auto &a = viaText.functions[0].programs;
  const auto &b = viaGraph.functions[0].programs;
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t r = 0; r < a.size(); ++r)
    EXPECT_EQ(deterministicBytes(a[r]), deterministicBytes(b[r]))
        << what << ": the programs of rank " << r << " differ";
}

TEST(SegmentGraph, EveryOpBuildsWhatItsTextParsesTo) {
  std::set<std::string> covered;
  for (const OpInfo &op : opRegistry()) {
    if (!op.isDialectOp || clientNeverRecords(op))
      continue;
    SegmentMaker m;
    std::optional<Segment> seg = segmentFor(op, m);
    ASSERT_TRUE(seg) << "no test segment for dialect op '" << op.name
                     << "' (family " << op.family << "): add one";
    expectSameCompile(*seg, m.mesh, op.name);
    covered.insert(op.name);
  }
  EXPECT_GT(covered.size(), 40u);
}

TEST(SegmentGraph, ScalarOperandsSeedsAndChains) {
  SegmentMaker m;
  Handle x = m.arg({8, 6}, F32, layout({S(0), R}));
  ScalarOperand scalar;
  scalar.index = 1;
  scalar.value = 1e-8; // written 1.0e-08 in the text
  scalar.placements = layout({R, R});
  Handle a = m.node("mul", {x, 0}, {}, {8, 6}, F32, layout({S(0), R}), scalar);
  scalar.index = 0;
  scalar.value = std::numeric_limits<double>::infinity();
  Handle b =
      m.node("maximum", {0, a}, {}, {8, 6}, F32, layout({R, S(1)}), scalar);
  Handle r1 = m.node("random", {},
                     {{"seed", intA(77)}, {"distribution", stringA("uniform")}},
                     {8, 6}, F32, layout({S(0), R}));
  Handle r2 = m.node("random", {},
                     {{"seed", intA(78)}, {"distribution", stringA("normal")}},
                     {8, 6}, F32, layout({S(1), R}));
  Handle c = m.node("add", {r1, r2}, {}, {8, 6}, F32, layout({S(0), R}));
  Handle d = m.node("sum", {c}, {{"dims", intsA({0, 1})}, {"keepdim", intA(0)}},
                    {}, F32, layout({R, R}));
  Handle e = m.node("full", {}, {{"value", floatA(std::nan(""))}}, {8, 6}, F32,
                    layout({R, R}));
  Segment seg = m.done({b, d, e, b});
  expectSameCompile(seg, m.mesh, "scalars, seeds and a chain");

  // The seeds: slot numbers in both, the real ones handed back in order.
  std::vector<int64_t> seeds;
  SegmentGraph g = segmentGraph(seg, m.mesh, "segment", &seeds);
  EXPECT_EQ(seeds, (std::vector<int64_t>{77, 78}));
  // x is value 0; the scalar fulls are nodes of their own.
  EXPECT_EQ(g.args.size(), 1u);
  EXPECT_EQ(g.nodes.size(), 9u);
  EXPECT_EQ(g.nodes[0].op, "full");
  EXPECT_EQ(g.nodes[1].operands, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(g.results.front(), g.results.back());
}

// A scalar used again (same value, shape, dtype and placements) reads the
// one full made where it was first used, in the text and in the graph; a
// scalar that differs in any of these gets its own.
TEST(SegmentGraph, RepeatedScalarsShareOneFull) {
  SegmentMaker m;
  Handle x = m.arg({8, 6}, F32, layout({S(0), R}));
  auto scalar = [](double value, Placements ps) {
    ScalarOperand s;
    s.index = 1;
    s.value = value;
    s.placements = std::move(ps);
    return s;
  };
  Placements rowS = layout({S(0), R}), rep = layout({R, R});
  Handle y = x;
  for (int k = 0; k < 3; ++k) {
    y = m.node("mul", {y, 0}, {}, {8, 6}, F32, rowS, scalar(1.5, rep));
    y = m.node("add", {y, 0}, {}, {8, 6}, F32, rowS, scalar(0.25, rep));
  }
  y = m.node("add", {y, 0}, {}, {8, 6}, F32, rowS, scalar(0.25, rowS));
  y = m.node("add", {y, 0}, {}, {8, 6}, F32, rowS, scalar(-0.0, rep));
  y = m.node("add", {y, 0}, {}, {8, 6}, F32, rowS, scalar(0.0, rep));
  Segment seg = m.done({y});
  expectSameCompile(seg, m.mesh, "repeated scalars");

  SegmentGraph g = segmentGraph(seg, m.mesh, "segment");
  std::vector<std::string> ops;
  for (const GraphNode &n : g.nodes)
    ops.push_back(n.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"full", "mul", "full", "add", "mul",
                                           "add", "mul", "add", "full", "add",
                                           "full", "add", "full", "add"}));
  // Every mul reads the first full (value 1), every add of 0.25 on R the
  // second (value 3).
  EXPECT_EQ(g.nodes[4].operands, (std::vector<int32_t>{4, 1}));
  EXPECT_EQ(g.nodes[5].operands, (std::vector<int32_t>{5, 3}));
  EXPECT_EQ(g.nodes[7].operands, (std::vector<int32_t>{7, 3}));
  std::string text = segmentText(seg, m.mesh, "segment");
  size_t fulls = 0;
  for (size_t at = text.find("dtensor.full"); at != std::string::npos;
       at = text.find("dtensor.full", at + 1))
    ++fulls;
  EXPECT_EQ(fulls, 5u) << text;
}

TEST(SegmentGraph, MeshWithDeviceAndWithoutNames) {
  SegmentMaker m;
  m.mesh.dimNames.clear();
  m.mesh.device = "cuda";
  Handle x = m.arg({8, 6}, F32, layout({S(0), S(1)}));
  Handle y = m.node("relu", {x}, {}, {8, 6}, F32, layout({R, R}));
  expectSameCompile(m.done({y}), m.mesh, "cuda mesh");
}

// ---- invalid descriptions ------------------------------------------------

SegmentGraph validGraph() {
  SegmentGraph g;
  g.meshShape = {2, 2};
  g.meshDimNames = {"dp", "tp"};
  GraphTensorType t{{8, 6}, wire::F32, {Placement::shard(0), R}};
  g.args = {t, t};
  GraphNode add;
  add.op = "add";
  add.operands = {0, 1};
  add.type = t;
  g.nodes = {add};
  g.results = {2};
  return g;
}

void expectDiagnostic(const SegmentGraph &g, const std::string &needle) {
  CompileResult r = compileGraph(g);
  EXPECT_FALSE(r.ok) << "expected a diagnostic containing '" << needle << "'";
  EXPECT_NE(r.error.find(needle), std::string::npos) << "diagnostics were:\n"
                                                     << r.error;
}

TEST(SegmentGraph, ValidGraphCompiles) {
  CompileResult r = compileGraph(validGraph());
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.functions.size(), 1u);
  // An even split: one class program runs on all 4 positions.
  ASSERT_EQ(r.functions[0].programs.size(), 1u);
  for (int64_t pos = 0; pos < 4; ++pos)
    EXPECT_EQ(r.functions[0].programAt(pos), 0);
  EXPECT_TRUE(r.stages.empty()); // nothing recorded unless asked for
}

TEST(SegmentGraph, InvalidDescriptionsGiveDiagnostics) {
  SegmentGraph g = validGraph();
  g.nodes[0].op = "no_such_op";
  expectDiagnostic(g, "unknown op 'dtensor.no_such_op'");

  g = validGraph();
  g.nodes[0].operands = {0, 2}; // its own result
  expectDiagnostic(g, "operand names value 2");

  g = validGraph();
  g.nodes[0].operands = {-1, 0};
  expectDiagnostic(g, "operand names value -1");

  g = validGraph();
  g.nodes[0].operands = {0};
  expectDiagnostic(g, "segment.mlir:2:8: error: 'dtensor.add' op");

  g = validGraph();
  g.results = {3};
  expectDiagnostic(g, "result names value 3");

  g = validGraph();
  g.nodes[0].type.placements = {Placement::shard(5), R};
  expectDiagnostic(g, "segment.mlir:2:8: error:");

  g = validGraph();
  g.nodes[0].type.shape = {8, 5}; // operands and result disagree
  expectDiagnostic(g, "'dtensor.add' op");

  g = validGraph();
  g.args[0].dtype = wire::DTYPE_INVALID;
  expectDiagnostic(g, "unknown element type");

  g = validGraph();
  g.meshDimNames = {"dp"};
  expectDiagnostic(g, "mesh has 2 dims but 1 dim names");

  g = validGraph();
  g.meshShape = {};
  expectDiagnostic(g, "mesh must have at least one dim");

  // A required attribute missing, or of the wrong kind.
  g = validGraph();
  g.nodes[0].op = "sum";
  g.nodes[0].operands = {0};
  g.nodes[0].type.shape = {8};
  expectDiagnostic(g, "dims");
  g.nodes[0].attrs = {{"dims", GraphAttr::ofInt(1)}};
  expectDiagnostic(g, "dims");

  // A graph the pipeline rejects reports the pass' diagnostic.
  g = validGraph();
  g.nodes[0].op = "all_gather";
  g.nodes[0].operands = {0};
  g.nodes[0].attrs = {{"axis", GraphAttr::ofInt(7)}};
  CompileResult r = compileGraph(g);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
}

TEST(SegmentGraph, ProfileTimesEveryPhase) {
  CompileOptions options;
  options.profile = true;
  // Every stage verified (a release build verifies the last one unless
  // asked: StageVerification.h).
  CompileResult r;
  {
    testsupport::ScopedEnvironment verify("DTORCH_VERIFY_STAGES", "1");
    r = compileGraph(validGraph(), options);
  }
  ASSERT_TRUE(r.ok) << r.error;
  std::map<std::string, double> phases(r.timings.begin(), r.timings.end());
  for (const char *phase :
       {"context", "build", "dtensor-propagate-sharding", "dtensor-cse",
        "dtensor-lower-redistribute", "dtensor-lower-to-rank",
        "verify (sharded)", "verify (redistributed)", "verify (rank)", "emit"})
    EXPECT_TRUE(phases.count(phase)) << "no time for " << phase;
}

} // namespace
} // namespace dtorch::client
