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
    called. ``mesh["name"]`` gives a sub-mesh (see `__getitem__`) and
    ``mesh["dp", "cp"]._flatten()`` a 1-D view of several dims (see
    `_flatten`). Two mesh objects are equal when they are the same view of
    the same mesh.

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

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _parent=None, _groups=None):
        self.device_type = device_type
        if _parent is not None:
            # A view: each of its dims is a group of root mesh dims (one, or
            # several flattened in row-major order), named in `mesh_dim_names`.
            root = _parent._root
            self._root = root
            self._groups = tuple(tuple(g) for g in _groups)
            self._ranks = root._ranks
            self._mesh_id = root._mesh_id
            self.mesh_dim_names = (tuple(root._group_name(g) for g in self._groups)
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
            self._groups = tuple((a,) for a in range(ranks.ndim))
            self._flattened = {}  # name -> root dims, made by _flatten
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
        dims = self._root._ranks.shape
        return tuple(int(np.prod([dims[a] for a in g])) for g in self._groups)

    @property
    def ndim(self):
        """int: the number of mesh dims (the number of placements a tensor on
        this mesh has).

        Example:
            >>> import dtorch
            >>> dtorch.init_device_mesh("cpu", (2, 2)).ndim
            2
        """
        return len(self._groups)

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
        ranks at position ``i`` along ``tp``; a flattened dim (`_flatten`)
        numbers its positions row-major over the dims it joins.

        Example:
            >>> import dtorch
            >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
            >>> mesh.mesh.tolist(), mesh["tp"].mesh.tolist()
            ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
        """
        if self._root is self:
            return self._ranks.copy()
        axes = self._axes
        rest = tuple(a for a in range(self._ranks.ndim) if a not in axes)
        moved = self._ranks.transpose(axes + rest)
        return moved.reshape(self.shape + tuple(self._ranks.shape[a] for a in rest))

    def __getitem__(self, names):
        """The sub-mesh of the named dims: ``mesh["tp"]``, ``mesh["dp", "tp"]``.

        A sub-mesh is a view of this mesh, not a new group of ranks: a tensor
        placed on it is this mesh's tensor with `Replicate` on every dim the
        view leaves out, so tensors on a sub-mesh and on its parent mix in
        one op. Names made by `_flatten` (``"dp_cp"``) can be looked up on the
        mesh they were flattened from, as in torch.

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
        if not self.mesh_dim_names and not self._root._flattened:
            raise KeyError("this mesh has no dim names")
        groups = []
        for n in names:
            if self.mesh_dim_names and n in self.mesh_dim_names:
                groups.append(self._groups[self.mesh_dim_names.index(n)])
            elif n in self._root._flattened:
                groups.append(self._root._flattened[n])
            else:
                raise KeyError(f"mesh has no dim named {n!r} (it has {self.mesh_dim_names})")
        return DeviceMesh(self.device_type, None, _parent=self, _groups=groups)

    def _flatten(self, mesh_dim_name=None):
        """This mesh as a 1-D mesh of all its ranks, as torch's
        ``DeviceMesh._flatten``: ``mesh["dp", "cp"]._flatten()``.

        Position ``i * n_cp + j`` of the flattened dim is position ``(i, j)``
        of ``("dp", "cp")``. A tensor placed on it is the parent-mesh tensor
        with the placement repeated on every joined dim: ``Shard(d)`` splits
        tensor dim ``d`` by ``dp``, then each piece by ``cp`` (the nested split
        of ``[Shard(d), Shard(d)]``, which for an even split is the same as
        ``dp * cp`` equal pieces); ``Replicate()`` and ``Partial(op)`` hold on
        both. The parent's other dims are ``Replicate()``. The name is then
        also known to the parent: ``mesh["dp_cp"]``.

        Args:
            mesh_dim_name (str, optional): the new dim's name; by default the
                joined names with ``_``.

        Raises:
            ValueError: the dims are not in the parent's order, or the name is
                taken by another dim.

        Example:
            >>> import dtorch
            >>> mesh = dtorch.init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("dp", "cp", "tp"))
            >>> flat = mesh["dp", "tp"]._flatten()
            >>> flat.shape, flat.mesh_dim_names, flat.mesh.tolist()
            ((4,), ('dp_tp',), [[0], [1], [2], [3]])
            >>> mesh["dp_tp"] == flat
            True
        """
        axes = self._axes
        if list(axes) != sorted(axes) or len(set(axes)) != len(axes):
            raise ValueError(
                f"_flatten needs the dims in the order of the parent mesh, got {self.mesh_dim_names}")
        root = self._root
        if mesh_dim_name is None:
            mesh_dim_name = "_".join(root.mesh_dim_names[a] for a in axes) if root.mesh_dim_names \
                else "_".join(str(a) for a in axes)
        if not isinstance(mesh_dim_name, str):
            raise TypeError(f"mesh_dim_name must be a string, got {mesh_dim_name!r}")
        taken = root._flattened.get(mesh_dim_name)
        if (root.mesh_dim_names and mesh_dim_name in root.mesh_dim_names
                and (root.mesh_dim_names.index(mesh_dim_name),) != axes) or \
                (taken is not None and taken != axes):
            raise ValueError(f"mesh dim name {mesh_dim_name!r} is already used for other dims")
        root._flattened[mesh_dim_name] = axes
        flat = DeviceMesh(self.device_type, None, _parent=self, _groups=(axes,))
        flat.mesh_dim_names = (mesh_dim_name,)
        return flat

    def __eq__(self, other):
        return (isinstance(other, DeviceMesh) and other._mesh_id == self._mesh_id
                and other._groups == self._groups)

    def __hash__(self):
        return hash((self._mesh_id, self._groups))

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist()}{names})"

    # ---- placements between this view and its root -----------------------------
    @property
    def _axes(self):
        """The root mesh dims this view covers, in the order of its dims."""
        return tuple(a for g in self._groups for a in g)

    def _group_name(self, group):
        if len(group) == 1:
            return self.mesh_dim_names[group[0]]
        for name, g in self._flattened.items():
            if g == group:
                return name
        return "_".join(self.mesh_dim_names[a] for a in group)

    def _root_placements(self, placements, tensor_ndim):
        raw = to_raw(placements, self.ndim)
        full = [Replicate()._raw()] * self._root.ndim
        for group, r in zip(self._groups, raw):
            if r[0] == "S":
                dim = r[1] + tensor_ndim if r[1] < 0 else r[1]
                r = ("S", dim, "")
            for axis in group:
                full[axis] = r
        return full

    def _view_placements(self, raw_root):
        """This view's placements of a tensor whose root placements are
        `raw_root`, or None when the view cannot express them (a flattened
        dim whose root dims differ, or a dim outside the view that is not
        Replicate)."""
        raw_root = [tuple(r) for r in raw_root]
        out = []
        for group in self._groups:
            first = raw_root[group[0]]
            if any(raw_root[a] != first for a in group):
                return None
            out.append(from_raw(first))
        covered = set(self._axes)
        if any(r[0] != "R" for a, r in enumerate(raw_root) if a not in covered):
            return None
        return tuple(out)


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
        ValueError: the mesh has more ranks than the world, the number of
            names differs from the number of mesh dims, or the device type
            is neither ``"cpu"`` nor ``"cuda"``.
        DTorchError: ``"cuda"`` where a rank's worker has no CUDA device
            (the message names the rank, its host and why).

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
        view = _views[tensor._view]
        # An op can leave a tensor of a view in a layout the view cannot
        # express (e.g. a flattened dim's root dims sharded differently);
        # it then reads as a tensor of the whole mesh.
        if view._root is view or view._view_placements(tensor._placements_raw) is not None:
            return view
        return view._root
    return _roots[tensor._mesh_id]
