"""Reverse-mode automatic differentiation over the client's tape.

When grad mode is on and an operand of an op requires grad, the client
(lib/Client/Autograd.cpp) gives the result a record of the op: its tensor
operands, attributes and scalar operand (``Tensor.grad_fn``). `backward`
walks these records from the output in reverse topological order and
evaluates each op's gradient formulas, declared with the op in ODS (the
``gradient`` field of the op registry). The formulas are written with dtorch
ops, so the backward is recorded like any other op, into the same pending
segment as the forward: a training step is one cached program.

Names a formula may use: ``g`` (the gradient of the op's result),
``result``, the op's operand names and attributes, every dtorch function and
the helpers below (`expand_to`, `sum_to`, `kept_shape`, `reduced_count`,
`scatter_slice`, `pad_to`, `concat_offset`, `like_placements`); a variadic
operand is a list, with ``i`` the position of the tensor being
differentiated. A Python number operand arrives as a tensor like ``g``.
"""
import contextlib
import functools

from . import _C

Tensor = _C.Tensor

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled"]


# ---- grad mode ---------------------------------------------------------------------
def is_grad_enabled():
    """Whether ops record the autograd tape (torch.is_grad_enabled).

    Example:
        >>> import dtorch
        >>> dtorch.is_grad_enabled()
        True
        >>> with dtorch.no_grad():
        ...     dtorch.is_grad_enabled()
        False
    """
    return _C.is_grad_enabled()


class _GradMode(contextlib.ContextDecorator):
    """Sets grad mode inside a with-block or a decorated function."""

    _mode = True

    def __new__(cls, *args, **kwargs):
        # @no_grad without parentheses decorates at once.
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]):
            return cls()(args[0])
        return super().__new__(cls)

    def __init__(self):
        self._saved = []

    def __enter__(self):
        self._saved.append(_C.is_grad_enabled())
        _C.set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _C.set_grad_enabled(self._saved.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_GradMode):  # noqa: N801 - torch's name
    """Ops inside record no autograd history (context manager or decorator).

    Example:
        >>> import dtorch
        >>> x = dtorch.ones(3, requires_grad=True)
        >>> with dtorch.no_grad():
        ...     y = x * 2
        >>> y.requires_grad
        False
        >>> @dtorch.no_grad()
        ... def double(t):
        ...     return t * 2
        >>> double(x).requires_grad
        False
    """

    _mode = False


class enable_grad(_GradMode):  # noqa: N801 - torch's name
    """Ops inside record autograd history, even within `no_grad`.

    Example:
        >>> import dtorch
        >>> x = dtorch.ones(3, requires_grad=True)
        >>> with dtorch.no_grad():
        ...     with dtorch.enable_grad():
        ...         y = x * 2
        >>> y.requires_grad
        True
    """

    _mode = True


class set_grad_enabled(_GradMode):  # noqa: N801 - torch's name
    """Sets grad mode now (as a function) or for a with-block.

    Example:
        >>> import dtorch
        >>> x = dtorch.ones(3, requires_grad=True)
        >>> with dtorch.set_grad_enabled(False):
        ...     (x * 2).requires_grad
        False
        >>> (x * 2).requires_grad
        True
    """

    def __init__(self, mode):
        super().__init__()
        self._mode = bool(mode)
        self._before = _C.is_grad_enabled()
        _C.set_grad_enabled(self._mode)

    def __enter__(self):
        self._saved.append(self._before)
        return self

    def __call__(self, fn):
        mode = self._mode
        _C.set_grad_enabled(self._before)

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapped


# ---- helpers of the gradient formulas -----------------------------------------------
def _rep_raw(x):
    """x's raw placements with Partial made Replicate."""
    return [("R", 0, "") if k == "P" else (k, d, o) for k, d, o in x._placements_raw]


def kept_shape(shape, dims):
    """`shape` with the reduced `dims` kept as extent 1.

    Example:
        >>> from dtorch.autograd import kept_shape
        >>> kept_shape((4, 3, 2), [1])
        [4, 1, 2]
    """
    dims = set(dims)
    return [1 if d in dims else s for d, s in enumerate(shape)]


def reduced_count(shape, dims):
    """How many elements a reduction over `dims` of `shape` combines (a
    Python float).

    Example:
        >>> from dtorch.autograd import reduced_count
        >>> reduced_count((4, 3, 2), [0, 2])
        8.0
    """
    n = 1.0
    for d in dims:
        n *= shape[d]
    return n


