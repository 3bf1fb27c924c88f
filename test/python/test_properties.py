"""Property tests of DTorch's central invariant: every op's result equals the
same op on the gathered full tensors, for every mesh and every placement.

Hypothesis draws a `Program`: a mesh, inputs of rank 1 to 3 with uneven
extents (1..7) each with its own placements (Replicate, Shard(d) with any d,
Partial(sum|avg|max|min) made by redistributing a replicated tensor), and a
chain of 1 to 6 ops from the registry's families, each applied to earlier
results where the shapes allow. The program runs on DTorch and on a numpy
mirror (property_mirror.py: float64 values with a forward error bound), and
every value of the chain, inputs and intermediates included, must agree.

Beyond the required meshes, a program may use a mesh with its ranks in
another order or on part of the world ((3,) splits unevenly), put inputs on
sub-mesh views, fetch values mid-chain (a new segment reads them), drop
values (never materialized), and try user mistakes that must raise at the
call. Properties: any chain (float32), elementwise and layout ops (float32
and float64), float16/bfloat16 elementwise chains, int64/int32 chains, and
chains with mistakes.

Tolerance: float32 at rtol = atol = 1e-5 plus the mirror's error bound for
that element (property_mirror.py explains it: it stays within a few times
1e-5 for these magnitudes, is zero for exact results, and covers what a
flat tolerance cannot: summation order across shards, comparisons at a tie,
exp of a rounded value). 16-bit dtypes use 1e-3 (float16) and 1e-2
(bfloat16) with their own unit roundoff; integer chains must be exact.

Examples per test: DTORCH_PROPERTY_EXAMPLES (default 100, derandomized so
CI is repeatable: 15 s for the file on an idle 2-core machine, about 45 s
under heavy load); DTORCH_PROPERTY_RANDOM=1 draws
fresh examples; DTORCH_PROPERTY_WORLD=8 runs on 8 in-process ranks with
meshes (8,), (2, 4), (2, 2, 2). tools/property-run runs both with many
examples.
"""
import json
import operator
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import dtorch
from dtorch import Partial, Replicate, Shard

from property_mirror import F32_UNIT, F64_UNIT, DomainError, Mirror, Ref, mismatch, round_bfloat16

EXAMPLES = int(os.environ.get("DTORCH_PROPERTY_EXAMPLES", "100"))
WORLD = int(os.environ.get("DTORCH_PROPERTY_WORLD", "4"))
RANDOM = os.environ.get("DTORCH_PROPERTY_RANDOM") == "1"
MESH_SHAPES = {4: [(4,), (2, 2), (1, 4), (2, 1, 2)],
               8: [(8,), (2, 4), (2, 2, 2)]}[WORLD]
# Meshes on part of the world: 3 ranks split 7 rows 3, 3, 1.
EXTRA_MESH_SHAPES = {4: [(3,), (2,)], 8: [(3,), (2, 3)]}[WORLD]

# Scalars are exact in float32, float16 and bfloat16, so the mirror's
# operand is the kernel's.
SCALARS = (0.5, -1.5, 2.0, 0.25, 3.0, -0.75, 1.0, 0.0)
INT_SCALARS = (2, -1, 3, 0, 1)  # a float scalar would promote an int tensor
REDUCE_OPS = ("sum", "avg", "max", "min")
MESH_DIM_NAMES = ("m0", "m1", "m2")
MAX_RANK = 4
MAX_MAGNITUDE = 1e4  # ops whose result could grow past this are not drawn

STATS = {"examples": 0, "values_checked": 0, "ops": {}, "meshes": {}}

SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=not RANDOM,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


# ---- the program: inputs and ops, with the mirror value of each ------------------
class Node:
    """One value of a program: an input or an op over earlier values."""

    def __init__(self, op, args, params):
        self.op, self.args, self.params = op, tuple(args), dict(params)

    def text(self, index):
        def arg(a):
            return f"v{a[1]}" if a[0] == "v" else repr(a[1])
        if self.op == "index_input":
            p = self.params
            pl = ", ".join(_placement_text(x) for x in p["placements"])
            return (f"v{index} = index_input({'x'.join(map(str, p['shape']))}, "
                    f"0..{p['high'] - 1}, seed={p['seed']}, [{pl}])")
        if self.op == "input":
            p = self.params
            pl = ", ".join(_placement_text(x) for x in p["placements"])
            data = "ints" if p["integers"] else "floats"
            view = f", on mesh{list(MESH_DIM_NAMES[a] for a in p['view'])}" if p["view"] else ""
            return (f"v{index} = input({'x'.join(map(str, p['shape'])) or 'scalar'}, "
                    f"{data}, seed={p['seed']}, [{pl}]{view})")
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"v{index} = {self.op}({', '.join(arg(a) for a in self.args)}" + (
            f", {params})" if params else ")")


def _placement_text(p):
    return "R" if p[0] == "R" else f"{p[0]}({p[1]})"


class Program:
    """A mesh, a dtype and a list of nodes; `refs` holds the mirror value of
    every node (computed while drawing, so later draws see real shapes and
    magnitudes)."""

    def __init__(self, mesh_shape, dtype_name="float32", ranks=None):
        self.mesh_shape = tuple(mesh_shape)
        size = int(np.prod(self.mesh_shape))
        self.ranks = tuple(ranks) if ranks is not None else tuple(range(size))
        self.dtype_name = dtype_name
        self.mirror = Mirror(UNITS[dtype_name])
        self.integer = dtype_name in ("int32", "int64")
        self.scalars = INT_SCALARS if self.integer else SCALARS
        self.reduce_ops = tuple(op for op in REDUCE_OPS if not (self.integer and op == "avg"))
        self.nodes, self.refs = [], []
        self.cuts, self.dropped = set(), set()  # fetched at once / never held
        self.mistakes = {}  # node -> a user mistake tried on it (must raise at the call)
        self.steps = 0

    def add(self, op, args, params):
        node = Node(op, args, params)
        if op == "index_input":
            ref = Ref(index_array(params))
        elif op == "input":
            v = input_array(params, self.dtype_name).astype(np.float64)
            # A value made Partial(sum|avg) is reduced again when fetched or
            # redistributed: x + x + x over 3 ranks (or 8 in the collectives'
            # order) may round, except for small integers.
            rounds = not params["integers"] and any(
                p[0] == "P" and p[1] in ("sum", "avg") for p in params["placements"])
            bound = 4.0 * max(self.mesh_shape) * self.mirror.unit * np.abs(v)
            ref = Ref(v, bound if rounds else 0.0)
        else:
            try:
                ref = OPS[op].run(MirrorLib(self.mirror), [self._arg(self.refs, a) for a in args],
                                  node.params)
            except DomainError:
                reject()  # too close to a singular point for a useful bound
        self.nodes.append(node)
        self.refs.append(ref)
        return len(self.nodes) - 1

    @staticmethod
    def _arg(values, a):
        return values[a[1]] if a[0] == "v" else a[1]

    def __repr__(self):
        ranks = "" if self.ranks == tuple(range(len(self.ranks))) else f", ranks={self.ranks}"
        lines = [f"Program(mesh={self.mesh_shape}{ranks}, dtype={self.dtype_name})"]
        lines += ["  " + n.text(i) + ("  # fetched at once" if i in self.cuts else "")
                  + (f"  # then the mistake {self.mistakes[i]!r}" if i in self.mistakes else "")
                  + ("  # dropped" if i in self.dropped else "") for i, n in enumerate(self.nodes)]
        return "\n".join(lines)


