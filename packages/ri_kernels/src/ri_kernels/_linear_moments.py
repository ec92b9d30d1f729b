"""Quadratic-phase moments of small curvature, from linear moments in real arithmetic.

    M_n(α, β) = mean_y y^n exp(i(αy + βy²)) = Σ_{k<K} (iβ)^k/k! L_{n+2k}(α),   y in [-1, 1],

with the linear moments L_n(α) = mean_y y^n exp(iαy) and K = ``terms``. The expansion is used
for |β| below ``expansion_switch(K)``, where its tail β^K e^|β|/K! is below the working
precision; larger curvature needs the Fresnel seeds of :mod:`ri_kernels._curved_moments`.

L_n is real for even n and imaginary for odd n (y^n sin(αy) and y^n cos(αy) average to zero
for those parities), so one real sequence ℓ_n carries it: L_n = i^(n mod 2) ℓ_n. Integrating
d/dy [y^n exp(iαy)] by parts gives

    α ℓ_n = sin α - n ℓ_{n-1}   (n even),        α ℓ_n = n ℓ_{n-1} - cos α   (n odd),

whose homogeneous solution grows by n/|α| a step upwards. So ℓ_n comes upwards from
ℓ_0 = sin α/α for n <= |α|, and downwards from a zero tail T steps above the highest index for
n > |α| (the minimal solution there; α = 0 is exact). Both chains run for every element and
ℓ_n is selected from the stable one.

Cost per element and piece: about 2(N + T) real multiply-adds for ℓ and (n_max + 1) K for the
expansion, N = n_max + 2(K - 1), against N + T complex steps with a complex division each in
the curved case. Measured on one core of the 2-core benchmark machine (float64, 2^16
elements, two pieces, n_max = 13, K = 6): ℓ and the expansion 0.4 us per element, the curved
recurrences, run to 13 moments, 10 us.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ri_kernels._phasor import turn_phasor
from ri_kernels._split_complex import SplitComplex


def log_tolerance(dtype):
    """-ln of the truncation error aimed at: the working precision."""
    return -math.log(float(jnp.finfo(dtype).eps))


def expansion_switch(terms, log_tol):
    """Largest |β| at which Σ_{k<terms} (iβ)^k/k! is within exp(-log_tol) of exp(iβ)."""
    lo, hi = 0.0, 64.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        # Tail bound β^K e^β / K!, compared in logs.
        if terms * math.log(mid) + mid - math.lgamma(terms + 1) < -log_tol:
            lo = mid
        else:
            hi = mid
    return lo


def linear_tail(n, log_tol):
    """Steps above index n from which the downward recurrence, started from zero, reaches
    ℓ_n to exp(-log_tol).

    An error at index m shrinks by |α|/m per step down; the slowest case is |α| just below n,
    where T steps gain Σ_{m=n+1}^{n+T} ln(m/n), about T²/(2n).
    """
    n = max(n, 1)
    gain, t = 0.0, 0
    while gain < log_tol:
        t += 1
        gain += math.log((n + t) / n)
    return t


def linear_moments(alpha, n_max, e_alpha=None):
    """ℓ_n(α), n = 0..n_max, stacked on a leading axis (module docstring).

    ``e_alpha``: exp(iα) as a SplitComplex where it is known more precisely than from α (a
    float32 α of 5e3 rad is rounded by 2.4e-4 rad, but enters the recurrences relatively,
    through 1/α, so that only the phasor needs the fraction of a turn); by default from α.
    """
    if e_alpha is None:
        cos_a, sin_a = turn_phasor(alpha * (1 / (2 * math.pi)))
    else:
        cos_a, sin_a = e_alpha.re, e_alpha.im
    abs_a = jnp.abs(alpha)
    is_zero = alpha == 0
    sinc = jnp.where(is_zero, 1.0, sin_a / jnp.where(is_zero, 1.0, alpha))
    # Where a chain is not the stable one its values are discarded; its arguments there only
    # keep it from dividing by zero or growing fast: the upward chain runs at |α| >= 1
    # (growth at most n_max!), the downward one at |α| < n_top (at most e^n_top) or α = 0.
    inv_a = 1 / jnp.where(abs_a < 1, 1.0, alpha)
    n_top = n_max + linear_tail(n_max, log_tolerance(alpha.dtype))
    n_top += n_top % 2
    a_down = jnp.where(abs_a < n_top, alpha, 0.0)

    def up(ell, m):
        # From ℓ_m to ℓ_{m+1} and ℓ_{m+2}, m even.
        odd = ((m + 1) * ell - cos_a) * inv_a
        even = (sin_a - (m + 2) * odd) * inv_a
        return even, jnp.stack([ell, odd])

    def down(ell, k):
        # From ℓ_k to ℓ_{k-1} and ℓ_{k-2}, k even.
        odd = (sin_a - a_down * ell) * (1 / k)
        even = (a_down * odd + cos_a) * (1 / (k - 1))
        return even, jnp.stack([even, odd])

    # Each loop has one stacked output, (ℓ_m, ℓ_{m+1}) at step m/2, so that the moments are
    # a reshape of it: XLA's CPU loops wrote separate outputs 5x slower, and the expansion
    # read reversed or interleaved ones 3x slower. The downward tail is only carried.
    dtype = alpha.dtype
    n_run = n_max + 2 - n_max % 2  # even, > n_max
    fall, _ = jax.lax.scan(
        lambda ell, k: (down(ell, k)[0], None),
        jnp.zeros_like(alpha),
        jnp.arange(n_top, n_run, -2, dtype=dtype),
    )
    steps = jnp.arange(0, n_run, 2, dtype=dtype)
    _, rising = jax.lax.scan(up, sinc, steps)
    _, falling = jax.lax.scan(lambda ell, m: down(ell, m + 2), fall, steps, reverse=True)
    rising = rising.reshape(n_run, *alpha.shape)[: n_max + 1]
    falling = falling.reshape(n_run, *alpha.shape)[: n_max + 1]
    n = np.arange(n_max + 1).reshape((-1,) + (1,) * alpha.ndim)
    return jnp.where(n <= abs_a, rising, falling)


def expanded_moments(alpha, beta, n_max, terms, e_alpha=None):
    """M_n(α, β), n = 0..n_max, by the curvature expansion: a SplitComplex of stacked
    (n_max + 1,) + shape arrays. Accurate for |β| < expansion_switch(terms). ``e_alpha`` as
    in :func:`linear_moments`."""
    ell = linear_moments(alpha, n_max + 2 * (terms - 1), e_alpha)
    # (iβ)^k/k! = i^k c_k with c_k = β^k/k! real: even k add to the part of ℓ's own phase,
    # odd k to the part a quarter turn on. M_n = i^(n mod 2) (own + i turned).
    coef = [jnp.ones_like(beta)]
    for k in range(1, terms):
        coef.append(coef[-1] * beta * (1.0 / k))
    coef = jnp.stack([(-1) ** (k // 2) * c for k, c in enumerate(coef)])

    def step(_, n):
        # One moment per step, with the coefficients computed once outside: fused over a
        # leading moment axis, XLA's CPU loops recomputed them for every moment. Each step
        # reads the rows it needs and writes its two parts as separate outputs: a window
        # sliced from ℓ, or the parts stacked, was copied each step and took twice as long
        # (float32, 2^20 elements in blocks of 8192, 14 moments: 0.35 s -> 0.12 s on one core).
        rows = [jax.lax.dynamic_index_in_dim(ell, n + 2 * k, keepdims=False) for k in range(terms)]
        own, turned = (sum(coef[k] * rows[k] for k in range(first, terms, 2)) for first in (0, 1))
        odd = n % 2 == 1
        return None, (jnp.where(odd, -turned, own), jnp.where(odd, own, turned))

    re, im = jax.lax.scan(step, None, jnp.arange(n_max + 1))[1]
    return SplitComplex(re, im)
