// reshape, transpose, slice, copy, and the pack/unpack of all_reduce
// buckets.
#include "KernelSupport.h"

#include <algorithm>

#include <cstring>

namespace dtorch::rt {

using namespace detail;

namespace {

void requireSameDtype(const TensorDesc &x, const TensorDesc &out) {
  if (x.dtype != out.dtype)
    throw RuntimeError(std::string("input is ") + dtypeName(x.dtype) +
                       ", output is " + dtypeName(out.dtype));
}

void copyWhole(const std::vector<const Tensor *> &inputs,
               const std::vector<Tensor *> &outputs) {
  // A planned output may be written over its input (in place): nothing to do.
  if (outputs[0]->nbytes() != 0 && outputs[0]->data() != inputs[0]->data())
    std::memcpy(outputs[0]->data(), inputs[0]->data(), outputs[0]->nbytes());
}

Kernel reshapeKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireSameDtype(inputs[0], outputs[0]);
    if (shapeNumel(inputs[0].shape) != shapeNumel(outputs[0].shape))
      throw RuntimeError("reshape " + shapeToString(inputs[0].shape) + " -> " +
                         shapeToString(outputs[0].shape) +
                         " changes the element count");
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    copyWhole(inputs, outputs);
  };
  return kernel;
}

Kernel copyKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    checkAllSame(inputs, outputs);
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    copyWhole(inputs, outputs);
  };
  return kernel;
}

// A Partial(sum) made from a replicated value: the rank at coordinate 0 of
// the mesh axis keeps it (`coord` = that coordinate), the others hold zeros.
Kernel leadOrZeroKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    checkAllSame(inputs, outputs);
    if (attrs.getInt("coord") < 0)
      throw RuntimeError("lead_or_zero: coord must be >= 0");
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    if (attrs.getInt("coord") == 0)
      copyWhole(inputs, outputs);
    else if (outputs[0]->nbytes())
      std::memset(outputs[0]->data(), 0, outputs[0]->nbytes());
  };
  return kernel;
}

std::vector<int64_t> readPermutation(const AttrReader &attrs, size_t rank) {
  std::vector<int64_t> perm = attrs.getInts("perm");
  if (perm.size() != rank)
    throw RuntimeError("transpose: perm " + shapeToString(perm) +
                       " must have " + std::to_string(rank) + " entries");
  std::vector<bool> seen(rank, false);
  for (int64_t &p : perm) {
    p = normalizeDim(p, static_cast<int64_t>(rank), "transpose perm entry");
    if (seen[p])
      throw RuntimeError("transpose: perm " + shapeToString(perm) +
                         " repeats a dim");
    seen[p] = true;
  }
  return perm;
}

template <class T> Kernel transposeKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireSameDtype(inputs[0], outputs[0]);
    const Shape &in = inputs[0].shape;
    std::vector<int64_t> perm = readPermutation(attrs, in.size());
    Shape expected(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      expected[i] = in[perm[i]];
    if (expected != outputs[0].shape)
      throw RuntimeError("transpose of " + shapeToString(in) + " by perm " +
                         shapeToString(perm) + " gives " +
                         shapeToString(expected) + ", output is " +
                         shapeToString(outputs[0].shape));
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    if (out.numel() == 0)
      return;
    size_t rank = out.shape().size();
    std::vector<int64_t> perm = readPermutation(attrs, rank);
    std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
    // Stride in x of each out dim.
    std::vector<int64_t> gatherStrides(rank);
    for (size_t i = 0; i < rank; ++i)
      gatherStrides[i] = inStrides[perm[i]];
    // Out dims that read x contiguously from each other merge (dims of
    // extent 1 drop out): [16, 4, 32, 16] <- [16, 32, 4, 16] is 2048 runs of
    // 16 contiguous elements, each copied at once.
    std::vector<int64_t> extents, strides; // merged, outermost first
    for (size_t d = 0; d < rank; ++d) {
      int64_t extent = out.shape()[d];
      if (extent == 1)
        continue;
      if (!extents.empty() && strides.back() == gatherStrides[d] * extent) {
        extents.back() *= extent;
        strides.back() = gatherStrides[d];
      } else {
        extents.push_back(extent);
        strides.push_back(gatherStrides[d]);
      }
    }
    if (extents.empty()) { // one element
      extents.push_back(1);
      strides.push_back(1);
    }
    const T *xs = x.data_as<T>();
    T *os = out.data_as<T>();
    size_t outerRank = extents.size() - 1;
    int64_t inner = extents.back(), innerStride = strides.back();
    std::vector<int64_t> index(outerRank, 0);
    int64_t source = 0;
    for (int64_t o = 0, n = out.numel(); o < n; o += inner) {
      if (innerStride == 1)
        std::memcpy(os + o, xs + source, sizeof(T) * inner);
      else
        for (int64_t j = 0; j < inner; ++j)
          os[o + j] = xs[source + j * innerStride];
      for (size_t d = outerRank; d-- > 0;) {
        source += strides[d];
        if (++index[d] < extents[d])
          break;
        source -= strides[d] * extents[d];
        index[d] = 0;
      }
    }
  };
  return kernel;
}

