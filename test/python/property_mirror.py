"""The numpy mirror of the property tests (test_properties.py).

Every mirror value is a `Ref`: the exact value computed in float64 (`v`)
and a bound (`e`, one per element) on how far a correct low-precision
computation may be from it. The bound is a forward error analysis of the
op sequence: each op propagates its inputs' bounds through its derivative
and adds its own rounding (`unit` is the unit roundoff of the dtype under
test: 2**-24 for float32, 2**-11 for float16, 2**-8 for bfloat16). Results
that are exact (layout ops, max/min, sums of small integers) get a bound of
zero, so they must match bit for bit.

Why not a flat tolerance: a sum over a sharded dim adds its pieces in
another order than numpy, a value near a comparison's threshold may flip,
and exp() of a value with a small absolute error has a relative error of
that size. A flat rtol/atol of 1e-5 fails on such cases although DTorch is
right; a loose flat tolerance would hide real bugs. The bound is tiny next
to any real bug (a missing shard, a wrong offset, a double-counted partial
change values by O(1)), and every comparison still has the plain 1e-5
(float32) base tolerance on top.

A bool `Ref` uses `e` as "uncertain": 1 where the comparison was within the
error bound of its threshold (either answer is right), 0 where it is
certain. An int64 `Ref` (argmax/argmin) uses `e = inf` where another index
was within the bound of the extreme.
"""
import math

import numpy as np

F32_UNIT = 2.0 ** -24
F64_UNIT = 2.0 ** -53

# Rounding factor per op kind: correctly rounded arithmetic rounds once;
# library transcendentals are allowed a few ulps.
ARITH_ULPS = 2.0
TRANSCENDENTAL_ULPS = 8.0

# Lipschitz constants of the bounded-derivative unary ops.
LIPSCHITZ = {"neg": 1.0, "abs": 1.0, "relu": 1.0, "tanh": 1.0, "sigmoid": 0.25,
             "sin": 1.0, "cos": 1.0, "gelu": 1.13, "silu": 1.1}


class DomainError(ValueError):
    """An op's input is too close to a singular point (log, sqrt, rsqrt,
    div, pow near 0) for a useful error bound: the drawing code rejects
    the example."""


def _require(ok, message):
    if not ok:
        raise DomainError(message)


class Ref:
    """A mirror value: float64/bool/int64 exact value and its error bound."""

    __slots__ = ("v", "e")

    def __init__(self, v, e=None):
        self.v = np.asarray(v)
        e = 0.0 if e is None else e
        self.e = np.array(np.broadcast_to(np.asarray(e, dtype=np.float64), self.v.shape))

    @property
    def kind(self):
        return {"b": "b", "i": "i"}.get(self.v.dtype.kind, "f")

    @property
    def shape(self):
        return self.v.shape


def as_ref(x):
    return x if isinstance(x, Ref) else Ref(np.float64(x))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _rounding(v, propagated, unit, ulps, exact_ok=True):
    """The rounding an op adds: none where the inputs were exact and the
    exact result is representable in the dtype under test (then a correctly
    rounded op returns it), else `ulps` units of the result's size."""
    scale = ulps * unit * (np.abs(v) + propagated)
    if not exact_ok:
        return scale
    representable = representable_in(v, unit)
    return np.where((propagated == 0) & representable, 0.0, scale)


def representable_in(v, unit):
    """Whether each float64 value is exactly a value of the dtype whose unit
    roundoff is `unit` (float32, float16 or bfloat16)."""
    v = np.asarray(v, dtype=np.float64)
    if unit <= F64_UNIT:  # float64 itself, or an integer dtype (unit 0)
        return np.ones(v.shape, dtype=bool)
    if unit == F32_UNIT:
        return v.astype(np.float32).astype(np.float64) == v
    if unit == 2.0 ** -11:
        with np.errstate(over="ignore"):
            return v.astype(np.float16).astype(np.float64) == v
    return round_bfloat16(v.astype(np.float32)).astype(np.float64) == v


