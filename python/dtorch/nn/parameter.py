"""Parameter: a Tensor that a Module registers as a learnable weight."""
from .. import _C

Tensor = _C.Tensor


class Parameter(Tensor):
    """A tensor that `Module` registers as a parameter when assigned as an
    attribute, as ``torch.nn.Parameter``. It names the value of `data` (no
    copy) and requires grad by default.

    dtorch has no views: in-place updates (``p.add_(...)``, an optimizer step,
    ``load_state_dict``) make ``p`` name a new value, and every holder of the
    object ``p`` (modules, optimizers) sees it; the tensor ``data`` it was made
    from keeps naming the old value.

    Args:
        data (Tensor or array-like): the initial value; numpy arrays, lists and
            torch tensors are placed on the default mesh, replicated.
        requires_grad (bool): default True.

    Example:
        >>> import dtorch
        >>> p = dtorch.nn.Parameter(dtorch.zeros(2, 3))
        >>> p.requires_grad, p.shape
        (True, (2, 3))
    """

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            from .._creation import empty
            data = empty(0)
        elif not isinstance(data, Tensor):
            from .._creation import tensor
            data = tensor(data)
        super().__init__(data)
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        # Values are immutable: a copy is another name for the same value.
        if id(self) not in memo:
            memo[id(self)] = type(self)(self, requires_grad=self.requires_grad)
        return memo[id(self)]


class Buffer(Tensor):
    """A tensor that `Module` registers as a buffer when assigned as an
    attribute, as ``torch.nn.Buffer``.

    Args:
        data (Tensor or array-like): the value.
        persistent (bool): whether it is part of the module's ``state_dict``.
    """

    def __init__(self, data, *, persistent=True):
        if not isinstance(data, Tensor):
            from .._creation import tensor
            data = tensor(data)
        super().__init__(data)
        self.persistent = persistent
