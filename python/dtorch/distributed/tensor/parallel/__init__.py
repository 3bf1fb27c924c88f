"""dtorch.distributed.tensor.parallel: tensor and sequence parallelism with
torch's names (parallelize_module and the parallel styles)."""
from .api import loss_parallel, parallelize_module
from .style import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleOutput,
                    RowwiseParallel, SequenceParallel)
from .expert import ExpertParallel

__all__ = ["parallelize_module", "loss_parallel", "ParallelStyle", "ColwiseParallel",
           "RowwiseParallel", "SequenceParallel", "PrepareModuleInput", "PrepareModuleOutput",
           "ExpertParallel"]
