"""Unit phasors exp(2 pi i t) of angles t given in turns, by polynomials.

XLA's CPU sine and cosine took 24 ms for 737,280 float32 angles on the benchmark machine (the
quadrature operator's whole fine grid at the CPU benchmark size), about as long as the Gram
matmuls; the polynomials below take 0.5 ms. Working in turns also makes the range reduction
exact: ``t - round(t)`` loses nothing, where ``2 pi t`` in radians is rounded first.

After reduction to s in [-1/8, 1/8] turn, z = 2 pi s lies in [-pi/4, pi/4] and truncated
Taylor series reach the working precision: for float32 the first omitted terms are
(pi/4)**11 / 11! = 2e-9 (sine) and (pi/4)**10 / 10! = 2.5e-8 (cosine), for float64
(pi/4)**17 / 17! = 5e-17 and (pi/4)**18 / 18! = 2e-18. Quarter turns are then restored exactly
by swapping and negating.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

# Highest odd (sine) and even (cosine) powers kept, per real dtype.
_DEGREES = {np.dtype(np.float32): (9, 8), np.dtype(np.float64): (15, 16)}


def _taylor(z2, powers):
    """Horner sum of (-1)**j z**(2j) / p_j! over the powers p_j given (ascending)."""
    total = jnp.zeros_like(z2)
    for p in reversed(powers):
        total = total * z2 + (-1) ** (p // 2) / math.factorial(p)
    return total


def turn_phasor(turns):
    """(cos, sin) of 2 pi ``turns``; turns: real array, float32 or float64."""
    odd, even = _DEGREES[np.dtype(turns.dtype)]
    r = turns - jnp.round(turns)  # [-1/2, 1/2] turn, exactly
    quarter = jnp.round(4 * r)  # -2..2
    z = (2 * math.pi) * (r - quarter / 4)  # [-pi/4, pi/4]
    z2 = z * z
    sin = z * _taylor(z2, range(1, odd + 1, 2))
    cos = _taylor(z2, range(0, even + 1, 2))
    q = quarter.astype(jnp.int32) % 4  # rotate back by q quarter turns
    cos_out = jnp.where(q == 0, cos, jnp.where(q == 1, -sin, jnp.where(q == 2, -cos, sin)))
    sin_out = jnp.where(q == 0, sin, jnp.where(q == 1, cos, jnp.where(q == 2, -sin, -cos)))
    return cos_out, sin_out


def unit_phasor(turns):
    """exp(2 pi i turns) as a complex array (complex64 for float32, complex128 for float64)."""
    return jax.lax.complex(*turn_phasor(turns))
