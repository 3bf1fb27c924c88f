"""dtorch.explain(): why the last segment communicated, in the user's names;
mesh dim names and device in the compiled IR."""
import os
import subprocess
import sys

import numpy as np

from conftest import assert_close
from dtorch import Partial, Replicate, Shard

R, S0, S1 = Replicate(), Shard(0), Shard(1)


def matmul_inputs(dt, mesh):
    xn = np.arange(8 * 16, dtype=np.float32).reshape(8, 16) / 100
    wn = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) / 50
    x = dt.tensor(xn, device_mesh=mesh, placements=[S0, S1])
    w = dt.tensor(wn, device_mesh=mesh, placements=[R, S0])
    return xn, wn, x, w


def test_matmul_then_replicate_explains_all_reduce_on_named_axis(dt, meshes):
    mesh = meshes["2x2"]
    xn, wn, x, w = matmul_inputs(dt, mesh)
    y = x @ w  # contracts dim 1, sharded on "tp": a partial sum on "tp"
    assert y.placements == (S0, Partial("sum"))
    z = y.redistribute(mesh, [S0, R])
    assert_close(z.numpy(), xn @ wn, tol=1e-4)
    rows = list(dt.explain())
    assert len(rows) == 1
    row = rows[0]
    assert row["op"] == "redistribute" and row["operand"] is None
    assert row["shape"] == (8, 4) and row["dtype"] == "float32"
    assert row["before"] == "dp: S(0), tp: P(sum)"
    assert row["after"] == "dp: S(0), tp: R"
    assert row["collectives"] == ['all_reduce(sum) on "tp"']
    # Each rank holds a 4x4 f32 partial piece (16 elements); the all_reduce
    # sends 8 in its reduce-scatter half and 8 in its all-gather half.
    assert row["bytes_per_rank"] == [64, 64, 64, 64]
    text = str(dt.explain())
    assert 'all_reduce(sum) on "tp"' in text and "64" in text


def test_inserted_redistribution_names_the_op_and_operand(dt, meshes):
    mesh = meshes["2x2"]
    xn, wn, x, w = matmul_inputs(dt, mesh)
    z = (x @ w).relu()  # relu needs the partial sum reduced
    assert_close(z.numpy(), np.maximum(xn @ wn, 0), tol=1e-4)
    e = dt.explain()
    assert len(e) == 1
    row = e[0]
    assert (row["op"], row["operand"]) == ("relu", 0)
    assert row["reason"] == "operand 0 of relu"
    assert row["change"] == "tp: P(sum) -> S(1)"
    assert row["collectives"] == ['reduce_scatter(sum) on "tp"']
    # A 4x4 piece, 4x2 kept: 8 f32 leave each rank.
    assert row["bytes_per_rank"] == [32, 32, 32, 32]
    assert row["steps"][0]["mesh_dim_name"] == "tp"
    assert "operand 0 of relu" in row["text"]


def test_uneven_pieces_and_unnamed_mesh(dt, meshes):
    a = np.arange(35, dtype=np.float64).reshape(7, 5)
    x = dt.tensor(a, device_mesh=meshes["4"], placements=[S0])
    y = x.redistribute(meshes["4"], [R])
    assert_close(y.numpy(), a)
    (row,) = dt.explain()
    assert row["collectives"] == ["all_gather on mesh dim 0"]
    assert row["mesh_dim_names"] is None
    # Pieces of 2, 2, 2, 1 rows of 5 f64, each sent to 3 peers.
    assert row["bytes_per_rank"] == [240, 240, 240, 120]
    assert "120..240" in str(dt.explain())
    assert dt.explain().bytes_per_rank == [240, 240, 240, 120]


def test_segment_without_communication(dt, meshes):
    mesh = meshes["2x2"]
    a = np.ones((4, 6), np.float32)
    x = dt.tensor(a, device_mesh=mesh, placements=[S0, R])
    y = (x + x).relu()
    assert_close(y.numpy(), 2 * a)
    e = dt.explain()
    assert len(e) == 0 and list(e) == []
    assert str(e) == "no communication"


