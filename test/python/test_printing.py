"""repr()/str() of a dtorch.Tensor: the values (fetched) formatted like torch,
with dtype, mesh and placements."""
import numpy as np
import pytest

from dtorch import Partial, Replicate, Shard

R, S0, S1 = Replicate(), Shard(0), Shard(1)
MESH_2X2 = "DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp'))"


def test_repr_shows_values_dtype_mesh_and_placements(dt, meshes):
    x = dt.tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), device_mesh=meshes["2x2"],
                  placements=[S0, R])
    want = ("tensor([[1., 2.],\n        [3., 4.]], dtype=dtorch.float32, "
            f"device_mesh={MESH_2X2}, placements=(Shard(dim=0), Replicate()))")
    assert repr(x) == want
    assert str(x) == want


def test_values_are_the_global_tensor_of_any_layout(dt, meshes):
    a = np.array([[0.5, -1.25, 3.0], [2.0, 0.125, -4.0]])
    x = dt.tensor(a, device_mesh=meshes["2x2"], placements=[S1, S0])
    text = repr(x * 2)  # computed on the workers, then fetched
    assert text.startswith("tensor([[ 1.0000, -2.5000,  6.0000],\n"
                           "        [ 4.0000,  0.2500, -8.0000]], dtype=dtorch.float64")
    p = dt.ones(2, 3, device_mesh=meshes["4"], placements=[Partial("sum")])
    assert repr(p).startswith("tensor([[1., 1., 1.],")  # the global value
    assert repr(p).endswith("placements=(Partial(sum),))")


def test_integers_scalars_and_empty(dt, meshes):
    i = dt.tensor(np.arange(6).reshape(2, 3), device_mesh=meshes["4"], placements=[S1])
    assert repr(i).startswith("tensor([[0, 1, 2],\n        [3, 4, 5]], dtype=dtorch.int64, ")
    s = dt.tensor(np.arange(6, dtype=np.float32), device_mesh=meshes["4"], placements=[S0]).sum()
    assert repr(s).startswith("tensor(15., dtype=dtorch.float32, ")
    e = dt.zeros(0, 3, device_mesh=meshes["4"])
    assert repr(e).startswith("tensor([], size=(0, 3), dtype=dtorch.float32, ")


def test_sub_mesh_tensor_shows_its_view(dt, meshes):
    tp = meshes["2x2"]["tp"]
    x = dt.ones(2, 4, device_mesh=tp, placements=[S1])
    text = repr(x)
    assert "mesh_dim_names=('tp',)" in text
    assert text.endswith("placements=(Shard(dim=1),))")


def test_large_tensors_are_summarized_like_torch(dt, meshes):
    x = dt.zeros(40, 40, device_mesh=meshes["4"], placements=[S0])
    lines = repr(x).split("\n")
    assert len(lines) == 7 and "..." in lines[0] and lines[3].strip() == "...,"


def test_requires_grad_is_shown(dt, meshes):
    x = dt.ones(2, device_mesh=meshes["4"]).requires_grad_()
    assert repr(x).endswith(", requires_grad=True)")


def test_failing_fetch_raises_from_repr(dt, meshes):
    a = dt.tensor(np.array([1, 2, 3, 4]), device_mesh=meshes["4"])
    b = dt.tensor(np.array([1, -1, 3, 4]), device_mesh=meshes["4"])
    bad = a ** b  # int64 power with a negative exponent fails on the worker
    with pytest.raises(dt.DTorchError, match="negative exponent"):
        repr(bad)
    dt.synchronize()  # reported once
    assert repr(a + b).startswith("tensor([2, 1, 6, 8], dtype=dtorch.int64")