def expand_to(t, like, dims):
    """The result (or gradient) of a reduction over `dims` of `like`,
    repeated back to `like`'s shape and laid out as `like` (Partial
    placements become Replicate), so that the gradient meets the forward's
    tensors without moving data.

    Example:
        >>> import dtorch
        >>> from dtorch.autograd import expand_to
        >>> x = dtorch.arange(4.0)
        >>> expand_to(x.sum(0), x, [0]).tolist()
        [6.0, 6.0, 6.0, 6.0]
    """
    shape = list(like.shape)
    t = _C.reshape(t, kept_shape(shape, dims))
    if list(t.shape) == shape:
        return t
    return _C.broadcast_to(t, shape, _rep_raw(like))


def sum_to(g, shape):
    """Sums g over the dims a broadcast to g's shape created from `shape`.

    Example:
        >>> import dtorch
        >>> from dtorch.autograd import sum_to
        >>> sum_to(dtorch.ones(4, 3), (3,)).tolist()
        [4.0, 4.0, 4.0]
    """
    shape = list(shape)
    lead = g.ndim - len(shape)
    dims = list(range(lead)) + [lead + d for d, s in enumerate(shape)
                                if s == 1 and g.shape[lead + d] != 1]
    if dims:
        g = _C.reduce("sum", g, dims, True)
    return _C.reshape(g, shape)


def _zeros(like, shape, dim):
    """Zeros of `shape` laid out as `like` (a gradient), except that `dim`
    and dims beyond `shape` are not sharded; Partial stays Partial (zeros are
    a valid piece of any partial value)."""
    raw = [("R", 0, "") if k == "S" and (d == dim or d >= len(shape)) else (k, d, o)
           for k, d, o in like._placements_raw]
    return _C.full(list(shape), 0.0, like.dtype, like._mesh_id, raw, like._view)


def _pad(t, dim, before, after):
    parts = []
    if before:
        parts.append(_zeros(t, t.shape[:dim] + (before,) + t.shape[dim + 1:], dim))
    parts.append(t)
    if after:
        parts.append(_zeros(t, t.shape[:dim] + (after,) + t.shape[dim + 1:], dim))
    return t if len(parts) == 1 else _C.concat(parts, dim)


def scatter_slice(g, shape, offsets, sizes, strides):
    """The gradient of a strided slice: g written into zeros of `shape` at
    `offsets + i * strides` (concat of zeros, reshape and narrow).

    Example:
        >>> import dtorch
        >>> from dtorch.autograd import scatter_slice
        >>> scatter_slice(dtorch.ones(2), (5,), [1], [2], [2]).tolist()
        [0.0, 1.0, 0.0, 1.0, 0.0]
    """
    shape = tuple(shape)
    if any(n == 0 for n in sizes):
        return _zeros(g, shape, -1)
    for d, (o, n, s) in enumerate(zip(offsets, sizes, strides)):
        extent = shape[d]
        if o == 0 and n == extent and s == 1:
            continue
        if s > 1 and n > 1:
            # Interleave: [.., n, ..] -> [.., n, s, ..] with zeros after each
            # element, flattened to n * s and cut after the last element.
            gs = g.shape
            col = _C.reshape(g, list(gs[:d + 1]) + [1] + list(gs[d + 1:]))
            z = _zeros(col, gs[:d + 1] + (s - 1,) + gs[d + 1:], d + 1)
            g = _C.reshape(_C.concat([col, z], d + 1),
                           list(gs[:d]) + [n * s] + list(gs[d + 1:]))
            g = _C.slice(g, [0] * g.ndim, list(gs[:d]) + [(n - 1) * s + 1] + list(gs[d + 1:]),
                         [1] * g.ndim)
        span = (n - 1) * s + 1
        g = _pad(g, d, o, extent - o - span)
    return g


def pad_to(t, shape):
    """t padded with zeros at the end of each dim up to `shape`.

    Example:
        >>> import dtorch
        >>> from dtorch.autograd import pad_to
        >>> pad_to(dtorch.ones(2), (4,)).tolist()
        [1.0, 1.0, 0.0, 0.0]
    """
    for d, want in enumerate(shape):
        if t.shape[d] < want:
            t = _pad(t, d, 0, want - t.shape[d])
    return t


def concat_offset(inputs, i, dim):
    """Where operand i of a concat starts along `dim`.

    Example:
        >>> import dtorch
        >>> from dtorch.autograd import concat_offset
        >>> a, b = dtorch.ones(2, 3), dtorch.ones(4, 3)
        >>> concat_offset([a, b, a], 2, 0)
        6
    """
    off = 0
    for x in inputs[:i]:
        off += x.shape[dim]
    return off