UNITS = {"float32": F32_UNIT, "float64": F64_UNIT, "float16": 2.0 ** -11,
         "bfloat16": 2.0 ** -8, "int32": 0.0, "int64": 0.0}
BASE_TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-3, "bfloat16": 1e-2,
            "int32": 0.0, "int64": 0.0}


def index_array(params):
    """An int64 index tensor's global value: entries in [0, high)."""
    rng = np.random.default_rng(params["seed"])
    return rng.integers(0, params["high"], params["shape"]).astype(np.int64)


def input_array(params, dtype_name):
    """The input's global value, already rounded to the dtype under test."""
    rng = np.random.default_rng(params["seed"])
    shape = params["shape"]
    # Small integers give ties (max, argmax, eq) and exact sums.
    if params["integers"] or dtype_name in ("int32", "int64"):
        a = rng.integers(-2, 3, shape).astype(np.float32)
    else:
        a = rng.uniform(-2.0, 2.0, shape).astype(np.float32)
    if dtype_name == "float16":
        return a.astype(np.float16).astype(np.float32)
    if dtype_name == "bfloat16":
        return round_bfloat16(a)
    return a


# ---- the same op on DTorch and on the mirror: one adapter each -------------------
_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "div": operator.truediv, "pow": operator.pow}
_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}


class DTorchLib:
    """The ops through DTorch's torch-style surface (operators, methods and
    functions, as users call them)."""

    def __init__(self, mesh):
        self.mesh = mesh  # the program's (root) mesh

    def unary(self, name, x):
        if name == "neg":
            return -x
        if name == "abs":
            return abs(x)
        if name in ("gelu", "silu", "sigmoid"):
            return getattr(dtorch, name)(x)
        return getattr(x, name)()

    def binary(self, name, a, b):
        if name in _ARITH:
            return _ARITH[name](a, b)
        return getattr(dtorch, name)(a, b)

    def compare(self, name, a, b):
        return _COMPARE[name](a, b)

    def where(self, c, a, b):
        return dtorch.where(c, a, b)

    def reduce(self, name, x, dims, keepdim):
        fn = {"sum": x.sum, "mean": x.mean, "max": x.amax, "min": x.amin}[name]
        return fn(list(dims) or None, keepdim=keepdim)

    def argreduce(self, name, x, dim, keepdim):
        return getattr(x, name)(dim, keepdim)

    def matmul(self, a, b):
        return a @ b

    def reshape(self, x, shape):
        return x.reshape(*shape)

    def permute(self, x, perm):
        return x.permute(*perm)

    def unsqueeze(self, x, dim):
        return x.unsqueeze(dim)

    def squeeze(self, x, dim):
        return x.squeeze(dim)

    def expand(self, x, shape):
        return x.expand(*shape)

    def getitem(self, x, key):
        return x[key]

    def narrow(self, x, dim, start, length):
        return x.narrow(dim, start, length)

    def chunk(self, x, chunks, dim, k):
        return x.chunk(chunks, dim)[k]

    def flatten(self, x, start, end):
        return x.flatten(start, end)

    def cross_entropy(self, x, target, reduction, label_smoothing):
        return dtorch.cross_entropy(x, target, reduction=reduction,
                                    label_smoothing=label_smoothing)

    def concat(self, xs, dim):
        return dtorch.cat(xs, dim)

    def triangle(self, name, x, diagonal):
        return getattr(x, name)(diagonal)

    def softmax(self, x, dim):
        return x.softmax(dim)

    def log_softmax(self, x, dim):
        return dtorch.log_softmax(x, dim)

    def logsumexp(self, x, dims, keepdim):
        return x.logsumexp(list(dims), keepdim)

    def var(self, x, dims, keepdim, correction):
        return x.var(list(dims), keepdim=keepdim, correction=correction)

    def layer_norm(self, x, k):
        return dtorch.layer_norm(x, tuple(x.shape[x.ndim - k:]))

    def redistribute(self, x, placements):
        return x.redistribute(self.mesh, [_placement(p) for p in placements])

    def rms_norm(self, x, k):
        return dtorch.rms_norm(x, tuple(x.shape[x.ndim - k:]))

    def stack(self, xs, dim):
        return dtorch.stack(xs, dim)

    def linear(self, x, weight, bias):
        return dtorch.linear(x, weight, bias)

    def masked_fill(self, x, mask, value):
        return x.masked_fill(mask, value)

    def index_select(self, x, dim, index):
        if dim % x.ndim == x.ndim - 1:  # x[..., index]: indexing with a tensor
            return x[(Ellipsis, index)]
        return dtorch.index_select(x, dim, index)

    def gather(self, x, dim, index):
        return x.gather(dim, index)

    def scatter_add(self, x, dim, index, src):
        return dtorch.scatter_add(x, dim, index, src)


