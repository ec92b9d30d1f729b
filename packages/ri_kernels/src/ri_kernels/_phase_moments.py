"""Closed-form phase moments: the integrals the analytic RFI-visibility operator is built on.

    W[..., m] = (1/2) ∫_{-1}^{1} x^m exp(i(φ0 + a x + b x² + c x³)) dx,     m = 0..n_moments-1.

[-1, 1] is split into ``segments`` equal pieces (centre x_i, half-width ρ = 1/segments). On a
piece x = x_i + ρy, y in [-1, 1], and the phase is φ_i + αy + βy² + γ(y³ - 3y/4) with

    φ_i = φ0 + a x_i + b x_i² + c x_i³,   α = (a + 2b x_i + 3c x_i²)ρ + 3γ/4,
    β = (b + 3c x_i)ρ²,   γ = cρ³

(3y/4 is the best linear fit to y³ on [-1, 1], so the residual cubic is at most |γ|/4). With
M_n = mean_y y^n exp(i(αy + βy²)) the residual is a series of ``cubic_terms`` = K terms,

    P_j = Σ_{k=0..K} (iγ)^k/k! Σ_l binom(k, l) (-3/4)^(k-l) M_{j+k+2l},

(K = 0: the cubic enters only through α and β), and W_m = mean_i exp(iφ_i)
Σ_j binom(m, j) x_i^(m-j) ρ^j P_j translates back to x exactly.

The quadratic moments M_n, n <= N = n_moments - 1 + 3K, obey one three-term recurrence
(integrate d/dy [y^n exp(iφ)] by parts):

    -i n M_{n-1} + α M_n + 2β M_{n+1} = R_n,     R_n = -(i/2)(E₊ - (-1)^n E₋),  E± = e^{i(β±α)}.

Its stable direction depends on (α, β), so each moment comes from the solution that is stable
for it; every branch is evaluated and selected elementwise, the unused ones fed harmless
arguments so that values and gradients stay finite:

* M_0: Fresnel integrals for |β| >= β_s (``_fresnel_seed``, written so that the endpoint
  terms carry E± directly); sin α/α for |β| < β_s, where the recurrences run at β = 0 (the
  linear moments L_n) up to N + 2(terms - 1) and the curvature is put back as
  M_n = Σ_{k<terms} (iβ)^k/k! L_{n+2k}. β_s is the largest |β| at which ``terms`` terms reach
  the working precision, so ``terms`` moves the switch, not the accuracy.
* n > n* = θ|α| + 2θ²|β| (θ = 1.2): both roots of the recurrence exceed θ in modulus, so M_n is
  its minimal solution: downwards from a zero tail T steps above (``_tail``).
* n <= n*, |α| <= κ|β| (stationary point in or near the piece): upwards from M_0; errors grow
  by at most about κ/2 per step.
* n <= n*, |α| > κ|β|: neither direction is stable; the recurrence is a boundary-value
  problem (M_0 below; the minimal solution above n*, or zero above the tail) solved by
  elimination from the top and substitution upwards, damping errors by 2|β|/|α| < 2/κ a step.

κ = 2 eps^(-1/(N'+T)) balances the last two (3.1 to 3.7 in float64). The design text switched
at |α| = 2.5|β|, |β| = 1 and used the curvature expansion elsewhere; at terms = 6 that is off by
|β|^6/720 (1e-4 at |β| = 1, far worse at a fast satellite's large α and β).

Accuracy (float64; largest error over m relative to max_m |W|; against dense Gauss-Legendre
quadrature, tests/test_phase_moments.py): defaults (2, 6, 3) <= 3e-9 for |a| <= 1e4,
|b| <= 1e3, |c| <= 0.5 and across every branch edge; the cubic series limits them at larger
|c| (4e-8 at |c| = 1, 7e-7 at 2, 4e-6 at 3, 6e-5 at 6.3), where (4, 16, 3) gives <= 2e-8.
(1, 6, 0) drops the residual cubic: exact only for c = 0. Float32 inputs with x64 on: within
1e-6 of float64. Without x64 all angles are float32 and errors grow with the phase: 5e-6 at
|a| <= 100, 5e-5 at |a| <= 1e3. ∂W_m/∂(φ0, a, b, c) = i W_{m+(0,1,2,3)} (a custom JVP):
gradients cost three more moments, never a pass back through the recurrences. Cost: N' + T
downward and N' upward steps per piece (N' = N + 2(terms - 1); T = 45 in float64, 28 in
float32 at N' = 35).
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
_CPU_BLOCK = 1024


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
    return _moments(n_moments, segments, terms, cubic_terms, phi0, a, b, c).astype(out_dtype)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3))
def _moments(n_moments, segments, terms, cubic_terms, phi0, a, b, c):
    return _in_blocks(phi0, a, b, c, n_moments, segments, terms, cubic_terms)


@_moments.defjvp
def _moments_jvp(n_moments, segments, terms, cubic_terms, primals, tangents):
    # ∂W_m/∂φ0 = i W_m, ∂W_m/∂a = i W_{m+1}, ∂W_m/∂b = i W_{m+2}, ∂W_m/∂c = i W_{m+3}: the
    # derivatives are three more moments, not a trip back through the recurrences.
    extended = _in_blocks(*primals, n_moments + 3, segments, terms, cubic_terms)
    value = extended[..., :n_moments]
    slope = sum(extended[..., k : k + n_moments] * t[..., None] for k, t in enumerate(tangents))
    return value, 1j * slope


def _in_blocks(phi0, a, b, c, n_moments, segments, terms, cubic_terms):
    """_evaluate, on the CPU backend over blocks of _CPU_BLOCK elements.

    XLA's CPU loops stream every carried array through memory at each recurrence step;
    blocks that stay in cache ran 2.3x faster (float32, 5 moments, 2^17 elements: 7.5 ->
    3.3 us per element with blocks of 1024).
    """
    size = phi0.size
    if jax.default_backend() != "cpu" or size <= _CPU_BLOCK:
        return _evaluate(phi0, a, b, c, n_moments, segments, terms, cubic_terms)
    pad = -size % _CPU_BLOCK
    blocks = tuple(jnp.pad(v.ravel(), (0, pad)).reshape(-1, _CPU_BLOCK) for v in (phi0, a, b, c))
    out = jax.lax.map(lambda v: _evaluate(*v, n_moments, segments, terms, cubic_terms), blocks)
    return out.reshape(-1, n_moments)[:size].reshape((*phi0.shape, n_moments))


def _evaluate(phi0, a, b, c, n_moments, segments, terms, cubic_terms):
    """W for float arrays of one shape S and the working dtype: complex, S + (n_moments,)."""
    shape = phi0.shape
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
    table = jnp.asarray(_translation_table(centres, n_moments), phi0.dtype)
    translate = partial(
        jnp.tensordot, table, axes=((1, 2), (0, 1)), precision=jax.lax.Precision.HIGHEST
    )
    moments = jax.lax.complex(translate(rotated.re), translate(rotated.im))
    return jnp.moveaxis(moments, 0, -1)


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
    """A complex array as two real arrays: most products here are real × complex, two
    multiplies instead of four (a 60-step recurrence ran 2x faster on CPU than complex128)."""

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

    def __radd__(self, other):  # sum() starts from 0
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


def _stationary_ratio(n_max, terms, dtype):
    """κ, the |α|/|β| above which moments come from elimination rather than upwards."""
    log_tol = _log_tolerance(dtype)
    n_ext = n_max + 2 * (terms - 1)
    return 2 * math.exp(log_tol / (n_ext + _tail(n_ext, log_tol)))


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
    kappa = _stationary_ratio(n_max, terms, alpha.dtype)
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
