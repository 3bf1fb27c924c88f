#include "CudaParityCases.h"

#include "KernelTestSupport.h"
#include "dtorch/runtime/Shape.h"

#include <cmath>
#include <cstring>
#include <random>
#include <set>

namespace dtorch::rt::test {
namespace {

bool isFloatDtype(DType d) {
  return d == F32 || d == F64 || d == F16 || d == BF16;
}

// A tensor of `dtype` with uniform values in [low, high] (integers: whole
// numbers; bool: about half true).
Tensor randomTensor(DType dtype, const Shape &shape, double low, double high,
                    unsigned seed) {
  Tensor t = Tensor::empty(dtype, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(rng);
    switch (dtype) {
    case F32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case F64:
      t.data_as<double>()[i] = v;
      break;
    case F16:
      t.data_as<Half>()[i] = Half(static_cast<float>(v));
      break;
    case BF16:
      t.data_as<BFloat16>()[i] = BFloat16(static_cast<float>(v));
      break;
    case I32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(std::floor(v));
      break;
    case I64:
      t.data_as<int64_t>()[i] = static_cast<int64_t>(std::floor(v));
      break;
    default:
      t.data_as<bool>()[i] = v > (low + high) / 2;
      break;
    }
  }
  return t;
}

// Elementwise math in float32 differs from glibc in the last bits; 16-bit
// floats may round the other way once.
void mathTolerance(ParityCase &c, DType d) {
  if (d == F64) {
    c.rtol = 1e-13;
    c.atol = 1e-14;
  } else if (d == F32) {
    c.rtol = 2e-6;
    c.atol = 1e-6;
  } else if (d == F16) {
    c.rtol = 2e-3;
    c.atol = 1e-3;
  } else if (d == BF16) {
    c.rtol = 1.6e-2;
    c.atol = 1e-2;
  }
}

// Sums and GEMMs accumulate in another order.
void accumulateTolerance(ParityCase &c, DType d) {
  mathTolerance(c, d);
  if (d == F32) {
    c.rtol = 1e-5;
    c.atol = 1e-5;
  }
}

const std::set<std::string> kUnary = {
    "neg",  "abs",     "exp",  "log",  "sqrt", "rsqrt", "relu",
    "tanh", "sigmoid", "gelu", "silu", "sin",  "cos"};
const std::set<std::string> kBinary = {"add",     "sub",     "mul", "div",
                                       "maximum", "minimum", "pow"};
const std::set<std::string> kCompare = {"eq", "ne", "lt", "le", "gt", "ge"};
const DType kAllDtypes[] = {F32, F64, F16, BF16, I32, I64, BOOL};

std::string dims(const Shape &s) { return shapeToString(s); }

} // namespace

std::vector<ParityCase> parityCases(const std::string &op, DType d) {
  std::vector<ParityCase> cases;
  std::string tag = std::string(" ") + dtypeName(d);
  auto add = [&](ParityCase c) { cases.push_back(std::move(c)); };
  bool isFloat = isFloatDtype(d);

  if (kUnary.count(op)) {
    bool positive = op == "log" || op == "sqrt" || op == "rsqrt";
    ParityCase c{op + tag,
                 {randomTensor(d, {37, 19}, positive ? 0.05 : -4, 4, 11)},
                 {},
                 d,
                 {37, 19}};
    mathTolerance(c, d);
    add(std::move(c));
  } else if (kBinary.count(op)) {
    double lowA = -20, highA = 20, lowB = -20, highB = 20;
    if (op == "pow") {
      if (isFloat) {
        lowA = 0.2, highA = 3, lowB = -2, highB = 2;
      } else {
        lowA = -4, highA = 5, lowB = 0, highB = 6;
      }
    }
    Tensor b = randomTensor(d, {41, 13}, lowB, highB, 13);
    if (op == "div" && !isFloat) { // no zero divisor: 1..9 with signs
      Tensor m = randomTensor(d, {41, 13}, 1, 10, 17);
      for (int64_t i = 0; i < b.numel(); ++i) {
        if (d == I32)
          b.data_as<int32_t>()[i] = (i % 2 ? -1 : 1) * m.data_as<int32_t>()[i];
        else
          b.data_as<int64_t>()[i] = (i % 2 ? -1 : 1) * m.data_as<int64_t>()[i];
      }
    }
    ParityCase c{op + tag,
                 {randomTensor(d, {41, 13}, lowA, highA, 12), b},
                 {},
                 d,
                 {41, 13}};
    mathTolerance(c, d);
    add(std::move(c));
  } else if (kCompare.count(op)) {
    for (DType in : kAllDtypes) // few distinct values: ties happen
      add(ParityCase{op + " of " + dtypeName(in),
                     {randomTensor(in, {23, 11}, -3, 3, 21),
                      randomTensor(in, {23, 11}, -3, 3, 22)},
                     {},
                     BOOL,
                     {23, 11}});
  } else if (op == "where") {
    add(ParityCase{op + tag,
                   {randomTensor(BOOL, {17, 9}, 0, 1, 31),
                    randomTensor(d, {17, 9}, -9, 9, 32),
                    randomTensor(d, {17, 9}, -9, 9, 33)},
                   {},
                   d,
                   {17, 9}});
  } else if (op == "cast") {
    for (DType in : kAllDtypes)
      add(ParityCase{std::string("cast ") + dtypeName(in) + " ->" + tag,
                     {randomTensor(in, {29, 7}, -300, 300, 41)},
                     {},
                     d,
                     {29, 7}});
  } else if (op == "full") {
    double value = d == BOOL ? 1 : (isFloat ? 2.718281828459045 : -77);
    add(ParityCase{op + tag,
                   {},
                   [value](Instruction &i) { setFloat(i, "value", value); },
                   d,
                   {13, 5}});
  } else if (op == "random") {
    for (const char *dist : {"uniform", "normal"})
      add(ParityCase{std::string("random ") + dist + tag,
                     {},
                     [dist](Instruction &i) {
                       setInt(i, "seed", 20261202);
                       setString(i, "dist", dist);
                       setInts(i, "global_shape", {8, 50, 3});
                       setInts(i, "offset", {2, 10, 0});
                     },
                     d,
                     {5, 30, 3}});
  } else if (op == "constant") {
    Tensor global = randomTensor(d, {6, 7}, -50, 50, 51);
    std::string bytes(static_cast<const char *>(global.data()),
                      global.nbytes());
    add(ParityCase{op + tag,
                   {},
                   [bytes](Instruction &i) {
                     setData(i, "data", bytes.data(), bytes.size());
                     setInts(i, "global_shape", {6, 7});
                     setInts(i, "offset", {1, 2});
                   },
                   d,
                   {4, 3}});
  } else if (op == "iota") {
    add(ParityCase{op + tag,
                   {},
                   [](Instruction &i) {
                     setInt(i, "dim", 1);
                     setInts(i, "offset", {0, 5});
                     setFloat(i, "start", 3);
                     setFloat(i, "step", 2);
                   },
                   d,
                   {4, 9}});
  } else if (op == "sum" || op == "max" || op == "min") {
    struct R {
      Shape shape, dims;
      bool keepdim;
      Shape out;
    };
    // Collapsible, not collapsible (kept dims between reduced ones), all
    // dims, and one long row (a block per output).
    for (const R &r :
         {R{{6, 5, 7}, {2}, false, {6, 5}},
          R{{6, 5, 7}, {0, 2}, true, {1, 5, 1}}, R{{6, 5, 7}, {}, false, {}},
          R{{3, 5000}, {1}, false, {3}}}) {
      double high = d == BOOL ? 1 : (isFloat ? 3 : 1000);
      ParityCase c{op + tag + " dims " + dims(r.dims) + " of " + dims(r.shape),
                   {randomTensor(d, r.shape, d == BOOL ? 0 : -high, high, 61)},
                   [r, op, isFloat](Instruction &i) {
                     setInts(i, "dims", r.dims);
                     setInt(i, "keepdim", r.keepdim ? 1 : 0);
                     if (op == "sum" && isFloat)
                       setFloat(i, "scale", 0.25);
                   },
                   d,
                   r.out};
      if (op == "sum")
        accumulateTolerance(c, d);
      add(std::move(c));
    }
  } else if (op == "argmax" || op == "argmin") {
    for (DType in : {F32, BF16, I32, I64})
      add(ParityCase{op + " of " + dtypeName(in),
                     {randomTensor(in, {6, 9, 4}, -5, 5, 71)},
                     [](Instruction &i) { setInt(i, "dim", 1); },
                     I64,
                     {6, 4}});
  } else if (op == "matmul" || op == "bmm") {
    bool batched = op == "bmm";
    for (int flags = 0; flags < 4; ++flags) {
      bool ta = flags & 1, tb = flags & 2;
      int64_t m = 33, k = 17, n = 29;
      Shape a = ta ? Shape{k, m} : Shape{m, k};
      Shape b = tb ? Shape{n, k} : Shape{k, n};
      Shape out{m, n};
      if (batched) {
        a.insert(a.begin(), 3);
        b.insert(b.begin(), 3);
        out.insert(out.begin(), 3);
      }
      double high = isFloat ? 2 : 50;
      ParityCase c{op + tag + (ta ? " trans_a" : "") + (tb ? " trans_b" : ""),
                   {randomTensor(d, a, -high, high, 81),
                    randomTensor(d, b, -high, high, 82)},
                   [ta, tb](Instruction &i) {
                     setInt(i, "trans_a", ta);
                     setInt(i, "trans_b", tb);
                   },
                   d,
                   out};
      accumulateTolerance(c, d);
      add(std::move(c));
    }
  } else if (op == "reshape") {
    add(ParityCase{
        op + tag, {randomTensor(d, {4, 6}, -9, 9, 91)}, {}, d, {3, 8}});
  } else if (op == "copy") {
    add(ParityCase{
        op + tag, {randomTensor(d, {4, 6}, -9, 9, 92)}, {}, d, {4, 6}});
  } else if (op == "lead_or_zero") {
    for (int coord : {0, 1})
      add(ParityCase{op + tag + " coord " + std::to_string(coord),
                     {randomTensor(d, {4, 6}, -9, 9, 93)},
                     [coord](Instruction &i) { setInt(i, "coord", coord); },
                     d,
                     {4, 6}});
  } else if (op == "transpose") {
    add(ParityCase{op + tag,
                   {randomTensor(d, {3, 4, 5}, -9, 9, 94)},
                   [](Instruction &i) { setInts(i, "perm", {2, 0, -2}); },
                   d,
                   {5, 3, 4}});
  } else if (op == "slice") {
    add(ParityCase{op + tag,
                   {randomTensor(d, {4, 6, 2}, -9, 9, 95)},
                   [](Instruction &i) {
                     setInt(i, "dim", 1);
                     setInt(i, "start", 2);
                   },
                   d,
                   {4, 3, 2}});
  } else if (op == "broadcast_to") {
    add(ParityCase{
        op + tag, {randomTensor(d, {1, 5}, -9, 9, 96)}, {}, d, {3, 4, 5}});
  } else if (op == "bucket_pack") {
    add(ParityCase{
        op + tag,
        {randomTensor(d, {3}, -9, 9, 97), randomTensor(d, {2, 2}, -9, 9, 98)},
        {},
        d,
        {7}});
  } else if (op == "bucket_unpack") {
    add(ParityCase{op + tag,
                   {randomTensor(d, {9}, -9, 9, 99)},
                   [](Instruction &i) { setInt(i, "offset", 2); },
                   d,
                   {2, 3}});
  } else if (op == "extract_slice") {
    add(ParityCase{op + tag,
                   {randomTensor(d, {6, 8}, -9, 9, 100)},
                   [](Instruction &i) {
                     setInts(i, "offsets", {1, 2});
                     setInts(i, "sizes", {2, 3});
                     setInts(i, "strides", {2, 2});
                   },
                   d,
                   {2, 3}});
  } else if (op == "index_select") {
    // Indices of a shard held from offset 4; masked: others give zeros.
    for (int masked : {0, 1}) {
      std::vector<int64_t> picks = masked
                                       ? std::vector<int64_t>{4, 9, 2, 6, 4, 12}
                                       : std::vector<int64_t>{4, 8, 5, 4, 7};
      add(ParityCase{op + tag + (masked ? " masked" : ""),
                     {randomTensor(d, {3, 5, 2}, -9, 9, 105),
                      makeTensor<int64_t>(I64, {int64_t(picks.size())}, picks)},
                     [masked](Instruction &i) {
                       setInt(i, "dim", 1);
                       setInt(i, "offset", 4);
                       setInt(i, "masked", masked);
                     },
                     d,
                     {3, int64_t(picks.size()), 2}});
    }
  } else if (op == "gather") {
    Tensor index = randomTensor(I64, {4, 3}, 0, 6.99, 106);
    add(ParityCase{op + tag,
                   {randomTensor(d, {5, 7}, -9, 9, 107), index},
                   [](Instruction &i) { setInt(i, "dim", 1); },
                   d,
                   {4, 3}});
  } else if (op == "topk_indices") {
    // Few distinct values (ties keep index order) and a NaN in float rows.
    for (DType in : {F32, BF16, I32, I64})
      for (int largest : {1, 0}) {
        Tensor x = randomTensor(in, {3, 9, 2}, -4, 4, 111);
        if (in == F32)
          x.data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
        add(ParityCase{op + " of " + dtypeName(in) +
                           (largest ? " largest" : " smallest"),
                       {x},
                       [largest](Instruction &i) {
                         setInt(i, "dim", 1);
                         setInt(i, "k", 4);
                         setInt(i, "largest", largest);
                       },
                       I64,
                       {3, 4, 2}});
      }
  } else if (op == "scatter_add") {
    // Repeated targets along dim 0 (ties add in index order); an index
    // smaller than src in dim 1.
    add(ParityCase{op + tag,
                   {randomTensor(d, {4, 6}, -9, 9, 108),
                    randomTensor(I64, {7, 5}, 0, 3.99, 109),
                    randomTensor(d, {8, 5}, -9, 9, 110)},
                   [](Instruction &i) { setInt(i, "dim", 0); },
                   d,
                   {4, 6}});
  } else if (op == "tril" || op == "triu") {
    // A piece of a larger matrix (offsets) and a diagonal off the middle.
    for (int64_t diagonal : {-1, 0, 2})
      add(ParityCase{op + tag + " diagonal " + std::to_string(diagonal),
                     {randomTensor(d, {2, 5, 7}, -9, 9, 104)},
                     [diagonal](Instruction &i) {
                       setInt(i, "diagonal", diagonal);
                       setInt(i, "row_offset", 3);
                       setInt(i, "col_offset", 1);
                     },
                     d,
                     {2, 5, 7}});
  } else if (op == "concat") {
    add(ParityCase{op + tag,
                   {randomTensor(d, {3, 2}, -9, 9, 101),
                    randomTensor(d, {3, 4}, -9, 9, 102),
                    randomTensor(d, {3, 1}, -9, 9, 103)},
                   [](Instruction &i) { setInt(i, "dim", 1); },
                   d,
                   {3, 7}});
  }
  return cases;
}

} // namespace dtorch::rt::test
