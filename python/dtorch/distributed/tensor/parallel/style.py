"""The tensor-parallel styles of ``torch.distributed.tensor.parallel``:
ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput and
PrepareModuleOutput.

A style does two things to a module: it lays the module's parameters out
with the placements of the style on the given mesh (in place: the Parameter
objects stay), and it registers forward hooks that redistribute the
module's inputs and outputs to the style's layouts. Everything else follows
from the sharding rules of the ops the module runs: a row-wise matmul gives
a Partial result that the output layout reduces, and the gradients come
back through the same redistributions.

dtorch tensors are global: an input already knows its placements, so
``input_layouts`` only matters for a numpy array or torch tensor input,
which is taken as the global value and placed with ``input_layouts`` on
the mesh before it is redistributed to the layout the style needs; and
``use_local_output`` is accepted for torch's signatures but a module's
output stays a (global) dtorch tensor with the style's output placements.
"""
from ... import _layout
from ....placement_types import Placement, Replicate, Shard

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
           "PrepareModuleInput", "PrepareModuleOutput"]


def _one(layout, default):
    if layout is None:
        return default
    if isinstance(layout, Placement):
        return layout
    layout = tuple(layout)
    if len(layout) != 1:
        raise ValueError(f"expected one placement (a 1-D mesh), got {layout}")
    return layout[0]


def _module_kind(module):
    from ....nn import Embedding, Linear
    if isinstance(module, Linear):
        return "linear"
    if isinstance(module, Embedding):
        return "embedding"
    return None


def _check_1d(style, mesh):
    if mesh.ndim != 1:
        raise ValueError(f"{type(style).__name__} needs a 1-D mesh (e.g. mesh['tp']), got "
                         f"{mesh.ndim} dims")


def _map_outputs(outputs, fn):
    if isinstance(outputs, tuple):
        return tuple(fn(o) for o in outputs)
    if isinstance(outputs, list):
        return [fn(o) for o in outputs]
    return fn(outputs)


class ParallelStyle:
    """Base class of the styles: ``_apply(module, device_mesh)`` lays the
    module out and returns it (what `parallelize_module` calls).

    Example:
        >>> from dtorch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle
        >>> isinstance(ColwiseParallel(), ParallelStyle)
        True
    """

    def _apply(self, module, device_mesh):
        raise NotImplementedError


class _LinearStyle(ParallelStyle):
    """What Colwise and Rowwise share: parameter placements per module kind,
    an input hook and an output hook."""

    _weight = {}
    _bias = None

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layouts = (_one(input_layouts, self._default_input),)
        self.output_layouts = (_one(output_layouts, self._default_output),)
        self.use_local_output = use_local_output

    def _desired_input(self, kind):
        raise NotImplementedError

    def _partition(self, module, kind, mesh):
        for name, param in module.named_parameters(recurse=False):
            placement = self._weight[kind] if name == "weight" else self._bias
            _layout.relayout_(param, mesh, [placement])

    def _apply(self, module, device_mesh):
        _check_1d(self, device_mesh)
        kind = _module_kind(module)
        if kind is None:
            raise NotImplementedError(f"{type(self).__name__} supports nn.Linear and "
                                      f"nn.Embedding, got {type(module).__name__}")
        self._partition(module, kind, device_mesh)
        desired = self._desired_input(kind)
        given = self.input_layouts[0]
        output = self.output_layouts[0]

        def prepare_input(mod, args):
            if not args:
                return None
            x = _layout.from_global(args[0], device_mesh, [given])
            return (_layout.to_layout(x, device_mesh, [desired]),) + tuple(args[1:])

        def prepare_output(mod, args, out):
            return _map_outputs(out, lambda o: _layout.to_layout(o, device_mesh, [output]))

        module.register_forward_pre_hook(prepare_input)
        module.register_forward_hook(prepare_output)
        return module

    def __repr__(self):
        return (f"{type(self).__name__}(input_layouts={self.input_layouts}, "
                f"output_layouts={self.output_layouts}, "
                f"use_local_output={self.use_local_output})")


