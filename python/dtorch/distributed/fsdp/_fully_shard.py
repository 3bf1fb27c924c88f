"""fully_shard: ZeRO-3 / FSDP by placements.

Each parameter a fully-sharded module manages is laid out ``Shard(0)`` on
the data-parallel mesh dim (its other mesh dims keep their placements, so a
tensor-parallel weight becomes sharded on both). Gradients reach a
parameter in its placements and optimizer state is made like its
parameter, so both are ``Shard(0)`` too: each rank holds a 1/n piece of
parameters, gradients and optimizer state between steps.

A forward pre-hook puts the parameter redistributed to ``Replicate()`` on
that dim (an all_gather the compiler inserts) in the module's place for the
forward, and a forward hook puts the sharded Parameter back. The gathered
tensor is an ordinary op result on the autograd tape, so its gradient (a
Partial sum when the batch is sharded on the same dim) flows back through
the redistribute's gradient into the parameter's ``Shard(0)`` layout: a
reduce_scatter, chosen by the redistribution planner.

With ``reshard_after_forward=True`` the forward hook also releases the
gathered copies (`_release_gathered`: metadata-only from then on, autograd
record kept), and the backward reads a fresh gather of the shard instead
(autograd._regathered: a redistribute marked ``dtorch.regather``, which the
compiler keeps apart from the forward's gather). With False the backward
reads the forward's gathered copy.
"""
from ... import _C
from .. import _layout
from ...placement_types import Replicate, Shard

__all__ = ["fully_shard", "FSDPModule"]


class _FSDPState:
    """The parameters one fully_shard call manages and their gathered
    copies while the module runs."""

    def __init__(self, module, mesh, reshard_after_forward, managed):
        self.module = module
        self.mesh = mesh
        self.reshard_after_forward = reshard_after_forward
        self.managed = managed  # [(owner module, name, Parameter)]
        self.unsharded = False
        self.gathered_copies = []  # the tensors unshard() gathered

    def gathered(self, param):
        raw = _layout.root_placements(param, self.mesh, [Replicate()] * self.mesh.ndim)
        if [tuple(r) for r in param._placements_raw] == raw:
            return param
        return _C.redistribute(param, self.mesh._mesh_id, raw, param._view)

    def unshard(self):
        self.gathered_copies = []
        for owner, name, param in self.managed:
            full = self.gathered(param)
            if full is not param:
                self.gathered_copies.append(full)
            owner._parameters[name] = full
        self.unsharded = True

    def reshard(self, after_forward=False):
        """Puts the sharded Parameters back. After a forward with
        reshard_after_forward=True it also releases the gathered copies
        (their values become metadata only) that the autograd tape can
        gather again: the backward's formulas then read a second all_gather
        of the shard (autograd._regathered) and the forward's gathered value
        is dead once the forward has used it."""
        for owner, name, param in self.managed:
            owner._parameters[name] = param
        self.unsharded = False
        if after_forward and self.reshard_after_forward:
            for full in self.gathered_copies:
                _release_gathered(full)
        self.gathered_copies = []


def _release_gathered(full):
    """Turns the gathered copy `full` into a meta tensor of the same layout
    (the tensor keeps its autograd record and identity, drops its value),
    when the tape can make it again: it has a grad_fn, a redistribute of a
    tensor that holds a value. Returns whether it did."""
    fn = full.grad_fn
    if full.is_meta or fn is None or fn.op != "redistribute" or fn.inputs[0].is_meta:
        return False
    from ... import autograd
    autograd._note_released()
    _C.rebind(full, _C.meta(list(full.shape), full.dtype, full._mesh_id,
                            full._placements_raw, full._view), full._view)
    return True


class FSDPModule:
    """The class a module takes on after `fully_shard` (torch's
    ``FSDPModule``, mixed in front of the module's own class).

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.fsdp import FSDPModule, fully_shard
        >>> fc = fully_shard(dtorch.nn.Linear(4, 8))
        >>> isinstance(fc, FSDPModule), isinstance(fc, dtorch.nn.Linear)
        (True, True)
    """

    def unshard(self, async_op=False):
        """Puts the gathered parameters (replicated on the data-parallel
        dim) in the module until `reshard` (a forward puts the sharded ones
        back when it ends).

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.fsdp import fully_shard
            >>> fc = fully_shard(dtorch.nn.Linear(4, 8))
            >>> fc.unshard()
            >>> fc._parameters["weight"].placements
            (Replicate(),)
            >>> fc.reshard()
            >>> fc.weight.placements
            (Shard(dim=0),)
        """
        self._fsdp_state.unshard()

    def reshard(self):
        """Puts the sharded Parameters back (see `unshard`).

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.fsdp import fully_shard
            >>> fc = fully_shard(dtorch.nn.Linear(4, 8))
            >>> fc.reshard()
            >>> fc.weight.placements
            (Shard(dim=0),)
        """
        self._fsdp_state.reshard()


