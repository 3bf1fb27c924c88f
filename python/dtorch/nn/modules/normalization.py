"""LayerNorm and RMSNorm."""
import numbers

from .. import functional as F
from .._placement import factory
from ..parameter import Parameter
from .module import Module


def _shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalises over the last dims, as ``torch.nn.LayerNorm`` (weight
    ones, bias zeros)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None, *, device_mesh=None, placements=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        make = factory(device_mesh, placements, dtype, device)
        if elementwise_affine:
            self.weight = Parameter(make("weight", self.normalized_shape, "full", 1.0))
            if bias:
                self.bias = Parameter(make("bias", self.normalized_shape, "full", 0.0))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.weight is not None:
            _fill(self.weight, 1.0)
        if self.bias is not None:
            _fill(self.bias, 0.0)

    def forward(self, input):  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


def _fill(t, value):
    from .. import init
    init.constant_(t, value)


class RMSNorm(Module):
    """Root-mean-square normalisation over the last dims, as
    ``torch.nn.RMSNorm`` (weight ones; eps None means the dtype's epsilon)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None, *, device_mesh=None, placements=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        make = factory(device_mesh, placements, dtype, device)
        if elementwise_affine:
            self.weight = Parameter(make("weight", self.normalized_shape, "full", 1.0))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        if self.weight is not None:
            _fill(self.weight, 1.0)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