class ColwiseParallel(_LinearStyle):
    """Shards an ``nn.Linear`` column-wise: weight ``[out, in]`` as
    ``Shard(0)``, bias ``Shard(0)``; input ``Replicate()``, output
    ``Shard(-1)`` (``output_layouts`` changes it: ``Replicate()`` gathers).
    On an ``nn.Embedding`` it shards the embedding dim (weight ``Shard(1)``).

    Args:
        input_layouts (Placement, optional): how a numpy or torch input (a
            global value) is placed first (default ``Replicate()``).
        output_layouts (Placement, optional): the output's placement on the
            mesh (default ``Shard(-1)``).
        use_local_output (bool): accepted for torch's signature; outputs
            stay global dtorch tensors.

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        >>> fc = parallelize_module(dtorch.nn.Linear(4, 6, device_mesh=mesh), mesh,
        ...                         ColwiseParallel())
        >>> fc.weight.placements, fc(dtorch.ones(3, 4, device_mesh=mesh)).placements
        ((Shard(dim=0),), (Shard(dim=1),))
    """

    _default_input = Replicate()
    _default_output = Shard(-1)
    _weight = {"linear": Shard(0), "embedding": Shard(1)}
    _bias = Shard(0)

    def _desired_input(self, kind):
        return Replicate()


class RowwiseParallel(_LinearStyle):
    """Shards an ``nn.Linear`` row-wise: weight ``[out, in]`` as
    ``Shard(1)``, bias ``Replicate()``; input ``Shard(-1)``, output
    ``Replicate()`` (the matmul's Partial sum is all-reduced; with
    ``output_layouts=Shard(1)`` it is reduce-scattered, for sequence
    parallelism). On an ``nn.Embedding`` it shards the vocabulary (weight
    ``Shard(0)``, input ``Replicate()``).

    Args:
        input_layouts (Placement, optional): how a numpy or torch input (a
            global value) is placed first (default ``Shard(-1)``).
        output_layouts (Placement, optional): the output's placement on the
            mesh (default ``Replicate()``).
        use_local_output (bool): accepted for torch's signature.

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        >>> fc = parallelize_module(dtorch.nn.Linear(4, 6, device_mesh=mesh), mesh,
        ...                         RowwiseParallel())
        >>> fc.weight.placements, fc(dtorch.ones(3, 4, device_mesh=mesh)).placements
        ((Shard(dim=1),), (Replicate(),))
    """

    _default_input = Shard(-1)
    _default_output = Replicate()
    _weight = {"linear": Shard(1), "embedding": Shard(0)}
    _bias = Replicate()

    def _desired_input(self, kind):
        return Shard(-1) if kind == "linear" else Replicate()


class SequenceParallel(ParallelStyle):
    """Runs a norm or dropout region sharded on the sequence dim: parameters
    ``Replicate()``, input and output ``Shard(sequence_dim)``. The norms
    reduce over the last dim, so they run locally; the gradients of the
    replicated parameters are Partial sums that reduce where they are
    accumulated.

    Args:
        sequence_dim (int): default 1 (``[batch, seq, hidden]``).
        use_local_output (bool): accepted for torch's signature.

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.tensor.parallel import SequenceParallel, parallelize_module
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        >>> ln = parallelize_module(dtorch.nn.LayerNorm(4, device_mesh=mesh), mesh,
        ...                         SequenceParallel())
        >>> ln(dtorch.ones(2, 6, 4, device_mesh=mesh)).placements
        (Shard(dim=1),)
    """

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output

    def _apply(self, module, device_mesh):
        _check_1d(self, device_mesh)
        for param in module.parameters(recurse=True):
            _layout.relayout_(param, device_mesh, [Replicate()])
        shard = Shard(self.sequence_dim)

        def prepare_input(mod, args):
            if not args:
                return None
            x = _layout.from_global(args[0], device_mesh, [shard])
            return (_layout.to_layout(x, device_mesh, [shard]),) + tuple(args[1:])

        def prepare_output(mod, args, out):
            return _map_outputs(out, lambda o: _layout.to_layout(o, device_mesh, [shard]))

        module.register_forward_pre_hook(prepare_input)
        module.register_forward_hook(prepare_output)
        return module

    def __repr__(self):
        return f"SequenceParallel(sequence_dim={self.sequence_dim})"


