// The element-wise arithmetic of the reducing collectives (all_reduce,
// reduce_scatter), shared by every backend so that they give the same bits.
//
// Order of operations: for every element, the pieces are combined left to
// right in the order the caller passes them (group order in every backend):
//   acc = p[0]; acc = acc (op) p[1]; ...; acc = acc (op) p[n-1];
// and avg then divides once: acc = acc / n. The per-element order does not
// depend on how a backend cuts the work into chunks or blocks, so the fake,
// shared-memory and Gloo backends agree bit for bit.
//
// Accumulation types:
//  * f32, f64: in the dtype itself (IEEE, as before).
//  * f16, bf16: sum and avg accumulate in float32 in the order above and
//    round to 16 bits once, at the end (nearest even, Half.h). max and min
//    compare the values as floats and copy the winner's 16 bits unchanged.
//  * i32, i64: sum wraps around (two's complement); max and min as usual.
//    avg is rejected: the average of integers is not defined (torch has no
//    integer average either; its floor or truncation would silently differ
//    from a float average). Cast to a floating dtype first.
//  * bool: sum and max are logical or, min is logical and; avg is rejected.
//    Results are canonical 0/1 bytes.
//  * NaN: sum/avg propagate NaN by IEEE arithmetic; max and min return NaN
//    when any member has NaN (the last NaN in group order).
#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Half.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace dtorch::rt {

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Avg:
    return "avg";
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Min:
    return "min";
  }
  return "?";
}

ReduceOp parseReduceOp(const std::string &name) {
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    if (name == reduceOpName(op))
      return op;
  throw RuntimeError("unknown reduction '" + name +
                     "' (expected sum, avg, max or min)");
}

void checkReducible(DType dtype, ReduceOp op) {
  switch (dtype) {
  case ::dtorch::wire::F32:
  case ::dtorch::wire::F64:
  case ::dtorch::wire::F16:
  case ::dtorch::wire::BF16:
    return;
  case ::dtorch::wire::I32:
  case ::dtorch::wire::I64:
  case ::dtorch::wire::BOOL:
    if (op != ReduceOp::Avg)
      return;
    throw RuntimeError(std::string("reduction 'avg' is not defined for ") +
                       dtypeName(dtype) +
                       " (the average of integer or bool values is not "
                       "defined; cast to a floating dtype first)");
  default:
    break;
  }
  throw RuntimeError(std::string("reduction '") + reduceOpName(op) +
                     "' is not supported for dtype " +
                     std::to_string(static_cast<int>(dtype)));
}

namespace {

// Elements of one block: the accumulator of a block stays in cache while
// every piece streams through it once.
constexpr int64_t kBlockBytes = 32 << 10;

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class T> bool isNan(T value) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(value);
  else if constexpr (std::is_same_v<T, Half>)
    return (value.bits & 0x7fffu) > 0x7c00u;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return (value.bits & 0x7fffu) > 0x7f80u;
  else
    return false;
}

// a < b on values (16-bit floats compared as floats).
template <class T> bool less(T a, T b) {
  if constexpr (kIsHalf<T>)
    return static_cast<float>(a) < static_cast<float>(b);
  else
    return a < b;
}

// acc[i] = acc[i] (op) x[i], in the storage type. Bool is stored as uint8_t.
// Not used for sum/avg of 16-bit floats (see sumHalf).
template <class T, bool kBool>
void combineInto(T *acc, const T *x, int64_t count, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    if constexpr (std::is_floating_point_v<T>) {
      for (int64_t i = 0; i < count; ++i)
        acc[i] += x[i];
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      if constexpr (kBool) {
        for (int64_t i = 0; i < count; ++i)
          acc[i] = static_cast<T>((acc[i] | x[i]) != 0);
      } else {
        for (int64_t i = 0; i < count; ++i) // wraps around
          acc[i] =
              static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(x[i]));
      }
    }
    return;
  case ReduceOp::Max:
    if constexpr (kBool) {
      for (int64_t i = 0; i < count; ++i)
        acc[i] = static_cast<T>((acc[i] | x[i]) != 0);
      return;
    }
    for (int64_t i = 0; i < count; ++i) {
      if (isNan(x[i]))
        acc[i] = x[i];
      else if (!isNan(acc[i]) && less(acc[i], x[i]))
        acc[i] = x[i];
    }
    return;
  case ReduceOp::Min:
    if constexpr (kBool) {
      for (int64_t i = 0; i < count; ++i)
        acc[i] = static_cast<T>((acc[i] != 0) & (x[i] != 0));
      return;
    }
    for (int64_t i = 0; i < count; ++i) {
      if (isNan(x[i]))
        acc[i] = x[i];
      else if (!isNan(acc[i]) && less(x[i], acc[i]))
        acc[i] = x[i];
    }
    return;
  }
}

