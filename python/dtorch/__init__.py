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
from ._runtime import init, shutdown
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


def op_registry():
    """Every operator's declaration: a list of dicts (name, family, kernel,
    torch names, partial pass-through, dtypes, ...), generated from ODS."""
    return _ops.registry()


def is_initialized():
    return _C.is_initialized()