def like_placements(g, x):
    """g laid out as x (Partial placements of x become Replicate).

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> from dtorch.autograd import like_placements
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> w = dtorch.zeros(4, 2, device_mesh=mesh, placements=[Shard(0)])
        >>> like_placements(dtorch.ones(4, 2, device_mesh=mesh), w).placements
        (Shard(dim=0),)
    """
    if g._mesh_id != x._mesh_id:
        return g
    return _C.redistribute(g, x._mesh_id, _rep_raw(x), x._view)


def transfer(x, axis, sources, destinations):
    """The transfer op (``dtensor.transfer``) on root mesh dim `axis`: block
    ``destinations[k]`` of the result is x's block ``sources[k]``, the other
    blocks are zero. Its gradient is the transfer with the pairs swapped.
    The user-facing form is `dtorch.distributed.pipelining.transfer`.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> from dtorch.autograd import transfer
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> x = dtorch.arange(4.0, device_mesh=mesh, placements=[Shard(0)])
        >>> transfer(x, 0, [0], [1]).numpy().tolist()
        [0.0, 0.0, 0.0, 1.0]
    """
    return _C.transfer(x, int(axis), [int(s) for s in sources],
                       [int(d) for d in destinations])


def _exchange_layout(t, axis, keep_partial):
    """t laid out as ``dtensor.all_to_all_v`` needs it: Shard(0) on root mesh
    dim `axis`, dims 0 and 1 split by no other mesh dim (those become
    Replicate), other placements kept (a Partial only where `keep_partial`)."""
    raw = []
    for a, (k, d, o) in enumerate(t._placements_raw):
        if a == axis:
            raw.append(("S", 0, ""))
        elif (k == "S" and d in (0, 1)) or (k == "P" and not keep_partial):
            raw.append(("R", 0, ""))
        else:
            raw.append((k, d, o))
    if raw == [tuple(p) for p in t._placements_raw]:
        return t
    return _C.redistribute(t, t._mesh_id, raw, t._view)


def all_to_all_v(x, counts, axis):
    """The exchange op (``dtensor.all_to_all_v``) on root mesh dim `axis` of
    n positions: x is ``[n, n * S * C, ...]`` (position i's rows: n * S
    segments of C rows, segment (j, s) bound for position j) and counts
    ``[n, n * S]`` int64 (how many rows of each segment are real). Block j
    of the result holds in its segment (i, s) the first ``counts[i, j * S +
    s]`` rows of x's segment (j, s) of block i, then zeros; only those rows
    move. x and counts are first laid out as the op needs (Shard(0) on
    `axis`). Its gradient is the exchange with `transposed_counts`. The
    user-facing form is `dtorch.distributed.all_to_all_v`.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> from dtorch.autograd import all_to_all_v
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> x = dtorch.arange(8.0, device_mesh=mesh).reshape(2, 4, 1)
        >>> counts = dtorch.tensor([[2, 1], [0, 2]], device_mesh=mesh)
        >>> all_to_all_v(x, counts, 0).reshape(2, 4).numpy().tolist()
        [[0.0, 1.0, 0.0, 0.0], [2.0, 0.0, 6.0, 7.0]]
    """
    axis = int(axis)
    return _C.all_to_all_v(_exchange_layout(x, axis, True),
                           _exchange_layout(counts, axis, False), axis)


def transposed_counts(counts):
    """The counts of the reverse exchange: ``[n, n * S]`` with entry
    ``[j, i * S + s]`` the entry ``[i, j * S + s]`` of `counts` (what
    position j received from position i is what it sends back).

    Example:
        >>> import dtorch
        >>> from dtorch.autograd import transposed_counts
        >>> transposed_counts(dtorch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])).numpy().tolist()
        [[1, 2, 5, 6], [3, 4, 7, 8]]
    """
    n, segments = counts.shape
    per = segments // n
    return counts.reshape(n, n, per).transpose(0, 1).reshape(n, segments)


_HELPERS = dict(kept_shape=kept_shape, reduced_count=reduced_count, expand_to=expand_to,
                sum_to=sum_to, scatter_slice=scatter_slice, pad_to=pad_to,
                concat_offset=concat_offset, like_placements=like_placements,
                transfer=transfer, all_to_all_v=all_to_all_v,
                transposed_counts=transposed_counts)

