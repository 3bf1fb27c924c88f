// The "cuda" twins of the elementwise, comparison, where, cast and creation
// kernels. The CPU registry says which (op, dtype) exist; each gets a CUDA
// run here.
#include "CudaRegistrationSupport.h"

#include <map>

namespace dtorch::rt::cuda {

namespace {

const std::map<std::string, UnaryOp> &unaryOps() {
  static const std::map<std::string, UnaryOp> ops{
      {"neg", UnaryOp::Neg},         {"abs", UnaryOp::Abs},
      {"exp", UnaryOp::Exp},         {"log", UnaryOp::Log},
      {"sqrt", UnaryOp::Sqrt},       {"rsqrt", UnaryOp::Rsqrt},
      {"relu", UnaryOp::Relu},       {"tanh", UnaryOp::Tanh},
      {"sigmoid", UnaryOp::Sigmoid}, {"gelu", UnaryOp::Gelu},
      {"silu", UnaryOp::Silu},       {"sin", UnaryOp::Sin},
      {"cos", UnaryOp::Cos}};
  return ops;
}

const std::map<std::string, BinaryOp> &binaryOps() {
  static const std::map<std::string, BinaryOp> ops{
      {"add", BinaryOp::Add},         {"sub", BinaryOp::Sub},
      {"mul", BinaryOp::Mul},         {"div", BinaryOp::Div},
      {"maximum", BinaryOp::Maximum}, {"minimum", BinaryOp::Minimum},
      {"pow", BinaryOp::Pow}};
  return ops;
}

const std::map<std::string, CompareOp> &compareOps() {
  static const std::map<std::string, CompareOp> ops{
      {"eq", CompareOp::Eq}, {"ne", CompareOp::Ne}, {"lt", CompareOp::Lt},
      {"le", CompareOp::Le}, {"gt", CompareOp::Gt}, {"ge", CompareOp::Ge}};
  return ops;
}

bool isIntegerDtype(DType dtype) {
  return dtype == ::dtorch::wire::I32 || dtype == ::dtorch::wire::I64;
}

KernelRunFn unaryRun(UnaryOp op, DType dtype, std::string name) {
  return [op, type = elemTypeOf(dtype),
          name](const AttrReader &, const std::vector<const Tensor *> &inputs,
                const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name.c_str());
    launchUnary(op, type, inputs[0]->data(), outputs[0]->data(),
                outputs[0]->numel(), c.stream);
  };
}

KernelRunFn binaryRun(BinaryOp op, DType dtype, std::string name) {
  // Integer div and pow can fail like the CPU kernel: their error bits are
  // read back (which waits for the kernel).
  bool canFail =
      isIntegerDtype(dtype) && (op == BinaryOp::Div || op == BinaryOp::Pow);
  return [op, type = elemTypeOf(dtype), name, canFail](
             const AttrReader &, const std::vector<const Tensor *> &inputs,
             const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name.c_str());
    launchBinary(op, type, inputs[0]->data(), inputs[1]->data(),
                 outputs[0]->data(), outputs[0]->numel(), c.device.errorWord(),
                 c.stream);
    if (canFail && outputs[0]->numel() > 0)
      c.device.checkErrorWord(c.stream, name.c_str());
  };
}

KernelRunFn compareRun(CompareOp op, std::string name) {
  return
      [op, name](const AttrReader &, const std::vector<const Tensor *> &inputs,
                 const std::vector<Tensor *> &outputs) {
        LaunchContext c = launchContext(inputs, outputs, name.c_str());
        launchCompare(op, elemTypeOf(inputs[0]->dtype()), inputs[0]->data(),
                      inputs[1]->data(), outputs[0]->data_as<bool>(),
                      outputs[0]->numel(), c.stream);
      };
}

void whereRun(const AttrReader &, const std::vector<const Tensor *> &inputs,
              const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "where");
  launchWhere(static_cast<int>(dtypeSize(outputs[0]->dtype())),
              inputs[0]->data_as<bool>(), inputs[1]->data(), inputs[2]->data(),
              outputs[0]->data(), outputs[0]->numel(), c.stream);
}

