"""dtorch.distributed.optim: ZeroRedundancyOptimizer (ZeRO-1), optimizer
state sharded on a data-parallel mesh dim while parameters stay
replicated."""
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
