"""Layout helpers shared by the parallel styles, `fully_shard` and
`distribute_module`: placing a tensor on some dims of a mesh while keeping
its layout on the others, and laying a module's Parameter out anew in place
(the Python object stays, so modules and optimizers keep seeing it)."""
import numpy as np

from .. import _C
from ..autograd import no_grad
from ..device_mesh import mesh_of
from ..placement_types import Placement, Replicate

Tensor = _C.Tensor

_REPLICATE = ("R", 0, "")


def _as_list(placements):
    if isinstance(placements, Placement):
        return [placements]
    return list(placements)


def root_placements(x, mesh, placements, keep_others=True):
    """The raw root-mesh placements of `x` with the dims of `mesh` (a view
    of x's root mesh) set to `placements` (one per dim of `mesh`). The other
    root dims keep x's placements (Partial made Replicate) when
    `keep_others`, else become Replicate."""
    placements = _as_list(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"expected {mesh.ndim} placements for {mesh}, got {placements}")
    new = mesh._root_placements(placements, x.ndim)
    covered = set(mesh._axes)
    out = []
    for axis, (k, d, o) in enumerate(x._placements_raw):
        if axis in covered:
            out.append(tuple(new[axis]))
        elif keep_others and k != "P":
            out.append((k, d, o))
        else:
            out.append(_REPLICATE)
    return out


def same_root(x, mesh):
    return x._mesh_id == mesh._mesh_id


def to_layout(x, mesh, placements):
    """`x` redistributed so that its placements on the dims of `mesh` are
    `placements`; its placements on the root mesh's other dims stay (as a
    data-parallel batch dim does under a tensor-parallel module). Anything
    that is not a dtorch tensor passes unchanged. Recorded like any op, so
    the gradient flows back through it."""
    if not isinstance(x, Tensor) or placements is None:
        return x
    if not same_root(x, mesh):
        raise ValueError(f"a tensor on {mesh_of(x)} cannot enter a module parallelized on "
                         f"{mesh}: create it on the same (root) mesh")
    raw = root_placements(x, mesh, placements)
    if [tuple(r) for r in x._placements_raw] == raw:
        return x
    return _C.redistribute(x, mesh._mesh_id, raw, x._view if x._view >= 0 else mesh._view)


def from_global(value, mesh, placements):
    """A numpy array or torch tensor (a global value) placed on `mesh` with
    `placements` (other root mesh dims Replicate); anything else (dtorch
    tensors included) is returned as it is."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray) or (hasattr(value, "detach") and hasattr(value, "numpy")):
        from .._creation import tensor
        return tensor(value, device_mesh=mesh, placements=_as_list(placements))
    return value


def _laid_out(t, mesh, placements, keep_others):
    """A tensor with t's value laid out with `placements` on `mesh` (no
    autograd history). A layout the mesh view cannot express (another mesh
    dim sharded) reads as the root mesh's."""
    placements = _as_list(placements)
    if same_root(t, mesh):
        raw = root_placements(t, mesh, placements, keep_others)
        view = mesh._view
        if t.is_meta:
            return _C.meta(list(t.shape), t.dtype, mesh._mesh_id, raw, view)
        with no_grad():
            out = _C.redistribute(t, mesh._mesh_id, raw, view)
            if out is t:
                out = _C.alias(t)
        return out
    # Another mesh: the value moves through the client once (at set-up).
    raw = mesh._root_placements(placements, t.ndim)
    if t.is_meta:
        return _C.meta(list(t.shape), t.dtype, mesh._mesh_id, raw, mesh._view)
    arr = t.numpy()
    if t.dtype == _C.dtype.bfloat16:
        return _C.from_numpy(np.ascontiguousarray(arr).view(np.uint16), mesh._mesh_id, raw,
                             mesh._view, _C.dtype.bfloat16)
    return _C.from_numpy(np.ascontiguousarray(arr), mesh._mesh_id, raw, mesh._view)


def relayout_(t, mesh, placements, keep_others=True):
    """Lays the tensor `t` (a Parameter or buffer) out with `placements` on
    `mesh`, in place: the same Python object names the value in its new
    layout afterwards (a meta tensor only changes its metadata). Its
    gradient, if any, moves along. Returns `t`."""
    new = _laid_out(t, mesh, placements, keep_others)
    _C.rebind(t, new, mesh._view)
    if t.grad is not None:
        t.grad = _laid_out(t.grad, mesh, placements, keep_others)
    return t


def mesh_placements(t, mesh):
    """t's placements on the dims of `mesh` (a view of t's root mesh)."""
    from ..placement_types import from_raw
    raw = t._placements_raw
    return tuple(from_raw(raw[g[0]]) for g in mesh._groups)


def replicate_others(mesh, placements):
    return _as_list(placements) if placements is not None else [Replicate()] * mesh.ndim