def test_cache_hit_keeps_the_cached_programs_explanation(dt, meshes):
    mesh = meshes["2x2"]

    def communicating_step():
        xn, wn, x, w = matmul_inputs(dt, mesh)
        return (x @ w).relu().numpy()

    def quiet_step():
        x = dt.ones(4, 4, device_mesh=mesh, placements=[S0, S1])
        return (x * 2).numpy()

    communicating_step()
    first = list(dt.explain())
    quiet_step()
    assert len(dt.explain()) == 0
    compiles = dt._C.compile_count()
    communicating_step()
    assert dt._C.compile_count() == compiles  # a cache hit
    assert list(dt.explain()) == first


def test_a_miss_leaves_the_explanation_to_explain(dt, meshes):
    # A cache miss compiles without explaining; the first explain() of the
    # segment compiles it again once for the explanation, later ones reuse it.
    mesh = meshes["2x2"]
    xn = np.arange(8 * 12, dtype=np.float32).reshape(8, 12) / 97
    wn = np.arange(12 * 6, dtype=np.float32).reshape(12, 6) / 41
    x = dt.tensor(xn, device_mesh=mesh, placements=[S0, S1])
    w = dt.tensor(wn, device_mesh=mesh, placements=[R, S0])
    dt.synchronize()
    compiles = dt._C.compile_count()
    z = (x @ w).redistribute(mesh, [S0, R])  # a structure no other test runs
    assert_close(z.numpy(), xn @ wn, tol=1e-4)
    assert dt._C.compile_count() == compiles + 1  # a miss
    before = dt._C.controller_stats()["ir_recompiles"]
    rows = list(dt.explain())
    assert dt._C.controller_stats()["ir_recompiles"] == before + 1
    assert len(rows) == 1 and rows[0]["collectives"] == ['all_reduce(sum) on "tp"']
    assert rows[0]["shape"] == (8, 6) and rows[0]["after"] == "dp: S(0), tp: R"
    assert list(dt.explain()) == rows
    assert dt._C.controller_stats()["ir_recompiles"] == before + 1
    assert dt._C.compile_count() == compiles + 1  # not counted as a miss


def test_explain_before_any_segment_is_empty():
    code = (
        "import dtorch\n"
        "e = dtorch.explain()\n"
        "assert len(e) == 0 and str(e) == 'no segment has run yet', str(e)\n"
        "dtorch.init(world_size=2, backend='inprocess', num_processes=1)\n"
        "dtorch.init_device_mesh('cpu', (2,))\n"
        "e = dtorch.explain()\n"
        "assert list(e) == [] and str(e) == 'no segment has run yet', str(e)\n"
        "dtorch.shutdown()\n")
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.path.join(root, "python") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


# ---- mesh dim names and device type in the IR -----------------------------------------
def test_mesh_names_reach_every_dtensor_stage_and_the_cache_still_hits(dt, meshes):
    mesh = meshes["2x2"]

    def step():
        x = dt.ones(8, 4, device_mesh=mesh, placements=[S0, S1])
        return x.redistribute(mesh, [R, R]).numpy()

    step()
    for stage in ("input", "sharded", "redistributed"):
        assert '#dtensor.mesh<[2, 2], names = ["dp", "tp"]>' in dt.last_ir(stage), stage
    assert 'all_gather %' in dt.last_ir("redistributed")
    compiles = dt._C.compile_count()
    step()
    step()
    assert dt._C.compile_count() == compiles


def test_sub_mesh_tensor_shows_the_parent_names(dt, meshes):
    tp = meshes["2x2"]["tp"]
    x = dt.ones(4, 6, device_mesh=tp, placements=[S1])
    y = x.redistribute(tp, [R])
    assert_close(y.numpy(), np.ones((4, 6)))
    assert 'names = ["dp", "tp"]' in dt.last_ir("sharded")
    (row,) = dt.explain()
    assert row["before"] == "dp: R, tp: S(1)"
    assert row["collectives"] == ['all_gather on "tp"']


def test_unusual_names_are_escaped_in_the_ir(dt):
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=('a"b', "c\\d"))
    x = dt.ones(4, 4, device_mesh=mesh, placements=[S0, R])
    assert_close((x + 1).numpy(), np.full((4, 4), 2.0))
    ir = dt.last_ir("sharded")
    assert 'names = ["a\\22b", "c\\\\d"]' in ir


def test_repeated_mesh_dim_names_raise(dt):
    import pytest
    with pytest.raises(ValueError, match="unique"):
        dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "dp"))
    with pytest.raises(TypeError, match="strings"):
        dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", 1))