Kernel sliceKernel(size_t elementSize) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireSameDtype(inputs[0], outputs[0]);
    const Shape &in = inputs[0].shape, &out = outputs[0].shape;
    if (in.size() != out.size())
      throw RuntimeError("slice: output rank differs from input rank");
    int64_t dim = normalizeDim(attrs.getInt("dim"),
                               static_cast<int64_t>(in.size()), "slice dim");
    int64_t start = attrs.getInt("start");
    for (size_t d = 0; d < in.size(); ++d)
      if (static_cast<int64_t>(d) != dim && in[d] != out[d])
        throw RuntimeError("slice: output " + shapeToString(out) +
                           " and input " + shapeToString(in) +
                           " differ outside dim " + std::to_string(dim));
    if (start < 0 || start > in[dim] || out[dim] > in[dim] - start)
      throw RuntimeError(
          "slice: [" + std::to_string(start) + ", " + std::to_string(start) +
          " + " + std::to_string(out[dim]) + ") is out of range for extent " +
          std::to_string(in[dim]));
  };
  kernel.run = [elementSize](const AttrReader &attrs,
                             const std::vector<const Tensor *> &inputs,
                             const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    int64_t dim = normalizeDim(attrs.getInt("dim"), x.dim(), "slice dim");
    Shape offset(out.shape().size(), 0);
    offset[dim] = attrs.getInt("start");
    copyBox(x.data(), x.shape(), offset, out.data(), out.shape(),
            Shape(offset.size(), 0), out.shape(), elementSize);
  };
  return kernel;
}

// numpy broadcasting: trailing dims aligned, input extents of 1 repeat.
template <class T> Kernel broadcastToKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireSameDtype(inputs[0], outputs[0]);
    const Shape &in = inputs[0].shape, &out = outputs[0].shape;
    if (in.size() > out.size())
      throw RuntimeError("broadcast_to: input " + shapeToString(in) +
                         " has more dims than " + shapeToString(out));
    size_t lead = out.size() - in.size();
    for (size_t d = 0; d < in.size(); ++d)
      if (in[d] != 1 && in[d] != out[lead + d])
        throw RuntimeError("broadcast_to: cannot broadcast " +
                           shapeToString(in) + " to " + shapeToString(out));
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    if (out.numel() == 0)
      return;
    const Shape &shape = out.shape();
    size_t rank = shape.size(), lead = rank - x.shape().size();
    std::vector<int64_t> inStrides = rowMajorStrides(x.shape());
    std::vector<int64_t> strides(
        rank, 0); // stride in x of each out dim (0: repeated)
    for (size_t d = 0; d < x.shape().size(); ++d)
      strides[lead + d] = x.shape()[d] == 1 ? 0 : inStrides[d];
    const T *xs = x.data_as<T>();
    T *os = out.data_as<T>();
    // The trailing dims that are all read along (a contiguous run of x:
    // copied) or all repeated (one element of x: filled) make one block of
    // the output; the dims before them step from block to block. Extents of
    // 1 go with either.
    size_t split = rank;
    bool repeatedRun = false, kindKnown = false;
    int64_t block = 1;
    while (split > 0) {
      size_t d = split - 1;
      if (shape[d] != 1) {
        bool repeated = strides[d] == 0;
        if (kindKnown && repeated != repeatedRun)
          break;
        repeatedRun = repeated;
        kindKnown = true;
      }
      block *= shape[d];
      split = d;
    }
    std::vector<int64_t> index(split, 0);
    int64_t source = 0;
    for (int64_t start = 0, n = out.numel(); start < n; start += block) {
      T *dst = os + start;
      if (repeatedRun)
        std::fill(dst, dst + block, xs[source]);
      else
        std::copy(xs + source, xs + source + block, dst);
      for (size_t d = split; d-- > 0;) {
        source += strides[d];
        if (++index[d] < shape[d])
          break;
        source -= strides[d] * shape[d];
        index[d] = 0;
      }
    }
  };
  return kernel;
}

