// Reference results of the collectives, computed element by element in the
// test (independently of the runtime's reduction and copy code), and one
// workload that runs every collective on one dtype with uneven pieces and
// checks each result against the reference. The fake, shared-memory and Gloo
// tests all run it, and compare the backends' results bit for bit.
#pragma once

#include "TestSupport.h"

#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Shape.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>

namespace dtorch::rt::test {

inline const std::vector<DType> &everyDtype() {
  static const std::vector<DType> dtypes = {
      ::dtorch::wire::F32,  ::dtorch::wire::F64, ::dtorch::wire::F16,
      ::dtorch::wire::BF16, ::dtorch::wire::I32, ::dtorch::wire::I64,
      ::dtorch::wire::BOOL};
  return dtypes;
}

inline bool isFloatingDtype(DType dtype) {
  return dtype == ::dtorch::wire::F32 || dtype == ::dtorch::wire::F64 ||
         dtype == ::dtorch::wire::F16 || dtype == ::dtorch::wire::BF16;
}

// The reductions a dtype supports: avg only for floating dtypes.
inline std::vector<ReduceOp> reductionsOf(DType dtype) {
  if (isFloatingDtype(dtype))
    return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  return {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
}

// Calls fn(T{}) with the element storage type of `dtype` (bool: uint8_t).
template <class Fn> void visitDtype(DType dtype, Fn &&fn) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return fn(float{});
  case ::dtorch::wire::F64:
    return fn(double{});
  case ::dtorch::wire::F16:
    return fn(Half{});
  case ::dtorch::wire::BF16:
    return fn(BFloat16{});
  case ::dtorch::wire::I32:
    return fn(int32_t{});
  case ::dtorch::wire::I64:
    return fn(int64_t{});
  case ::dtorch::wire::BOOL:
    return fn(uint8_t{});
  default:
    FAIL() << "no storage type for dtype " << dtype;
  }
}

template <class T>
constexpr bool kIs16Bit =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Value of an element as a double, for messages and comparisons.
template <class T> double asDouble(T value) {
  if constexpr (kIs16Bit<T>)
    return static_cast<float>(value);
  else
    return static_cast<double>(value);
}

// Deterministic sample values. Floats are finite and of mixed magnitude (16-bit
// sums round); integers reach near the type's limits now and then (sums
// wrap); bools are true about one time in three.
inline Tensor sampleTensor(DType dtype, const Shape &shape, unsigned seed) {
  Tensor t = Tensor::empty(dtype, shape);
  std::mt19937 gen(seed * 2654435761u + 12345u);
  visitDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T *data = static_cast<T *>(t.data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, uint8_t>) {
        data[i] = gen() % 3 == 0;
      } else if constexpr (std::is_integral_v<T>) {
        T big = std::numeric_limits<T>::max() - static_cast<T>(gen() % 50);
        T small = static_cast<T>(static_cast<int64_t>(gen() % 200) - 100);
        data[i] = gen() % 8 == 0 ? (gen() % 2 ? big : T(-big)) : small;
      } else {
        float value = std::uniform_real_distribution<float>(-4, 4)(gen);
        if (gen() % 4 == 0)
          value *= 1000;
        if constexpr (std::is_same_v<T, double>)
          data[i] = static_cast<double>(value) / 3.0;
        else
          data[i] = T(value);
      }
    }
  });
  return t;
}

// One element of the reference reduction: values in group order, combined
// left to right; 16-bit floats in float32, rounded once at the end.
template <class T>
T referenceCombine(const std::vector<T> &values, ReduceOp op, bool isBool) {
  size_t n = values.size();
  if (isBool) {
    bool any = false, all = true;
    for (T v : values) {
      any = any || v != 0;
      all = all && v != 0;
    }
    return static_cast<T>(op == ReduceOp::Min ? all : any);
  }
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    T acc = values[0];
    for (size_t k = 1; k < n; ++k) {
      if (op == ReduceOp::Sum)
        acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(values[k]));
      else if (op == ReduceOp::Max)
        acc = std::max(acc, values[k]);
      else if (op == ReduceOp::Min)
        acc = std::min(acc, values[k]);
      else
        ADD_FAILURE() << "no reference for integer avg";
    }
    return acc;
  } else {
    using Acc = std::conditional_t<kIs16Bit<T>, float, T>;
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) {
      Acc acc = static_cast<Acc>(values[0]);
      for (size_t k = 1; k < n; ++k)
        acc = acc + static_cast<Acc>(values[k]);
      if (op == ReduceOp::Avg)
        acc = acc / static_cast<Acc>(n);
      return T(acc);
    }
    // max/min: NaN wins (the last one); otherwise the first extreme value.
    int best = 0;
    for (size_t k = 0; k < n; ++k)
      if (std::isnan(static_cast<Acc>(values[k])))
        best = static_cast<int>(k);
    if (std::isnan(static_cast<Acc>(values[best])))
      return values[best];
    for (size_t k = 1; k < n; ++k) {
      Acc candidate = static_cast<Acc>(values[k]),
          current = static_cast<Acc>(values[best]);
      if (op == ReduceOp::Max ? current < candidate : candidate < current)
        best = static_cast<int>(k);
    }
    return values[best];
  }
}

