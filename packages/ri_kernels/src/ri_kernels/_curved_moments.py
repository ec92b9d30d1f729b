"""Quadratic-phase moments of large curvature: Fresnel seeds and the three-term recurrence.

For |β| at or above the curvature expansion's switch (:mod:`ri_kernels._linear_moments`),
M_n = mean_y y^n exp(i(αy + βy²)), n <= N, obey one three-term recurrence (integrate
d/dy [y^n exp(iφ)] by parts):

    -i n M_{n-1} + α M_n + 2β M_{n+1} = R_n,     R_n = -(i/2)(E₊ - (-1)^n E₋),  E± = e^{i(β±α)}.

Its stable direction depends on (α, β), so each moment comes from the solution that is stable
for it; every branch is evaluated and selected elementwise, the unused ones fed harmless
arguments so that values stay finite:

* M_0: Fresnel integrals (``_fresnel_seed``, written so that the endpoint terms carry E±
  directly).
* n > n* = θ|α| + 2θ²|β| (θ = 1.2): both roots of the recurrence exceed θ in modulus, so M_n is
  its minimal solution: downwards from a zero tail T steps above (``_tail``).
* n <= n*, |α| <= κ|β| (stationary point in or near the piece): upwards from M_0; errors grow
  by at most about κ/2 per step.
* n <= n*, |α| > κ|β|: neither direction is stable; the recurrence is a boundary-value
  problem (M_0 below; the minimal solution above n*, or zero above the tail) solved by
  elimination from the top and substitution upwards, damping errors by 2|β|/|α| < 2/κ a step.

κ = 2 eps^(-1/(N+T)) balances the last two (3.1 to 3.7 in float64). The recurrences run to
N = n_max + 2(terms - 1) (``_recurrence_length``). Cost: N + T downward and N upward complex
steps per piece (T = 45 in float64, 28 in float32 at N = 35).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ri_kernels._fresnel import fresnel_aux
from ri_kernels._linear_moments import log_tolerance
from ri_kernels._split_complex import SplitComplex, select, zeros_like

_MARGIN = 1.2  # n* = θ|α| + 2θ²|β| makes both recurrence roots at least θ in modulus.


def _tail(n, log_tol):
    """Steps above index n for the downward recurrence started from zero to settle.

    Above n* the error shrinks per step by at least θ and then faster (the roots grow like
    k/|α| or √(k/|β|)); T steps gain about T ln θ + T²/(2n). Calibrated on the slowest case,
    |α| << |β| with n* near n: for n = 35, T = 30 and 40 left 6e-11 and 4e-14 (this rule
    gives 18 and 30).
    """
    n = max(n, 1)
    t = 1
    while t * math.log(_MARGIN) + t * t / (2 * n) < log_tol:
        t += 1
    return t


def _recurrence_length(n_max, terms):
    """Highest moment the recurrences run to: as far as the curvature expansion of ``terms``
    terms reads, n_max + 2(terms - 1). The tail rule is calibrated at such lengths; run to
    n_max alone (4 at 5 moments without the cubic), its shorter tail left errors of 6e-9 at
    α = 0, β = 1."""
    return n_max + 2 * (terms - 1)


def stationary_ratio(n_max, terms, dtype):
    """κ, the |α|/|β| above which moments come from elimination rather than upwards."""
    log_tol = log_tolerance(dtype)
    n_run = _recurrence_length(n_max, terms)
    return 2 * math.exp(log_tol / (n_run + _tail(n_run, log_tol)))


def curved_moments(alpha, beta, n_max, terms, e_alpha=None, e_beta=None):
    """M_n(α, β), n = 0..n_max, for β != 0: a SplitComplex of stacked (n_max + 1,) + shape
    arrays. Accurate for |β| at or above the switch of a curvature expansion of ``terms``
    terms.

    ``e_alpha``, ``e_beta``: exp(iα), exp(iβ) as SplitComplex where they are known more
    precisely than from α and β (float32 work: from fractions of a turn); by default from α
    and β. Elsewhere α and β enter through ratios, where their relative precision suffices,
    and through the stationary-point phase -α²/(4β), used only where it is at most |β|.
    """
    n_run = _recurrence_length(n_max, terms)
    n_top = n_run + _tail(n_run, log_tolerance(alpha.dtype))
    kappa = stationary_ratio(n_max, terms, alpha.dtype)
    abs_a = jnp.abs(alpha)
    abs_b = jnp.abs(beta)
    n_star = _MARGIN * abs_a + 2 * _MARGIN**2 * abs_b
    if e_alpha is None:
        e_alpha = SplitComplex(jnp.cos(alpha), jnp.sin(alpha))
    if e_beta is None:
        e_beta = SplitComplex(jnp.cos(beta), jnp.sin(beta))
    e_plus = e_beta * e_alpha
    e_minus = e_beta * e_alpha.conj()
    # R_n depends on n only through its parity.
    r_even = (e_plus - e_minus).times_i() * -0.5
    r_odd = (e_plus + e_minus).times_i() * -0.5
    seed = _fresnel_seed(alpha, beta, e_plus, e_minus)

    stationary = abs_a <= kappa * abs_b
    # Harmless arguments keep each unused solution bounded (module docstring).
    has_tail = n_star < n_top
    a_min = jnp.where(has_tail, alpha, 0.0)
    b_min = jnp.where(has_tail, beta, 0.0)
    eliminate = ~stationary & (n_star >= 1)
    a_el = jnp.where(eliminate, alpha, float(n_top + 1))
    b_el = jnp.where(eliminate, beta, 0.0)
    rise = stationary & (n_star >= 1)
    a_up = jnp.where(rise, alpha, 0.0)
    inv_2b = 0.5 / jnp.where(rise, beta, float(n_run + 1))
    zero = zeros_like(alpha)

    r_step = r_odd - r_even

    def r(n):
        # R_n by parity without a select: n - 2 floor(n/2) is 0 or 1.
        return r_even + r_step * (n - 2 * jnp.floor(n / 2))

    def down(carry, n):
        # D_n, D_{n+1}: minimal solution. u_{n+1}, v_{n+1}: elimination from the top,
        # M_{n+1} = u_{n+1} M_n + v_{n+1}; where the minimal solution holds (n > n*, and for
        # the stationary branch, which uses nothing else from here) u = 0, v = D.
        d, d_next, u_next, v_next = carry
        r_n = r(n)
        d_prev = (r_n - d * a_min - d_next * (2 * b_min)).times_i() * (1.0 / n)
        inv_e = (SplitComplex(a_el, jnp.zeros_like(a_el)) + u_next * (2 * b_el)).inverse()
        keep = (n > n_star) | stationary
        u = select(keep, zero, inv_e.times_i() * n)
        v = select(keep, d, (r_n - v_next * (2 * b_el)) * inv_e)
        # Four separate outputs per step: stacked, XLA's CPU loop wrote them through a
        # concatenation (float64, 10^5 elements through the curved path: 0.52-0.56 s ->
        # 0.50-0.51 s, interleaved runs).
        return (d_prev, d, u, v), (u.re, u.im, v.re, v.im)

    def up(carry, xs):
        m_prev, m = carry
        n, uv = xs
        u_n, v_n = SplitComplex(*uv[:2]), SplitComplex(*uv[2:])
        rising = (r(n - 1) + m_prev.times_i() * (n - 1) - m * a_up) * inv_2b
        m_next = select(stationary & (n <= n_star), rising, u_n * m + v_n)
        return (m, m_next), (m_next.re, m_next.im)

    def steps(first, last):
        return jnp.arange(first, last, -1 if first > last else 1, dtype=alpha.dtype)

    _, uv = jax.lax.scan(down, (zero,) * 4, steps(n_top, 0))
    uv = tuple(part[: n_top - n_run - 1 : -1] for part in uv)
    _, rest = jax.lax.scan(up, (zero, seed), (steps(1, n_run + 1), uv))
    return SplitComplex(
        jnp.concatenate([seed.re[None], rest[0][:n_max]]),
        jnp.concatenate([seed.im[None], rest[1][:n_max]]),
    )


def _fresnel_seed(alpha, beta, e_plus, e_minus):
    """M_0 for β != 0 by completing the square.

    With s = sign β, B = |β| and t± = s(α ± 2β)/√(2πB), the Fresnel integral F(t) = C + iS
    (conjugated for s < 0) gives M_0 = √(π/(2B))/2 · e^{-iα²/(4β)} [F(t₊) - F(t₋)]. Writing
    F(t) = sgn t [(1 + is)/2 - G_s(|t|) e^{isπt²/2}] turns the product of e^{-iα²/(4β)} with
    e^{isπt±²/2} into the endpoint phase E± = e^{i(β ± α)}, and the constants cancel unless
    the stationary point -α/(2β) lies inside (-1, 1).
    """
    sign = jnp.where(beta < 0, -1.0, 1.0).astype(beta.dtype)
    size = jnp.abs(beta)
    root = jnp.sqrt(2 * math.pi * size)
    t_hi = sign * (alpha + 2 * beta) / root
    t_lo = sign * (alpha - 2 * beta) / root
    # Both endpoints in one evaluation of G.
    g = fresnel_aux(jnp.abs(jnp.stack([t_hi, t_lo])))
    g_hi, g_lo = (SplitComplex(g.real[k], sign * g.imag[k]) for k in range(2))
    side_hi = jnp.where(t_hi < 0, 1.0, -1.0).astype(t_hi.dtype)
    side_lo = jnp.where(t_lo < 0, -1.0, 1.0).astype(t_lo.dtype)
    total = g_hi * e_plus * side_hi + g_lo * e_minus * side_lo
    inside = (t_lo < 0) & (t_hi >= 0)
    centre_angle = -alpha * alpha / (4 * beta)
    centre = SplitComplex(jnp.cos(centre_angle), jnp.sin(centre_angle)) * SplitComplex(
        jnp.ones_like(sign), sign
    )
    total = total + centre * inside.astype(alpha.dtype)
    return total * (0.5 * jnp.sqrt(math.pi / (2 * size)))
