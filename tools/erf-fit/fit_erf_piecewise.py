"""Fits the coefficients of the division-free float32 erf
(runtime/include/dtorch/runtime/PolynomialMath.h, erfPiecewise; emitted in
the generated kernels by lib/Compiler/ErfApproximation.cpp).

On a = |x|:
  a < 1:            erf(a) = a + a * P(a^2)      (P: degree SMALL in s = a^2;
                                                  one fma: a's factor 1 exact)
  1 <= a < SAT:     erf(a) = 1 + Q(a - 2)        (Q: degree LARGE; a - 2 is exact
                                                  for a in [1, 4], Sterbenz)
  a >= SAT:         1 (SAT: where erfc(a) falls below half an ulp of 1)
then the sign of x. Both polynomials are evaluated by Horner's rule with an
fma per step, in float32.

Each polynomial is a weighted minimax fit in float64 (Lawson's iteratively
reweighted least squares on a dense grid): P on the relative error of erf,
Q on the absolute error (the result is near 1, where an ulp is 2^-24). The
coefficients are then rounded to float32 one at a time, from the highest
degree down, the lower ones fitted again after each rounding. The fit's
float32 error is estimated here on a strided sample of float32 inputs (fma
emulated in float64); test/cpp/runtime/ErfAccuracyTest.cpp measures the
implementation itself against float64 erf.

    python3 tools/erf-fit/fit_erf_piecewise.py [--small 6] [--large 14]

Prints the coefficients as C++ initializers and the estimated max ulp error.
"""
import argparse
import math

import numpy as np

F32 = np.float32
SPLIT = 1.0
CENTER = 2.0


def erf64(x):
    return np.array([math.erf(float(v)) for v in np.ravel(x)]).reshape(np.shape(x))


def erfc64(x):
    return np.array([math.erfc(float(v)) for v in np.ravel(x)]).reshape(np.shape(x))


def saturation_point():
    """The smallest float32 a with erfc(a) below half an ulp of 1 (2^-25):
    from there erf(a) rounds to 1."""
    a = F32(3.5)
    while math.erfc(float(a)) >= 2.0 ** -25:
        a = np.nextafter(a, F32(np.inf))
    return a


def lawson(V, y, weight, iters=400):
    """Coefficients c minimizing max |weight * (V c - y)| (approximately)."""
    u = np.full(len(y), 1.0 / len(y))
    c = None
    for _ in range(iters):
        sw = np.sqrt(u) * weight
        c, *_ = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)
        e = np.abs(weight * (V @ c - y))
        u = u * (e + 1e-300)
        u /= u.sum()
    return c


def fit_rounded(t, y, weight, degree):
    """float32 coefficients (lowest degree first) of a polynomial in t,
    rounded from the highest degree down, each rounding followed by a new
    fit of the coefficients below it."""
    fixed = {}
    for k in range(degree, -1, -1):
        free = list(range(k + 1))
        rest = y.copy()
        for j, v in fixed.items():
            rest = rest - float(v) * t ** j
        V = np.stack([t ** j for j in free], axis=1)
        c = lawson(V, rest, weight)
        fixed[k] = F32(c[k])
    return [fixed[k] for k in range(degree + 1)]


def horner32(coeffs, t):
    p = np.full_like(t, coeffs[-1], dtype=F32)
    for c in reversed(coeffs[:-1]):
        p = (p.astype(np.float64) * t.astype(np.float64) + float(c)).astype(F32)  # fma
    return p


def erf32(a, small, large, sat):
    a = a.astype(F32)
    s = (a * a).astype(F32)
    lo = (a.astype(np.float64) * horner32(small, s) + a).astype(F32)  # fma
    hi = (F32(1) + horner32(large, (a - F32(CENTER)).astype(F32))).astype(F32)
    r = np.where(a < F32(SPLIT), lo, hi)
    return np.where(a >= sat, F32(1), r)


def ulp_error(approx, exact):
    mag = np.maximum(np.abs(exact), 2.0 ** -149)
    e = np.maximum(np.floor(np.log2(mag)), -126)
    return np.abs(approx.astype(np.float64) - exact) / 2.0 ** (e - 23)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=6, help="degree of P in a^2")
    ap.add_argument("--large", type=int, default=14, help="degree of Q in a - 2")
    ap.add_argument("--stride", type=int, default=97, help="float32 sample stride")
    args = ap.parse_args()
    sat = saturation_point()

    # P: erf(a) / a - 1 as a polynomial in s = a^2 on [0, 1), relative
    # error of erf.
    a = np.linspace(0.0, SPLIT, 4001)[1:]
    s = a * a
    y = erf64(a) / a
    small = fit_rounded(s, y - 1, 1.0 / y, args.small)
    # Q: erf(a) - 1 as a polynomial in u = a - 2 on [1, sat], absolute error.
    a = np.linspace(SPLIT, float(sat), 6001)
    u = a - CENTER
    large = fit_rounded(u, -erfc64(a), np.ones_like(a), args.large)

    bits = np.arange(np.float32(2.0 ** -20).view(np.uint32), np.float32(4.5).view(np.uint32),
                     args.stride, dtype=np.uint32)
    x = bits.view(F32)
    err = ulp_error(erf32(x, small, large, sat), erf64(x.astype(np.float64)))
    worst = int(np.argmax(err))
    print(f"saturation point {float(sat)!r} ({sat.view(np.uint32):#x})")
    print(f"estimated max error {err.max():.3f} ulp at x = {float(x[worst])!r} "
          f"({len(x)} float32 in [2^-20, 4.5), stride {args.stride})")
    for name, cs in (("kErfSmall", small), ("kErfLarge", large)):
        print(f"inline constexpr float {name}[] = {{")
        for c in cs:
            mantissa, exponent = float(c).hex().split("p")
            print(f"    {mantissa.rstrip('0').rstrip('.')}p{exponent}f, // {float(c)!r}")
        print("};")


if __name__ == "__main__":
    main()
