"""dtorch.distributed.fsdp: fully sharded data parallelism (ZeRO-3 /
ZeRO-2) by placements."""
from ._fully_shard import FSDPModule, fully_shard

__all__ = ["fully_shard", "FSDPModule"]
