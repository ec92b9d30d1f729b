"""Float32 numbers carried as unevaluated sums hi + lo (two-float, or "double-float",
arithmetic: Dekker 1971, Knuth TAOCP vol. 2 section 4.2.2), for the angles of the analytic
operator when jax's 64-bit mode is off.

A pair's phase may wind through 1600 turns across an integration (|a| = 1e4 rad), and only
its fraction of a turn matters; one float32 holds the turn count to 2^-24 of itself, so that
fraction would be lost to 1e-4 turn. As a pair (hi, lo) with |lo| of order ulp(hi) the same
number carries about 48 bits, and ``hi - round(hi)`` is its fraction exactly.

Products are formed from halves of 12 significant bits, cut by masking the low mantissa bits,
so every partial product is exact: the results are then the same whether or not a compiler
contracts a multiply and an add into a fused multiply-add, and no step relies on the
rounding of an inexact product. Sums use Knuth's branch-free two-sum, which holds as long as
floating-point additions are not reassociated (XLA keeps them as written unless fast-math is
asked for, e.g. ``--xla_cpu_enable_fast_math``, off by default).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

_HIGH_BITS = np.uint32(0xFFFFF000)  # sign, exponent and the top 11 of 23 mantissa bits


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth)."""
    s = a + b
    b_part = s - a
    return s, (a - (s - b_part)) + (b - b_part)


def _split(a):
    """(hi, lo) with hi + lo = a exactly, each of at most 12 significant bits; float32 only."""
    bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & _HIGH_BITS
    hi = jax.lax.bitcast_convert_type(bits, jnp.float32)
    return hi, a - hi


def two_prod(a, b):
    """(p, e) with p + e = a b to about 2^-47 relative; a, b float32."""
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    p, e = two_sum(a_hi * b_hi, a_hi * b_lo)
    p, e_cross = two_sum(p, a_lo * b_hi)
    return p, e + e_cross + a_lo * b_lo


def add(x, y):
    """Sum of two pairs (hi, lo), as a pair."""
    s, e = two_sum(x[0], y[0])
    return s, e + (x[1] + y[1])


def times(x, y):
    """Product of two pairs (hi, lo), as a pair; lo * lo (below 2^-48 relative) is dropped."""
    p, e = two_prod(x[0], y[0])
    return p, e + (x[0] * y[1] + x[1] * y[0])


def scale(x, v):
    """A pair (hi, lo) times a float, as a pair."""
    p, e = two_prod(x[0], v)
    return p, e + x[1] * v


def times_constant(x, values):
    """A pair (hi, lo) times numpy float64 constants ``values`` (broadcast), as a pair. Where
    every constant is zero or a power of two (two pieces: centres +-1/2, half-width 1/2)
    the plain products are exact, and no halves are cut."""
    values = np.asarray(values, np.float64)
    mantissa, _ = np.frexp(values)
    if np.all((mantissa == 0.5) | (mantissa == -0.5) | (values == 0)):
        return x[0] * values.astype(np.float32), x[1] * values.astype(np.float32)
    hi = values.astype(np.float32)
    return times(x, (hi, (values - hi).astype(np.float32)))


def constant(value):
    """A Python float as a pair of float32 numpy scalars, hi + lo to about 2^-48."""
    hi = np.float32(value)
    return hi, np.float32(value - float(hi))


def fraction(x, extra=0.0):
    """hi + lo + extra less the nearest integer to hi: the fraction of a turn count, in one
    float32 (|result| <= 1/2 + |lo + extra|). ``hi - round(hi)`` is exact."""
    hi, lo = x
    return (hi - jnp.round(hi)) + (lo + extra)


INV_TWO_PI = constant(1 / (2 * math.pi))  # turns per radian
