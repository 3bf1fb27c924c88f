"""The modules of dtorch.nn."""
from .activation import GELU, Dropout, ReLU, Sigmoid, SiLU, Tanh  # noqa: F401
from .container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .linear import Identity, Linear  # noqa: F401
from .module import Module  # noqa: F401
from .moe import MoE  # noqa: F401
from .normalization import LayerNorm, RMSNorm  # noqa: F401
from .sparse import Embedding  # noqa: F401