// Element-wise reduction of same-shaped tensors given in group order.
inline Tensor referenceReduce(const std::vector<Tensor> &inputs, ReduceOp op) {
  const Tensor &first = inputs.at(0);
  Tensor out = Tensor::empty(first.dtype(), first.shape());
  bool isBool = first.dtype() == ::dtorch::wire::BOOL;
  visitDtype(first.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> values(inputs.size());
    for (int64_t i = 0; i < out.numel(); ++i) {
      for (size_t k = 0; k < inputs.size(); ++k)
        values[k] = static_cast<const T *>(inputs[k].data())[i];
      static_cast<T *>(out.data())[i] = referenceCombine(values, op, isBool);
    }
  });
  return out;
}

// Elements before `dim`, and elements of one unit of `dim`.
inline int64_t elementsBefore(const Shape &shape, int64_t dim) {
  int64_t count = 1;
  for (int64_t d = 0; d < dim; ++d)
    count *= shape[d];
  return count;
}
inline int64_t elementsAfter(const Shape &shape, int64_t dim) {
  int64_t count = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    count *= shape[d];
  return count;
}

// t[..., start : start + extent, ...] along `dim`.
inline Tensor sliceAlong(const Tensor &t, int64_t dim, int64_t start,
                         int64_t extent) {
  Shape shape = t.shape();
  shape[dim] = extent;
  Tensor out = Tensor::empty(t.dtype(), shape);
  size_t unit = elementsAfter(t.shape(), dim) * dtypeSize(t.dtype());
  const char *source = static_cast<const char *>(t.data());
  char *target = static_cast<char *>(out.data());
  for (int64_t o = 0; o < elementsBefore(t.shape(), dim); ++o)
    for (int64_t k = 0; k < extent; ++k)
      std::memcpy(target + (o * extent + k) * unit,
                  source + (o * t.shape()[dim] + start + k) * unit, unit);
  return out;
}

// Concatenation along `dim` of pieces equal in every other extent.
inline Tensor concatAlong(const std::vector<Tensor> &pieces, int64_t dim) {
  Shape shape = pieces.at(0).shape();
  shape[dim] = 0;
  for (const Tensor &piece : pieces)
    shape[dim] += piece.shape()[dim];
  Tensor out = Tensor::empty(pieces[0].dtype(), shape);
  size_t unit = elementsAfter(shape, dim) * dtypeSize(out.dtype());
  char *target = static_cast<char *>(out.data());
  int64_t at = 0;
  for (const Tensor &piece : pieces) {
    const char *source = static_cast<const char *>(piece.data());
    int64_t extent = piece.shape()[dim];
    for (int64_t o = 0; o < elementsBefore(shape, dim); ++o)
      for (int64_t k = 0; k < extent; ++k)
        std::memcpy(target + (o * shape[dim] + at + k) * unit,
                    source + (o * extent + k) * unit, unit);
    at += extent;
  }
  return out;
}

inline bool sameBits(const Tensor &a, const Tensor &b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

// "f16[3] {1, 2.5, -3}" (at most 8 values), for failure messages.
inline std::string describeValues(const Tensor &t) {
  std::ostringstream text;
  text << t.describe() << " {";
  visitDtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 8); ++i)
      text << (i ? ", " : "") << asDouble(static_cast<const T *>(t.data())[i]);
  });
  text << (t.numel() > 8 ? ", ...}" : "}");
  return text.str();
}

