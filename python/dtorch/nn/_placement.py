"""Where a module's parameters live: the `device_mesh` and `placements`
keywords of every module, else the module-level default mesh
(`set_default_device_mesh`, `default_device_mesh`), else dtorch's default
mesh (every rank of the world as one 1-D mesh), with `Replicate` placements.
"""
import contextlib

from ..placement_types import Placement, Replicate, Shard

_default = {"mesh": None, "meta": False}


def set_default_device_mesh(mesh):
    """Makes `mesh` the mesh of parameters created without ``device_mesh``
    (None restores dtorch's default mesh). Returns the previous one."""
    previous = _default["mesh"]
    _default["mesh"] = mesh
    return previous


def get_default_device_mesh():
    """The mesh new parameters go to when no ``device_mesh`` is given."""
    if _default["mesh"] is not None:
        return _default["mesh"]
    from ..device_mesh import default_mesh
    return default_mesh()


@contextlib.contextmanager
def default_device_mesh(mesh):
    """``with dtorch.nn.default_device_mesh(mesh): model = MLP()`` puts every
    parameter made inside on `mesh` (replicated unless a module says
    otherwise)."""
    previous = set_default_device_mesh(mesh)
    try:
        yield mesh
    finally:
        set_default_device_mesh(previous)


@contextlib.contextmanager
def meta_init():
    """``with dtorch.nn.meta_init(): model = GPT()`` builds modules whose
    parameters and buffers are meta tensors (torch's ``device="meta"``):
    shapes, dtypes, meshes and placements only, no value on the workers and
    nothing recorded. Parallelize the model, then ``model.to_empty()`` and
    ``reset_parameters()`` (or ``load_state_dict``) give the values in their
    final layout."""
    previous = _default["meta"]
    _default["meta"] = True
    try:
        yield
    finally:
        _default["meta"] = previous


def param_placements(placements, name, ndim, mesh):
    """The placements of parameter `name` (with `ndim` dims) from a module's
    ``placements`` keyword: None (replicated), one list for every parameter
    (a Shard of a dim the parameter lacks becomes Replicate, so
    ``[Shard(0)]`` shards a weight and its bias alike) or a dict by
    parameter name (names it lacks are replicated)."""
    if isinstance(placements, dict):
        placements = placements.get(name)
    if placements is None:
        return [Replicate()] * mesh.ndim
    if isinstance(placements, Placement):
        placements = [placements]
    out = []
    for p in placements:
        if isinstance(p, Shard) and not -ndim <= p.dim < ndim:
            p = Replicate()
        out.append(p)
    return out


def factory(device_mesh, placements, dtype, device=None):
    """A function (name, shape, kind, value) -> Tensor making a module's
    parameter values on the right mesh; `kind` is "full", "uniform" or
    "normal". With ``device="meta"`` (or inside `meta_init`) it makes meta
    tensors."""
    from .. import _C
    from .._creation import full, rand, randn
    if device not in (None, "cpu", "meta") and not str(device).startswith("cuda"):
        raise ValueError(f"device {device!r}: dtorch modules take device_mesh=, or "
                         "device='meta'")
    meta = device == "meta" or (device is None and _default["meta"])
    mesh = device_mesh if device_mesh is not None else get_default_device_mesh()
    dt = dtype if dtype is not None else _C.dtype.float32

    def make(name, shape, kind="full", value=0.0):
        pl = param_placements(placements, name, len(shape), mesh)
        if meta:
            raw = mesh._root_placements(pl, len(shape))
            return _C.meta(list(shape), dt, mesh._mesh_id, raw, mesh._view)
        if kind == "full":
            return full(tuple(shape), value, device_mesh=mesh, placements=pl, dtype=dt)
        fn = rand if kind == "uniform" else randn
        return fn(*shape, device_mesh=mesh, placements=pl, dtype=dt)
    return make
