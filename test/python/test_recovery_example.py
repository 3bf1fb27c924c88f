"""examples/train_with_recovery.py: a worker is killed mid-training, the loop
catches the WorkerError, restarts, loads the last checkpoint and goes on;
its losses are bitwise those of a run without the fault. Each run is a
fresh interpreter with the on-disk program cache off, so both compile the
same tiers in the same order."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import backend_name, subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(backend_name() != "cluster", reason="needs worker processes")


def run(kill_at, tmp_path):
    code = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {os.path.join(ROOT, "examples")!r})
        import dtorch
        from train_with_recovery import train
        log = []
        t = time.time()
        losses, recoveries = train(steps=24, every=5, kill_at={kill_at!r},
                                   checkpoint_dir={str(tmp_path)!r}, log=log.append)
        seconds = time.time() - t
        t = time.time()
        dtorch.shutdown()
        print(json.dumps({{"losses": losses, "recoveries": recoveries, "log": log,
                          "seconds": seconds, "shutdown": time.time() - t}}))
    """)
    env = dict(subprocess_env(), DTORCH_CACHE_DIR="")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_killed_worker_restart_and_checkpoint_continue_the_losses_bitwise(tmp_path):
    clean = run(None, tmp_path / "clean")
    faulty = run(13, tmp_path / "faulty")
    print("\n".join(faulty["log"]))
    assert clean["recoveries"] == 0 and faulty["recoveries"] == 1, faulty["log"]
    assert any("WorkerError" in line for line in faulty["log"]), faulty["log"]
    assert any("resumed from the checkpoint of step 10" in line for line in faulty["log"])
    assert len(clean["losses"]) == len(faulty["losses"]) == 24
    assert clean["losses"][-1] < clean["losses"][0]
    # Bitwise: JSON keeps every digit of a float.
    assert faulty["losses"] == clean["losses"]
    assert faulty["shutdown"] < 2
