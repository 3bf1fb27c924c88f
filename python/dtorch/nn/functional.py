"""dtorch.nn.functional: torch.nn.functional's names over DTensors."""
from .. import _C
from .. import _decompositions as _dec

linear = _dec.linear
softmax = _dec.softmax
log_softmax = _dec.log_softmax
cross_entropy = _dec.cross_entropy
mse_loss = _dec.mse_loss
layer_norm = _dec.layer_norm
rms_norm = _dec.rms_norm
dropout = _dec.dropout
scaled_dot_product_attention = _dec.scaled_dot_product_attention
one_hot = _dec.one_hot


def embedding(input, weight):  # noqa: A002
    """Rows of `weight` [V, D] at the int64 indices `input`; a table sharded
    on V gives a Partial(sum) result that reduces where it is used."""
    return _dec.embedding(input, weight)


def relu(x):
    return _C.unary("relu", x)


def gelu(x, approximate="none"):
    if approximate != "none":
        raise NotImplementedError("gelu: only approximate='none' (the erf form)")
    return _C.unary("gelu", x)


def silu(x):
    return _C.unary("silu", x)


def sigmoid(x):
    return _C.unary("sigmoid", x)


def tanh(x):
    return _C.unary("tanh", x)
