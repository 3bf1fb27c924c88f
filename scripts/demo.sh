#!/usr/bin/env bash
# `make demo`: the compiler pipeline on a sample graph, a real run, then the
# training of a small GPT (examples/gpt) with its loss curve, model and a sample.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
echo "== dtorch-opt: the pipeline on docs/examples/mlp.mlir (per-rank program of rank 0)"
"$ROOT/$BUILD/bin/dtorch-opt" "$ROOT/docs/examples/mlp.mlir" \
  --pass-pipeline='builtin.module(dtensor-to-rank)' | sed -n '/@mlp_rank0/,/^  }/p'
echo
echo "== a distributed computation from Python"
cd / && python3 "$ROOT/scripts/demo.py"

echo
echo "== training a character-level GPT on a 2x2 (dp, tp) mesh (examples/gpt/train.py)"
cd / && python3 "$ROOT/examples/gpt/train.py" --out "$ROOT/$BUILD/gpt-demo"
echo "generate more text: python3 examples/gpt/generate.py $BUILD/gpt-demo/model.npz --top-k 5"