class MirrorLib:
    """The ops on the mirror (float64 values with error bounds)."""

    def __init__(self, mirror):
        self.m = mirror

    def __getattr__(self, name):  # unary, binary, compare, where, reduce, ...
        return getattr(self.m, name)

    def reshape(self, x, shape):
        return self.m.layout(x, lambda a: a.reshape(shape))

    def permute(self, x, perm):
        return self.m.layout(x, lambda a: np.transpose(a, perm))

    def unsqueeze(self, x, dim):
        return self.m.layout(x, lambda a: np.expand_dims(a, dim))

    def squeeze(self, x, dim):
        return self.m.layout(x, lambda a: np.squeeze(a, dim) if a.shape[dim] == 1 else a)

    def expand(self, x, shape):
        return self.m.layout(x, lambda a: np.broadcast_to(a, shape))

    def getitem(self, x, key):
        return self.m.layout(x, lambda a: a[key])

    def narrow(self, x, dim, start, length):
        start %= x.shape[dim]
        return self.m.layout(x, lambda a: np.take(a, range(start, start + length), axis=dim))

    def chunk(self, x, chunks, dim, k):
        size = -(-x.shape[dim] // chunks)
        return self.m.layout(x, lambda a: np.take(
            a, range(k * size, min((k + 1) * size, a.shape[dim])), axis=dim))

    def flatten(self, x, start, end):
        shape = x.shape
        s, e = start % len(shape), end % len(shape)
        new = shape[:s] + (int(np.prod(shape[s:e + 1])),) + shape[e + 1:]
        return self.m.layout(x, lambda a: a.reshape(new))

    def cross_entropy(self, x, target, reduction, label_smoothing):
        m = self.m
        logp = m.log_softmax(x, 1)
        picked = self.layout(logp, lambda a: np.take_along_axis(a, target.v[:, None], 1)[:, 0])
        nll = m.unary("neg", picked)
        if label_smoothing:
            smooth = m.unary("neg", m.reduce("mean", logp, [1], False))
            nll = m.binary("add", m.binary("mul", nll, 1.0 - label_smoothing),
                           m.binary("mul", smooth, label_smoothing))
        if reduction == "none":
            return nll
        return m.reduce("sum" if reduction == "sum" else "mean", nll, [], False)

    def triangle(self, name, x, diagonal):
        fn = np.tril if name == "tril" else np.triu
        return self.m.layout(x, lambda a: fn(a, diagonal))

    def matmul(self, a, b):
        return self.m.matmul(a, b)

    def rms_norm(self, x, k):
        dims = list(range(x.v.ndim - k, x.v.ndim))
        ms = self.m.reduce("mean", self.m.binary("mul", x, x), dims, True)
        eps = 1.1920928955078125e-07  # float32's machine epsilon, as torch
        return self.m.binary("mul", x, self.m.unary("rsqrt", self.m.binary("add", ms, eps)))

    def stack(self, xs, dim):
        return self.m.concat([self.unsqueeze(x, dim) for x in xs], dim)

    def linear(self, x, weight, bias):
        return self.m.binary("add", self.m.matmul(x, self.permute(weight, (1, 0))), bias)

    def masked_fill(self, x, mask, value):
        return self.m.where(mask, value, x)

    def index_select(self, x, dim, index):
        return self.m.layout(x, lambda a: np.take(a, index.v, axis=dim))

    def gather(self, x, dim, index):
        dim %= x.v.ndim
        box = tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))
        return self.m.layout(x, lambda a: np.take_along_axis(a[box], index.v, axis=dim))

    def scatter_add(self, x, dim, index, src):
        dim %= x.v.ndim
        v = x.v.astype(np.float64).copy()
        e = x.e.copy()
        mag = np.abs(v)
        sv = src.v.astype(np.float64)
        target = list(np.indices(index.shape))
        target[dim] = index.v
        target = tuple(target)
        box = tuple(slice(0, n) for n in index.shape)
        np.add.at(v, target, sv[box])
        np.add.at(e, target, src.e[box])
        np.add.at(mag, target, np.abs(sv[box]))
        count = np.zeros(v.shape)
        np.add.at(count, target, 1.0)
        # Sums in any order: (adds + 1) units of the magnitudes added.
        exact = (e == 0) & (mag * self.m.unit < 0.5) & np.all(sv == np.round(sv)) & \
            np.all(x.v == np.round(x.v))
        return Ref(v, e + np.where(exact | (count == 0), 0.0, (count + 1) * self.m.unit * mag))

    def redistribute(self, x, placements):
        # The same value; reducing partial pieces (into the fetched value or
        # a collective) may round once per piece.
        partial = any(p[0] == "P" for p in placements)
        v = x.v.astype(np.float64)
        return Ref(x.v, x.e + (8.0 * self.m.unit * np.abs(v) if partial else 0.0))


# ---- the op table: how each op runs and when it may be drawn --------------------
class OpSpec:
    """run(lib, args, params) builds the op from the adapter's primitives,
    so DTorch and the mirror run the very same composition."""

    def __init__(self, family, run, elementwise=False):
        self.family, self.run, self.elementwise = family, run, elementwise


def _u(name):
    return lambda L, a, p: L.unary(name, a[0])


def _pos(L, x):
    """|x| + 0.5: a value bounded away from zero (for log, sqrt, rsqrt, div, pow)."""
    if isinstance(x, (int, float)):
        return abs(x) + 0.5
    return L.binary("add", L.unary("abs", x), 0.5)


OPS = {}
for _name in ("neg", "abs", "relu", "tanh", "sigmoid", "sin", "cos", "gelu", "silu", "exp"):
    OPS[_name] = OpSpec("unary", _u(_name), elementwise=True)
for _name in ("log", "sqrt", "rsqrt"):
    OPS[_name + "_abs"] = OpSpec(
        "unary", (lambda n: lambda L, a, p: L.unary(n, _pos(L, a[0])))(_name), elementwise=True)
OPS["square"] = OpSpec("unary", lambda L, a, p: L.binary("mul", a[0], a[0]), elementwise=True)
OPS["clamp"] = OpSpec("unary", lambda L, a, p: L.binary(
    "minimum", L.binary("maximum", a[0], p["lo"]), p["hi"]), elementwise=True)
for _name in ("add", "sub", "mul", "maximum", "minimum"):
    OPS[_name] = OpSpec("binary", (lambda n: lambda L, a, p: L.binary(n, a[0], a[1]))(_name),
                        elementwise=True)
OPS["div_abs"] = OpSpec("binary", lambda L, a, p: L.binary("div", a[0], _pos(L, a[1])),
                        elementwise=True)
OPS["pow_abs"] = OpSpec("binary", lambda L, a, p: L.binary("pow", _pos(L, a[0]), p["k"]),
                        elementwise=True)
for _name in _COMPARE:
    OPS[_name] = OpSpec("compare", (lambda n: lambda L, a, p: L.compare(n, a[0], a[1]))(_name),
                        elementwise=True)
OPS["where"] = OpSpec("where", lambda L, a, p: L.where(a[0], a[1], a[2]), elementwise=True)
for _name in ("sum", "mean", "max", "min"):
    OPS["reduce_" + _name] = OpSpec(
        "reduction", (lambda n: lambda L, a, p: L.reduce(n, a[0], p["dims"], p["keepdim"]))(_name))
