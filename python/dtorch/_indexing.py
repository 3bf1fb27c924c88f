"""Basic and advanced indexing, narrow, split and chunk (dtensor.slice,
dtensor.index_select, reshape)."""
from . import _C

Tensor = _C.Tensor


def _getitem(self, key):
    """x[a:b], x[a:b:s], x[i], x[None], x[...], x[-1], x[index_tensor] along
    one dim; everything else raises TypeError/IndexError at the call."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > self.ndim:
        raise IndexError(f"too many indices for a tensor of dimension {self.ndim}")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (self.ndim - n_real))
        else:
            expanded.append(k)
    if Ellipsis not in key:
        expanded.extend([slice(None)] * (self.ndim - n_real))
    offsets, sizes, strides, out_shape = [], [], [], []
    tensor_index = None
    d = 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            continue
        extent = self.shape[d]
        if isinstance(k, bool):
            raise TypeError("dtorch: indexing with a Python bool is not supported")
        if isinstance(k, int):
            i = k + extent if k < 0 else k
            if not 0 <= i < extent:
                raise IndexError(f"index {k} is out of bounds for dimension {d} with size {extent}")
            offsets.append(i), sizes.append(1), strides.append(1)
        elif isinstance(k, slice):
            if k.step is not None and k.step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, step = k.indices(extent)
            count = max(0, (stop - start + step - 1) // step)
            offsets.append(start if count else 0), sizes.append(count), strides.append(step)
            out_shape.append(count)
        elif isinstance(k, Tensor):
            if tensor_index is not None:
                raise IndexError("dtorch: one index tensor per indexing expression")
            if k.dtype == _C.dtype.bool:
                raise IndexError("dtorch: boolean mask indexing has a data-dependent shape; "
                                 "use where() or masked_fill()")
            if k.ndim != 1:
                raise IndexError("dtorch: an index tensor must be 1-D")
            tensor_index = (d, len(out_shape), k)
            offsets.append(0), sizes.append(extent), strides.append(1)
            out_shape.append(k.shape[0])
        else:
            raise TypeError(f"dtorch: unsupported index of type {type(k).__name__}")
        d += 1
    out = _C.slice(self, offsets, sizes, strides)
    if tensor_index is not None:
        src_dim, _, idx = tensor_index
        out = _C.index_select(out, src_dim, idx)
        sizes = list(out.shape)
    if list(out.shape) != out_shape:
        out = _C.reshape(out, out_shape)
    return out


def narrow(x, dim, start, length):
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"narrow: dim {dim} out of range for rank {x.ndim}")
    dim %= x.ndim
    extent = x.shape[dim]
    if start < 0:
        start += extent
    if not 0 <= start <= extent or length < 0 or start + length > extent:
        raise IndexError(f"narrow: start ({start}) + length ({length}) exceeds dimension "
                         f"size ({extent})")
    offsets = [0] * x.ndim
    sizes = list(x.shape)
    offsets[dim], sizes[dim] = start, length
    return _C.slice(x, offsets, sizes, [1] * x.ndim)


def split(x, split_size_or_sections, dim=0):
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"split: dim {dim} out of range for rank {x.ndim}")
    dim %= x.ndim
    extent = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError("split: split_size must be positive")
        sizes = [min(split_size_or_sections, extent - s)
                 for s in range(0, extent, split_size_or_sections)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != extent:
            raise ValueError(f"split: sections {sizes} do not add up to dim {dim}'s "
                             f"size {extent}")
    out, start = [], 0
    for n in sizes:
        out.append(narrow(x, dim, start, n))
        start += n
    return tuple(out)


def chunk(x, chunks, dim=0):
    if chunks <= 0:
        raise ValueError("chunk: chunks must be positive")
    extent = x.shape[dim % max(x.ndim, 1)]
    size = -(-extent // chunks) if extent else 1
    return split(x, size, dim)


Tensor.__getitem__ = _getitem
