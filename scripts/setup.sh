#!/usr/bin/env bash
# Installs every system and Python package DTorch needs. Idempotent: when all
# is present it only checks and returns in about a second.
set -euo pipefail

APT_PACKAGES=(
  cmake ninja-build pkg-config ccache lld-22 clang-22 clang-format-22
  # compiler-rt: ASan/UBSan/TSan and libFuzzer runtimes (make test-asan,
  # test-fuzz)
  libclang-rt-22-dev
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libzmq3-dev cppzmq-dev libsodium-dev libprotobuf-dev protobuf-compiler
  libgloo-dev libgtest-dev libgmock-dev
  # BLAS, loaded at run time (runtime/lib/BlasLibraries.cpp): oneDNN's sgemm
  # by default, OpenBLAS (core type chosen from CPUID) for float64, BLIS on
  # request (DTORCH_BLAS=blis).
  libopenblas-dev libdnnl-dev libblis-dev
  # ip and ss: the multi-host tests' network namespaces
  # (test/python/test_multihost.py)
  iproute2
)
PIP_PACKAGES=(numpy pytest lit nanobind hypothesis ml_dtypes tqdm matplotlib safetensors)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

PY=${PYTHON:-python3}
pmissing=()
for p in "${PIP_PACKAGES[@]}"; do
  "$PY" -c "import $p" 2>/dev/null || pmissing+=("$p")
done
if [ ${#pmissing[@]} -gt 0 ]; then
  echo "setup: installing pip packages: ${pmissing[*]}"
  "$PY" -m pip install -q "${pmissing[@]}"
fi
# torch, the single-device reference of the parallel-training parity tests
# (test/python/test_parallel_torch_parity.py, test_gpt_parity.py). PyPI's
# Linux wheel is the CUDA build; its full dependency set adds ~3 GB of
# nvidia-* wheels that duplicate the CUDA toolkit of this machine kind
# (/usr/local/cuda, on the loader path). So: torch without dependencies, plus
# the four CUDA libraries the toolkit lacks or has too old (cuFile,
# cuSPARSELt, NVSHMEM, NCCL), all pinned: ~1.1 GB download, ~2 GB on disk,
# about 2.5 min on 2 cores. It runs on the CPU. Without the toolkit (another
# machine kind) it is not installed and the parity tests skip with the reason.
TORCH_PINNED=(torch==2.15.0 nvidia-cufile==1.20.0.107 nvidia-cusparselt-cu13==0.8.1
              nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7)
TORCH_PURE_DEPS=(filelock fsspec sympy networkx jinja2 typing_extensions)
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '2.15.0')" 2>/dev/null; then
  # grep reads all of ldconfig's output (-q could end the pipe early: SIGPIPE
  # under pipefail would read as a miss).
  if ldconfig -p 2>/dev/null | grep 'libcublas.so.13' >/dev/null; then
    echo "setup: installing torch 2.15.0 (no nvidia-* dependencies but four)"
    "$PY" -m pip install -q "${TORCH_PURE_DEPS[@]}"
    "$PY" -m pip install -q --no-deps "${TORCH_PINNED[@]}"
  else
    echo "setup: no CUDA 13 toolkit on the loader path; torch not installed (parity tests against torch skip)"
  fi
fi
echo "setup: all packages present"
