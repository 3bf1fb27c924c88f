"""Linear and Identity."""
import math

from .. import functional as F
from .. import init
from .._grad import no_grad
from .._placement import factory
from ..parameter import Parameter
from .module import Module


class Identity(Module):
    """Returns its input."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):  # noqa: A002
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``, as ``torch.nn.Linear``: weight
    [out_features, in_features] kaiming-uniform (bound 1/sqrt(in_features)),
    bias U(-1/sqrt(in_features), 1/sqrt(in_features)).

    Args:
        in_features, out_features (int): sizes.
        bias (bool): default True.
        device_mesh (DeviceMesh, optional): where the parameters live; else
            the default of `dtorch.nn.default_device_mesh`, else every rank.
        placements (list or dict, optional): the parameters' placements: one
            list for both (``[Shard(0)]`` shards weight rows and the bias), or
            a dict by parameter name; replicated by default.
        dtype (dtorch.dtype, optional): default float32.
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, *,
                 device_mesh=None, placements=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        make = factory(device_mesh, placements, dtype, device)
        self.weight = Parameter(make("weight", (out_features, in_features)))
        if bias:
            self.bias = Parameter(make("bias", (out_features,)))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            with no_grad():
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):  # noqa: A002
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
