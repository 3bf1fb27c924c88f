"""Gradient clipping, as torch.nn.utils: computed on the workers (nothing
waits) when every gradient lives on one mesh."""
import math

from ... import _C
from .._grad import grad_of, no_grad

Tensor = _C.Tensor


def _grads(parameters):
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [g for g in (grad_of(p) for p in params) if g is not None]


def _norm_power(g, norm_type):
    """sum(|g|^p) (or max |g| for inf) of one gradient, as a 0-d tensor."""
    a = g.abs()
    if math.isinf(norm_type):
        return a.amax() if norm_type > 0 else a.amin()
    if norm_type == 2.0:
        return (g * g).sum()
    if norm_type == 1.0:
        return a.sum()
    return (a ** norm_type).sum()


def _combine(parts, norm_type):
    total = parts[0]
    for t in parts[1:]:
        if math.isinf(norm_type):
            total = total.maximum(t) if norm_type > 0 else total.minimum(t)
        else:
            total = total + t
    return total


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scales the gradients in place so that their joint norm is at most
    `max_norm`; returns the norm before clipping (a 0-d tensor).

    The norm is computed on the workers; gradients on several meshes need one
    fetch of each mesh's partial norm. ``error_if_nonfinite=True`` waits for
    the norm.
    """
    from ..._creation import tensor
    grads = _grads(parameters)
    norm_type = float(norm_type)
    max_norm = float(max_norm)
    if not grads:
        return tensor(0.0)
    by_mesh = {}
    for g in grads:
        by_mesh.setdefault(g._mesh_id, []).append(g)
    with no_grad():
        per_mesh = {m: _combine([_norm_power(g, norm_type).to(_C.dtype.float32)
                                 if g.dtype != _C.dtype.float64 else _norm_power(g, norm_type)
                                 for g in gs], norm_type)
                    for m, gs in by_mesh.items()}
        if len(per_mesh) > 1:
            values = [float(t.item()) for t in per_mesh.values()]
            joint = max(values) if math.isinf(norm_type) else sum(values)
            norms = {m: tensor(joint, device_mesh=gs[0].device_mesh, dtype=per_mesh[m].dtype)
                     for m, gs in by_mesh.items()}
        else:
            norms = per_mesh
        if not math.isinf(norm_type):
            norms = {m: t if norm_type == 1.0 else t ** (1.0 / norm_type)
                     for m, t in norms.items()}
        total = next(iter(norms.values()))
        if error_if_nonfinite and not math.isfinite(float(total.item())):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                               "`parameters` is non-finite, so it cannot be clipped. To "
                               "disable this error and scale the gradients by the non-finite "
                               "norm anyway, set `error_if_nonfinite=False`")
        for m, gs in by_mesh.items():
            coef = (max_norm / (norms[m] + 1e-6)).minimum(
                _C.full([], 1.0, norms[m].dtype, norms[m]._mesh_id,
                        [("R", 0, "")] * len(norms[m]._placements_raw), norms[m]._view))
            for g in gs:
                g._assign(g * coef.to(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient element to [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g._assign(g.clamp(-clip_value, clip_value))
