// REQUIRES: gpu-kernel-codegen
// RUN: dtorch-gpu-kernel %s --stage=gpu | FileCheck %s --check-prefix=GPU
// RUN: dtorch-gpu-kernel %s --stage=nvvm | FileCheck %s --check-prefix=NVVM
// RUN: dtorch-gpu-kernel %s --stage=llvm | FileCheck %s --check-prefix=LLVM
// RUN: dtorch-gpu-kernel %s --stage=ptx --arch=sm_90 | FileCheck %s --check-prefix=PTX
// RUN: dtorch-gpu-kernel %s --stage=ptx --arch=sm_80 --group=1 | FileCheck %s --check-prefix=SM80
// RUN: %if ptxas %{ dtorch-gpu-kernel %s --group=0 --arch=sm_90 > %t.0.ptx && %ptxas -arch=sm_90 %t.0.ptx -o %t.0.o %}
// RUN: %if ptxas %{ dtorch-gpu-kernel %s --group=1 --arch=sm_90 > %t.1.ptx && %ptxas -arch=sm_90 %t.1.ptx -o %t.1.o %}

// Group 0: y = gelu(x * b + 2) over 4x300 float32 with b broadcast along
// the rows. One loop over the 1200 elements, tiled by 256: 5 blocks of 256
// threads; the constant is a float64 kernel parameter; the memrefs are
// bare pointers; float32 erf is the polynomial (its math.fma calls
// libdevice's __nv_fmaf, which is one fma.rn.f32), and the products are not
// contracted into sums (mul.rn).

// GPU-LABEL: fused group 0
// GPU: func.func @dtorch_fused_gpu(
// GPU: gpu.launch_func @[[MOD:[a-z_]+]]::@[[KERNEL:[a-z_]+]] blocks in (%[[B:.*]], %{{.*}}, %{{.*}}) threads in (%[[T:.*]], %{{.*}}, %{{.*}}) args(
// GPU: gpu.module @[[MOD]]
// GPU: gpu.func @[[KERNEL]](
// GPU-SAME: memref<300xf32>
// GPU-SAME: memref<4x300xf32>
// GPU-SAME: f64
// GPU-SAME: kernel
// GPU-DAG: gpu.block_id x
// GPU-DAG: gpu.thread_id x
// GPU: arith.remsi %{{.*}}, %c300
// GPU: arith.divsi %{{.*}}, %c300
// GPU: memref.load
// GPU: arith.truncf %{{.*}} : f64 to f32
// GPU: math.fma
// GPU: memref.store
// GPU: gpu.return

// NVVM-LABEL: fused group 0
// NVVM: gpu.module
// NVVM: llvm.func @dtorch_fused_gpu_kernel(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: f64, %{{.*}}: !llvm.ptr)
// NVVM-SAME: nvvm.kernel
// NVVM-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// NVVM-DAG: nvvm.read.ptx.sreg.ctaid.x
// NVVM-DAG: nvvm.read.ptx.sreg.tid.x
// NVVM-NOT: llvm.call @__nv_{{[a-eg-z]}}
// NVVM: llvm.call @__nv_fmaf
// NVVM-NOT: llvm.call @__nv_{{[a-eg-z]}}
// NVVM: llvm.return

// LLVM-LABEL: fused group 0
// LLVM: define ptx_kernel void @dtorch_fused_gpu_kernel(
// LLVM-NOT: call {{.*}}@__nv_
// LLVM: call float @llvm.fma.f32
// LLVM-NOT: call {{.*}}@__nv_
// LLVM: ret void
// LLVM-LABEL: fused group 1
// LLVM: define ptx_kernel void @dtorch_fused_gpu_kernel(
// libdevice's sin is linked in and inlined: nothing is left to call.
// LLVM-NOT: declare {{.*}}@__nv_sin

// PTX-LABEL: fused group 0
// PTX: .target sm_90
// PTX: .address_size 64
// PTX: .visible .entry dtorch_fused_gpu_kernel(
// PTX-NEXT: .param .u64 .ptr .align 1 dtorch_fused_gpu_kernel_param_0,
// PTX-NEXT: .param .u64 .ptr .align 1 dtorch_fused_gpu_kernel_param_1,
// PTX-NEXT: .param .f64 dtorch_fused_gpu_kernel_param_2,
// PTX-NEXT: .param .u64 .ptr .align 1 dtorch_fused_gpu_kernel_param_3
// PTX: .maxntid 256
// PTX-NOT: .ftz
// PTX: mov.u32 {{.*}}%ctaid.x
// PTX-NOT: .ftz
// PTX: mul.rn.f32
// PTX-NOT: .ftz
// PTX: fma.rn.f32
// PTX-NOT: call
// PTX-NOT: .ftz
// PTX: ret;

// Group 1: -sin(x) over 3 float64 values: libdevice's __nv_sin is linked
// in and inlined (its slow path of the argument reduction stays a function
// of the module), one block.
// PTX-LABEL: fused group 1
// PTX: .target sm_90
// PTX: .func {{.*}}__internal_trig_reduction_slowpathd
// PTX: .entry dtorch_fused_gpu_kernel(
// PTX-NEXT: .param .u64 .ptr .align 1 dtorch_fused_gpu_kernel_param_0,
// PTX-NEXT: .param .u64 .ptr .align 1 dtorch_fused_gpu_kernel_param_1
// PTX-NEXT: )
// PTX: ret;

// SM80: fused group 1 (sm_80, ptx)
// SM80: .target sm_80
// SM80: .entry dtorch_fused_gpu_kernel(

func.func @gelu_chain(%x: tensor<4x300xf32>, %b: tensor<300xf32>) -> tensor<4x300xf32> {
  %0 = rank.fused(%b, %x) : (tensor<300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32> {
  ^bb0(%bb: tensor<300xf32>, %a: tensor<4x300xf32>):
    %1 = rank.kernel "broadcast_to"(%bb) : (tensor<300xf32>) -> tensor<4x300xf32>
    %2 = rank.kernel "mul"(%a, %1) : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>
    %3 = rank.kernel "full"() {value = 2.0 : f64} : () -> tensor<4x300xf32>
    %4 = rank.kernel "add"(%2, %3) : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>
    %5 = rank.kernel "gelu"(%4) : (tensor<4x300xf32>) -> tensor<4x300xf32>
    rank.yield %5 : tensor<4x300xf32>
  }
  return %0 : tensor<4x300xf32>
}

func.func @sin_f64(%x: tensor<3xf64>) -> tensor<3xf64> {
  %0 = rank.fused(%x) : (tensor<3xf64>) -> tensor<3xf64> {
  ^bb0(%a: tensor<3xf64>):
    %1 = rank.kernel "sin"(%a) : (tensor<3xf64>) -> tensor<3xf64>
    %2 = rank.kernel "neg"(%1) : (tensor<3xf64>) -> tensor<3xf64>
    rank.yield %2 : tensor<3xf64>
  }
  return %0 : tensor<3xf64>
}