void castRun(const AttrReader &, const std::vector<const Tensor *> &inputs,
             const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "cast");
  launchCast(elemTypeOf(inputs[0]->dtype()), elemTypeOf(outputs[0]->dtype()),
             inputs[0]->data(), outputs[0]->data(), outputs[0]->numel(),
             c.stream);
}

void fullRun(const AttrReader &attrs, const std::vector<const Tensor *> &inputs,
             const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "full");
  launchFill(elemTypeOf(outputs[0]->dtype()), attrs.getFloat("value"),
             outputs[0]->data(), outputs[0]->numel(), c.stream);
}

void randomRun(const AttrReader &attrs,
               const std::vector<const Tensor *> &inputs,
               const std::vector<Tensor *> &outputs) {
  LaunchContext c = launchContext(inputs, outputs, "random");
  Tensor &out = *outputs[0];
  // The CPU check validated global_shape and offset against the output.
  Shape globalShape = attrs.getInts("global_shape");
  Shape offset = attrs.getInts("offset");
  if (out.shape().size() > static_cast<size_t>(kMaxRank))
    throw RuntimeError("random: rank above " + std::to_string(kMaxRank) +
                       " on CUDA");
  RandomBox box;
  box.rank = static_cast<int>(out.shape().size());
  std::vector<int64_t> strides = rowMajorStrides(globalShape);
  for (int d = 0; d < box.rank; ++d) {
    box.shape[d] = out.shape()[d];
    box.offset[d] = offset[d];
    box.globalStrides[d] = strides[d];
  }
  launchRandom(elemTypeOf(out.dtype()),
               static_cast<uint64_t>(attrs.randomSeed()),
               attrs.getString("dist") == "normal", box, out.data(),
               out.numel(), c.stream);
}

// Kernels whose values come from attributes (constant's bytes, iota's
// start and step): the CPU twin fills a host tensor, which is copied to the
// device; bitwise the CPU's result.
KernelRunFn hostMadeRun(const Kernel *cpu, std::string name) {
  return [cpu, name](const AttrReader &attrs,
                     const std::vector<const Tensor *> &inputs,
                     const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name.c_str());
    Tensor &out = *outputs[0];
    Tensor host = Tensor::empty(out.dtype(), out.shape());
    std::vector<Tensor *> hostOutputs{&host};
    cpu->run(attrs, {}, hostOutputs);
    // From pageable memory the copy returns once the bytes are staged, so
    // `host` may go away.
    Stream &stream = c.device.currentStream();
    c.device.copyHostToDevice(out.data(), host.data(), host.nbytes(), &stream);
  };
}

} // namespace

void registerCudaElementwiseKernels(KernelRegistry &registry) {
  for (const auto &[op, dtype] : registry.entriesFor(kCpuDevice)) {
    if (auto u = unaryOps().find(op); u != unaryOps().end())
      addCudaTwin(registry, op, dtype, unaryRun(u->second, dtype, op));
    else if (auto b = binaryOps().find(op); b != binaryOps().end())
      addCudaTwin(registry, op, dtype, binaryRun(b->second, dtype, op));
    else if (auto k = compareOps().find(op); k != compareOps().end())
      addCudaTwin(registry, op, dtype, compareRun(k->second, op));
    else if (op == "where")
      addCudaTwin(registry, op, dtype, whereRun);
    else if (op == "cast")
      addCudaTwin(registry, op, dtype, castRun);
  }
}

void registerCudaCreationKernels(KernelRegistry &registry) {
  for (const auto &[op, dtype] : registry.entriesFor(kCpuDevice)) {
    if (op == "full")
      addCudaTwin(registry, op, dtype, fullRun);
    else if (op == "random")
      addCudaTwin(registry, op, dtype, randomRun);
    else if (op == "constant" || op == "iota")
      addCudaTwin(registry, op, dtype,
                  hostMadeRun(registry.lookup(op, dtype, kCpuDevice), op));
  }
}

} // namespace dtorch::rt::cuda
