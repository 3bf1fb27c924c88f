"""no_grad for the updates of nn.init, the optimizers and load_state_dict:
dtorch.no_grad when autograd provides it, else a context that does nothing
(without autograd nothing is recorded for backward anyway)."""
import contextlib


def no_grad():
    import dtorch
    ctx = getattr(dtorch, "no_grad", None)
    return ctx() if ctx is not None else contextlib.nullcontext()


def grad_of(tensor):
    """The tensor's .grad, or None when it has none."""
    return getattr(tensor, "grad", None)
