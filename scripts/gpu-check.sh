#!/usr/bin/env bash
# gpu-check.sh: on a machine with an NVIDIA GPU, builds DTorch with its CUDA
# backend and runs every GPU test and benchmark, then prints one table:
#   - cuda_kernel_tests: every CUDA kernel against its CPU twin (parity),
#     the device layer (streams, events, caching allocator), coverage;
#   - gpu_fused_kernel_tests: fused kernels the compiler generates for the
#     GPU (MLIR's NVVM path to PTX) against the hand-written CUDA kernels
#     and the CPU, every fusible float kernel in every float dtype, and the
#     row kernels (softmax, log_softmax, layer_norm, rms_norm,
#     cross-entropy; one thread per row) against the CPU's row kernels and
#     library kernels (its own row of the table);
#   - gpu_gemm_bench: GEMM TFLOP/s of DTorch's CUDA matmul next to cuBLAS;
#   - the NCCL communicator's tests (cuda_kernel_tests NcclCommunicator.*:
#     one rank per GPU; a world of one on a single GPU) and
#     nccl_allreduce_bench: float32 all_reduce bandwidth, one rank per GPU;
#   - cuda_ipc_tests: collectives between processes sharing one GPU (CUDA
#     IPC), every collective bit for bit, and all_reduce of 2 processes on
#     one GPU through device ipc next to the host path and NCCL;
#   - test_cuda_device.py: a "cuda" mesh of dtorch-worker processes computing
#     on the GPU (device chosen from the mesh) against the CPU.
# Fails at once with "no GPU" where there is none. Budget: 8 minutes.
#
#   scripts/gpu-check.sh [--no-build]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
START=$(date +%s)

no_gpu() {
  echo "gpu-check: no GPU: $1" >&2
  exit 1
}
if ! command -v nvidia-smi > /dev/null 2>&1; then
  no_gpu "nvidia-smi not found (no NVIDIA driver on this machine)"
fi
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)
if [ -z "$GPU" ] || echo "$GPU" | grep -qiE "failed|error|no devices"; then
  no_gpu "nvidia-smi: ${GPU:-no device listed}"
fi
echo "gpu-check: $GPU"

ROWS=()
row() { ROWS+=("$(printf '%-34s %-8s %s' "$1" "$2" "$3")"); }
elapsed() { echo $(( $(date +%s) - $1 ))s; }

# ---- build -------------------------------------------------------------------
if [ "${1:-}" != "--no-build" ]; then
  t=$(date +%s)
  if make build > /tmp/gpu-check-build.log 2>&1; then
    row "build (make build)" ok "$(elapsed "$t")"
  else
    tail -30 /tmp/gpu-check-build.log
    row "build (make build)" FAILED "$(elapsed "$t"), log /tmp/gpu-check-build.log"
  fi
fi
STATUS=0
if [ ! -x "$BUILD/bin/cuda_kernel_tests" ]; then
  STATUS=1
  row "CUDA backend" MISSING "$BUILD/bin/cuda_kernel_tests not built (nvcc found? DTORCH_CUDA?)"
fi

# ---- tests -------------------------------------------------------------------
if [ -x "$BUILD/bin/cuda_kernel_tests" ]; then
  t=$(date +%s)
  timeout 240 "$BUILD/bin/cuda_kernel_tests" > /tmp/gpu-check-tests.log 2>&1
  rc=$?
  parity=$(grep -o "parity: .*" /tmp/gpu-check-tests.log | head -1)
  summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " /tmp/gpu-check-tests.log | tr '\n' ' ')
  if [ $rc -eq 0 ] && ! grep -q "SKIPPED \]" /tmp/gpu-check-tests.log; then
    row "cuda_kernel_tests" ok "$(elapsed "$t"); $parity"
  else
    STATUS=1
    grep -E "Failure|FAILED|Skipped|no CUDA device" /tmp/gpu-check-tests.log | head -20
    row "cuda_kernel_tests" FAILED "rc $rc; $summary; $parity"
  fi
fi

# Generated GPU kernels (the compiler's NVVM path to PTX, loaded through the
# driver) against the hand-written CUDA kernels and the CPU.
if [ -x "$BUILD/bin/gpu_fused_kernel_tests" ]; then
  t=$(date +%s)
  timeout 300 "$BUILD/bin/gpu_fused_kernel_tests" > /tmp/gpu-check-fused.log 2>&1
  rc=$?
  kernels=$(grep -cE "^  [a-z]+ +(f32|f64|f16|bf16) .* vs CPU: " /tmp/gpu-check-fused.log)
  # Row kernels: one line per case, dtype and output; the elements that
  # differ from the CPU's row kernels (0 but in float64 exp/log).
  rowcases=$(grep -c " vs CPU fused: " /tmp/gpu-check-fused.log)
  rowdiffer=$(grep -o "vs CPU fused: *[0-9]*" /tmp/gpu-check-fused.log | awk '{s += $NF} END {print s + 0}')
  if [ $rc -eq 0 ] && ! grep -q "SKIPPED \]" /tmp/gpu-check-fused.log; then
    row "gpu_fused_kernel_tests" ok "$(elapsed "$t"); $kernels generated kernels vs CPU and hand-written CUDA"
    row "  row kernels (softmax, norms, CE)" ok "$rowcases outputs vs the CPU's row and library kernels; $rowdiffer elements differ (float64 exp/log only)"
  else
    STATUS=1
    grep -E "Failure|FAILED|Skipped|no CUDA device|beyond" /tmp/gpu-check-fused.log | head -20
    row "gpu_fused_kernel_tests" FAILED "rc $rc; log /tmp/gpu-check-fused.log"
  fi
