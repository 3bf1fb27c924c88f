//===- SegmentGraph.h - a dtensor function as plain data ----------*- C++
//-*-===//
//
// The MLIR-free description of one function in the dtensor dialect: what the
// client records for a segment, handed to the compiler
// (dtorch::compileGraph in include/dtorch/Compiler.h), which builds the
// module from it directly (no text is printed or parsed). Building it prints
// exactly what parsing the segment's text (lib/Client/SegmentText.cpp)
// gives.
//
// Values are numbered: the arguments are values 0 .. args.size()-1, node k's
// result is value args.size() + k. A node names its operands by value
// number, so only earlier values can be used.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_SEGMENTGRAPH_H
#define DTORCH_SEGMENTGRAPH_H

#include "dtorch/Layout.h"
#include "dtorch_program.pb.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtorch {

/// A `!dtensor.tensor` on the graph's mesh.
struct GraphTensorType {
  std::vector<int64_t> shape;
  wire::DType dtype = wire::F32;
  Placements placements;
  bool operator==(const GraphTensorType &o) const {
    return shape == o.shape && dtype == o.dtype && placements == o.placements;
  }
};

/// One attribute of a node, as the op's inherent attribute:
/// Int -> i64 integer, Float -> f64 float, String -> string,
/// Ints -> array<i64: ...>, Unit -> unit attribute (present).
struct GraphAttr {
  enum class Kind { Int, Float, String, Ints, Unit } kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;

  static GraphAttr ofInt(int64_t v) {
    GraphAttr a;
    a.i = v;
    return a;
  }
  static GraphAttr ofFloat(double v) {
    GraphAttr a;
    a.kind = Kind::Float;
    a.f = v;
    return a;
  }
  static GraphAttr ofString(std::string v) {
    GraphAttr a;
    a.kind = Kind::String;
    a.s = std::move(v);
    return a;
  }
  static GraphAttr ofInts(std::vector<int64_t> v) {
    GraphAttr a;
    a.kind = Kind::Ints;
    a.ints = std::move(v);
    return a;
  }
  static GraphAttr unit() {
    GraphAttr a;
    a.kind = Kind::Unit;
    return a;
  }
};

/// The op name of a node that is not an op but another result of an op
/// with several results (dtensor.fused_adam): its one operand names the op's
/// node (whose own value is the op's result 0) and its Int attribute
/// `index` (>= 1) the result; its `type` is that result's type. The nodes
/// of an op's results 1, 2, ... follow the op's node at once, in order, and
/// give the op its result types. The segment's text writes the op as
/// `%k:R = ...`, its results as `%k#i`, and each such node as a comment
/// line, so node k stays at line k + 2.
inline constexpr const char *kResultOfNode = "#result";

/// One op: `dtensor.<op>` of the operands, with the attributes, giving one
/// result of `type` (or, followed by kResultOfNode nodes, several).
struct GraphNode {
  std::string op; // the dtensor op mnemonic: "add", "sum", "redistribute"
  std::vector<int32_t> operands; // value numbers
  std::vector<std::pair<std::string, GraphAttr>> attrs;
  GraphTensorType type;
};

struct SegmentGraph {
  std::string name = "segment";
  /// The mesh every value lives on.
  std::vector<int64_t> meshShape;
  std::vector<std::string> meshDimNames; // empty, or one per mesh dim
  std::string device = "cpu";
  /// The global rank of every mesh position (row-major), or empty. Set for
  /// a segment that moves values between meshes (send, recv): the function
  /// carries it as `dtensor.global_ranks`, and its class programs as
  /// `rank.global_ranks`, which --rank-match-p2p pairs messages by.
  std::vector<int64_t> globalRanks;
  std::vector<GraphTensorType> args;
  std::vector<GraphNode> nodes;
  std::vector<int32_t> results; // value numbers
  /// Names the source in diagnostics and locations: node k is at line k + 2
  /// of `sourceName`, at the column of its op name, where the segment's
  /// text has it.
  std::string sourceName = "segment.mlir";
};

} // namespace dtorch

#endif // DTORCH_SEGMENTGRAPH_H