# ---- the formulas of the registry -------------------------------------------------------
_FORMULAS = {}
_BASE_ENV = None


def _base_env():
    global _BASE_ENV
    if _BASE_ENV is None:
        import dtorch
        env = {k: v for k, v in vars(dtorch).items() if not k.startswith("__")}
        env.update(_HELPERS)
        env["__builtins__"] = __builtins__
        _BASE_ENV = env
    return _BASE_ENV


def _formulas(op):
    """(operand names, compiled formulas or None per operand, variadic)."""
    f = _FORMULAS.get(op)
    if f is None:
        entry = next((e for e in _C.op_registry() if e["name"] == op and e["is_dialect_op"]),
                     None)
        if entry is None or not entry["gradient"]:
            raise NotImplementedError(f"dtorch: the op '{op}' has no gradient formula in the "
                                      "op registry")
        codes = [compile(src, f"<gradient of {op}>", "eval") if src else None
                 for src in entry["gradient"]]
        f = (entry["operand_names"], codes, entry["num_operands"] < 0)
        _FORMULAS[op] = f
    return f


def _scalar_tensor(g, value):
    return _C.full(list(g.shape), float(value), g.dtype, g._mesh_id, _rep_raw(g), g._view)


# Layout-only ops whose saved result the backward recomputes when their
# operand was released (linear saves its weight transposed): op -> how to
# make it again from the new operand and the old result.
_RECOMPUTE = {
    "transpose": lambda a, old, attrs: _C.permute(a, list(attrs["perm"])),
    "reshape": lambda a, old, attrs: _C.reshape(a, list(old.shape)),
    "cast": lambda a, old, attrs: _C.cast(a, old.dtype),
    "broadcast_to": lambda a, old, attrs: _C.broadcast_to(a, list(old.shape),
                                                          old._placements_raw),
    "redistribute": lambda a, old, attrs: _C.redistribute(a, old._mesh_id,
                                                          old._placements_raw, old._view),
}


# Whether any tensor's value was released for regathering (_note_released):
# until then backward reads every saved tensor as it is, at no cost.
_RELEASED = [False]


def _note_released():
    """Called by whoever releases a saved tensor's value (fully_shard with
    reshard_after_forward=True): from then on backward checks the saved
    tensors its formulas read (`_regathered`)."""
    _RELEASED[0] = True


def _regathered(x, regathers):
    """The value a gradient formula reads for the saved tensor `x`: `x`
    itself, or, when `x`'s value was released after the forward (FSDP's
    reshard_after_forward=True turns its gathered parameters into meta
    tensors) and its grad_fn is the redistribute that made it from a live
    tensor, a fresh redistribute of that source marked ``regather`` (a
    second all_gather the compiler keeps apart from the forward's). A value
    that a layout-only op (`_RECOMPUTE`) made from a released tensor is made
    again from the regathered one, so the backward reads nothing the
    forward's gather produced. One per tensor and backward (`regathers`:
    key -> tensor, or None for "read `x` itself")."""
    key = x._key
    if key in regathers:
        found = regathers[key]
        return x if found is None else found
    fn = x.grad_fn
    found = None
    if fn is None:
        pass
    elif x.is_meta:
        if fn.op == "redistribute" and not fn.inputs[0].is_meta:
            source = fn.inputs[0]
            found = _C.redistribute(source, x._mesh_id, x._placements_raw, x._view,
                                    regather=True)
    elif fn.op in _RECOMPUTE and len(fn.inputs) == 1:
        operand = fn.inputs[0]
        again = _regathered(operand, regathers)
        if again is not operand:
            found = _RECOMPUTE[fn.op](again, x, fn.attrs)
            if found._placements_raw != x._placements_raw:
                found = _C.redistribute(found, x._mesh_id, x._placements_raw, x._view)
    regathers[key] = found
    return x if found is None else found


