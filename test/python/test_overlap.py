"""Overlap of communication with compute (--rank-schedule-collectives): a
data-parallel training step reduces its gradients in a few bucketed
all_reduces issued during the backward, not one per gradient at its end,
and trains exactly as before."""
import re
import subprocess
import sys

import numpy as np

from conftest import subprocess_env

LAYERS = 4
WIDTH = 16


def _mlp(dt, mesh):
    with dt.nn.default_device_mesh(mesh):
        dt.manual_seed(0)
        layers = []
        for _ in range(LAYERS):
            layers += [dt.nn.Linear(WIDTH, WIDTH), dt.nn.GELU()]
        return dt.nn.Sequential(*layers)


def _train(dt, mesh, steps=3):
    """Trains the MLP for `steps` AdamW steps on fixed batches sharded on
    the mesh's first dim; returns the parameters and the step's rank IR."""
    from dtorch import Shard
    model = _mlp(dt, mesh)
    opt = dt.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = dt.tensor(rng.standard_normal((8, WIDTH)).astype(np.float32), device_mesh=mesh,
                      placements=[Shard(0)])
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ir = dt.last_ir("rank")
    return [p.numpy() for p in model.parameters()], ir


def _function_body(ir):
    """The lines of the (only) class function of a rank-stage IR."""
    return [line.strip() for line in ir.splitlines() if " = rank." in line]


def _counts(ir):
    """(all_reduces, buckets, bucket members) of a rank-stage IR."""
    body = _function_body(ir)
    return (sum("rank.all_reduce" in line for line in body),
            sum("\"bucket_pack\"" in line for line in body),
            sum("\"bucket_unpack\"" in line for line in body))


def test_dp_step_buckets_its_gradient_all_reduces(dt, meshes):
    params, ir = _train(dt, meshes["4"])
    all_reduces, buckets, members = _counts(ir)
    # Fewer all_reduces than the gradients they reduce: each bucket
    # replaces its members by one.
    unbucketed = all_reduces - buckets + members
    assert buckets >= 1 and all_reduces < unbucketed, ir
    assert "rank.scheduled" in ir


def test_dp_step_issues_all_reduces_during_the_backward(dt, meshes):
    _, ir = _train(dt, meshes["4"], steps=1)
    body = _function_body(ir)
    reduces = [i for i, line in enumerate(body) if "rank.all_reduce" in line]
    matmuls = [i for i, line in enumerate(body) if "\"matmul\"" in line]
    # The first gradient bucket is reduced before the backward's last
    # matmul runs (the first layer's weight gradient), so it overlaps it.
    assert reduces and matmuls and reduces[0] < matmuls[-1], "\n".join(body)


def test_dp_training_matches_one_rank(dt, meshes):
    dp, _ = _train(dt, meshes["4"])
    one, _ = _train(dt, meshes["1"])
    for got, want in zip(dp, one):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import dtorch as dt
import test_overlap as t
dt.init(world_size=4, backend="inprocess")
params, ir = t._train(dt, dt.init_device_mesh("cpu", (4,)), steps=1)
print("COUNTS", *t._counts(ir))
"""


def _counts_in_subprocess(**env):
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(subprocess_env(), DTORCH_CACHE_DIR="", **env)
    out = subprocess.run([sys.executable, "-c", SCRIPT, here], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return tuple(int(n) for n in re.search(r"^COUNTS (\d+) (\d+) (\d+)$", out.stdout,
                                               re.M).groups())


def test_bucketing_can_be_turned_off_from_the_environment():
    bucketed = _counts_in_subprocess()
    plain = _counts_in_subprocess(DTORCH_BUCKET_CAP_MB="0")
    assert plain[1:] == (0, 0), plain
    all_reduces, buckets, members = bucketed
    assert buckets >= 1 and plain[0] == all_reduces - buckets + members > all_reduces, (
        bucketed, plain)
