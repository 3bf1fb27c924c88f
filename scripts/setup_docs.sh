#!/usr/bin/env bash
# Installs the documentation tools (docs/requirements.txt: Sphinx, MyST) into
# a virtual environment of their own, VENV (default build/docs-venv), so that
# neither `make test` nor the user's Python gets them. numpy is installed there
# too, so that autodoc can import dtorch (PYTHONPATH=python).
# Idempotent: when the tools are present it returns at once.
set -euo pipefail
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$ROOT/build/docs-venv}
REQUIREMENTS=$ROOT/docs/requirements.txt

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_docs: creating $VENV"
  "$PY" -m venv "$VENV"
fi
# Reinstall when the requirements changed since the last install.
STAMP=$VENV/.requirements
if ! cmp -s "$REQUIREMENTS" "$STAMP" || ! "$VENV/bin/python" -c "import sphinx, myst_parser, numpy" 2>/dev/null; then
  echo "setup_docs: installing $(grep -v '^#' "$REQUIREMENTS" | tr '\n' ' ')"
  "$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$STAMP"
fi
"$VENV/bin/python" -c "import sphinx, myst_parser; print('setup_docs: sphinx', sphinx.__version__, '+ myst-parser', myst_parser.__version__)"