_fsdp_classes = {}


def _fsdp_class(cls):
    if issubclass(cls, FSDPModule):
        return cls
    if cls not in _fsdp_classes:
        _fsdp_classes[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return _fsdp_classes[cls]


def _managed_params(module):
    """(owner, name, parameter) of every parameter of `module` that no
    fully-sharded submodule manages already."""
    out, seen = [], set()

    def walk(m, top):
        if not top and "_fsdp_state" in m.__dict__:
            for _, _, p in m._fsdp_state.managed:
                seen.add(id(p))
            return
        for name, p in m._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                out.append((m, name, p))
        for child in m.children():
            walk(child, False)

    # First the fully-sharded submodules (their parameters are theirs), then
    # the rest.
    for m in module.modules():
        if m is not module and "_fsdp_state" in m.__dict__:
            for _, _, p in m._fsdp_state.managed:
                seen.add(id(p))
    walk(module, True)
    return out


def fully_shard(module, *, mesh=None, reshard_after_forward=True, shard_placement_fn=None,
                mp_policy=None, offload_policy=None, ignored_params=None):
    """Shards a module's parameters on a data-parallel mesh dim (ZeRO-3 /
    FSDP), as torch's ``fully_shard``.

    Apply it to each block first and to the root last, as in torch: a call
    manages the parameters that no fully-sharded submodule manages. The
    module's class becomes ``FSDP<Class>`` (a subclass of `FSDPModule` and
    of its class).

    Args:
        module (nn.Module): the module (changed in place and returned).
        mesh (DeviceMesh): a 1-D mesh or sub-mesh (``mesh["dp"]``), or a
            2-D one for HSDP (parameters replicated on its first dim and
            sharded on its second, as torch); by default dtorch's default
            mesh.
        reshard_after_forward (bool): torch's switch between ZeRO-3 (True)
            and ZeRO-2 (False). True: when the module's forward ends, the
            gathered copies are released (their values dropped; they stay
            on the autograd tape as metadata) and the backward gathers each
            parameter whose value a gradient formula reads again, so a
            step's program holds two all_gathers of it (the second marked
            ``dtorch.regather``; ``dtorch.explain()`` shows it as
            ``redistribute (regather)``) and the gathered value lives only
            through the forward. False: the backward reads the forward's
            gathered copy (one all_gather, the copy lives until the
            backward). A parameter that does not require grad keeps its
            gathered copy either way. Either way the module shows its
            sharded Parameters again after the forward, so an optimizer
            step and ``state_dict`` see the sharded values.
        shard_placement_fn (callable, optional): parameter -> ``Shard(d)``
            (or None for ``Shard(0)``).
        ignored_params (set, optional): parameters to leave as they are.
        mp_policy, offload_policy: not supported (must be None).

    Returns:
        nn.Module: `module`.

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.fsdp import fully_shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        >>> fc = fully_shard(dtorch.nn.Linear(4, 6, device_mesh=mesh), mesh=mesh)
        >>> fc.weight.placements, type(fc).__name__
        ((Shard(dim=0),), 'FSDPLinear')
    """
    if mp_policy is not None or offload_policy is not None:
        raise NotImplementedError("fully_shard: mp_policy and offload_policy are not supported")
    if mesh is None:
        from ...device_mesh import default_mesh
        mesh = default_mesh()
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard needs a 1-D mesh (e.g. mesh['dp']) or a 2-D one "
                         f"(replicate, shard) for HSDP, got {mesh.ndim} dims")
    if "_fsdp_state" in module.__dict__:
        raise ValueError(f"fully_shard was already applied to this {type(module).__name__}")
    ignored = {id(p) for p in (ignored_params or ())}
    managed = [(o, n, p) for o, n, p in _managed_params(module) if id(p) not in ignored]
    for _, _, param in managed:
        placement = shard_placement_fn(param) if shard_placement_fn is not None else None
        if placement is None:
            placement = Shard(0)
        if param.ndim == 0:
            placement = Replicate()
        # HSDP: replicated on the first dim of a 2-D mesh, sharded on the second.
        _layout.relayout_(param, mesh, [Replicate()] * (mesh.ndim - 1) + [placement])
    state = _FSDPState(module, mesh, reshard_after_forward, managed)
    object.__setattr__(module, "_fsdp_state", state)

    def pre_forward(mod, args):
        state.unshard()

    def post_forward(mod, args, output):
        state.reshard(after_forward=True)

    module.register_forward_pre_hook(pre_forward)
    module.register_forward_hook(post_forward)
    module.__class__ = _fsdp_class(type(module))
    return module