inline void expectSameBits(const Tensor &actual, const Tensor &expected,
                           const std::string &what) {
  EXPECT_TRUE(sameBits(actual, expected))
      << what << ": got " << describeValues(actual) << ", expected "
      << describeValues(expected);
}

// Runs every collective of `dtype` on ranks 0-3 (every rank calls it with its
// own communicator), with uneven and empty pieces and groups not in rank
// order; checks each result against the reference computed from every rank's
// inputs (regenerated from their seeds) and returns the results in a fixed
// order, for comparisons between backends.
inline std::vector<Tensor> runEveryCollective(Communicator &comm, int rank,
                                              DType dtype) {
  const std::string name = dtypeName(dtype);
  std::vector<Tensor> results;
  auto seed = [&](int r, unsigned salt) {
    return static_cast<unsigned>(1000 * salt + 10 * r + dtype);
  };
  // all_reduce over a group not in rank order; 9000 elements cross the
  // backends' 32 KiB blocks for every dtype.
  const Group shuffled = {2, 0, 3, 1};
  for (ReduceOp op : reductionsOf(dtype))
    for (int64_t n : {0, 7, 9000}) {
      unsigned salt = 1 + static_cast<unsigned>(op) * 10 + (n % 10);
      Tensor x = sampleTensor(dtype, {n}, seed(rank, salt));
      Tensor out = Tensor::empty(dtype, {n});
      comm.all_reduce(x, out, shuffled, op);
      std::vector<Tensor> inputs;
      for (int64_t member : shuffled)
        inputs.push_back(sampleTensor(dtype, {n}, seed(member, salt)));
      expectSameBits(out, referenceReduce(inputs, op),
                     name + " all_reduce " + reduceOpName(op) + " of " +
                         std::to_string(n) + " on rank " +
                         std::to_string(rank));
      results.push_back(out);
    }
  if (!isFloatingDtype(dtype)) {
    Tensor x = sampleTensor(dtype, {3}, 7), out = Tensor::empty(dtype, {3});
    expectRuntimeError(
        [&] { comm.all_reduce(x, out, shuffled, ReduceOp::Avg); },
        {"avg", "not defined", name});
  }
  // all_reduce on a sub-group of two.
  if (rank == 1 || rank == 3) {
    Tensor x = sampleTensor(dtype, {2, 3}, seed(rank, 90));
    Tensor out = Tensor::empty(dtype, {2, 3});
    comm.all_reduce(x, out, {3, 1}, ReduceOp::Sum);
    expectSameBits(out,
                   referenceReduce({sampleTensor(dtype, {2, 3}, seed(3, 90)),
                                    sampleTensor(dtype, {2, 3}, seed(1, 90))},
                                   ReduceOp::Sum),
                   name + " all_reduce on {3, 1}");
    results.push_back(out);
  }
  // reduce_scatter and all_gather along dim 0 and dim 1, uneven with an
  // empty piece; member j of the group (not in rank order) owns sizes[j].
  const Group group = {1, 3, 0, 2};
  const std::vector<int64_t> sizes = {2, 0, 1, 3};
  const std::vector<int64_t> offsets = {0, 2, 2, 3};
  size_t me = groupIndexOf(group, rank);
  for (int64_t dim : {0, 1}) {
    Shape whole = {5, 5};
    whole[dim] = 6;
    Shape piece = whole;
    piece[dim] = sizes[me];
    for (ReduceOp op : reductionsOf(dtype)) {
      unsigned salt =
          100 + 10 * static_cast<unsigned>(dim) + static_cast<unsigned>(op);
      Tensor x = sampleTensor(dtype, whole, seed(rank, salt));
      Tensor out = Tensor::empty(dtype, piece);
      comm.reduce_scatter(x, out, group, op, dim, sizes);
      std::vector<Tensor> inputs;
      for (int64_t member : group)
        inputs.push_back(sampleTensor(dtype, whole, seed(member, salt)));
      expectSameBits(
          out,
          sliceAlong(referenceReduce(inputs, op), dim, offsets[me], sizes[me]),
          name + " reduce_scatter " + reduceOpName(op) + " along dim " +
              std::to_string(dim) + " on rank " + std::to_string(rank));
      results.push_back(out);
    }
    unsigned salt = 200 + static_cast<unsigned>(dim);
    Tensor mine = sampleTensor(dtype, piece, seed(rank, salt));
    Tensor gathered = Tensor::empty(dtype, whole);
    comm.all_gather(mine, gathered, group, dim, sizes);
    std::vector<Tensor> pieces;
    for (size_t j = 0; j < group.size(); ++j) {
      Shape shape = whole;
      shape[dim] = sizes[j];
      pieces.push_back(sampleTensor(dtype, shape, seed(group[j], salt)));
    }
    expectSameBits(gathered, concatAlong(pieces, dim),
                   name + " all_gather along dim " + std::to_string(dim) +
                       " on rank " + std::to_string(rank));
    results.push_back(gathered);
  }
  // all_to_all from dim 0 to dim 1: member j's x is [4, concat[j]], cut into
  // rows split (the same for everyone); member i receives rows
  // [splitOffsets[i], +split[i]) of everyone, side by side.
  {
    const Group world = {0, 1, 2, 3};
    const std::vector<int64_t> split = {1, 0, 2, 1},
                               splitOffsets = {0, 1, 1, 3};
    const std::vector<int64_t> concat = {2, 1, 0, 3};
    Tensor x = sampleTensor(dtype, {4, concat[rank]}, seed(rank, 300));
    Tensor out = Tensor::empty(dtype, {split[rank], 6});
    comm.all_to_all(x, out, world, 0, split, 1, concat);
    std::vector<Tensor> pieces;
    for (int64_t j : world)
      pieces.push_back(
          sliceAlong(sampleTensor(dtype, {4, concat[j]}, seed(j, 300)), 0,
                     splitOffsets[rank], split[rank]));
    expectSameBits(out, concatAlong(pieces, 1),
                   name + " all_to_all dim 0 -> 1 on rank " +
                       std::to_string(rank));
    results.push_back(out);
  }
  // all_to_all along dim 1 on both sides with sizes that differ per sender:
  // member j sends (i + j) % 3 columns to member i.
  {
    const Group world = {0, 1, 2, 3};
    auto splitOf = [](int64_t j) {
      std::vector<int64_t> split;
      for (int64_t i = 0; i < 4; ++i)
        split.push_back((i + j) % 3);
      return split;
    };
    auto total = [](const std::vector<int64_t> &v) {
      int64_t s = 0;
      for (int64_t e : v)
        s += e;
      return s;
    };
    std::vector<int64_t> split = splitOf(rank), concat;
    for (int64_t j : world)
      concat.push_back(splitOf(j)[rank]);
    Tensor x = sampleTensor(dtype, {2, total(split)}, seed(rank, 310));
    Tensor out = Tensor::empty(dtype, {2, total(concat)});
    comm.all_to_all(x, out, world, 1, split, 1, concat);
    std::vector<Tensor> pieces;
    for (int64_t j : world) {
      std::vector<int64_t> theirs = splitOf(j);
      int64_t start = 0;
      for (int64_t i = 0; i < rank; ++i)
        start += theirs[i];
      pieces.push_back(
          sliceAlong(sampleTensor(dtype, {2, total(theirs)}, seed(j, 310)), 1,
                     start, theirs[rank]));
    }
    expectSameBits(out, concatAlong(pieces, 1),
                   name + " all_to_all along dim 1 on rank " +
                       std::to_string(rank));
    results.push_back(out);
  }
  // broadcast from rank 2 on {1, 2, 3}; point to point 1 -> 2 and 2 -> 1.
  if (rank != 0) {
    Tensor x = rank == 2 ? sampleTensor(dtype, {3, 2}, seed(2, 400)) : Tensor();
    Tensor out = Tensor::empty(dtype, {3, 2});
    comm.broadcast(x, out, {1, 2, 3}, 2);
    expectSameBits(out, sampleTensor(dtype, {3, 2}, seed(2, 400)),
                   name + " broadcast on rank " + std::to_string(rank));
    results.push_back(out);
  }
  if (rank == 1 || rank == 2) {
    int peer = 3 - rank;
    comm.send(sampleTensor(dtype, {5}, seed(rank, 500)), peer, 11);
    Tensor got = Tensor::empty(dtype, {5});
    comm.recv(got, peer, 11);
    expectSameBits(got, sampleTensor(dtype, {5}, seed(peer, 500)),
                   name + " recv on rank " + std::to_string(rank));
    results.push_back(got);
  }
  return results;
}

} // namespace dtorch::rt::test
