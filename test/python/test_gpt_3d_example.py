"""examples/gpt/train_3d.py: the GPT trained with DP x PP x TP on 8 ranks
(a (2, 2, 2) "pp" x "dp" x "tp" mesh, two pipeline stages of 4 ranks) gives
the losses of the same model trained unpipelined on the same batches, and
the loss falls. Runs the script in a fresh interpreter (8 ranks; the test
session has 4)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import backend_name, subprocess_env

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt", "train_3d.py")


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_dp_pp_tp_gpt_matches_the_unpipelined_run(schedule):
    env = dict(subprocess_env(), DTORCH_BACKEND=backend_name(), DTORCH_CACHE_DIR="")
    proc = subprocess.run([sys.executable, SCRIPT, "--steps", "4", "--check",
                           "--schedule", schedule], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "stages on ranks [[0, 1, 2, 3], [4, 5, 6, 7]]" in out, out
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < first, out
    diff = float(re.search(r"unpipelined run: ([\d.e+-]+)", out).group(1))
    assert diff < 1e-4, out