def round_bfloat16(x):
    """float32 -> the nearest bfloat16 value (ties to even), as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


class Mirror:
    """The mirror ops, one per DTorch primitive, for one dtype (`unit`)."""

    def __init__(self, unit=F32_UNIT):
        self.unit = unit

    # ---- elementwise -----------------------------------------------------------
    def unary(self, name, x):
        v, e = x.v.astype(np.float64), x.e
        u = self.unit
        if name == "neg":
            return Ref(-v, e)
        if name == "abs":
            return Ref(np.abs(v), e)
        if name == "relu":
            # Certainly negative (or exactly zero) inputs give exactly 0.
            out = np.maximum(v, 0.0)
            return Ref(out, np.where(v < -e, 0.0, e))
        if name == "exp":
            out = np.exp(v)
            return Ref(out, out * np.expm1(e) + _rounding(out, out * np.expm1(e), u,
                                                          TRANSCENDENTAL_ULPS, False))
        if name in ("log", "sqrt", "rsqrt"):
            lo = v - e
            _require(np.all(lo > 0), f"mirror: {name} needs inputs bounded away from 0")
            if name == "log":
                out, deriv = np.log(v), 1.0 / lo
            elif name == "sqrt":
                out, deriv = np.sqrt(v), 0.5 / np.sqrt(lo)
            else:
                out, deriv = 1.0 / np.sqrt(v), 0.5 * lo ** -1.5
            prop = deriv * e
            return Ref(out, prop + _rounding(out, prop, u, TRANSCENDENTAL_ULPS, False))
        fn = {"tanh": np.tanh, "sigmoid": lambda t: 1.0 / (1.0 + np.exp(-t)),
              "sin": np.sin, "cos": np.cos,
              "gelu": lambda t: 0.5 * t * (1.0 + _erf(t / math.sqrt(2.0))),
              "silu": lambda t: t / (1.0 + np.exp(-t))}[name]
        out = fn(v)
        prop = LIPSCHITZ[name] * e
        # sin/cos near their zeros: the kernel's error is relative to 1.
        size = np.maximum(np.abs(out), 1.0) if name in ("sin", "cos") else np.abs(out)
        return Ref(out, prop + TRANSCENDENTAL_ULPS * u * (size + prop))

    def binary(self, name, a, b):
        a, b = as_ref(a), as_ref(b)
        av, bv = a.v.astype(np.float64), b.v.astype(np.float64)
        ae, be = a.e, b.e
        u = self.unit
        if name in ("add", "sub"):
            out = av + bv if name == "add" else av - bv
            prop = ae + be
        elif name == "mul":
            out = av * bv
            prop = np.abs(bv) * ae + np.abs(av) * be + ae * be
        elif name == "div":
            lo = np.abs(bv) - be
            _require(np.all(lo > 0), "mirror: div needs a divisor bounded away from 0")
            out = av / bv
            prop = (ae + np.abs(out) * be) / lo
        elif name in ("maximum", "minimum"):
            out = np.maximum(av, bv) if name == "maximum" else np.minimum(av, bv)
            return Ref(out, np.maximum(ae, be) + 0 * out)
        elif name == "pow":
            assert b.v.ndim == 0 and float(be) == 0, "mirror: pow takes a scalar exponent"
            k = float(bv)
            lo = av - ae
            _require(np.all(lo > 0), "mirror: pow needs a base bounded away from 0")
            out = av ** k
            worst = np.maximum(lo ** (k - 1), (av + ae) ** (k - 1))
            prop = abs(k) * worst * ae
            return Ref(out, prop + _rounding(out, prop, u, TRANSCENDENTAL_ULPS,
                                             k in (1.0, 2.0)))
        else:
            raise KeyError(name)
        return Ref(out, prop + _rounding(out, prop, u, ARITH_ULPS))

    def compare(self, name, a, b):
        a, b = as_ref(a), as_ref(b)
        fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
              "gt": np.greater, "ge": np.greater_equal}[name]
        out = fn(a.v, b.v)
        slack = a.e + b.e
        gap = np.abs(a.v.astype(np.float64) - b.v.astype(np.float64))
        return Ref(out, ((slack > 0) & (gap <= slack)).astype(np.float64))

    def where(self, c, a, b):
        a, b = as_ref(a), as_ref(b)
        av, bv = a.v.astype(np.float64), b.v.astype(np.float64)
        out = np.where(c.v, av, bv)
        certain = np.where(c.v, a.e + 0 * bv, b.e + 0 * av)
        either = np.maximum(np.maximum(a.e, b.e), np.abs(av - bv))
        return Ref(out, np.where(c.e > 0, either, certain))

    # ---- reductions --------------------------------------------------------------
    def reduce(self, name, x, dims, keepdim):
        # A 0-d tensor reduces over dim 0 (or -1) as over nothing, as in torch.
        dims = () if x.v.ndim == 0 else (
            tuple(d % x.v.ndim for d in dims) if dims else tuple(range(x.v.ndim)))
        v = x.v.astype(np.float64)
        n = int(np.prod([x.v.shape[d] for d in dims])) if dims else 1
        if name in ("max", "min"):
            out = (np.max if name == "max" else np.min)(v, axis=dims, keepdims=keepdim)
            return Ref(out, np.max(x.e, axis=dims, keepdims=keepdim) + 0 * out)
        total = np.sum(v, axis=dims, keepdims=keepdim)
        abs_total = np.sum(np.abs(v), axis=dims, keepdims=keepdim)
        prop = np.sum(x.e, axis=dims, keepdims=keepdim)
        # Any summation order (pieces per rank, then across ranks) is within
        # n units of the sum of magnitudes; integers below 2**mantissa add
        # exactly in any order.
        whole = np.all(v == np.round(v), axis=dims, keepdims=keepdim)
        exact = (prop == 0) & whole & (abs_total * self.unit < 0.5)
        rounding = np.where(exact, 0.0, (n + 2) * self.unit * abs_total)
        if name == "sum":
            return Ref(total, prop + rounding)
        out = total / n
        return Ref(out, (prop + rounding) / n + ARITH_ULPS * self.unit * np.abs(out))

    def argreduce(self, name, x, dim, keepdim):
        v = x.v.astype(np.float64)
        if v.ndim == 0:
            return Ref(np.int64(0))
        dim %= v.ndim
        pick = np.argmax if name == "argmax" else np.argmin
        idx = pick(v, axis=dim)
        best = np.take_along_axis(v, np.expand_dims(idx, dim), dim)
        best_e = np.take_along_axis(x.e, np.expand_dims(idx, dim), dim)
        slack = x.e + best_e
        near = (np.abs(v - best) <= slack) & (slack > 0)
        rival = np.sum(near, axis=dim) > (np.take_along_axis(near, np.expand_dims(idx, dim),
                                                              dim).squeeze(dim))
        err = np.where(rival, np.inf, 0.0)
        if keepdim:
            idx, err = np.expand_dims(idx, dim), np.expand_dims(err, dim)
        return Ref(idx.astype(np.int64), err)

    def matmul(self, a, b):
        av, bv = a.v.astype(np.float64), b.v.astype(np.float64)
        k = av.shape[-1]
        out = av @ bv
        mag = np.abs(av) @ np.abs(bv)
        prop = np.abs(av) @ b.e + a.e @ np.abs(bv) + a.e @ b.e
        whole = np.all(av == np.round(av)) and np.all(bv == np.round(bv))
        exact = (prop == 0) & whole & (mag * self.unit < 0.5)
        return Ref(out, prop + np.where(exact, 0.0, (k + 8) * self.unit * mag))

    # ---- layout: the same move on the value and on its bound ------------------------
    def layout(self, x, fn):
        return Ref(fn(x.v), fn(x.e))

    def concat(self, xs, dim):
        return Ref(np.concatenate([x.v.astype(np.float64) for x in xs], axis=dim),
                   np.concatenate([x.e for x in xs], axis=dim))

    # ---- decompositions: the math of torch's definition, composed -------------------
    def softmax(self, x, dim):
        shifted = self.binary("sub", x, self.reduce("max", x, [dim], True))
        e = self.unary("exp", shifted)
        return self.binary("div", e, self.reduce("sum", e, [dim], True))

    def log_softmax(self, x, dim):
        shifted = self.binary("sub", x, self.reduce("max", x, [dim], True))
        lse = self.unary("log", self.reduce("sum", self.unary("exp", shifted), [dim], True))
        return self.binary("sub", shifted, lse)

    def logsumexp(self, x, dims, keepdim):
        m = self.reduce("max", x, dims, True)
        s = self.reduce("sum", self.unary("exp", self.binary("sub", x, m)), dims, True)
        out = self.binary("add", self.unary("log", s), m)
        if not keepdim and x.v.ndim:
            out = self.layout(out, lambda a: np.squeeze(a, axis=tuple(
                d % x.v.ndim for d in (dims or range(x.v.ndim)))))
        return out

    def var(self, x, dims, keepdim, correction):
        n = int(np.prod([x.v.shape[d] for d in dims]))
        centered = self.binary("sub", x, self.reduce("mean", x, dims, True))
        ss = self.reduce("sum", self.binary("mul", centered, centered), dims, keepdim)
        return self.binary("div", ss, float(n - correction))

    def layer_norm(self, x, k, eps=1e-5):
        dims = list(range(x.v.ndim - k, x.v.ndim))
        centered = self.binary("sub", x, self.reduce("mean", x, dims, True))
        v = self.reduce("mean", self.binary("mul", centered, centered), dims, True)
        return self.binary("mul", centered, self.unary("rsqrt", self.binary("add", v, eps)))


def mismatch(got, want, base_tol):
    """None when `got` (a fetched array) agrees with the mirror value `want`
    within base_tol (relative and absolute) plus the error bound; else a
    message naming the worst element."""
    got = np.asarray(got)
    if got.shape != want.v.shape:
        return f"shape {got.shape} != {want.v.shape}"
    if want.kind in ("b", "i"):
        certain = ~(want.e > 0)
        bad = certain & (got != want.v)
        if np.any(bad):
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return f"element {i}: got {got[i]}, want {want.v[i]} ({int(bad.sum())} differ)"
        return None
    g = got.astype(np.float64)
    w = want.v.astype(np.float64)
    allowed = base_tol + base_tol * np.abs(w) + want.e
    diff = np.abs(g - w)
    bad = ~(diff <= allowed) & ~(np.isnan(g) & np.isnan(w))
    if np.any(bad):
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"element {i}: got {g[i]:.9g}, want {w[i]:.9g} (allowed error {allowed[i]:.3g}, "
                f"{int(bad.sum())} of {bad.size} differ)")
    return None
