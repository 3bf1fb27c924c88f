"""In-place updates: Tensor._assign and copy_/zero_/fill_/add_/sub_/mul_/div_.
The Python object keeps its identity and placements while naming a new
value; old values are freed on the workers, and a loop of updates runs one
cached program from its second step."""
import numpy as np
import pytest

from dtorch import Partial, Replicate, Shard
from conftest import assert_close


def test_assign_keeps_identity_and_placements(dt, meshes):
    mesh = meshes["2x2"]
    x = dt.tensor(np.arange(12.0).reshape(4, 3), device_mesh=mesh,
                  placements=[Shard(0), Replicate()])
    holder = [x]
    v = dt.tensor(np.ones((4, 3)), device_mesh=mesh, placements=[Replicate(), Shard(1)])
    assert x._assign(v) is x
    assert holder[0] is x
    assert x.placements == (Shard(0), Replicate())
    assert_close(x.numpy(), np.ones((4, 3)))
    # The value keeps its own name and layout.
    assert v.placements == (Replicate(), Shard(1))
    assert_close(v.numpy(), np.ones((4, 3)))
    # Each rank holds its piece of the target's layout.
    shards = x.local_shards()
    assert shards[0].shape == (2, 3) and shards[3].shape == (2, 3)


def test_assign_from_partial_value_reduces(dt, meshes):
    mesh = meshes["4"]
    a = dt.tensor(np.arange(8.0).reshape(2, 4), device_mesh=mesh, placements=[Shard(1)])
    b = dt.tensor(np.ones((4, 3)), device_mesh=mesh, placements=[Shard(0)])
    prod = a @ b
    assert prod.placements == (Partial("sum"),)
    x = dt.zeros(2, 3, device_mesh=mesh, dtype=dt.float64)
    x._assign(prod)
    assert x.placements == (Replicate(),)
    assert_close(x.numpy(), np.arange(8.0).reshape(2, 4) @ np.ones((4, 3)))


def test_assign_rejects_mismatches(dt, meshes):
    mesh = meshes["4"]
    x = dt.zeros(4, 3, device_mesh=mesh)
    with pytest.raises(ValueError, match=r"shape \[5, 3\] differs"):
        x._assign(dt.zeros(5, 3, device_mesh=mesh))
    with pytest.raises(ValueError, match="dtype float64 differs"):
        x._assign(dt.zeros(4, 3, device_mesh=mesh, dtype=dt.float64))
    with pytest.raises(ValueError, match="another device mesh"):
        x._assign(dt.zeros(4, 3, device_mesh=meshes["2x2"]))
    with pytest.raises(TypeError):
        x._assign(np.zeros((4, 3)))
    assert_close(x.numpy(), np.zeros((4, 3)))  # still usable


def test_inplace_methods_match_numpy(dt, meshes):
    mesh = meshes["2x2"]
    ref = np.random.default_rng(0).standard_normal((6, 4))
    x = dt.tensor(ref, device_mesh=mesh, placements=[Shard(0), Shard(1)])
    other = np.random.default_rng(1).standard_normal((6, 4))
    o = dt.tensor(other, device_mesh=mesh, placements=[Replicate(), Replicate()])
    x.add_(o, alpha=-0.5)
    ref = ref - 0.5 * other
    x.mul_(3.0)
    ref = ref * 3.0
    x.sub_(o)
    ref = ref - other
    x.div_(2.0)
    ref = ref / 2.0
    assert_close(x.numpy(), ref, 1e-12)
    assert x.placements == (Shard(0), Shard(1))
    x.copy_(np.arange(4.0))  # broadcast, as torch's copy_
    assert_close(x.numpy(), np.broadcast_to(np.arange(4.0), (6, 4)))
    x.copy_(dt.ones(6, 4, device_mesh=mesh, dtype=dt.float32))  # cast
    assert x.dtype == dt.float64
    assert_close(x.numpy(), np.ones((6, 4)))
    x.zero_()
    assert_close(x.numpy(), np.zeros((6, 4)))
    x.fill_(2.5)
    assert_close(x.numpy(), np.full((6, 4), 2.5))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        dt.zeros(4, device_mesh=mesh).add_(dt.zeros(3, 4, device_mesh=mesh))


def test_update_loop_frees_old_values_and_hits_the_program_cache(dt, meshes):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((8, 6))
    w = dt.tensor(w0, device_mesh=mesh, placements=[Shard(0), Shard(1)])
    m = dt.zeros(8, 6, device_mesh=mesh, placements=[Shard(0), Shard(1)], dtype=dt.float64)
    grads = [rng.standard_normal((8, 6)) for _ in range(6)]
    ref_w, ref_m = w0.copy(), np.zeros((8, 6))
    dt.synchronize()  # w and m exist on the workers before the first step
    live, compiles = [], []
    for g in grads:
        gt = dt.tensor(g, device_mesh=mesh, placements=[Shard(0), Shard(1)])
        m.mul_(0.9).add_(gt)
        w.add_(m, alpha=-0.1)
        ref_m = 0.9 * ref_m + g
        ref_w = ref_w - 0.1 * ref_m
        del gt
        dt.synchronize()
        live.append(dt._C.live_tensors())
        compiles.append(dt._C.compile_count())
    assert_close(w.numpy(), ref_w, 1e-12)
    assert_close(m.numpy(), ref_m, 1e-12)
    assert len(set(live[1:])) == 1, live          # bounded: no value leaks
    assert compiles[1:] == [compiles[0]] * (len(compiles) - 1), compiles  # step 2 on: hits


def test_scalars_without_a_dot_in_their_shortest_form(dt, meshes):
    # 1e-08 is printed "%.17g" as 1e-08, which MLIR reads only as 1.0e-08.
    x = dt.ones(3, device_mesh=meshes["4"], dtype=dt.float64)
    assert_close((x + 1e-08).numpy(), np.full(3, 1.0 + 1e-08), 1e-15)
    assert_close((x * 1e20).numpy(), np.full(3, 1e20), 1e-15)
