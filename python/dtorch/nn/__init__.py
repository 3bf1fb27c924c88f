"""dtorch.nn: modules, parameters, initialisations and functional ops over
DTensors, with torch.nn's names and behaviour.

Parameters live where the module's ``device_mesh``/``placements`` keywords
say, else on the mesh of `default_device_mesh` (a context manager) or
`set_default_device_mesh`, else on every rank of the world, replicated.
"""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from ._placement import (default_device_mesh, get_default_device_mesh,  # noqa: F401
                         meta_init, set_default_device_mesh)
from .modules import (GELU, Dropout, Embedding, Identity, LayerNorm, Linear,  # noqa: F401
                      Module, ModuleDict, ModuleList, MoE, ReLU, RMSNorm, Sequential, Sigmoid,
                      SiLU, Tanh)
from .parameter import Buffer, Parameter  # noqa: F401
from . import utils  # noqa: F401
