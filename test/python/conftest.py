"""Starts one DTorch session (4 ranks) for the whole test run and always
shuts it down. DTORCH_TEST_BACKEND picks "cluster" (2 worker processes x 2
ranks, the default when dtorch-worker is built) or "inprocess"."""
import os

import numpy as np
import pytest

import dtorch
from dtorch import _runtime

# Tests count compiles: programs kept on disk by an earlier run (or by
# another test's process) would turn them into disk hits. The on-disk cache
# is tested with folders of its own (test_program_cache.py).
os.environ["DTORCH_CACHE_DIR"] = ""


def subprocess_env():
    """The environment for a child interpreter that must import this very
    dtorch (not whichever checkout was installed last)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))
    paths = [package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def run_fusion_script(script, fusion, *args, timeout=600, env=None):
    """Runs `script` in a child interpreter with DTORCH_FUSION=`fusion`, no
    disk program cache and the variables of `env` (switches read once per
    process); returns the JSON of its last "RESULT " line."""
    import json
    import subprocess
    import sys
    env = dict(subprocess_env(), DTORCH_FUSION=str(fusion), DTORCH_CACHE_DIR="",
               **(env or {}))
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def backend_name():
    name = os.environ.get("DTORCH_TEST_BACKEND")
    if name:
        return name
    return "cluster" if os.path.exists(_runtime._worker_executable() or "/nonexistent") else "inprocess"


@pytest.fixture(scope="session")
def dt():
    dtorch.init(world_size=4, backend=backend_name(), num_processes=2)
    try:
        yield dtorch
    finally:
        dtorch.shutdown()


@pytest.fixture(scope="session")
def meshes(dt):
    return {
        "1": dt.init_device_mesh("cpu", (1,)),
        "4": dt.init_device_mesh("cpu", (4,)),
        "2x2": dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")),
    }


def assert_close(got, want, tol=1e-5):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
