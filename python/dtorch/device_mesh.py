"""DeviceMesh: an N-D array of ranks with optional dim names."""
import numpy as np

from . import _C, _runtime
from .placement_types import Replicate, Shard, from_raw, to_raw

# Every DeviceMesh object (roots and sub-mesh views) by view id.
_views = []
_roots = {}  # C++ mesh id -> root DeviceMesh
_default = [None]


def _reset():
    _views.clear()
    _roots.clear()
    _default[0] = None


class DeviceMesh:
    """`DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))`."""

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _parent=None, _axes=None):
        self.device_type = device_type
        if _parent is not None:
            root = _parent._root
            self._root = root
            self._axes = tuple(_parent._axes[a] for a in _axes)
            self._ranks = root._ranks
            self._mesh_id = root._mesh_id
            self.mesh_dim_names = (tuple(root.mesh_dim_names[a] for a in self._axes)
                                   if root.mesh_dim_names else None)
        else:
            _runtime.ensure_initialized()
            ranks = np.asarray(mesh, dtype=np.int64)
            if ranks.ndim == 0:
                ranks = ranks.reshape(1)
            world = _C.world_size()
            if ranks.size > world or (ranks.size and ranks.max() >= world):
                raise ValueError(
                    f"a mesh of {ranks.size} ranks (max rank {int(ranks.max())}) does not fit "
                    f"in a world of {world} ranks")
            if mesh_dim_names is not None:
                mesh_dim_names = tuple(mesh_dim_names)
                if len(mesh_dim_names) != ranks.ndim:
                    raise ValueError(f"mesh has {ranks.ndim} dims but {len(mesh_dim_names)} names")
                if not all(isinstance(n, str) for n in mesh_dim_names):
                    raise TypeError(f"mesh_dim_names must be strings, got {mesh_dim_names}")
                if len(set(mesh_dim_names)) != len(mesh_dim_names):
                    raise ValueError(f"mesh_dim_names must be unique, got {mesh_dim_names}")
            self.mesh_dim_names = mesh_dim_names
            self._ranks = ranks
            self._root = self
            self._axes = tuple(range(ranks.ndim))
            self._mesh_id = _C.add_mesh(list(ranks.shape), list(mesh_dim_names or ()),
                                        ranks.flatten().tolist(), device_type)
            _roots[self._mesh_id] = self
        self._view = len(_views)
        _views.append(self)

    # ---- torch's DeviceMesh surface ------------------------------------------
    @property
    def shape(self):
        return tuple(self._root._ranks.shape[a] for a in self._axes)

    @property
    def ndim(self):
        return len(self._axes)

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            return int(np.prod(self.shape))
        return self.shape[mesh_dim]

    @property
    def mesh(self):
        if self._root is self:
            return self._ranks.copy()
        return self._ranks.transpose(
            self._axes + tuple(a for a in range(self._ranks.ndim) if a not in self._axes))

    def __getitem__(self, names):
        if isinstance(names, str):
            names = (names,)
        if not self.mesh_dim_names:
            raise KeyError("this mesh has no dim names")
        axes = []
        for n in names:
            if n not in self.mesh_dim_names:
                raise KeyError(f"mesh has no dim named {n!r} (it has {self.mesh_dim_names})")
            axes.append(self.mesh_dim_names.index(n))
        return DeviceMesh(self.device_type, None, _parent=self, _axes=tuple(axes))

    def __eq__(self, other):
        return (isinstance(other, DeviceMesh) and other._mesh_id == self._mesh_id
                and other._axes == self._axes)

    def __hash__(self):
        return hash((self._mesh_id, self._axes))

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist()}{names})"

    # ---- placements between this view and its root -----------------------------
    def _root_placements(self, placements, tensor_ndim):
        raw = to_raw(placements, self.ndim)
        full = [Replicate()._raw()] * self._root.ndim
        for axis, r in zip(self._axes, raw):
            if r[0] == "S":
                dim = r[1] + tensor_ndim if r[1] < 0 else r[1]
                r = ("S", dim, "")
            full[axis] = r
        return full

    def _view_placements(self, raw_root):
        return tuple(from_raw(raw_root[a]) for a in self._axes)


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """Ranks 0..n-1 in row-major order, as torch's init_device_mesh."""
    mesh_shape = tuple(mesh_shape)
    n = int(np.prod(mesh_shape)) if mesh_shape else 1
    return DeviceMesh(device_type, np.arange(n).reshape(mesh_shape), mesh_dim_names=mesh_dim_names)


def default_mesh():
    """All ranks of the cluster as a 1-D mesh."""
    if _default[0] is None or _default[0]._mesh_id not in _roots:
        _runtime.ensure_initialized()
        _default[0] = init_device_mesh("cpu", (_C.world_size(),))
    return _default[0]


def mesh_of(tensor):
    if tensor._view >= 0:
        return _views[tensor._view]
    return _roots[tensor._mesh_id]
