"""repr() and str() of a dtorch.Tensor, formatted like torch's.

Printing fetches the values (as printing a torch tensor on a device copies it
to the host): `tensor([[1., 2.], [3., 4.]], dtype=dtorch.float32,
device_mesh=DeviceMesh(...), placements=(Shard(dim=0), Replicate()))`. A
failing fetch raises from repr() with its own error.
"""
import numpy as np

_PREFIX = "tensor("


def values_text(values):
    """The numbers as torch lays them out: `1.` when every float is whole,
    else 4 decimals for all; continuation lines aligned under the first
    bracket; summarized beyond 1,000 elements."""
    if values.dtype.kind not in "biuf":  # e.g. bfloat16 from ml_dtypes
        values = values.astype(np.float32)
    floatmode = "maxprec_equal"
    if values.dtype.kind == "f":
        finite = values[np.isfinite(values)]
        if np.any(finite != np.round(finite)):
            floatmode = "fixed"
    return np.array2string(values, separator=", ", prefix=_PREFIX, precision=4,
                           floatmode=floatmode, threshold=1000, edgeitems=3)


def tensor_repr(tensor):
    if getattr(tensor, "is_meta", False):  # metadata only, nothing to fetch
        return (f"tensor(..., device='meta', size={tuple(tensor.shape)}, "
                f"dtype=dtorch.{tensor.dtype.name}, placements={tuple(tensor.placements)!r})")
    values = np.asarray(tensor.numpy())  # waits; a fetch error propagates
    parts = [values_text(values)]
    if values.size == 0 and values.ndim != 1:
        parts.append(f"size={tuple(values.shape)}")
    parts.append(f"dtype=dtorch.{tensor.dtype.name}")
    parts.append(f"device_mesh={tensor.device_mesh!r}")
    parts.append(f"placements={tuple(tensor.placements)!r}")
    fn = tensor.grad_fn
    if fn is not None:
        parts.append(f"grad_fn={fn!r}")
    elif tensor.requires_grad:
        parts.append("requires_grad=True")
    return _PREFIX + ", ".join(parts) + ")"