// The elements of every input, in order, one after the other in a flat
// output: the buffer of an all_reduce bucket (--rank-schedule-collectives).
Kernel bucketPackKernel() {
  Kernel kernel;
  kernel.numInputs = kVariadicInputs;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    const TensorDesc &out = outputs[0];
    if (out.shape.size() != 1)
      throw RuntimeError("bucket_pack: output " + shapeToString(out.shape) +
                         " must be 1-D");
    int64_t total = 0;
    for (const TensorDesc &in : inputs) {
      requireSameDtype(in, out);
      total += shapeNumel(in.shape);
    }
    if (total != out.shape[0])
      throw RuntimeError("bucket_pack: the inputs hold " +
                         std::to_string(total) + " elements, output has " +
                         std::to_string(out.shape[0]));
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    char *at = static_cast<char *>(outputs[0]->data());
    for (const Tensor *in : inputs) {
      if (in->nbytes() != 0)
        std::memcpy(at, in->data(), in->nbytes());
      at += in->nbytes();
    }
  };
  return kernel;
}

// out = the numel(out) elements of a flat bucket from `offset` on, in out's
// shape: one member of an all_reduce bucket.
Kernel bucketUnpackKernel(size_t elementSize) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireSameDtype(inputs[0], outputs[0]);
    if (inputs[0].shape.size() != 1)
      throw RuntimeError("bucket_unpack: input " +
                         shapeToString(inputs[0].shape) + " must be 1-D");
    int64_t offset = attrs.getInt("offset");
    int64_t count = shapeNumel(outputs[0].shape);
    if (offset < 0 || offset > inputs[0].shape[0] ||
        count > inputs[0].shape[0] - offset)
      throw RuntimeError("bucket_unpack: [" + std::to_string(offset) + ", " +
                         std::to_string(offset) + " + " +
                         std::to_string(count) +
                         ") is out of range for a bucket of " +
                         std::to_string(inputs[0].shape[0]));
  };
  kernel.run = [elementSize](const AttrReader &attrs,
                             const std::vector<const Tensor *> &inputs,
                             const std::vector<Tensor *> &outputs) {
    if (outputs[0]->nbytes() == 0)
      return;
    const char *from = static_cast<const char *>(inputs[0]->data()) +
                       attrs.getInt("offset") * elementSize;
    std::memcpy(outputs[0]->data(), from, outputs[0]->nbytes());
  };
  return kernel;
}

template <class T> void registerLayoutKernelsFor(KernelRegistry &registry) {
  addCpuKernel<T>(registry, "broadcast_to", broadcastToKernel<T>());
  addCpuKernel<T>(registry, "reshape", reshapeKernel());
  addCpuKernel<T>(registry, "copy", copyKernel());
  addCpuKernel<T>(registry, "lead_or_zero", leadOrZeroKernel());
  addCpuKernel<T>(registry, "transpose", transposeKernel<T>());
  addCpuKernel<T>(registry, "slice", sliceKernel(sizeof(T)));
  addCpuKernel<T>(registry, "bucket_pack", bucketPackKernel());
  addCpuKernel<T>(registry, "bucket_unpack", bucketUnpackKernel(sizeof(T)));
}

} // namespace

void registerLayoutKernels(KernelRegistry &registry) {
  forEachType(AllTypes{}, [&](auto tag) {
    registerLayoutKernelsFor<typename decltype(tag)::type>(registry);
  });
}

} // namespace dtorch::rt
