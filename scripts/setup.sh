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
echo "setup: all packages present"
