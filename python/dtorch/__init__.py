"""DTorch: distributed tensors with a PyTorch-style API and a single controller.

    import dtorch
    from dtorch import Shard, Replicate, Partial
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    x = dtorch.randn(8, 16, device_mesh=mesh, placements=[Shard(0), Replicate()])
    y = (x @ x.t()).relu()
    print(y.numpy())
"""
import numpy as _np

from . import _C
from ._runtime import generate_curve_keypair, init, shutdown
from .device_mesh import DeviceMesh, init_device_mesh
from .errors import CollectiveTimeout, DTorchError, OutOfMemoryError, WorkerError
from .placement_types import Partial, Placement, Replicate, Shard
from ._tensor import Tensor
from . import _creation
from ._explain import Explanation, explain
from ._creation import (arange, distribute_tensor, empty, eye, full, ones, ones_like, rand,
                        randn, tensor, zeros, zeros_like)

float32 = _C.dtype.float32
float64 = _C.dtype.float64
float16 = _C.dtype.float16
bfloat16 = _C.dtype.bfloat16
int32 = _C.dtype.int32
int64 = _C.dtype.int64
bool = _C.dtype.bool  # noqa: A001 - torch's name
float = float32  # noqa: A001
double = float64
long = int64
dtype = _C.dtype


def manual_seed(seed):
    """Random ops are reproducible and independent of placements."""
    from . import _runtime
    _runtime.ensure_initialized()
    _C.manual_seed(int(seed))


def synchronize():
    """Waits until all queued work has run on every worker."""
    if _C.is_initialized():
        _C.synchronize()


def memory_stats(with_handles=False):
    """What every rank holds on the workers, read from the runtime's buffer
    table (each rank's live tensors).

    The pending ops are submitted first and the request is queued behind all
    work before it, so the answer reflects every run and every free of a
    dropped tensor so far (no separate `synchronize` is needed). Values that
    a segment made but nobody holds were never kept, so they do not count.

    Args:
        with_handles (bool): also list each rank's tensors (for tests and
            debugging).

    Returns:
        list[dict]: one dict per global rank, in rank order: ``"rank"``,
        ``"host"`` (the worker's host name; ``"in-process"`` for the
        in-process backend), ``"tensors"`` (live tensors), ``"bytes"``
        (bytes of their storages; a storage shared by two tensors counts
        once), ``"bytes_by_dtype"`` (the same bytes by dtype name),
        ``"arena_bytes"`` (the arena the rank keeps for the planned
        temporaries of its programs), ``"last_run_arena_bytes"`` (the peak
        bytes of the last program's planned temporaries; 0 without buffer
        planning), ``"last_run_peak_bytes"`` (the rank's memory during its
        last run: table before it, arena, and the buffers it allocated),
        ``"peak_bytes"`` (the high-water mark of the rank's memory so far),
        and with ``with_handles`` ``"handles"`` (tensor handle -> bytes).
        Buffer planning is on unless ``DTORCH_BUFFER_PLANNING=0`` is set
        before the first compile. The simulated backend runs nothing and
        holds nothing: its counts are ``None``.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (4,))
        >>> before = [r["bytes"] for r in dtorch.memory_stats()]
        >>> x = dtorch.zeros(8, 16, device_mesh=mesh, placements=[Shard(0)])
        >>> after = [r["bytes"] for r in dtorch.memory_stats()]
        >>> [a - b for a, b in zip(after, before)]  # 2 x 16 float32 per rank
        [128, 128, 128, 128]
        >>> del x
        >>> [r["bytes"] for r in dtorch.memory_stats()] == before
        True
    """
    from . import _runtime
    _runtime.ensure_initialized()
    return _C.memory_stats(not not with_handles)  # `bool` is the dtype here


def last_ir(stage="sharded"):
    """The IR of the last segment run at a pass stage: "input",
    "sharded", "redistributed" or "rank". Made on demand: the segment is
    compiled again with the IR printed at the pipeline's stage boundaries
    (no program is made, and compiles on the hot path record nothing)."""
    return _C.last_ir(stage)


def save_graph(fn, example_args, path):
    """Traces fn(*example_args) into a dtensor-dialect file for dtorch-run."""
    outs = fn(*example_args)
    single = isinstance(outs, Tensor)
    outs = [outs] if single else list(outs)
    text = _C.graph_text(list(example_args), outs, "main")
    with open(path, "w") as f:
        f.write(text)
    return path


# ---- operators: every name comes from the op registry (declared once in ODS) ---
from . import _indexing  # noqa: E402  (Tensor.__getitem__, narrow, split, chunk)
from . import _ops  # noqa: E402

_ops.install(globals())
from . import _inplace  # noqa: E402,F401  (Tensor._assign, copy_, add_, ...)
from . import autograd  # noqa: E402
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from . import nn  # noqa: E402
from . import optim  # noqa: E402
from . import distributed  # noqa: E402
from . import profiler  # noqa: E402,F401  (dtorch.profiler.profile)
from ._serialization import (get_rng_state, load_safetensors,  # noqa: E402,F401
                             save_safetensors, set_rng_state)


def op_registry():
    """Every operator's declaration: a list of dicts (name, family, kernel,
    torch names, partial pass-through, dtypes, ...), generated from ODS."""
    return _ops.registry()


def is_initialized():
    return _C.is_initialized()
