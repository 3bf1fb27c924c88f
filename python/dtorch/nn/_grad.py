"""The grad-mode helpers that nn.init, the modules, the optimizers and
load_state_dict use: autograd's no_grad, and a tensor's gradient."""
from ..autograd import no_grad  # noqa: F401


def grad_of(tensor):
    """The tensor's .grad, or None when it has none."""
    return tensor.grad
