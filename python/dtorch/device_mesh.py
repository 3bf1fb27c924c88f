"""DeviceMesh: an N-dimensional array of ranks with optional dim names.

A mesh is the grid that placements refer to: the i-th placement of a tensor
says how it is laid out along dim i of its mesh. Meshes use ranks of the
world that `dtorch.init` started (the first mesh starts it implicitly).
"""
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
    """An N-dimensional arrangement of ranks, as torch's ``DeviceMesh``.

    The mesh may use any subset of the world's ranks, in any order. Creating
    the first mesh starts the embedded cluster if `dtorch.init` was not
    called. ``mesh["name"]`` gives a sub-mesh (see `__getitem__`). Two mesh
    objects are equal when they are the same view of the same mesh.

    Args:
        device_type (str): ``"cpu"``; ``"cuda"`` where the workers have GPUs.
        mesh: an array-like of distinct global ranks; its shape is the mesh
            shape.
        mesh_dim_names (tuple[str, ...], optional): one name per mesh dim.

    Raises:
        ValueError: the mesh needs a rank the world does not have, or the
            number of names differs from the number of mesh dims.

    Example:
        >>> import dtorch
        >>> mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
        >>> mesh.shape, mesh.ndim, mesh.size()
        ((2, 2), 2, 4)
        >>> dtorch.DeviceMesh("cpu", [3, 1]).mesh.tolist()
        [3, 1]
    """

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
        """tuple[int, ...]: the number of ranks along each mesh dim.

        Example:
            >>> import dtorch
            >>> dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))["tp"].shape
            (2,)
        """
        return tuple(self._root._ranks.shape[a] for a in self._axes)

    @property
    def ndim(self):
        """int: the number of mesh dims (the number of placements a tensor on
        this mesh has).

        Example:
            >>> import dtorch
            >>> dtorch.init_device_mesh("cpu", (2, 2)).ndim
            2
        """
        return len(self._axes)

    def size(self, mesh_dim=None):
        """The number of ranks of the mesh, or along one mesh dim.

        Args:
            mesh_dim (int, optional): a mesh dim; all ranks when omitted.

        Example:
            >>> import dtorch
            >>> mesh = dtorch.init_device_mesh("cpu", (2, 2))
            >>> mesh.size(), mesh.size(1)
            (4, 2)
        """
        if mesh_dim is None:
            return int(np.prod(self.shape))
        return self.shape[mesh_dim]

    @property
    def mesh(self):
        """numpy.ndarray: the global ranks of the mesh, one per position.

        For a sub-mesh, the array starts with the sub-mesh's dims and goes on
        with the parent's other dims, so ``mesh["tp"].mesh[i]`` lists the
        ranks at position ``i`` along ``tp``.

        Example:
            >>> import dtorch
            >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
            >>> mesh.mesh.tolist(), mesh["tp"].mesh.tolist()
            ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
        """
        if self._root is self:
            return self._ranks.copy()
        return self._ranks.transpose(
            self._axes + tuple(a for a in range(self._ranks.ndim) if a not in self._axes))

    def __getitem__(self, names):
        """The sub-mesh of the named dims: ``mesh["tp"]``, ``mesh["dp", "tp"]``.

        A sub-mesh is a view of this mesh, not a new group of ranks: a tensor
        placed on it is this mesh's tensor with `Replicate` on every dim the
        view leaves out, so tensors on a sub-mesh and on its parent mix in
        one op.

        Args:
            names (str or tuple[str, ...]): mesh dim names.

        Raises:
            KeyError: the mesh has no names, or none of this name.

        Example:
            >>> import dtorch
            >>> from dtorch import Shard
            >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
            >>> b = dtorch.ones(4, 8, device_mesh=mesh["tp"], placements=[Shard(1)])
            >>> b.placements, b.device_mesh.mesh_dim_names
            ((Shard(dim=1),), ('tp',))
            >>> (b + dtorch.ones(4, 8, device_mesh=mesh)).placements
            (Replicate(), Shard(dim=1))
        """
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
    """A mesh of the given shape over ranks 0..n-1 in row-major order, as
    torch's ``init_device_mesh``.

    The first mesh starts the embedded cluster (see `dtorch.init`).

    Args:
        device_type (str): ``"cpu"``; ``"cuda"`` where the workers have GPUs.
        mesh_shape (tuple[int, ...]): ranks along each mesh dim.
        mesh_dim_names (tuple[str, ...], optional): one name per mesh dim.

    Returns:
        DeviceMesh: the new mesh.

    Raises:
        ValueError: the mesh has more ranks than the world, or the number of
            names differs from the number of mesh dims.

    Example:
        >>> import dtorch
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        >>> mesh
        DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp'))
    """
    mesh_shape = tuple(mesh_shape)
    n = int(np.prod(mesh_shape)) if mesh_shape else 1
    return DeviceMesh(device_type, np.arange(n).reshape(mesh_shape), mesh_dim_names=mesh_dim_names)


def default_mesh():
    """The mesh of tensors created without ``device_mesh``: every rank of the
    world as one 1-D mesh (starts the cluster if needed).

    Example:
        >>> from dtorch.device_mesh import default_mesh
        >>> default_mesh().ndim
        1
    """
    if _default[0] is None or _default[0]._mesh_id not in _roots:
        _runtime.ensure_initialized()
        _default[0] = init_device_mesh("cpu", (_C.world_size(),))
    return _default[0]


def mesh_of(tensor):
    """The `DeviceMesh` (or sub-mesh) a tensor was placed on; the value of
    ``tensor.device_mesh``.

    Example:
        >>> import dtorch
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> mesh_of(dtorch.ones(2, device_mesh=mesh)) == mesh
        True
    """
    if tensor._view >= 0:
        return _views[tensor._view]
    return _roots[tensor._mesh_id]