template <class T> void divideBy(T *acc, int64_t count, int64_t members) {
  if constexpr (std::is_floating_point_v<T>) {
    T divisor = static_cast<T>(members);
    for (int64_t i = 0; i < count; ++i)
      acc[i] /= divisor;
  }
}

bool overlaps(const void *a, const void *b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return bytes && x < y + bytes && y < x + bytes;
}

// Reduction in the storage type, block by block. `out` may be one of the
// pieces (the same memory, not a partial overlap).
template <class T, bool kBool = false>
void reduceInStorageType(T *out, const std::vector<const void *> &pieces,
                         int64_t count, ReduceOp op) {
  size_t n = pieces.size();
  bool aliased = false; // out is a later piece: accumulate aside
  for (size_t j = 1; j < n; ++j)
    aliased = aliased || overlaps(out, pieces[j], count * sizeof(T));
  constexpr int64_t block = std::max<int64_t>(1, kBlockBytes / sizeof(T));
  std::vector<T> scratch;
  if (aliased)
    scratch.resize(static_cast<size_t>(std::min(block, count)));
  for (int64_t at = 0; at < count; at += block) {
    int64_t len = std::min(block, count - at);
    T *acc = aliased ? scratch.data() : out + at;
    std::memmove(acc, static_cast<const T *>(pieces[0]) + at, len * sizeof(T));
    for (size_t j = 1; j < n; ++j)
      combineInto<T, kBool>(acc, static_cast<const T *>(pieces[j]) + at, len,
                            op);
    if (op == ReduceOp::Avg)
      divideBy(acc, len, static_cast<int64_t>(n));
    if (aliased)
      std::memcpy(out + at, acc, len * sizeof(T));
  }
}

// Sum or avg of 16-bit floats: float32 accumulator per block, rounded to 16
// bits once. `out` is written after every piece of the block was read, so it
// may be one of the pieces.
template <class H>
void sumHalf(H *out, const std::vector<const void *> &pieces, int64_t count,
             bool average) {
  constexpr int64_t block = kBlockBytes / 2 / sizeof(float);
  float acc[block];
  size_t n = pieces.size();
  for (int64_t at = 0; at < count; at += block) {
    int64_t len = std::min(block, count - at);
    const H *first = static_cast<const H *>(pieces[0]) + at;
    for (int64_t i = 0; i < len; ++i)
      acc[i] = static_cast<float>(first[i]);
    for (size_t j = 1; j < n; ++j) {
      const H *piece = static_cast<const H *>(pieces[j]) + at;
      for (int64_t i = 0; i < len; ++i)
        acc[i] += static_cast<float>(piece[i]);
    }
    if (average) {
      float divisor = static_cast<float>(n);
      for (int64_t i = 0; i < len; ++i)
        acc[i] /= divisor;
    }
    for (int64_t i = 0; i < len; ++i)
      out[at + i] = H(acc[i]);
  }
}

template <class H>
void reduceHalf(void *out, const std::vector<const void *> &pieces,
                int64_t count, ReduceOp op) {
  if (op == ReduceOp::Sum || op == ReduceOp::Avg)
    sumHalf(static_cast<H *>(out), pieces, count, op == ReduceOp::Avg);
  else
    reduceInStorageType(static_cast<H *>(out), pieces, count, op);
}

} // namespace

void reducePieces(void *out, const std::vector<const void *> &pieces,
                  int64_t count, DType dtype, ReduceOp op) {
  checkReducible(dtype, op);
  if (pieces.empty())
    throw RuntimeError("reduction over no pieces");
  if (count <= 0)
    return;
  switch (dtype) {
  case ::dtorch::wire::F32:
    return reduceInStorageType(static_cast<float *>(out), pieces, count, op);
  case ::dtorch::wire::F64:
    return reduceInStorageType(static_cast<double *>(out), pieces, count, op);
  case ::dtorch::wire::F16:
    return reduceHalf<Half>(out, pieces, count, op);
  case ::dtorch::wire::BF16:
    return reduceHalf<BFloat16>(out, pieces, count, op);
  case ::dtorch::wire::I32:
    return reduceInStorageType(static_cast<int32_t *>(out), pieces, count, op);
  case ::dtorch::wire::I64:
    return reduceInStorageType(static_cast<int64_t *>(out), pieces, count, op);
  case ::dtorch::wire::BOOL:
    return reduceInStorageType<uint8_t, true>(static_cast<uint8_t *>(out),
                                              pieces, count, op);
  default:
    break;
  }
  throw RuntimeError(std::string("reduction '") + reduceOpName(op) +
                     "' is not supported for " + dtypeName(dtype));
}

} // namespace dtorch::rt