else
  STATUS=1
  row "gpu_fused_kernel_tests" MISSING "$BUILD/bin/gpu_fused_kernel_tests not built"
fi

# ---- benchmarks --------------------------------------------------------------
if [ -x "$BUILD/bin/gpu_gemm_bench" ]; then
  t=$(date +%s)
  if timeout 180 "$BUILD/bin/gpu_gemm_bench" > /tmp/gpu-check-gemm.log 2>&1; then
    row "gpu_gemm_bench" ok "$(elapsed "$t")"
    while read -r dtype n ours theirs ratio; do
      row "  GEMM $dtype n=$n" "" "dtorch $ours TFLOP/s, cuBLAS $theirs TFLOP/s, ratio $ratio"
    done < <(grep -E "^(float32|bfloat16|float16) " /tmp/gpu-check-gemm.log)
  else
    STATUS=1
    row "gpu_gemm_bench" FAILED "$(tail -1 /tmp/gpu-check-gemm.log)"
  fi
fi
if [ -x "$BUILD/bin/cuda_kernel_tests" ]; then
  t=$(date +%s)
  timeout 120 "$BUILD/bin/cuda_kernel_tests" --gtest_filter='NcclCommunicator.*' \
    > /tmp/gpu-check-nccl.log 2>&1
  rc=$?
  ran=$(grep -c "^\[       OK \]" /tmp/gpu-check-nccl.log)
  skipped=$(grep -A1 "SKIPPED \]" /tmp/gpu-check-nccl.log | grep -o "needs [0-9] GPUs[^)]*" | sort -u | tr '\n' ' ')
  if [ $rc -eq 0 ]; then
    row "NCCL communicator tests" ok "$(elapsed "$t"); $ran passed; skipped: ${skipped:-none}"
  else
    STATUS=1
    grep -E "Failure|FAILED|error" /tmp/gpu-check-nccl.log | head -10
    row "NCCL communicator tests" FAILED "rc $rc, log /tmp/gpu-check-nccl.log"
  fi
fi
if [ -x "$BUILD/bin/nccl_allreduce_bench" ]; then
  t=$(date +%s)
  if timeout 120 "$BUILD/bin/nccl_allreduce_bench" > /tmp/gpu-check-nccl-bench.log 2>&1; then
    row "nccl_allreduce_bench" ok "$(elapsed "$t"); $(head -1 /tmp/gpu-check-nccl-bench.log)"
    while read -r _ ranks mib ms algbw busbw; do
      row "  all_reduce f32 ${mib} MiB" "" "$ranks rank(s): $ms ms, algbw $algbw GB/s, busbw $busbw GB/s"
    done < <(grep -E "^all_reduce " /tmp/gpu-check-nccl-bench.log)
  else
    STATUS=1
    row "nccl_allreduce_bench" FAILED "$(tail -1 /tmp/gpu-check-nccl-bench.log)"
  fi
fi
# Collectives between processes that share one GPU (CUDA IPC): every
# collective bit for bit on 4 processes of GPU 0, then float32 all_reduce of
# 2 processes on GPU 0 through device ipc next to the host path (pinned
# copies + host shared memory) in the same run, and next to NCCL with one
# rank per GPU (nccl_allreduce_bench above; NCCL refuses two ranks of one
# GPU).
if [ -x "$BUILD/bin/cuda_ipc_tests" ]; then
  t=$(date +%s)
  timeout 300 "$BUILD/bin/cuda_ipc_tests" > /tmp/gpu-check-ipc.log 2>&1
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q "SKIPPED \]" /tmp/gpu-check-ipc.log; then
    row "cuda_ipc_tests" ok "$(elapsed "$t"); every collective and dtype on 4 processes of one GPU, bitwise"
    while read -r _ mib ipcms hostms ipcbw hostbw; do
      nccl=$(grep -E "^all_reduce " /tmp/gpu-check-nccl-bench.log 2>/dev/null |
        awk -v m="$mib" '$3 == m {printf "; NCCL %s rank(s) %s ms (%s GB/s)", $2, $4, $5; exit}')
      speedup=$(awk -v a="$hostms" -v b="$ipcms" 'BEGIN {printf "%.1f", a / b}')
      row "  all_reduce f32 ${mib} MiB, 2 procs/GPU" "" "device ipc $ipcms ms ($ipcbw GB/s), host path $hostms ms ($hostbw GB/s), x$speedup${nccl}"
    done < <(grep -E "^ipc_allreduce " /tmp/gpu-check-ipc.log)
  else
    STATUS=1
    grep -E "Failure|FAILED|Skipped|no CUDA device|process [0-9]" /tmp/gpu-check-ipc.log | head -10
    row "cuda_ipc_tests" FAILED "rc $rc, log /tmp/gpu-check-ipc.log"
  fi
else
  STATUS=1
  row "cuda_ipc_tests" MISSING "$BUILD/bin/cuda_ipc_tests not built"
fi
t=$(date +%s)
if PYTHONPATH=$ROOT/python timeout 180 python3 -m pytest -q test/python/test_cuda_device.py \
    > /tmp/gpu-check-python.log 2>&1; then
  row "test_cuda_device.py" ok "$(elapsed "$t"); $(tail -1 /tmp/gpu-check-python.log)"
else
  STATUS=1
  row "test_cuda_device.py" FAILED "$(tail -1 /tmp/gpu-check-python.log)"
fi

# ---- the table -----------------------------------------------------------------
echo
echo "== gpu-check: $GPU, $(elapsed "$START") =="
printf '%-34s %-8s %s\n' "check" "result" "details"
for r in "${ROWS[@]}"; do echo "$r"; done
exit $STATUS
