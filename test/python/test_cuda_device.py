"""init_device_mesh("cuda", ...): the mesh's device type reaches the workers'
reports (their Hello says how many CUDA devices each process sees). Without
a GPU the call raises a DTorchError that names the rank, its host and why,
and the session stays usable. On a machine with GPUs scripts/gpu-check.sh
runs the CUDA kernels themselves (cuda_kernel_tests)."""
import numpy as np
import pytest


def test_cuda_mesh_without_gpu_is_a_clear_dtorch_error(dt):
    with pytest.raises(dt.DTorchError) as info:
        dt.init_device_mesh("cuda", (2,))
    message = str(info.value)
    assert "init_device_mesh('cuda')" in message
    if "no CUDA device" not in message:
        pytest.skip("the workers have GPUs: " + message)
    assert "rank 0" in message and "on host" in message, message
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