def _input_grads(result, fn, g, regathers=None):
    """[(operand tensor, its gradient)] for the operands of `fn` that
    require grad. A saved operand that a running formula reads is read
    through `_regathered` (a released FSDP gather is gathered again)."""
    names, codes, variadic = _formulas(fn.op)
    tensors = list(fn.inputs)
    if regathers is None:
        regathers = {}
    regather = _RELEASED[0]
    env = dict(_base_env())
    env.update(fn.attrs)
    env["g"] = g
    env["result"] = result
    out = []
    if variadic:
        code = codes[0]
        if regather and code is not None and names[0] in code.co_names and any(
                t.requires_grad for t in tensors):
            env[names[0]] = [_regathered(t, regathers) for t in tensors]
        else:
            env[names[0]] = tensors
        for i, t in enumerate(tensors):
            if t.requires_grad and code is not None:
                env["i"] = i
                out.append((t, eval(code, env)))  # noqa: S307 - registry formulas
        return out
    operands = list(tensors)
    scalar = fn.scalar
    if scalar is not None:
        operands.insert(scalar[0], _scalar_tensor(g, scalar[1]))
    running = [k for k, x in enumerate(operands)
               if (scalar is None or k != scalar[0]) and x.requires_grad
               and codes[k] is not None]
    read = set()
    if regather:
        for k in running:
            read.update(codes[k].co_names)
    for name, x in zip(names, operands):
        env[name] = _regathered(x, regathers) if name in read else x
    for k in running:
        out.append((operands[k], eval(codes[k], env)))  # noqa: S307 - registry formulas
    return out


# ---- the engine --------------------------------------------------------------------------
_FREED = ("Trying to backward through the graph a second time (or directly access saved "
          "tensors after they have already been freed). Saved intermediate values of the "
          "graph are freed when you call .backward() or autograd.grad(). Specify "
          "retain_graph=True if you need to backward through the graph a second time.")


def _topological(roots):
    """Tensors reachable from `roots` through grad_fn records, every tensor
    after the tensors it was computed from."""
    order, seen = [], set()
    stack = [(r, False) for r in roots]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if t._key in seen:
            continue
        seen.add(t._key)
        stack.append((t, True))
        fn = t.grad_fn
        if fn is not None:
            if fn.released:
                raise RuntimeError(_FREED)
            for x in fn.inputs:
                if x.requires_grad and x._key not in seen:
                    stack.append((x, False))
    return order


def _accumulate(t, g):
    """t.grad += g, with g laid out as t (Partial reduced) and in t's dtype."""
    if g.dtype != t.dtype:
        g = _C.cast(g, t.dtype)
    g = like_placements(g, t)
    t.grad = g if t.grad is None else t.grad + g


def _root_grads(tensors, grad_tensors):
    out = []
    for k, (t, g) in enumerate(zip(tensors, grad_tensors)):
        if not isinstance(t, Tensor):
            raise TypeError(f"backward: expected a dtorch Tensor, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(f"element {k} of tensors does not require grad and does not "
                               "have a grad_fn")
        if g is None:
            n = 1
            for s in t.shape:
                n *= s
            if n != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = _C.full(list(t.shape), 1.0, t.dtype, t._mesh_id, _rep_raw(t), t._view)
        elif not isinstance(g, Tensor):
            g = _C.full(list(t.shape), float(g), t.dtype, t._mesh_id, _rep_raw(t), t._view)
        elif tuple(g.shape) != tuple(t.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{k}] has a shape of "
                               f"{tuple(g.shape)} and output[{k}] has a shape of "
                               f"{tuple(t.shape)}.")
        out.append((t, g))
    return out


def _run(tensors, grad_tensors, retain_graph, create_graph, capture=None, only=None):
    """Propagates gradients from `tensors`; accumulates into leaves (or into
    `only`), or, with `capture` (keys of tensors), returns their gradients.

    A plain backward (into the leaves, without a graph of the backward)
    goes through the client's backward replay (lib/Client/BackwardReplay.cpp):
    a backward of a structure seen before records the same ops in C++
    without evaluating a formula; the first one of a structure is walked
    here while the client captures what it records. A graph holding a
    released value (`_regathered`) is always walked here.
    ``DTORCH_BACKWARD_REPLAY=0`` turns it off."""
    roots = _root_grads(tensors, grad_tensors)
    if capture is None and only is None and not create_graph:
        started = _C._backward_start([t for t, _ in roots], [g for _, g in roots],
                                     not retain_graph)
        if started == "replayed":
            return {}
        if started == "capturing":
            completed = False
            try:
                _walk(roots, retain_graph, create_graph, capture, only)
                completed = True
            finally:
                _C._backward_capture_end(completed)
            return {}
    return _walk(roots, retain_graph, create_graph, capture, only)


