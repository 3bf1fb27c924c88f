"""dtorch.last_ir and dtorch.explain are served on demand: the controller
keeps the last segment it ran and compiles it again with the IR printed at
the pipeline's stage boundaries (or with explanations); a cache miss records
nothing. The stages are those of the last segment run, also on a cache hit,
and asking for them compiles no program."""
import numpy as np
import pytest

from dtorch import Replicate, Shard

S0, R = Shard(0), Replicate()


def test_stages_are_the_last_segment_run_even_on_a_cache_hit(dt, meshes):
    mesh = meshes["4"]

    def add_step():
        x = dt.ones(8, 4, device_mesh=mesh, placements=[S0])
        return (x + x).numpy()

    def relu_step():
        x = dt.ones(8, 4, device_mesh=mesh, placements=[S0])
        return x.relu().redistribute(mesh, [R]).numpy()

    add_step()
    relu_step()
    compiles = dt._C.compile_count()
    np.testing.assert_array_equal(add_step(), np.full((8, 4), 2.0))  # a cache hit
    assert dt._C.compile_count() == compiles
    stages = {s: dt.last_ir(s) for s in ("input", "sharded", "redistributed", "rank")}
    assert dt._C.compile_count() == compiles  # printing compiles no program
    assert "dtensor.add" in stages["input"] and "dtensor.relu" not in stages["input"]
    assert "dtensor.add" in stages["sharded"]
    assert "dtensor.all_gather" not in stages["redistributed"]
    assert stages["rank"].count("func.func @segment_class") == 1  # even: one class
    assert 'rank.kernel "add"' in stages["rank"]
    assert len(dt.explain()) == 0

    relu_step()  # a hit again: now the relu segment's stages and explanation
    assert dt._C.compile_count() == compiles
    assert "dtensor.relu" in dt.last_ir("input")
    assert "dtensor.all_gather" in dt.last_ir("redistributed")
    (row,) = dt.explain()
    assert any("all_gather" in c for c in row["collectives"])


def test_input_stage_prints_what_was_recorded_with_seed_slots(dt, meshes):
    mesh = meshes["4"]
    x = dt.rand(8, 4, device_mesh=mesh, placements=[S0])
    y = dt.randn(8, 4, device_mesh=mesh, placements=[R])
    (x * 2.5 + y).numpy()
    ir = dt.last_ir("input")
    # Random ops carry their slot number (the real seed is a run parameter),
    # the Python number a full of its own.
    assert 'dtensor.random seed = 0 distribution = "uniform"' in ir
    assert 'dtensor.random seed = 1 distribution = "normal"' in ir
    assert "dtensor.full 2.500000e+00" in ir


def test_unknown_stage_names_the_known_ones(dt, meshes):
    x = dt.ones(4, device_mesh=meshes["4"], placements=[S0])
    (x + 1).numpy()
    with pytest.raises(ValueError, match="expected one of input, sharded, redistributed, rank"):
        dt.last_ir("lowered")