for _name in ("argmax", "argmin"):
    OPS[_name] = OpSpec("argreduce", (lambda n: lambda L, a, p: L.argreduce(
        n, a[0], p["dim"], p["keepdim"]))(_name))
OPS["matmul"] = OpSpec("matmul", lambda L, a, p: L.matmul(a[0], a[1]))
OPS["reshape"] = OpSpec("shape", lambda L, a, p: L.reshape(a[0], p["shape"]))
OPS["permute"] = OpSpec("shape", lambda L, a, p: L.permute(a[0], p["perm"]))
OPS["unsqueeze"] = OpSpec("shape", lambda L, a, p: L.unsqueeze(a[0], p["dim"]))
OPS["squeeze"] = OpSpec("shape", lambda L, a, p: L.squeeze(a[0], p["dim"]))
OPS["expand"] = OpSpec("shape", lambda L, a, p: L.expand(a[0], p["shape"]))
OPS["getitem"] = OpSpec("slice", lambda L, a, p: L.getitem(a[0], p["key"]))
OPS["narrow"] = OpSpec("slice", lambda L, a, p: L.narrow(a[0], p["dim"], p["start"], p["length"]))
OPS["chunk"] = OpSpec("slice", lambda L, a, p: L.chunk(a[0], p["chunks"], p["dim"], p["k"]))
OPS["flatten"] = OpSpec("shape", lambda L, a, p: L.flatten(a[0], p["start"], p["end"]))
OPS["cross_entropy"] = OpSpec("decomposition", lambda L, a, p: L.cross_entropy(
    a[0], a[1], p["reduction"], p["label_smoothing"]))
OPS["cat"] = OpSpec("concat", lambda L, a, p: L.concat(list(a), p["dim"]))
OPS["tril"] = OpSpec("triangle", lambda L, a, p: L.triangle("tril", a[0], p["diagonal"]))
OPS["triu"] = OpSpec("triangle", lambda L, a, p: L.triangle("triu", a[0], p["diagonal"]))
OPS["softmax"] = OpSpec("decomposition", lambda L, a, p: L.softmax(a[0], p["dim"]))
OPS["log_softmax"] = OpSpec("decomposition", lambda L, a, p: L.log_softmax(a[0], p["dim"]))
OPS["logsumexp"] = OpSpec("decomposition", lambda L, a, p: L.logsumexp(
    a[0], p["dims"], p["keepdim"]))
OPS["var"] = OpSpec("decomposition", lambda L, a, p: L.var(
    a[0], p["dims"], p["keepdim"], p["correction"]))
OPS["layer_norm"] = OpSpec("decomposition", lambda L, a, p: L.layer_norm(a[0], p["k"]))
OPS["rms_norm"] = OpSpec("decomposition", lambda L, a, p: L.rms_norm(a[0], p["k"]))
OPS["stack"] = OpSpec("concat", lambda L, a, p: L.stack(list(a), p["dim"]))
OPS["linear"] = OpSpec("matmul", lambda L, a, p: L.linear(a[0], a[1], a[2]))
OPS["masked_fill"] = OpSpec("where", lambda L, a, p: L.masked_fill(a[1], a[0], p["value"]),
                            elementwise=True)
OPS["index_select"] = OpSpec("index", lambda L, a, p: L.index_select(a[0], p["dim"], a[1]))
OPS["gather"] = OpSpec("index", lambda L, a, p: L.gather(a[0], p["dim"], a[1]))
OPS["scatter_add"] = OpSpec("index", lambda L, a, p: L.scatter_add(a[0], p["dim"], a[1], a[2]))
OPS["redistribute"] = OpSpec("layout", lambda L, a, p: L.redistribute(a[0], p["placements"]))


# ---- strategies ---------------------------------------------------------------------
def placements(ndim, mesh_shape, partial=REDUCE_OPS):
    """One placement per mesh dim: Replicate, Shard(d) for any d (negative
    too; uneven splits follow from the extents), or Partial(op)."""
    kinds = [st.just(("R",))]
    if ndim:
        kinds.append(st.integers(-ndim, ndim - 1).map(lambda d: ("S", d)))
    if partial:
        kinds.append(st.sampled_from(partial).map(lambda op: ("P", op)))
    return st.tuples(*[st.one_of(kinds) for _ in mesh_shape])


def shapes(min_rank=1, max_rank=3):
    return st.lists(st.integers(1, 7), min_size=min_rank, max_size=max_rank).map(tuple)


def draw_input(draw, prog, shape):
    nd = len(prog.mesh_shape)
    view = ()
    if nd >= 2 and draw(st.integers(0, 3)) == 0:
        # On a sub-mesh view (mesh["m1"], mesh["m1", "m0"], ...): Replicate
        # on the dims the view leaves out.
        view = tuple(draw(st.permutations(range(nd))))[:draw(st.integers(1, nd))]
    view_shape = [prog.mesh_shape[a] for a in view] if view else prog.mesh_shape
    params = dict(shape=tuple(shape), seed=draw(st.integers(0, 2 ** 16)),
                  integers=prog.integer or draw(st.booleans()),
                  placements=draw(placements(len(shape), view_shape, prog.reduce_ops)),
                  view=view)
    return prog.add("input", [], params)


def draw_index_input(draw, prog, shape, high):
    params = dict(shape=tuple(shape), high=high, seed=draw(st.integers(0, 2 ** 16)),
                  placements=draw(placements(len(shape), prog.mesh_shape,
                                             ("sum", "max", "min"))))
    return prog.add("index_input", [], params)


def _hi(ref):
    return float(np.max(np.abs(ref.v) + ref.e)) if ref.v.size else 0.0


def _broadcast_partner_shape(draw, shape):
    """A shape that broadcasts with `shape`: each dim kept or 1, leading dims
    maybe dropped, and size-1 dims of `shape` maybe widened."""
    out = [draw(st.sampled_from([s, 1])) if s != 1 else draw(st.integers(1, 7))
           for s in shape]
    drop = draw(st.integers(0, len(out)))
    return tuple(out[drop:])


