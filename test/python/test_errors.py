"""Each invalid call of API.md raises at the call site, before anything is
sent, and the session stays usable."""
import numpy as np
import pytest

import dtorch
from conftest import assert_close
from dtorch import Partial, Replicate, Shard


def still_works(dt, meshes):
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = dt.tensor(a, device_mesh=meshes["2x2"], placements=[Shard(0), Shard(1)])
    assert_close(((x @ x.t()) + 1).numpy(), a @ a.T + 1)


def test_shape_mismatch(dt, meshes):
    x = dt.ones(3, 4, device_mesh=meshes["4"])
    y = dt.ones(5, 4, device_mesh=meshes["4"])
    with pytest.raises(ValueError, match="cannot be broadcast"):
        x + y
    with pytest.raises(ValueError, match="cannot be multiplied"):
        x @ y
    with pytest.raises(ValueError, match="invalid for input of size 12"):
        x.reshape(5, 3)
    still_works(dt, meshes)


def test_different_meshes(dt, meshes):
    x = dt.ones(4, 4, device_mesh=meshes["4"])
    y = dt.ones(4, 4, device_mesh=meshes["2x2"])
    with pytest.raises(ValueError, match="different device meshes"):
        x + y
    with pytest.raises(ValueError, match="different device meshes"):
        x @ y
    still_works(dt, meshes)


def test_bad_placements(dt, meshes):
    with pytest.raises(ValueError, match=r"Shard\(2\) but the tensor has rank 2"):
        dt.ones(4, 4, device_mesh=meshes["4"], placements=[Shard(2)])
    with pytest.raises(ValueError, match="expected 2 placements"):
        dt.ones(4, 4, device_mesh=meshes["2x2"], placements=[Shard(0)])
    with pytest.raises(TypeError, match="placements must be"):
        dt.ones(4, 4, device_mesh=meshes["4"], placements=["shard"])
    with pytest.raises(ValueError, match="reduce_op"):
        Partial("prod")
    x = dt.ones(4, 4, device_mesh=meshes["4"])
    with pytest.raises(ValueError, match="expected 1 placements"):
        x.redistribute(meshes["4"], [Shard(0), Shard(1)])
    with pytest.raises(ValueError, match="Shard"):
        x.redistribute(meshes["4"], [Shard(3)])
    still_works(dt, meshes)


def test_bad_dims_and_types(dt, meshes):
    x = dt.ones(4, 4, device_mesh=meshes["4"])
    with pytest.raises(ValueError, match="out of range"):
        x.sum(2)
    with pytest.raises(ValueError, match="more than once"):
        x.sum((0, 0))
    assert x.to(dt.int32).dtype == dt.int32  # every dtype converts now
    with pytest.raises(TypeError, match="bool"):
        dt.where(x, x, x)  # the condition must be bool
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError, match="sizes must be ints"):
        dt.ones(2.5, device_mesh=meshes["4"])
    with pytest.raises(ValueError, match="item"):
        x.item()
    still_works(dt, meshes)


def test_mesh_errors(dt, meshes):
    with pytest.raises(ValueError, match="does not fit"):
        dt.init_device_mesh("cpu", (3, 3))
    with pytest.raises(ValueError, match="does not fit"):
        dt.DeviceMesh("cpu", [0, 7])
    with pytest.raises(ValueError, match="appears twice"):
        dt.DeviceMesh("cpu", [1, 1])
    with pytest.raises(KeyError):
        meshes["2x2"]["pp"]
    still_works(dt, meshes)


def test_error_classes():
    assert issubclass(dtorch.WorkerError, dtorch.DTorchError)
    assert dtorch.errors.worker_error_class("x: out of memory allocating") is dtorch.OutOfMemoryError
    assert dtorch.errors.worker_error_class(
        "all_reduce: failed after waiting for rank(s) 2") is dtorch.CollectiveTimeout
    assert dtorch.errors.worker_error_class("division by zero") is dtorch.WorkerError
    assert issubclass(dtorch.CollectiveTimeout, dtorch.DTorchError)
    assert issubclass(dtorch.OutOfMemoryError, dtorch.DTorchError)


def test_worker_side_error_is_reported_once_and_session_survives(dt, meshes):
    a = dt.tensor(np.array([1, 2, 3, 4]), device_mesh=meshes["4"])
    b = dt.tensor(np.array([1, -1, 3, 4]), device_mesh=meshes["4"])
    with pytest.raises(dt.DTorchError, match="negative exponent"):
        (a ** b).numpy()  # int64 power with a negative exponent fails on the worker
    dt.synchronize()  # nothing left to report
    assert (a + b).numpy().tolist() == [2, 1, 6, 8]
    still_works(dt, meshes)


def test_out_of_memory_on_a_worker(dt, meshes):
    x = dt.zeros(1 << 20, 1 << 20, device_mesh=meshes["4"], placements=[Shard(0)])
    with pytest.raises(dt.OutOfMemoryError, match="out of memory") as info:
        (x + 1).sum().item()
    assert isinstance(info.value, dt.WorkerError) and info.value.rank in range(4)
    still_works(dt, meshes)
