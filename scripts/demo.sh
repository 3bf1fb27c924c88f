#!/usr/bin/env bash
# `make demo`: the compiler pipeline on a sample graph, then a real run.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
echo "== dtorch-opt: the pipeline on docs/examples/mlp.mlir (per-rank program of rank 0)"
"$ROOT/$BUILD/bin/dtorch-opt" "$ROOT/docs/examples/mlp.mlir" \
  --pass-pipeline='builtin.module(dtensor-to-rank)' | sed -n '/@mlp_rank0/,/^  }/p'
echo
echo "== a distributed computation from Python"
cd / && python3 "$ROOT/scripts/demo.py"
