"""init_device_mesh("cuda", ...): the mesh's device type reaches the workers'
reports (their Hello says how many CUDA devices each process sees). Without
a GPU the call raises a DTorchError that names every rank without one, with
its host and why, and the session stays usable. With GPUs the workers compute
on the device the mesh gives each rank (its index on its host modulo the
host's GPUs; puts and fetches through pinned buffers), collectives included,
and the results equal the CPU mesh's; scripts/gpu-check.sh runs this file
on a GPU machine."""
import numpy as np
import pytest

from conftest import assert_close
from dtorch import Replicate, Shard


def cuda_mesh_or_skip(dt, shape, **kwargs):
    try:
        return dt.init_device_mesh("cuda", shape, **kwargs)
    except dt.DTorchError as error:
        if "no CUDA device" in str(error):
            pytest.skip(str(error))
        raise


def test_cuda_mesh_without_gpu_is_a_clear_dtorch_error(dt):
    with pytest.raises(dt.DTorchError) as info:
        dt.init_device_mesh("cuda", (2,))
    message = str(info.value)
    assert "init_device_mesh('cuda')" in message
    if "no CUDA device" not in message:
        pytest.skip("the workers have GPUs: " + message)
    assert "rank 0" in message and "on host" in message, message
    # Every rank of the mesh without a GPU is named, not just the first.
    assert "rank 1 on host" in message, message
    # The reason comes from the worker (driver error, no device, or a build
    # without the CUDA backend) or from a backend without workers.
    assert message.rstrip().endswith(")"), message


def test_the_session_stays_usable_after_the_cuda_error(dt):
    with pytest.raises(dt.DTorchError):
        dt.init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    x = dt.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2), device_mesh=mesh)
    assert (x + x).numpy().tolist() == (2 * np.arange(8.0).reshape(4, 2)).tolist()


def test_an_unknown_device_type_is_a_value_error(dt):
    with pytest.raises(ValueError, match="device type 'tpu'"):
        dt.init_device_mesh("tpu", (2,))


def test_a_cuda_mesh_computes_as_the_cpu_mesh(dt):
    gpu = cuda_mesh_or_skip(dt, (2, 2), mesh_dim_names=("dp", "tp"))
    cpu = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    results = []
    for mesh in (gpu, cpu):
        x = dt.tensor(a, device_mesh=mesh, placements=[Shard(0), Replicate()])
        w = dt.tensor(b, device_mesh=mesh, placements=[Replicate(), Shard(1)])
        y = (x @ w).relu() * 2.0 + 1.0
        # A reduction over the sharded dim: an all_reduce on the mesh.
        total = y.sum(0)
        results.append((y.numpy(), total.numpy()))
    assert_close(results[0][0], results[1][0], tol=1e-4)
    assert_close(results[0][1], results[1][1], tol=1e-4)
    assert_close(results[1][0], np.maximum(a @ b, 0) * 2 + 1, tol=1e-4)
