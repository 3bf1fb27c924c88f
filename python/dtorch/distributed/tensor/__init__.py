"""dtorch.distributed.tensor: torch's DTensor namespace. dtorch tensors are
DTensors, so this re-exports the placement types, meshes and
`distribute_tensor`; ``parallel`` holds the tensor-parallel styles."""
from ...device_mesh import DeviceMesh, init_device_mesh
from ...placement_types import Partial, Placement, Replicate, Shard
from ..._creation import distribute_tensor
from ..._tensor import Tensor as DTensor
from . import parallel
from . import experimental

__all__ = ["DeviceMesh", "init_device_mesh", "Partial", "Placement", "Replicate", "Shard",
           "distribute_tensor", "DTensor", "parallel", "experimental"]
