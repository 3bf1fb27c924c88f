#!/usr/bin/env bash
# Makes the private torch environment of bench/train_bench.py (its torch
# column): a plain virtual environment in build/torch-venv with torch and
# numpy. A one-time download of about 3 GB (torch's nvidia-* dependencies);
# neither the tests nor `make test` need it.
#   bash bench/setup_torch.sh [TORCH_WHEEL_OR_SPEC]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TORCH_VENV:-$root/build/torch-venv}"
spec="${1:-torch}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q "$spec" numpy
"$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'in $venv')"