def _layouts(layouts):
    if layouts is None:
        return None
    if isinstance(layouts, Placement):
        return (layouts,)
    return tuple(layouts)


class PrepareModuleInput(ParallelStyle):
    """Redistributes a module's inputs before its forward: positional input
    i gets ``desired_input_layouts[i]`` on the mesh (None leaves it), keyword
    inputs by ``desired_input_kwarg_layouts``. Parameters are not touched.

    Example:
        >>> import dtorch
        >>> from dtorch import Replicate, Shard
        >>> from dtorch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        >>> m = parallelize_module(dtorch.nn.Identity(), mesh, PrepareModuleInput(
        ...     input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),)))
        >>> m(dtorch.ones(4, 2, device_mesh=mesh, placements=[Shard(0)])).placements
        (Replicate(),)
    """

    def __init__(self, *, input_layouts=None, desired_input_layouts=None,
                 input_kwarg_layouts=None, desired_input_kwarg_layouts=None,
                 use_local_output=False):
        self.input_layouts = _layouts(input_layouts)
        self.desired_input_layouts = _layouts(desired_input_layouts)
        self.input_kwarg_layouts = dict(input_kwarg_layouts or {})
        self.desired_input_kwarg_layouts = dict(desired_input_kwarg_layouts or {})
        self.use_local_output = use_local_output
        if (self.input_layouts is not None and self.desired_input_layouts is not None
                and len(self.input_layouts) != len(self.desired_input_layouts)):
            raise ValueError("input_layouts and desired_input_layouts should have the same "
                             "length")

    def _apply(self, module, device_mesh):
        _check_1d(self, device_mesh)
        desired = self.desired_input_layouts or ()
        kw_desired = self.desired_input_kwarg_layouts

        def prepare(mod, args, kwargs):
            args = tuple(_layout.to_layout(a, device_mesh, [d]) if d is not None else a
                         for a, d in zip(args, desired)) + tuple(args[len(desired):])
            kwargs = {k: (_layout.to_layout(v, device_mesh, [kw_desired[k]])
                          if kw_desired.get(k) is not None else v)
                      for k, v in kwargs.items()}
            return args, kwargs

        module.register_forward_pre_hook(prepare, with_kwargs=True)
        return module


class PrepareModuleOutput(ParallelStyle):
    """Redistributes a module's outputs after its forward: output i gets
    ``desired_output_layouts[i]`` on the mesh (None leaves it).

    Example:
        >>> import dtorch
        >>> from dtorch import Replicate, Shard
        >>> from dtorch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        >>> m = parallelize_module(dtorch.nn.Identity(), mesh, PrepareModuleOutput(
        ...     output_layouts=(Replicate(),), desired_output_layouts=(Shard(0),)))
        >>> m(dtorch.ones(4, 2, device_mesh=mesh)).placements
        (Shard(dim=0),)
    """

    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        self.output_layouts = _layouts(output_layouts)
        self.desired_output_layouts = _layouts(desired_output_layouts)
        self.use_local_output = use_local_output
        if len(self.output_layouts) != len(self.desired_output_layouts):
            raise ValueError("output_layouts and desired_output_layouts should have the same "
                             "length")

    def _apply(self, module, device_mesh):
        _check_1d(self, device_mesh)
        desired = self.desired_output_layouts

        def prepare(mod, args, out):
            single = not isinstance(out, (tuple, list))
            outs = [out] if single else list(out)
            if len(outs) != len(desired):
                raise ValueError(f"PrepareModuleOutput: {len(outs)} outputs for "
                                 f"{len(desired)} desired layouts")
            outs = [_layout.to_layout(o, device_mesh, [d]) if d is not None else o
                    for o, d in zip(outs, desired)]
            return outs[0] if single else type(out)(outs)

        module.register_forward_hook(prepare)
        return module
