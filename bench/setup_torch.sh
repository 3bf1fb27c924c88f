#!/usr/bin/env bash
# Makes the private environment of the peers of the benchmarks: a plain
# virtual environment in build/torch-venv with torch, numpy and jax (CPU).
# bench/train_bench.py uses its torch column; bench/eager_graph_bench.py its
# torch (DTensor on gloo processes) and jax (jit) columns. A one-time download
# of about 3 GB (torch's nvidia-* dependencies); neither the tests nor
# `make test` need it.
#   bash bench/setup_torch.sh [TORCH_WHEEL_OR_SPEC]
# DTORCH_BENCH_NO_JAX=1 skips jax.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TORCH_VENV:-$root/build/torch-venv}"
spec="${1:-torch}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q "$spec" numpy
"$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'in $venv')"
if [ -z "${DTORCH_BENCH_NO_JAX:-}" ]; then
  "$venv/bin/pip" install -q "jax[cpu]"
  "$venv/bin/python" -c "import jax; print('jax', jax.__version__, 'in $venv')"
fi
