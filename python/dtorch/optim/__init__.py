"""dtorch.optim: optimizers over DTensors (torch.optim's names and rules);
their state lives on the workers with each parameter's placements."""
from . import lr_scheduler  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
