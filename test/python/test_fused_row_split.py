"""A large fused elementwise chain on one rank is cut into row ranges run by
the rank's threads (runtime ParallelFor.h); the cut must not change a bit.
y = gelu(x * w + b) * s on 600 x 1001 values (2.4 MB in float32, 1.2 MB in
bfloat16: both above the 1 MiB split threshold) runs in a child interpreter
with the fused kernel on 1, 2 and 3 threads (DTORCH_KERNEL_THREADS) and
unfused (the runtime's hand-written kernels); all four give the same bits."""
import os
import subprocess
import sys
import textwrap

import numpy as np

from conftest import subprocess_env

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import dtorch
    from dtorch import Replicate

    out_path = sys.argv[1]
    dtorch.init(world_size=1, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (1,))
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((600, 1001)).astype(np.float32) * 3
    wv = rng.standard_normal(1001).astype(np.float32)
    bv = rng.standard_normal((600, 1)).astype(np.float32)
    results = {}
    for dtype in ("float32", "bfloat16"):
        x, w, b = (dtorch.tensor(v, device_mesh=mesh, placements=[Replicate()])
                   for v in (xv, wv, bv))
        if dtype == "bfloat16":
            x, w, b = x.bfloat16(), w.bfloat16(), b.bfloat16()
        y = (x * w + b).gelu() * 0.75
        if dtype == "bfloat16":
            y = y.float()  # exact: every bfloat16 is a float32
        results[dtype] = y.numpy()
    np.savez(out_path, **results)
    dtorch.shutdown()
""")


def run_child(tmp_path, name, env):
    out = tmp_path / f"{name}.npz"
    full_env = dict(subprocess_env(), DTORCH_CACHE_DIR="", **env)
    done = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True,
                          text=True, timeout=600, env=full_env)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def test_row_split_gives_the_same_bits(tmp_path):
    runs = {
        "fused, 1 thread": {"DTORCH_FUSION": "1", "DTORCH_KERNEL_THREADS": "1"},
        "fused, 2 threads": {"DTORCH_FUSION": "1", "DTORCH_KERNEL_THREADS": "2"},
        "fused, 3 threads": {"DTORCH_FUSION": "1", "DTORCH_KERNEL_THREADS": "3"},
        "unfused": {"DTORCH_FUSION": "0"},
    }
    results = {name: run_child(tmp_path, name.replace(", ", "-").replace(" ", "_"), env)
               for name, env in runs.items()}
    reference = results["fused, 1 thread"]
    for dtype in ("float32", "bfloat16"):
        want = reference[dtype]
        assert want.shape == (600, 1001) and np.isfinite(want).all()
        for name, got in results.items():
            same = np.array_equal(got[dtype].view(np.uint32), want.view(np.uint32))
            assert same, f"{name} {dtype}: {np.sum(got[dtype] != want)} elements differ"
