#!/usr/bin/env bash
# Editable install of the dtorch package into the current Python, as
# `pip install -e .` would give: a .pth file naming python/ in site-packages.
set -euo pipefail
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SITE=$("$PY" -c "import site, sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$ROOT/python" > "$SITE/dtorch-editable.pth"
(cd / && "$PY" -c "import dtorch, sys; print('dtorch importable from', dtorch.__file__)")
