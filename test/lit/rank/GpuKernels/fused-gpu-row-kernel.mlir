// REQUIRES: gpu-kernel-codegen
// RUN: dtorch-gpu-kernel %s --stage=gpu | FileCheck %s --check-prefix=GPU
// RUN: dtorch-gpu-kernel %s --stage=ptx --arch=sm_90 | FileCheck %s --check-prefix=PTX
// RUN: %if ptxas %{ dtorch-gpu-kernel %s --group=0 --arch=sm_90 > %t.0.ptx && %ptxas -arch=sm_90 %t.0.ptx -o %t.0.o %}

// softmax over the rows of 300x100 float32, a group that ends in row
// reductions: one thread per row (2 blocks of 256 threads cover the 300
// rows), each row's max and then its sum in float64, in increasing order
// (one loop per sweep, no scratch memory), as the CPU's row kernels.

// GPU-LABEL: fused group 0
// GPU: func.func @dtorch_fused_gpu(
// GPU: gpu.launch_func @{{[a-z_]+}}::@{{[a-z_]+}} blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}}) args(
// GPU: gpu.func @{{[a-z_]+}}(
// GPU-SAME: memref<30000xf32>
// GPU-SAME: memref<30000xf32>
// GPU-SAME: kernel
// GPU-DAG: gpu.block_id x
// GPU-DAG: gpu.thread_id x
// GPU: arith.cmpf olt
// GPU: arith.extf %{{.*}} : f32 to f64
// GPU: arith.addf %{{.*}} : f64
// GPU: arith.truncf %{{.*}} : f64 to f32
// GPU: arith.divf
// GPU: memref.store
// GPU: gpu.return

// PTX-LABEL: fused group 0
// PTX: .target sm_90
// PTX: .visible .entry dtorch_fused_gpu_kernel(
// PTX: .maxntid 256
// PTX-NOT: .local
// PTX: add.rn.f64
// PTX: div.rn.f32
// PTX: ret;

func.func @softmax(%x: tensor<300x100xf32>) -> tensor<300x100xf32> {
  %0 = rank.fused(%x) : (tensor<300x100xf32>) -> tensor<300x100xf32> {
  ^bb0(%a: tensor<300x100xf32>):
    %1 = rank.kernel "max"(%a) {dims = array<i64: 1>, keepdim = 1 : i64} : (tensor<300x100xf32>) -> tensor<300x1xf32>
    %2 = rank.kernel "broadcast_to"(%1) : (tensor<300x1xf32>) -> tensor<300x100xf32>
    %3 = rank.kernel "sub"(%a, %2) : (tensor<300x100xf32>, tensor<300x100xf32>) -> tensor<300x100xf32>
    %4 = rank.kernel "exp"(%3) : (tensor<300x100xf32>) -> tensor<300x100xf32>
    %5 = rank.kernel "sum"(%4) {dims = array<i64: 1>, keepdim = 1 : i64, scale = 1.0 : f64} : (tensor<300x100xf32>) -> tensor<300x1xf32>
    %6 = rank.kernel "broadcast_to"(%5) : (tensor<300x1xf32>) -> tensor<300x100xf32>
    %7 = rank.kernel "div"(%4, %6) : (tensor<300x100xf32>, tensor<300x100xf32>) -> tensor<300x100xf32>
    rank.yield %7 : tensor<300x100xf32>
  }
  return %0 : tensor<300x100xf32>
}