def _walk(roots, retain_graph, create_graph, capture, only):
    """The walk of `_run` over the records, evaluating the formulas."""
    order = _topological([t for t, _ in roots])
    grads = {}
    for t, g in roots:
        grads[t._key] = g if t._key not in grads else grads[t._key] + g
    captured = {}
    regathers = {}
    with set_grad_enabled(create_graph):
        for t in reversed(order):
            g = grads.pop(t._key, None)
            if g is None:
                continue
            fn = t.grad_fn
            if capture is not None:
                if t._key in capture:
                    captured[t._key] = g
            elif only is not None:
                if t._key in only:
                    _accumulate(t, g)
            elif fn is None or t._retains_grad:
                _accumulate(t, g)
            if fn is None:
                continue
            for x, gx in _input_grads(t, fn, g, regathers):
                if gx is None:
                    continue
                k = x._key
                grads[k] = gx if k not in grads else grads[k] + gx
    if not (retain_graph if retain_graph is not None else create_graph):
        for t in order:
            fn = t.grad_fn
            if fn is not None:
                fn._release()
    return captured


def _as_list(x):
    if x is None:
        return None
    return [x] if isinstance(x, Tensor) else list(x)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulates the gradients of `tensors` into the ``.grad`` of the
    leaves that require grad (torch.autograd.backward).

    Args:
        tensors: a tensor or a list of them.
        grad_tensors: their gradients (None: ones, for one-element tensors).
        retain_graph (bool): keep the records for another backward.
        create_graph (bool): record the backward too (higher derivatives).
        inputs: accumulate only into these tensors.

    Raises:
        RuntimeError: as torch: a non-scalar without a gradient, a tensor
            that does not require grad, a graph already freed.

    Example:
        >>> import dtorch
        >>> x = dtorch.ones(3, requires_grad=True)
        >>> dtorch.autograd.backward([(x * x).sum()])
        >>> x.grad.tolist()
        [2.0, 2.0, 2.0]
    """
    tensors = _as_list(tensors)
    grads = _as_list(grad_tensors) or [None] * len(tensors)
    if len(grads) != len(tensors):
        raise RuntimeError(f"got {len(grads)} gradients for {len(tensors)} tensors")
    only = None
    if inputs is not None:
        only = {t._key for t in _as_list(inputs)}
    _run(tensors, grads, retain_graph, create_graph, only=only)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """The gradients of `outputs` with respect to `inputs`, returned instead
    of accumulated (torch.autograd.grad).

    Example:
        >>> import dtorch
        >>> x = dtorch.ones(3, requires_grad=True)
        >>> (g,) = dtorch.autograd.grad((x * 3.0).sum(), [x])
        >>> g.tolist(), x.grad
        ([3.0, 3.0, 3.0], None)
    """
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    grads = _as_list(grad_outputs) or [None] * len(outputs)
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    captured = _run(outputs, grads, retain_graph, create_graph,
                    capture={t._key for t in inputs})
    out = []
    for t in inputs:
        g = captured.get(t._key)
        if g is None:
            if materialize_grads:
                g = _C.full(list(t.shape), 0.0, t.dtype, t._mesh_id, _rep_raw(t), t._view)
            elif not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have "
                                   "been used in the graph. Set allow_unused=True if this is "
                                   "the desired behavior.")
        out.append(g)
    return tuple(out)


# ---- Tensor methods ---------------------------------------------------------------------
def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Computes the gradient of this tensor with respect to the leaves of its
    graph and accumulates it into their ``.grad``."""
    backward([self], None if gradient is None else [gradient], retain_graph, create_graph,
             inputs)


_FLOATS = None


def _requires_grad_(self, requires_grad=True):
    """Sets whether autograd records ops on this tensor (leaves only)."""
    global _FLOATS
    if _FLOATS is None:
        _FLOATS = {_C.dtype.float32, _C.dtype.float64, _C.dtype.float16, _C.dtype.bfloat16}
    requires_grad = bool(requires_grad)
    if not self.is_leaf and not requires_grad:
        raise RuntimeError("you can only change requires_grad flags of leaf variables. If "
                           "you want to use a computed variable in a subgraph that doesn't "
                           "require differentiation use var_no_grad = var.detach().")
    if requires_grad and self.dtype not in _FLOATS:
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    self._requires_grad = requires_grad
    return self


def _retain_grad(self):
    """Keeps the gradient of a non-leaf tensor in ``.grad`` at backward."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if not self.is_leaf:
        self._retains_grad = True


def _install():
    Tensor.backward = _tensor_backward
    Tensor.requires_grad_ = _requires_grad_
    Tensor.retain_grad = _retain_grad
    Tensor.retains_grad = property(lambda self: self._retains_grad)
    Tensor.requires_grad = property(lambda self: self._requires_grad, _requires_grad_)


_install()