def draw_operand(draw, prog, src, allow_scalar=True):
    """A second operand for `src`: a Python scalar, an earlier float value
    that broadcasts with it, or a fresh input."""
    shape = prog.refs[src].shape
    earlier = [i for i, r in enumerate(prog.refs)
               if r.kind == "f" and _broadcasts(shape, r.shape)]
    kinds = ["fresh"] + (["scalar"] if allow_scalar else []) + (["value"] if earlier else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        return ("s", draw(st.sampled_from(prog.scalars)))
    if kind == "value":
        return ("v", draw(st.sampled_from(earlier)))
    return ("v", draw_input(draw, prog, _broadcast_partner_shape(draw, shape)))


def _broadcasts(a, b):
    try:
        return len(np.broadcast_shapes(a, b)) <= MAX_RANK
    except ValueError:
        return False


def _one_dim(draw, ndim):
    """A dim of a tensor of rank `ndim`; 0 or -1 for a 0-d tensor (torch
    accepts them)."""
    return draw(st.integers(-ndim, ndim - 1) if ndim else st.sampled_from([0, -1]))


def _dims_subset(draw, ndim):
    if ndim == 0:
        return draw(st.sampled_from([(), (0,), (-1,)]))
    dims = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(d - ndim if draw(st.booleans()) else d for d in dims)


def _numel(shape, dims):
    return int(np.prod([shape[d] for d in dims])) if dims else int(np.prod(shape))


def draw_step(draw, prog, names):
    """Appends one op (and any fresh inputs it needs) to the program."""
    floats = [i for i, r in enumerate(prog.refs) if r.kind == "f"]
    # Recent values first, so that shrinking moves towards a straight chain.
    src = floats[-1 - draw(st.integers(0, len(floats) - 1))]
    ref = prog.refs[src]
    shape, ndim, hi = ref.shape, len(ref.shape), _hi(ref)
    ok = [n for n in names if _applicable(n, prog, ref, shape, ndim, hi)]
    # Family first, then the op: the families get equal shares, however
    # many ops each has (there are ten unary ops and one matmul).
    families = sorted({OPS[n].family for n in ok})
    family = draw(st.sampled_from(families))
    name = draw(st.sampled_from([n for n in ok if OPS[n].family == family]))
    fam = OPS[name].family
    args, params = [("v", src)], {}
    if name == "clamp":
        lo = draw(st.sampled_from(prog.scalars))
        params = dict(lo=lo, hi=draw(st.sampled_from([s for s in prog.scalars if s >= lo])))
    elif name == "pow_abs":
        params = dict(k=draw(st.sampled_from(_pow_exponents(hi))))
    elif fam == "binary":
        other = draw_operand(draw, prog, src)
        ohi = abs(other[1]) if other[0] == "s" else _hi(prog.refs[other[1]])
        if name == "mul" and hi * ohi > MAX_MAGNITUDE:
            other = ("s", 1)
        if draw(st.booleans()):  # the reflected form: 2.0 - x, y * x
            args = [other, ("v", src)]
        else:
            args.append(other)
    elif fam == "compare":
        args.append(draw_operand(draw, prog, src))
    elif fam == "where":
        fits = (lambda c: _broadcasts(shape, c) and np.broadcast_shapes(shape, c) == shape) \
            if name == "masked_fill" else (lambda c: _broadcasts(shape, c))
        conds = [i for i, r in enumerate(prog.refs) if r.kind == "b" and fits(r.shape)]
        if conds and draw(st.booleans()):
            cond = conds[draw(st.integers(0, len(conds) - 1))]
        else:
            cmp = draw(st.sampled_from(sorted(_COMPARE)))
            cond = prog.add(cmp, [("v", src), ("s", draw(st.sampled_from(prog.scalars)))], {})
            prog.steps += 1
        if name == "masked_fill":
            args = [("v", cond), ("v", src)]
            params = dict(value=draw(st.sampled_from(prog.scalars)))
        else:
            other = draw_operand(draw, prog, src)
            if other[0] == "v" and not _broadcasts(
                    prog.refs[cond].shape, np.broadcast_shapes(shape, prog.refs[other[1]].shape)):
                other = ("s", draw(st.sampled_from(prog.scalars)))
            pair = [("v", src), other] if draw(st.booleans()) else [other, ("v", src)]
            args = [("v", cond)] + pair
    elif fam == "reduction":
        params = dict(dims=_dims_subset(draw, ndim), keepdim=draw(st.booleans()))
    elif fam == "argreduce":
        params = dict(dim=_one_dim(draw, ndim), keepdim=draw(st.booleans()))
    elif name == "matmul":
        args = [("v", src), ("v", _matmul_partner(draw, prog, src))]
    elif name == "reshape":
        params = dict(shape=draw(_factorizations(int(np.prod(shape)))))
    elif name == "permute":
        params = dict(perm=tuple(draw(st.permutations(range(ndim)))))
    elif name == "unsqueeze":
        params = dict(dim=draw(st.integers(-ndim - 1, ndim)))
    elif name == "squeeze":
        params = dict(dim=draw(st.sampled_from([d for d in range(ndim) if shape[d] == 1])))
    elif name == "expand":
        target = [draw(st.integers(1, 7)) if s == 1 else s for s in shape]
        lead = draw(st.integers(0, MAX_RANK - ndim))
        params = dict(shape=tuple([draw(st.integers(1, 4)) for _ in range(lead)] + target))
    elif name == "getitem":
        params = dict(key=_draw_index(draw, shape))
    elif name == "narrow":
        dim = _one_dim(draw, ndim)
        extent = shape[dim]
        start = draw(st.integers(-extent, extent - 1))
        params = dict(dim=dim, start=start,
                      length=draw(st.integers(1, extent - start % extent)))
    elif name == "chunk":
        dim = _one_dim(draw, ndim)
        chunks = draw(st.integers(1, shape[dim]))
        count = -(-shape[dim] // -(-shape[dim] // chunks))  # torch may give fewer chunks
        params = dict(chunks=chunks, dim=dim, k=draw(st.integers(0, count - 1)))
    elif name == "flatten":
        start = _one_dim(draw, ndim)
        end = draw(st.integers(start % ndim, ndim - 1))
        params = dict(start=start, end=end - ndim if draw(st.booleans()) else end)
    elif name == "cross_entropy":
        target = draw_index_input(draw, prog, (shape[0],), shape[1])
        args = [("v", src), ("v", target)]
        params = dict(reduction=draw(st.sampled_from(["mean", "sum", "none"])),
                      label_smoothing=draw(st.sampled_from([0.0, 0.25])))
    elif name == "stack":
        dim = draw(st.integers(-ndim - 1, ndim))
        other = src if draw(st.booleans()) else draw_input(draw, prog, shape)
        args, params = [("v", src), ("v", other)], dict(dim=dim)
    elif name == "linear":
        n = draw(st.integers(1, 7))
        weight = draw_input(draw, prog, (n, shape[-1]))
        bias = draw_input(draw, prog, (n,))
        args = [("v", src), ("v", weight), ("v", bias)]
    elif name == "cat":
        dim = draw(st.integers(-ndim, ndim - 1))
        if draw(st.booleans()):
            other = src
        else:
            oshape = list(shape)
            oshape[dim] = draw(st.integers(1, 7))
            other = draw_input(draw, prog, oshape)
        args, params = [("v", src), ("v", other)], dict(dim=dim)
    elif fam == "triangle":
        params = dict(diagonal=draw(st.integers(-2, 2)))
    elif name in ("softmax", "log_softmax"):
        params = dict(dim=_one_dim(draw, ndim))
    elif name == "logsumexp":
        params = dict(dims=_dims_subset(draw, ndim) or (_one_dim(draw, ndim),),
                      keepdim=draw(st.booleans()))
    elif name == "var":
        big = [d for d in range(ndim) if shape[d] > 1]
        dims = tuple(draw(st.lists(st.sampled_from(big), unique=True, min_size=1)))
        params = dict(dims=dims, keepdim=draw(st.booleans()),
                      correction=draw(st.sampled_from([0, 1])))
    elif name in ("layer_norm", "rms_norm"):
        params = dict(k=draw(st.integers(1, ndim)))
    elif fam == "index":
        dim = draw(st.integers(-ndim, ndim - 1))
        d0 = dim % ndim
        if name == "index_select":
            ishape = (draw(st.integers(1, 7)),)
        else:
            # Index (and src) at most as long as the input on the other dims
            # (shorter ones once met the gather/scatter_add rule bugs of
            # test_property_regressions.py).
            ishape = tuple(draw(st.integers(1, 7)) if d == d0 else draw(st.integers(1, shape[d]))
                           for d in range(ndim))
        index = draw_index_input(draw, prog, ishape, shape[d0])
        args = [("v", src), ("v", index)]
        if name == "scatter_add":
            args.append(("v", draw_input(draw, prog, ishape)))
        params = dict(dim=dim)
    elif name == "redistribute":
        params = dict(placements=draw(placements(ndim, prog.mesh_shape, prog.reduce_ops)))
    index = prog.add(name, args, params)
    prog.steps += 1
    return index


def _pow_exponents(hi):
    base = hi + 0.5
    return [k for k in (2.0, 0.5, 3.0, -1.0) if base ** max(k, 0) <= MAX_MAGNITUDE]


def _applicable(name, prog, ref, shape, ndim, hi):
    fam = OPS[name].family
    n = int(np.prod(shape)) if shape else 1
    if name == "exp":
        return hi <= 8.0
    if name == "square":
        return hi * hi <= MAX_MAGNITUDE
    if fam in ("slice", "concat", "index") and ndim == 0:
        return False
    if fam == "decomposition" and ndim == 0:  # dim 0 of a 0-d tensor, as in torch
        return name in ("softmax", "log_softmax", "logsumexp")
    if name == "reduce_sum":
        return hi * n <= MAX_MAGNITUDE
    if name == "matmul":
        return ndim in (2, 3) and hi <= 50.0
    if name == "linear":
        return ndim == 2 and hi <= 50.0
    if name == "stack":
        return ndim < MAX_RANK
    if name == "rms_norm":
        return hi <= 100.0
    if name == "permute":
        return ndim >= 2
    if name == "unsqueeze":
        return ndim < MAX_RANK
    if name == "squeeze":
        return 1 in shape
    if name == "flatten":
        return ndim >= 1
    if name == "cross_entropy":
        return ndim == 2 and hi <= 30.0
    if name == "expand":
        return ndim < MAX_RANK or 1 in shape
    if fam == "triangle":
        return ndim >= 2
    if name in ("softmax", "log_softmax", "logsumexp"):
        return hi <= 30.0
    if name == "var":
        return any(s > 1 for s in shape) and hi <= 50.0
    if name == "pow_abs":
        return bool(_pow_exponents(hi))
    return True


@st.composite
def _factorizations(draw, n):
    """A shape of rank 1..3 with `n` elements."""
    rank = draw(st.integers(1, 3))
    out, left = [], n
    for _ in range(rank - 1):
        divisors = [d for d in range(1, left + 1) if left % d == 0]
        d = draw(st.sampled_from(divisors))
        out.append(d)
        left //= d
    out.append(left)
    return tuple(draw(st.permutations(out)))


def _draw_index(draw, shape):
    """x[..., a:b:s, ...] on one or more dims (never empty), maybe an int."""
    key = []
    for extent in shape:
        kind = draw(st.sampled_from(["all", "slice", "slice", "int"]))
        if kind == "all":
            key.append(slice(None))
        elif kind == "int":
            key.append(draw(st.integers(-extent, extent - 1)))
        else:
            start = draw(st.integers(-extent, extent - 1))
            first = start % extent
            stop = draw(st.one_of(st.none(), st.integers(first + 1, extent)))
            step = draw(st.integers(1, 3))
            key.append(slice(start, stop, step))
    return tuple(key)


def _matmul_partner(draw, prog, src):
    shape = prog.refs[src].shape
    k = shape[-1]
    if draw(st.booleans()):  # x @ x^T: both operands carry the same placements
        perm = list(range(len(shape)))
        perm[-2], perm[-1] = perm[-1], perm[-2]
        prog.steps += 1
        return prog.add("permute", [("v", src)], dict(perm=tuple(perm)))
    other = list(shape[:-2]) + [k, draw(st.integers(1, 7))]
    return draw_input(draw, prog, other)


@st.composite
def programs(draw, names=tuple(OPS), dtype_names=("float32",), max_steps=6, mistakes=False):
    mesh_shape = draw(st.sampled_from(MESH_SHAPES + EXTRA_MESH_SHAPES))
    size = int(np.prod(mesh_shape))
    ranks = None
    if draw(st.booleans()):  # the mesh's ranks in another order, maybe a subset of the world
        ranks = tuple(draw(st.permutations(range(WORLD))))[:size]
    elif size < WORLD:
        ranks = tuple(range(WORLD - size, WORLD))
    prog = Program(mesh_shape, draw(st.sampled_from(dtype_names)), ranks)
    draw_input(draw, prog, draw(shapes()))
    target = draw(st.integers(1, max_steps))
    while prog.steps < target:
        draw_step(draw, prog, names)
    last = len(prog.nodes) - 1
    prog.cuts = draw(st.sets(st.integers(0, last), max_size=2))
    prog.dropped = draw(st.sets(st.integers(0, last - 1), max_size=last)) if last else set()
    if mistakes:
        floats = [i for i, r in enumerate(prog.refs) if r.kind == "f"]
        at = draw(st.lists(st.sampled_from(floats), min_size=1, max_size=3, unique=True))
        prog.mistakes = {i: draw(st.sampled_from(MISTAKES)) for i in at}
    return prog


# ---- running a program on DTorch ------------------------------------------------------
_MESHES = {}


def mesh_for(shape, ranks):
    key = (shape, ranks)
    mesh = _MESHES.get(key)
    if mesh is None:
        grid = np.array(ranks, dtype=np.int64).reshape(shape)
        mesh = _MESHES[key] = dtorch.DeviceMesh("cpu", grid,
                                                mesh_dim_names=MESH_DIM_NAMES[:len(shape)])
    return mesh


def _placement(p):
    return {"R": lambda: Replicate(), "S": lambda: Shard(p[1]),
            "P": lambda: Partial(p[1])}[p[0]]()


def make_input(prog, params, mesh):
    if params["view"]:
        mesh = mesh[tuple(MESH_DIM_NAMES[a] for a in params["view"])]
    arr = input_array(params, prog.dtype_name)
    full = [_placement(p) for p in params["placements"]]
    base = [Replicate() if isinstance(p, Partial) else p for p in full]
    t = dtorch.distribute_tensor(arr, mesh, base)
    if prog.dtype_name != "float32":
        t = t.to(getattr(dtorch, prog.dtype_name))
    if any(isinstance(p, Partial) for p in full):
        t = t.redistribute(mesh, full)
    return t


def _compare(prog, i, t):
    ref = prog.refs[i]
    got = t.numpy()
    want_dtype = {"f": prog.dtype_name, "b": "bool", "i": "int64"}[ref.kind]
    assert np.asarray(got).dtype.name == want_dtype, (
        f"{prog}\nv{i}: fetched dtype {np.asarray(got).dtype.name}, want {want_dtype}")
    if ref.kind == "f":
        got = _as_float64(got)
    problem = mismatch(got, ref, BASE_TOL[prog.dtype_name])
    assert problem is None, f"{prog}\nv{i} (placements {tuple(t.placements)}): {problem}"


def make_index_input(params, mesh):
    full = [_placement(p) for p in params["placements"]]
    base = [Replicate() if isinstance(p, Partial) else p for p in full]
    t = dtorch.distribute_tensor(index_array(params), mesh, base)
    if any(isinstance(p, Partial) for p in full):
        t = t.redistribute(mesh, full)
    return t


def _as_float64(values):
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":  # bfloat16 (ml_dtypes)
        return values.astype(np.float32).astype(np.float64)
    return values


def check_program(prog):
    """Runs the program on DTorch and compares every value with the mirror:
    values fetched at a cut point as soon as they exist (the ops after them
    go to a new segment that reads them from the workers), the rest at the
    end, except the dropped ones (never materialized)."""
    mesh = mesh_for(prog.mesh_shape, prog.ranks)
    lib = DTorchLib(mesh)
    tensors = []
    for i, node in enumerate(prog.nodes):
        if node.op == "input":
            t = make_input(prog, node.params, mesh)
        elif node.op == "index_input":
            t = make_index_input(node.params, mesh)
        else:
            t = OPS[node.op].run(lib, [Program._arg(tensors, a) for a in node.args],
                                 node.params)
        assert tuple(t.shape) == prog.refs[i].shape, (
            f"{prog}\nv{i}: shape {tuple(t.shape)} != {prog.refs[i].shape}")
        tensors.append(t)
        if i in prog.cuts:
            _compare(prog, i, t)
        if i in prog.mistakes:
            _make_mistake(prog, i, t, prog.mistakes[i], mesh)
    for i in prog.dropped:
        tensors[i] = None
    checked = 0
    for i, t in enumerate(tensors):
        if t is not None:
            _compare(prog, i, t)
            checked += 1
    STATS["values_checked"] += checked
    STATS["examples"] += 1
    key = "x".join(map(str, prog.mesh_shape))
    STATS["meshes"][key] = STATS["meshes"].get(key, 0) + 1
    for node in prog.nodes:
        STATS["ops"][node.op] = STATS["ops"].get(node.op, 0) + 1


# ---- user mistakes: raised in the client at the call, the session stays usable ----
def _ones(shape, mesh):
    return dtorch.ones(*shape, device_mesh=mesh)


def _mistake_call(kind, t, mesh):
    """The mistaken call on `t`, or None where it would not be a mistake."""
    s, nd = tuple(t.shape), t.ndim
    if kind == "broadcast":
        wide = [d for d in range(nd) if s[d] >= 2]
        if not wide:
            return None
        bad = list(s)
        bad[wide[0]] += 1
        return lambda: t + _ones(bad, mesh)
    if kind == "reshape":
        return lambda: t.reshape(int(np.prod(s)) + 1)
    if kind == "matmul":
        return (lambda: t @ _ones((s[-1] + 1, 2), mesh)) if nd == 2 else None
    if kind == "shard_dim":
        return lambda: t.redistribute(mesh, [Shard(nd)] + [Replicate()] * (mesh.ndim - 1))
    if kind == "placement_count":
        return lambda: t.redistribute(mesh, [Replicate()] * (mesh.ndim + 1))
    if kind == "reduce_dim":  # (a 0-d tensor takes dim 0, as in torch)
        return (lambda: t.sum(nd)) if nd >= 1 else None
    if kind == "cat":
        if nd < 2:
            return (lambda: dtorch.cat([t, _ones((1,) + s, mesh)], 0)) if nd == 1 else None
        bad = list(s)
        bad[1] += 1
        return lambda: dtorch.cat([t, _ones(bad, mesh)], 0)
    if kind == "permute":
        return (lambda: t.permute(*([0] * nd))) if nd >= 2 else None
    if kind == "index":
        return (lambda: t[s[0]]) if nd >= 1 else None
    if kind == "other_mesh":
        other = mesh_for((WORLD,), tuple(range(WORLD - 1, -1, -1)))
        return lambda: t + _ones(s, other)
    raise KeyError(kind)


MISTAKES = ("broadcast", "reshape", "matmul", "shard_dim", "placement_count", "reduce_dim",
            "cat", "permute", "index", "other_mesh")


def _make_mistake(prog, i, t, kind, mesh):
    call = _mistake_call(kind, t, mesh) or _mistake_call("reshape", t, mesh)
    try:
        out = call()
    except (ValueError, TypeError, IndexError, KeyError):
        return
    raise AssertionError(f"{prog}\nthe mistake {kind!r} on v{i} (shape {tuple(t.shape)}, "
                         f"placements {tuple(t.placements)}) did not raise; it gave "
                         f"shape {tuple(out.shape)}")


# ---- the session ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def property_session(request):
    """The conftest session (4 ranks) or, for DTORCH_PROPERTY_WORLD=8, a
    session of its own on the in-process backend."""
    if WORLD == 4:
        request.getfixturevalue("dt")
    else:
        if dtorch.is_initialized():
            pytest.skip("another DTorch session is running; run this file alone for WORLD=8")
        dtorch.init(world_size=WORLD, backend="inprocess")
        request.addfinalizer(dtorch.shutdown)
    _MESHES.clear()
    yield
    _MESHES.clear()
    path = os.environ.get("DTORCH_PROPERTY_STATS")
    if path:
        with open(path, "w") as f:
            json.dump(dict(STATS, world=WORLD), f, indent=1, sort_keys=True)


# ---- the properties -----------------------------------------------------------------------
@SETTINGS
@given(prog=programs())
def test_chain_matches_numpy(property_session, prog):
    """Any chain of ops, on any mesh and placements, equals numpy on the full tensors."""
    check_program(prog)


ELEMENTWISE = tuple(n for n, spec in OPS.items() if spec.elementwise)
LAYOUT = ("reshape", "permute", "unsqueeze", "squeeze", "expand", "flatten", "getitem",
          "narrow", "chunk", "cat", "stack", "tril", "triu", "redistribute")


@SETTINGS
@given(prog=programs(names=ELEMENTWISE + LAYOUT, dtype_names=("float32", "float64")))
def test_elementwise_and_layout_chain(property_session, prog):
    """Elementwise ops mixed with reshapes, slices and concatenations: most
    of them keep shards where they are, so odd layouts reach the kernels
    (float32 and float64)."""
    check_program(prog)


SIXTEEN_BIT = ("float16", "bfloat16")


@SETTINGS
@given(prog=programs(names=ELEMENTWISE, dtype_names=SIXTEEN_BIT, max_steps=4))
def test_16bit_elementwise_chain(property_session, prog):
    """float16/bfloat16 chains of elementwise ops at 16-bit tolerance (the
    mirror's bound uses the dtype's unit roundoff)."""
    check_program(prog)


INTEGER_OPS = ("neg", "abs", "relu", "square", "clamp", "add", "sub", "mul", "maximum",
               "minimum", "where", "reduce_sum", "reduce_max", "reduce_min", "argmax",
               "argmin", "matmul") + tuple(_COMPARE) + LAYOUT


@SETTINGS
@given(prog=programs(names=INTEGER_OPS, dtype_names=("int64", "int32")))
def test_integer_chain(property_session, prog):
    """int64/int32 chains (no avg partials, integer scalars): exact results."""
    check_program(prog)


@SETTINGS
@given(prog=programs(mistakes=True))
def test_user_mistakes_raise_and_leave_the_session_usable(property_session, prog):
    """A mistaken call in the middle of a chain (shapes that do not
    broadcast, a bad reshape, a dim out of range, tensors on other meshes,
    ...) raises ValueError/TypeError/IndexError at the call, and every value
    of the chain still comes out right."""
    check_program(prog)


# ---- the pieces each rank holds ------------------------------------------------------
def expected_box(shape, mesh_shape, placements, coord):
    """The global box a mesh position holds: every Shard(d) splits dim d's
    current range as torch.chunk does (leftmost mesh dim first)."""
    lo, hi = [0] * len(shape), list(shape)
    for mdim, p in enumerate(placements):
        if p[0] != "S":
            continue
        d = p[1] % len(shape)
        extent, n = hi[d] - lo[d], mesh_shape[mdim]
        size = -(-extent // n)
        start = lo[d] + min(coord[mdim] * size, extent)
        lo[d], hi[d] = start, min(start + size, lo[d] + extent)
    return tuple(slice(a, b) for a, b in zip(lo, hi))


@st.composite
def layout_walks(draw):
    """A mesh, a tensor and 1 to 3 layouts it is redistributed through."""
    prog = draw(programs(names=("neg",), max_steps=1))
    shape = prog.refs[0].shape
    walk = [prog.nodes[0].params["placements"]]
    if prog.nodes[0].params["view"]:
        walk = []
    steps = draw(st.integers(1, 3))
    walk += [draw(placements(len(shape), prog.mesh_shape)) for _ in range(steps)]
    return prog, walk


@SETTINGS
@given(case=layout_walks())
def test_local_pieces_follow_the_placements(property_session, case):
    """Each rank's piece is the box of the full tensor its mesh position
    owns (torch.chunk splits, nested splits in mesh-dim order); under a
    Partial placement the pieces have the box's shape."""
    prog, walk = case
    mesh = mesh_for(prog.mesh_shape, prog.ranks)
    full = prog.refs[0].v.astype(np.float32)
    grid = np.array(prog.ranks).reshape(prog.mesh_shape)
    t = dtorch.distribute_tensor(full, mesh, [Replicate()] * len(prog.mesh_shape))
    exact = True
    for layout in walk:
        t = t.redistribute(mesh, [_placement(p) for p in layout])
        # Reducing sum/avg pieces may round (x + x + x over 3 ranks, or in
        # the collectives' order): from then on the pieces of float data
        # are compared to within that rounding. Small integers stay exact.
        exact = exact and (prog.nodes[0].params["integers"] or not any(
            p[0] == "P" and p[1] in ("sum", "avg") for p in layout))
        pieces = t.local_shards()
        assert sorted(pieces) == sorted(prog.ranks), f"{prog}\n{layout}: ranks {sorted(pieces)}"
        partial = any(p[0] == "P" for p in layout)
        for rank, piece in pieces.items():
            coord = tuple(int(c) for c in np.argwhere(grid == rank)[0])
            want = full[expected_box(full.shape, prog.mesh_shape, layout, coord)]
            where = f"{prog}\nlayout {layout}: rank {rank} at {coord}"
            assert piece.shape == want.shape, f"{where}: piece {piece.shape}, want {want.shape}"
            if not partial:
                same = np.array_equal(piece, want) if exact else \
                    np.allclose(piece, want, rtol=8 * F32_UNIT, atol=0.0)
                assert same, f"{where}: wrong values {piece} != {want}"
        # Reducing partial pieces (3 ranks: x/3 + x/3 + x/3) may round once per piece.
        value = Ref(prog.refs[0].v, 8 * F32_UNIT * np.abs(prog.refs[0].v))
        problem = mismatch(t.numpy().astype(np.float64), value, 1e-5)
        assert problem is None, f"{prog}\nlayout {layout}: {problem}"
    STATS["examples"] += 1
