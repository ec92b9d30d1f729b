"""Closed-form phase moments: the integrals the analytic RFI-visibility operator is built on.

    W[..., m] = (1/2) ∫_{-1}^{1} x^m exp(i(φ0 + a x + b x² + c x³)) dx,     m = 0..n_moments-1.

[-1, 1] is split into ``segments`` equal pieces (centre x_i, half-width ρ = 1/segments). On a
piece, x = x_i + ρy with y in [-1, 1] and the phase is φ_i + αy + βy² + γy³ with

    φ_i = φ0 + a x_i + b x_i² + c x_i³,   α = (a + 2b x_i + 3c x_i²)ρ,   β = (b + 3c x_i)ρ²,
    γ = cρ³.

The residual cubic is a short series (``cubic_terms`` = K; K = 0 ignores γ):

    P_j = Σ_{k=0..K} (iγ)^k/k! M_{j+3k},        M_n = mean_y y^n exp(i(αy + βy²)),

and W_m = mean_i exp(iφ_i) Σ_j binom(m, j) x_i^(m-j) ρ^j P_j (exact translation back to x).

The quadratic-phase moments M_n, n = 0..N (N = n_moments - 1 + 3K), obey one three-term
recurrence, from integrating d/dy [y^n exp(iφ)] by parts:

    -i n M_{n-1} + α M_n + 2β M_{n+1} = R_n,     R_n = -(i/2)(E₊ - (-1)^n E₋),  E± = exp(i(β ± α)).

Which direction is stable depends on (α, β), so each moment is taken from the solution that is
stable for it (all are evaluated and selected elementwise; the unused ones are fed harmless
arguments so values and gradients stay finite):

* M_0. For |β| >= β_s: Fresnel integrals (completing the square; ``_fresnel``), written with
  the auxiliary function so the endpoint terms carry the endpoint phases exp(i(β ± α))
  directly. For |β| < β_s: the curvature expansion M_0 = Σ_{k<terms} (iβ)^k/k! L_2k(α) with
  the linear moments L_n(α) = mean y^n exp(iαy) (L_0 = sin α/α; upwards while n <= 1.2|α|,
  downwards from a zero tail above, which also gives α = 0 exactly). β_s is the largest |β|
  at which ``terms`` terms reach the working precision, so ``terms`` moves the switch but
  not the accuracy.
* n > n* = 1.2|α| + 2.88|β|: both roots of the recurrence exceed 1.2 in modulus there, so
  M_n is its minimal solution: downwards from a zero tail.
* n <= n*, |α| <= κ|β| (stationary point inside or near the piece): upwards from M_0
  (errors grow by about |α|/(2|β|) per step, at most κ/2).
* n <= n*, |α| > κ|β|: neither direction is stable; the recurrence is solved as a boundary
  value problem (M_0 below, the minimal solution or a zero closure above) by forward
  elimination and back substitution, which damps errors by 2|β|/|α| < 2/κ per step.

κ balances the last two: with a tail of T steps above N, κ = 2 eps^(-1/(N+T)), about 3.3 in
float64. The design text put the Fresnel/expansion switch at |α| = 2.5|β|, |β| = 1 and used
the curvature expansion everywhere else; with terms = 6 that expansion is off by
|β|^6/720 (1e-4 at |β| = 1 and far worse at the large |β|, large |α| of a fast satellite),
hence the scheme above.

Angles are formed in float64 when jax x64 is enabled (also for float32 inputs), otherwise in
float32; the result is cast to the inputs' precision.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ri_kernels._fresnel import fresnel_aux

_MARGIN = 1.2  # n* = θ|α| + 2θ²|β| makes both recurrence roots at least θ in modulus.
_MAX_MOMENTS = 17
_MAX_SEGMENTS = 1024
_MAX_TERMS = 32
_MAX_CUBIC_TERMS = 8


def phase_moments(
    phi0, a, b, c, n_moments: int, *, segments: int = 2, terms: int = 6, cubic_terms: int = 3
):
    """W[..., m] = mean over x in [-1, 1] of x**m * exp(i*(phi0 + a*x + b*x**2 + c*x**3)).

    phi0, a, b, c: real arrays (rad) broadcastable to a common shape S, all float32 or all
    float64. n_moments (1..17), segments (1..1024), terms (1..32), cubic_terms (0..8): static
    ints, see the module docstring. Returns complex64 / complex128 of shape S + (n_moments,).
    """
    _check_options(n_moments, segments, terms, cubic_terms)
    args = [jnp.asarray(v) for v in (phi0, a, b, c)]
    dtypes = sorted({str(v.dtype) for v in args})
    if len(dtypes) != 1 or dtypes[0] not in ("float32", "float64"):
        raise ValueError(
            f"phase_moments: phi0, a, b, c must all be float32 or all float64, got {dtypes}; "
            "cast them to one real precision"
        )
    out_dtype = jnp.complex64 if dtypes[0] == "float32" else jnp.complex128
    work = jax.dtypes.canonicalize_dtype(np.float64)
    shape = jnp.broadcast_shapes(*(v.shape for v in args))
    phi0, a, b, c = (jnp.broadcast_to(v.astype(work), shape) for v in args)

    rho = 1.0 / segments
    centres = -1.0 + rho * (2 * np.arange(segments) + 1)
    x = centres.reshape((segments,) + (1,) * len(shape))
    gamma = jnp.broadcast_to(c * rho**3, shape)
    # γy³ = (3/4)γy + γ(y³ - 3y/4): the best linear fit to y³ on [-1, 1] goes into α, which
    # leaves a residual of at most |γ|/4 for the series.
    alpha = (a + (2 * b + 3 * c * x) * x) * rho + 0.75 * gamma
    beta = (b + 3 * c * x) * rho**2
    phase = phi0 + (a + (b + c * x) * x) * x

    n_max = n_moments - 1 + 3 * cubic_terms
    quad = _quadratic_moments(alpha, beta, n_max, terms)  # (n_max + 1, segments) + S
    series = quad[:n_moments]
    power = jnp.ones_like(gamma)
    for k in range(1, cubic_terms + 1):
        power = power * gamma / k
        # (y³ - 3y/4)^k = Σ_l binom(k, l) (-3/4)^(k-l) y^(k+2l)
        residual = sum(
            (quad[k + 2 * l : k + 2 * l + n_moments] * (math.comb(k, l) * (-0.75) ** (k - l)))
            for l in range(k + 1)
        )
        series = series + _times_i_power(residual * power, k)
    rotated = series * _Cx(jnp.cos(phase), jnp.sin(phase))
    # W_m = Σ_(j, i) table[m, j, i] rotated[j, i]: one contraction over moment and piece.
    table = jnp.asarray(_translation_table(centres, n_moments), work)
    translate = partial(
        jnp.tensordot, table, axes=((1, 2), (0, 1)), precision=jax.lax.Precision.HIGHEST
    )
    moments = jax.lax.complex(translate(rotated.re), translate(rotated.im))
    return jnp.moveaxis(moments, 0, -1).astype(out_dtype)


def _translation_table(centres, n_moments):
    """(m, j, i) table of binom(m, j) x_i^(m-j) ρ^j / segments: the mean over pieces of
    x^m = (x_i + ρy)^m = Σ_j binom(m, j) x_i^(m-j) ρ^j y^j."""
    segments = len(centres)
    rho = 1.0 / segments
    table = np.zeros((n_moments, n_moments, segments))
    for m in range(n_moments):
        for j in range(m + 1):
            table[m, j] = math.comb(m, j) * centres ** (m - j) * rho ** (j + 1)
    return table


def _check_options(n_moments, segments, terms, cubic_terms):
    limits = {
        "n_moments": (n_moments, 1, _MAX_MOMENTS),
        "segments": (segments, 1, _MAX_SEGMENTS),
        "terms": (terms, 1, _MAX_TERMS),
        "cubic_terms": (cubic_terms, 0, _MAX_CUBIC_TERMS),
    }
    for name, (value, lo, hi) in limits.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ValueError(
                f"phase_moments: {name} must be a Python int (a static option), got "
                f"{type(value).__name__} {value!r}"
            )
        if not lo <= value <= hi:
            raise ValueError(
                f"phase_moments: {name}={value} is out of range; expected {lo} <= {name} <= {hi}"
            )


@jax.tree_util.register_pytree_node_class
class _Cx:
    """A complex array as two real arrays.

    Most products here are real × complex; as pairs they cost two multiplies instead of four
    (a 60-step recurrence on 1e6 elements ran 2x faster on CPU than in complex128).
    """

    __slots__ = ("im", "re")

    def __init__(self, re, im):
        self.re = re
        self.im = im

    def tree_flatten(self):
        return (self.re, self.im), None

    @classmethod
    def tree_unflatten(cls, _, children):
        return cls(*children)

    def __add__(self, other):
        return _Cx(self.re + other.re, self.im + other.im)

    def __radd__(self, other):
        # sum() starts from 0.
        return self if other == 0 else NotImplemented

    def __sub__(self, other):
        return _Cx(self.re - other.re, self.im - other.im)

    def __mul__(self, other):
        if isinstance(other, _Cx):
            return _Cx(
                self.re * other.re - self.im * other.im, self.re * other.im + self.im * other.re
            )
        return _Cx(self.re * other, self.im * other)

    __rmul__ = __mul__

    def __getitem__(self, index):
        return _Cx(self.re[index], self.im[index])

    def times_i(self):
        return _Cx(-self.im, self.re)

    def conj(self):
        return _Cx(self.re, -self.im)

    def inverse(self):
        scale = 1 / (self.re * self.re + self.im * self.im)
        return _Cx(self.re * scale, -self.im * scale)


def _zero(like):
    return _Cx(jnp.zeros_like(like), jnp.zeros_like(like))


def _select(cond, z, w):
    return _Cx(jnp.where(cond, z.re, w.re), jnp.where(cond, z.im, w.im))


def _times_i_power(z, k):
    for _ in range(k % 4):
        z = z.times_i()
    return z


def _stack(parts):
    return _Cx(jnp.stack([z.re for z in parts]), jnp.stack([z.im for z in parts]))


def _log_tolerance(dtype):
    """-ln of the truncation error aimed at: the working precision."""
    return -math.log(float(jnp.finfo(dtype).eps))


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


def _expansion_switch(terms, log_tol):
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


def _quadratic_moments(alpha, beta, n_max, terms):
    """M_n = mean_y y^n exp(i(αy + βy²)), n = 0..n_max, stacked on a leading axis (_Cx)."""
    log_tol = _log_tolerance(alpha.dtype)
    n_ext = n_max + 2 * (terms - 1)
    tail = _tail(n_ext, log_tol)
    n_top = n_ext + tail
    kappa = 2 * math.exp(log_tol / (n_ext + tail))
    beta_switch = _expansion_switch(terms, log_tol)

    # Below the switch the recurrences run at β = 0 (linear moments L_n) and the curvature is
    # put back by the expansion at the end.
    small = jnp.abs(beta) < beta_switch
    b_run = jnp.where(small, 0.0, beta)
    abs_a = jnp.abs(alpha)
    abs_b = jnp.abs(b_run)
    n_star = _MARGIN * abs_a + 2 * _MARGIN**2 * abs_b
    e_alpha = _Cx(jnp.cos(alpha), jnp.sin(alpha))
    e_beta = _Cx(jnp.cos(b_run), jnp.sin(b_run))
    e_plus = e_beta * e_alpha
    e_minus = e_beta * e_alpha.conj()
    # R_n depends on n only through its parity.
    r_even = (e_plus - e_minus).times_i() * -0.5
    r_odd = (e_plus + e_minus).times_i() * -0.5

    a_sinc = jnp.where(alpha == 0, 1.0, alpha)
    sinc = jnp.where(alpha == 0, 1.0, jnp.sin(a_sinc) / a_sinc)
    seed = _select(
        small,
        _Cx(sinc, jnp.zeros_like(sinc)),
        _fresnel_seed(jnp.where(small, 0.0, alpha), jnp.where(small, 1.0, beta), e_plus, e_minus),
    )

    stationary = abs_a <= kappa * abs_b
    # Harmless arguments keep each unused solution bounded (module docstring).
    has_tail = n_star < n_top
    a_min = jnp.where(has_tail, alpha, 0.0)
    b_min = jnp.where(has_tail, b_run, 0.0)
    eliminate = ~stationary & (n_star >= 1)
    a_el = jnp.where(eliminate, alpha, float(n_top + 1))
    b_el = jnp.where(eliminate, b_run, 0.0)
    rise = stationary & (n_star >= 1)
    a_up = jnp.where(rise, alpha, 0.0)
    inv_2b = 0.5 / jnp.where(rise, b_run, float(n_ext))
    zero = _zero(alpha)

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
        inv_e = (_Cx(a_el, jnp.zeros_like(a_el)) + u_next * (2 * b_el)).inverse()
        keep = (n > n_star) | stationary
        u = _select(keep, zero, inv_e.times_i() * n)
        v = _select(keep, d, (r_n - v_next * (2 * b_el)) * inv_e)
        return (d_prev, d, u, v), (u, v)

    def up(carry, xs):
        m_prev, m = carry
        n, u_n, v_n = xs
        rising = (r(n - 1) + m_prev.times_i() * (n - 1) - m * a_up) * inv_2b
        m_next = _select(stationary & (n <= n_star), rising, u_n * m + v_n)
        return (m, m_next), m_next

    def steps(first, last):
        return jnp.arange(first, last, -1 if first > last else 1, dtype=alpha.dtype)

    _, (u, v) = jax.lax.scan(down, (zero,) * 4, steps(n_top, 0))
    u, v = u[: n_top - n_ext - 1 : -1], v[: n_top - n_ext - 1 : -1]
    _, rest = jax.lax.scan(up, (zero, seed), (steps(1, n_ext + 1), u, v))
    run = _Cx(jnp.concatenate([seed.re[None], rest.re]), jnp.concatenate([seed.im[None], rest.im]))

    curved = run[: n_max + 1]
    power = jnp.where(small, beta, 0.0)
    coef = jnp.ones_like(power)
    for k in range(1, terms):
        coef = coef * power / k
        curved = curved + _times_i_power(run[2 * k : 2 * k + n_max + 1] * coef, k)
    return curved


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
    g_hi, g_lo = (_Cx(g.real[k], sign * g.imag[k]) for k in range(2))
    side_hi = jnp.where(t_hi < 0, 1.0, -1.0).astype(t_hi.dtype)
    side_lo = jnp.where(t_lo < 0, -1.0, 1.0).astype(t_lo.dtype)
    total = g_hi * e_plus * side_hi + g_lo * e_minus * side_lo
    inside = (t_lo < 0) & (t_hi >= 0)
    centre_angle = -alpha * alpha / (4 * beta)
    centre = _Cx(jnp.cos(centre_angle), jnp.sin(centre_angle)) * _Cx(jnp.ones_like(sign), sign)
    total = total + centre * inside.astype(alpha.dtype)
    return total * (0.5 * jnp.sqrt(math.pi / (2 * size)))
