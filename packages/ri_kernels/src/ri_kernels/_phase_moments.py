"""Closed-form phase moments: the integrals the analytic RFI-visibility operator is built on.

    W[..., m] = (1/2) ∫_{-1}^{1} x^m exp(i(φ0 + a x + b x² + c x³)) dx,     m = 0..n_moments-1.

[-1, 1] is split into ``segments`` equal pieces (centre x_i, half-width ρ = 1/segments). On a
piece x = x_i + ρy, y in [-1, 1], and the phase is φ_i + αy + βy² + γ(y³ - 3y/4) with

    φ_i = φ0 + a x_i + b x_i² + c x_i³,   α = (a + 2b x_i + 3c x_i²)ρ + 3γ/4,
    β = (b + 3c x_i)ρ²,   γ = cρ³

(3y/4 is the best linear fit to y³ on [-1, 1], so the residual cubic is at most |γ|/4). With
M_n = mean_y y^n exp(i(αy + βy²)) the residual is a series of ``cubic_terms`` = K terms,

    P_j = Σ_{k=0..K} (iγ)^k/k! Σ_l binom(k, l) (-3/4)^(k-l) M_{j+k+2l},

and W_m = mean_i exp(iφ_i) Σ_j binom(m, j) x_i^(m-j) ρ^j P_j translates back to x exactly.
K = 0 drops the cubic phase altogether, as upstream ri-kernels documents it: c is taken as
zero before the pieces are formed, so the phase is quadratic across each piece and W is that
of (φ0, a, b, 0), with ∂W/∂c = 0. K >= 1 keeps c in φ_i, α and β and adds K residual terms.

The quadratic moments M_n, n <= N = n_moments - 1 + 3K, come from one of two methods:

* |β| < β_s: the curvature expansion M_n = Σ_{k<terms} (iβ)^k/k! L_{n+2k} over linear
  moments computed in real arithmetic (:mod:`ri_kernels._linear_moments`). β_s is the largest
  |β| at which ``terms`` terms reach the working precision, so ``terms`` moves the switch, not
  the accuracy.
* |β| >= β_s: Fresnel seeds and the stable directions of the three-term recurrence
  (:mod:`ri_kernels._curved_moments`), about twenty times the cost per piece.

Every element is first evaluated with the expansion alone, in cache-sized blocks on CPU; the
elements with a piece at or above the switch, where there are any, are then gathered, a chunk
at a time, evaluated with both methods, and written back (batches of at most one chunk take
both methods at once). Off the CPU the elements are laid in (rows, 128) tiles
(:func:`element_layout`). Typical interferers are mostly below the switch: at the CPU
benchmark (float32, terms = 6, β_s = 0.2) 0.3% of elements are gathered.

Accuracy (float64; largest error over m relative to max_m |W|; against dense Gauss-Legendre
quadrature, tests/test_phase_moments.py): defaults (2, 6, 3) <= 3e-9 for |a| <= 1e4,
|b| <= 1e3, |c| <= 0.5 and across every branch edge; the cubic series limits them at larger
|c| (4e-8 at |c| = 1, 7e-7 at 2, 4e-6 at 3, 6e-5 at 6.3), where (4, 16, 3) gives <= 2e-8.
(1, 6, 0) drops the cubic: exact only for c = 0. Float32 inputs with x64 on: within
1e-6 of float64.

Without x64 the work is float32, where the angles φ_i and α of a winding of 1e4 rad, formed
and reduced in one float32, lose their fraction of a turn to 1e4 * 2^-24 = 6e-4 rad (the
moments erred by |a| 2^-24: 8.6e-5 at |a| = 1232). There the cubic is carried in turns as a
:class:`TurnsCubic`, φ0 and a as two-float pairs (:mod:`ri_kernels._two_float`), and each
piece's φ_i and α are formed and reduced to a fraction of a turn in that precision: the
phasors exp(iφ_i), exp(iα) and exp(iβ) come from the fractions, and α and β enter the
recurrences, where only their relative precision matters, as single floats.
∂W_m/∂(φ0, a, b, c) = i W_{m+(0,1,2,3)} (a custom JVP): gradients cost three more moments,
never a pass back through the recurrences.
"""

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ri_kernels import _two_float as tf
from ri_kernels._curved_moments import curved_moments
from ri_kernels._linear_moments import expanded_moments, expansion_switch, log_tolerance
from ri_kernels._phasor import turn_phasor
from ri_kernels._split_complex import SplitComplex, select

_MAX_MOMENTS = 17
# The three more the derivatives in (φ0, a, b, c) take: dW_m/dc = i W_{m+3}.
_SLOPE_MOMENTS = 3
# Largest options of the moments, and so of the analytic operator; public so that callers
# can check their own configuration against the same limits.
MAX_SEGMENTS = 1024
MAX_TERMS = 32
MAX_CUBIC_TERMS = 8
# Most terms of the analytic operator's series across a channel (ri_kernels._analytic): each
# asks the moments for one more order.
MAX_CHANNEL_TERMS = 8
# Elements per block of the expansion on CPU, and per chunk of elements gathered for the
# curved method (any backend).
_CPU_BLOCK = 4096
_CHUNK = 1024
# Independent loops the CPU blocks are split between: XLA's CPU runtime runs independent
# loops on separate threads, where one loop leaves every core but one idle (float32 CPU
# benchmark, 2-core machine: value-and-gradient 0.48-0.95 s against 0.61-0.98 s with one
# loop, interleaved runs at load 1.6-3.5).
_CPU_LOOPS = 2
# Elements off the CPU lie in (rows, _LANES) arrays, rows a multiple of _SUBLANES: a TPU
# vector register's (8, 128) tile. As one flat axis, every array with a short axis before
# it (the pieces, the moments in the loops' stacked outputs) filled a fraction of its tiles:
# a TPU v5e's moments took 13.3 ns per element flat and 8.9 in rows (2 pieces, 1 cubic term,
# 2^20 elements, float32; benchmarks/moment_layout.py, docs/benchmarks.md). The CPU keeps
# one flat axis, which its blocks (_CPU_BLOCK) are cut from.
_LANES = 128
_SUBLANES = 8


class Cubic(NamedTuple):
    """φ0 + a x + b x² + c x³ (rad) on x in [-1, 1]: arrays of one shape S in float64, the
    working dtype with jax's 64-bit mode on."""

    phi0: jax.Array
    a: jax.Array
    b: jax.Array
    c: jax.Array


class TurnsCubic(NamedTuple):
    """The same cubic in turns (rad / 2π), float32 arrays of one shape S, for work without
    jax's 64-bit mode: φ0 and a as two-float pairs hi + lo (:mod:`ri_kernels._two_float`),
    whose fractions of a turn survive any winding; b and c as single floats, whose rounding
    costs at most |b| 2^-24 (3e-6 rad at |b| = 50 rad)."""

    phi0_hi: jax.Array
    phi0_lo: jax.Array
    a_hi: jax.Array
    a_lo: jax.Array
    b: jax.Array
    c: jax.Array


class _Pieces(NamedTuple):
    """The cubic on each piece (module docstring), (segments, S) arrays: α, β and γ (rad);
    the phasor exp(iφ_i) as (cos, sin); and exp(iα), exp(iβ) as SplitComplex when they are
    known more precisely than from α and β (float32 work), else None."""

    alpha: jax.Array
    beta: jax.Array
    gamma: jax.Array
    centre: tuple
    e_alpha: SplitComplex | None
    e_beta: SplitComplex | None


class _MomentOptions(NamedTuple):
    """Static options of one evaluation of the moments, Python ints (see the module docstring).

    n_moments: number of moments W_0..W_{n_moments-1}, 1..17.
    segments: equal pieces [-1, 1] is split into, 1..1024.
    terms: terms of the curvature expansion, 1..32.
    cubic_terms: terms K of the residual cubic series, 0..8; 0 drops the cubic phase.
    """

    n_moments: int
    segments: int
    terms: int
    cubic_terms: int


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


def cubic_moments_by_order(
    cubic, n_moments: int, *, segments: int = 2, terms: int = 6, cubic_terms: int = 3
):
    """W of a :class:`Cubic` or :class:`TurnsCubic` of arrays of shape S (from phases in rad:
    :func:`working_cubic`) as real and imaginary parts with the moment index first: two
    (n_moments,) + S arrays in the working dtype. The same values as :func:`phase_moments`,
    for callers that read each moment on its own. n_moments goes up to 20, the 17 of
    :func:`phase_moments` and the three more its derivatives take. Not differentiable in the
    cubic: the analytic operator forms its derivatives from those moments (∂W_m/∂φ0 = i W_m,
    ∂W_m/∂a = i W_{m+1}, ...).

    On XLA's CPU backend, writing the moments with a trailing axis of a complex array
    interleaves them element by element: a tenth of the moments' time at the CPU benchmark.
    """
    shape = jnp.broadcast_shapes(*(v.shape for v in cubic))
    laid = jax.tree.map(lambda v: to_elements(jnp.broadcast_to(v, shape), 0), cubic)
    re, im = laid_moments(laid, n_moments, segments=segments, terms=terms, cubic_terms=cubic_terms)
    return from_elements(re, 1, shape), from_elements(im, 1, shape)


def laid_moments(cubic, n_moments: int, *, segments: int = 2, terms: int = 6, cubic_terms: int = 3):
    """:func:`cubic_moments_by_order` of a cubic whose arrays are already in the
    :func:`element_layout` (from :func:`to_elements`): (n_moments,) + that layout, for
    callers that go on working elementwise in it."""
    most = _MAX_MOMENTS + _SLOPE_MOMENTS + MAX_CHANNEL_TERMS - 1
    _check_options(n_moments, segments, terms, cubic_terms, most)
    return _flat(cubic, n_moments, segments, terms, cubic_terms)


def element_layout(size: int) -> tuple[int, ...]:
    """The element axes that ``size`` elements are worked in: (size,) on the CPU, elsewhere
    (rows, 128) with rows a multiple of 8 (zero padding at the end)."""
    if not _tiled():
        return (size,)
    tile = _SUBLANES * _LANES
    return (-(-size // tile) * _SUBLANES, _LANES)


def _tiled() -> bool:
    """Whether elements are laid in (rows, 128) tiles: off the CPU."""
    return jax.default_backend() != "cpu"


def to_elements(v, lead: int):
    """``v``'s axes after its first ``lead`` ones in the :func:`element_layout`, zero-padded."""
    flat = v.reshape(*v.shape[:lead], -1)
    layout = element_layout(flat.shape[-1])
    pad = math.prod(layout) - flat.shape[-1]
    if pad:
        flat = jnp.pad(flat, [(0, 0)] * lead + [(0, pad)])
    return flat.reshape(*v.shape[:lead], *layout)


def from_elements(v, lead: int, shape):
    """The inverse of :func:`to_elements`: ``v``'s element axes back to ``shape``."""
    flat = v.reshape(*v.shape[:lead], -1)
    return flat[..., : math.prod(shape)].reshape(*v.shape[:lead], *shape)


def working_cubic(phi0, a, b, c):
    """The cubic φ0 + a x + b x² + c x³ of real arrays (rad) broadcastable to one shape S, in
    the form the moments take, in the working dtype: a :class:`Cubic`, or without jax's
    64-bit mode a :class:`TurnsCubic` (each float32 angle exactly, to 2^-47, in turns)."""
    args = [jnp.asarray(v) for v in (phi0, a, b, c)]
    work = jax.dtypes.canonicalize_dtype(np.float64)
    shape = jnp.broadcast_shapes(*(v.shape for v in args))
    phi0, a, b, c = (jnp.broadcast_to(v.astype(work), shape) for v in args)
    if work != np.float32:
        return Cubic(phi0, a, b, c)
    phi0_turns = tf.times((phi0, jnp.zeros_like(phi0)), tf.INV_TWO_PI)
    a_turns = tf.times((a, jnp.zeros_like(a)), tf.INV_TWO_PI)
    inv_two_pi = tf.INV_TWO_PI[0]
    return TurnsCubic(*phi0_turns, *a_turns, b * inv_two_pi, c * inv_two_pi)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3))
def _moments(n_moments, segments, terms, cubic_terms, phi0, a, b, c):
    return _trailing(phi0, a, b, c, n_moments, segments, terms, cubic_terms)


def _trailing(phi0, a, b, c, n_moments, segments, terms, cubic_terms):
    """W as one complex array of shape S + (n_moments,)."""
    shape = phi0.shape
    cubic = working_cubic(*(to_elements(v, 0) for v in (phi0, a, b, c)))
    re, im = (
        from_elements(v, 1, (math.prod(shape),))
        for v in _flat(cubic, n_moments, segments, terms, cubic_terms)
    )
    return jax.lax.complex(re, im).T.reshape((*shape, n_moments))


@_moments.defjvp
def _moments_jvp(n_moments, segments, terms, cubic_terms, primals, tangents):
    # ∂W_m/∂φ0 = i W_m, ∂W_m/∂a = i W_{m+1}, ∂W_m/∂b = i W_{m+2}, ∂W_m/∂c = i W_{m+3}: the
    # derivatives are three more moments, not a trip back through the recurrences. Without
    # the cubic (cubic_terms = 0) W does not depend on c.
    extended = _trailing(*primals, n_moments + _SLOPE_MOMENTS, segments, terms, cubic_terms)
    value = extended[..., :n_moments]
    if cubic_terms == 0:
        tangents = tangents[:3]
    slope = sum(extended[..., k : k + n_moments] * t[..., None] for k, t in enumerate(tangents))
    return value, 1j * slope


def _flat(cubic, n_moments, segments, terms, cubic_terms):
    """W of a :class:`Cubic` or :class:`TurnsCubic` of arrays in the :func:`element_layout`
    as (real, imaginary) parts, each (n_moments,) + that layout: the expansion everywhere,
    then the curved pieces, where there are any."""
    options = _MomentOptions(n_moments, segments, terms, cubic_terms)
    if cubic_terms == 0:
        # No cubic phase at all (module docstring), rather than c left in φ_i, α and β.
        cubic = cubic._replace(c=jnp.zeros_like(cubic.c))
    if cubic[0].size <= _CHUNK:
        # One chunk: both methods on every element, one program to compile instead of two.
        w, _ = _evaluate(cubic, options, with_curved=True)
        return w
    w, curved = _in_blocks(cubic, options)

    def patch(w):
        return _patch_curved(w, curved, cubic, options)

    # Only where some element is curved: finding them (jnp.nonzero) took as long as the
    # expansion itself on a TPU v5e when none was (9.3 ns per element against 13.3).
    return jax.lax.cond(jnp.any(curved), patch, lambda w: w, w)


def _in_blocks(cubic, options):
    """_evaluate without the curved method: on the CPU backend over blocks of _CPU_BLOCK
    elements, whose intermediates stay in cache (blocks of 2048 to 16384 elements
    measured within noise of each other), in _CPU_LOOPS independent loops."""
    size = cubic[0].size
    if jax.default_backend() != "cpu" or size <= _CPU_BLOCK or cubic[0].ndim != 1:
        return _evaluate(cubic, options, with_curved=False)
    n_loops = min(_CPU_LOOPS, -(-size // _CPU_BLOCK))
    pad = -size % (_CPU_BLOCK * n_loops)
    blocks = jax.tree.map(lambda v: jnp.pad(v, (0, pad)).reshape(n_loops, -1, _CPU_BLOCK), cubic)
    outs = [
        jax.lax.map(
            lambda v: _evaluate(v, options, with_curved=False),
            jax.tree.map(lambda v, i=i: v[i], blocks),
        )
        for i in range(n_loops)
    ]
    w, curved = jax.tree.map(lambda *v: jnp.concatenate(v), *outs)
    # (n_blocks, n_moments, block) -> (n_moments, size): a copy of whole blocks.
    w = tuple(v.transpose(1, 0, 2).reshape(options.n_moments, -1)[:, :size] for v in w)
    return w, curved.reshape(-1)[:size]


def _patch_curved(w, curved, cubic, options):
    """Re-evaluate, _CHUNK at a time, the elements flagged by ``curved`` with both methods.

    The flagged elements are gathered to the front (their count is known only at run time),
    so the loop runs as many chunks as there are flagged elements, and none when there are
    none. Unused slots of the last chunk lie past the last element and are dropped on writing
    back. Elements are read and written at their place in the element layout: as a flat
    axis, the moments' layout in tiles was copied on its way into and out of the
    ``lax.cond`` around this, curved elements or none (a TPU v5e, benchmarks/op_profile.py).
    """
    layout, size = curved.shape, curved.size
    n_chunks = -(-size // _CHUNK)
    (ids,) = jnp.nonzero(curved.ravel(), size=n_chunks * _CHUNK, fill_value=size)
    count = jnp.sum(curved, dtype=jnp.int32)

    def chunk(i, w):
        rows = jax.lax.dynamic_slice(ids, (i * _CHUNK,), (_CHUNK,))
        inputs = jax.tree.map(lambda v: v[_unravel(jnp.minimum(rows, size - 1), layout)], cubic)
        w_rows, _ = _evaluate(inputs, options, with_curved=True)
        at = (slice(None), *_unravel(rows, layout))  # past the end: first index out of range
        return tuple(v.at[at].set(v_rows, mode="drop") for v, v_rows in zip(w, w_rows, strict=True))

    return jax.lax.fori_loop(0, (count + _CHUNK - 1) // _CHUNK, chunk, w)


def _unravel(ids, layout):
    """The indices along each axis of ``layout`` of flat element ids; an id past the end
    keeps its first index out of range (``jnp.unravel_index`` clips it into range, where
    ``mode="drop"`` would then overwrite the last element)."""
    index = []
    for n in layout[:0:-1]:
        index.append(ids % n)
        ids = ids // n
    return (ids, *index[::-1])


def _evaluate(cubic, options, *, with_curved):
    """W for a :class:`Cubic` or :class:`TurnsCubic` of arrays of one shape S (the
    :func:`element_layout`), with the static :class:`_MomentOptions` ``options``: real and
    imaginary parts, each (n_moments,) + S, and S-shaped flags of the elements with a piece
    at or above the expansion's switch. Without ``with_curved`` those elements' W are wrong
    (but finite).

    The moment index stays the leading axis until the end: the sums over it (cubic series,
    translation) are then elementwise over the elements, which XLA's CPU loops vectorise
    (as a matrix product over a trailing moment axis they ran twice as slow), and the
    translation back to x is a matrix product over it on the CPU, sums of tiles elsewhere.
    """
    n_moments = options.n_moments
    centres = -1.0 + (1.0 / options.segments) * (2 * np.arange(options.segments) + 1)
    if isinstance(cubic, TurnsCubic):
        pieces = _pieces_from_turns(cubic, centres)
    else:
        pieces = _pieces(cubic, centres)
    alpha, beta, gamma = pieces.alpha, pieces.beta, pieces.gamma

    n_max = n_moments - 1 + 3 * options.cubic_terms
    switch = curvature_switch(options.terms, alpha.dtype)
    large = jnp.abs(beta) >= switch
    # (n_max + 1, segments, S)
    quad = expanded_moments(alpha, beta, n_max, options.terms, pieces.e_alpha)
    if with_curved:
        # Harmless arguments where a piece is below the switch (its phasors, of modulus 1,
        # keep those discarded values finite).
        fresnel = curved_moments(
            jnp.where(large, alpha, 0.0),
            jnp.where(large, beta, switch),
            n_max,
            options.terms,
            pieces.e_alpha,
            pieces.e_beta,
        )
        quad = select(large, fresnel, quad)
    series = quad[:n_moments]
    power = jnp.ones_like(gamma)
    for k in range(1, options.cubic_terms + 1):
        power = power * gamma / k
        # (y³ - 3y/4)^k = Σ_l binom(k, l) (-3/4)^(k-l) y^(k+2l)
        residual = sum(
            (quad[k + 2 * l : k + 2 * l + n_moments] * (math.comb(k, l) * (-0.75) ** (k - l)))
            for l in range(k + 1)
        )
        series = series + (residual * power).times_i_power(k)
    rotated = series * SplitComplex(*pieces.centre)
    # W_m = Σ_(j, i) table[m, j, i] rotated[j, i]: on the CPU one matrix product, whose
    # result is written once (sums written out per moment were each a fusion of their own,
    # and the moments were then interleaved element by element).
    table = _translation_table(centres, n_moments)

    def translate(part):
        if _tiled():
            # Off the CPU, sums of tiles: the matrix product put the moment index in the
            # tiles' lanes, and laid the moments back in a copy of their own (a TPU v5e,
            # benchmarks/op_profile.py).
            terms = np.argwhere(table)
            return jnp.stack(
                [
                    sum(float(table[m, j, i]) * part[j, i] for _, j, i in terms[terms[:, 0] == m])
                    for m in range(n_moments)
                ]
            )
        stacked = part.reshape(n_moments * options.segments, *part.shape[2:])
        flat_table = table.reshape(n_moments, -1).astype(alpha.dtype)
        return jnp.tensordot(flat_table, stacked, axes=1, precision=jax.lax.Precision.HIGHEST)

    return (translate(rotated.re), translate(rotated.im)), jnp.any(large, axis=0)


def _pieces(cubic, centres):
    """:class:`_Pieces` of a :class:`Cubic` (rad) on the pieces centred at ``centres``."""
    rho = 1.0 / len(centres)
    phi0, a, b, c = cubic
    x = _leading(centres, c.ndim)
    gamma = jnp.broadcast_to(c * rho**3, (len(centres), *c.shape))
    # γy³ = (3/4)γy + γ(y³ - 3y/4): the best linear fit to y³ on [-1, 1] goes into α, which
    # leaves a residual of at most |γ|/4 for the series.
    alpha = (a + (2 * b + 3 * c * x) * x) * rho + 0.75 * gamma
    beta = (b + 3 * c * x) * rho**2
    phase = phi0 + (a + (b + c * x) * x) * x
    return _Pieces(alpha, beta, gamma, turn_phasor(phase * (1 / (2 * math.pi))), None, None)


def _pieces_from_turns(cubic, centres):
    """:class:`_Pieces` of a :class:`TurnsCubic`: φ_i and α formed with φ0 + a x_i and a ρ
    as two-float pairs and reduced to fractions of a turn, from which their phasors come
    (and β's from its own turns); α and β in rad to the relative precision of one float32."""
    rho = 1.0 / len(centres)
    a_pair, b, c = (cubic.a_hi, cubic.a_lo), cubic.b, cubic.c
    x = _leading(centres, c.ndim).astype(np.float32)
    linear = tf.add(
        (cubic.phi0_hi, cubic.phi0_lo), tf.times_constant(a_pair, _leading(centres, c.ndim))
    )
    phase_turns = tf.fraction(linear, (b + c * x) * x * x)
    slope = tf.times_constant(a_pair, rho)
    # α = (a + (2b + 3c x_i) x_i) ρ + (3/4) c ρ³ (the best linear fit to γy³, as in _pieces)
    curvature = (2 * b + 3 * c * x) * x * rho + (0.75 * rho**3) * c
    alpha_turns = tf.fraction(slope, curvature)
    beta_turns = (b + 3 * c * x) * rho**2
    gamma = jnp.broadcast_to((2 * math.pi * rho**3) * c, (len(centres), *c.shape))
    return _Pieces(
        (2 * math.pi) * (slope[0] + (slope[1] + curvature)),
        (2 * math.pi) * beta_turns,
        gamma,
        turn_phasor(phase_turns),
        SplitComplex(*turn_phasor(alpha_turns)),
        SplitComplex(*turn_phasor(beta_turns)),
    )


def _leading(centres, ndim):
    """The pieces' centres as a leading axis before ``ndim`` element axes."""
    return centres.reshape(-1, *(1,) * ndim)


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


def _check_options(n_moments, segments, terms, cubic_terms, max_moments=_MAX_MOMENTS):
    limits = {
        "n_moments": (n_moments, 1, max_moments),
        "segments": (segments, 1, MAX_SEGMENTS),
        "terms": (terms, 1, MAX_TERMS),
        "cubic_terms": (cubic_terms, 0, MAX_CUBIC_TERMS),
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


def cubic_series_error(gamma: float, cubic_terms: int) -> float:
    """Bound on the error of the moments' residual cubic series, relative to the signal, for a
    piece's residual ``gamma`` (rad) and K = ``cubic_terms`` terms (module docstring).

    The residual γ(y³ - 3y/4) is at most |γ|/4 on [-1, 1], so the series of exp(i r) cut
    after K terms errs by at most (|γ|/4)^(K+1) / (K+1)! e^(|γ|/4). K = 0 drops the cubic
    phase c x³ before the pieces are formed: its error is that of the whole cubic, at most
    |c| = |γ| segments³ (rad); pass γ = |c| for it.
    """
    gamma = abs(float(gamma))
    if cubic_terms == 0:
        return gamma
    r = gamma / 4
    return r ** (cubic_terms + 1) / math.factorial(cubic_terms + 1) * math.exp(r)


def channel_series_error(
    epsilon: float, channel_terms: int, bend: float = 0.0, channel_bend: bool = True
) -> float:
    """Bound on the error, relative to the signal, of the analytic operator's series across a
    channel (``analytic_eval_with_indices``' ``channel_terms``) for a fine channel's largest
    cross term ``epsilon`` = 2 pi dnu d1 T/2 (rad; dnu the fine channel's offset from the
    centre, MHz, and d1 the pair's delay rate, us/s) and largest change of the curvature and
    the cubic across the channel ``bend`` = |beta| + |gamma| (rad; beta = pi dnu d2 (T/2)^2,
    gamma = (pi/3) dnu d3 (T/2)^3).

    The series of exp(i epsilon x), |x| <= 1, cut after J = ``channel_terms`` terms errs by at
    most |epsilon|^J / J! e^|epsilon|; the bend by e^|epsilon| bend^2 / 2 more taken to first
    order (``channel_bend``), or e^|epsilon| bend dropped. J = 0 forms the moments at every
    fine channel: exact.
    """
    epsilon, bend = abs(float(epsilon)), abs(float(bend))
    if channel_terms == 0:
        return 0.0
    series = epsilon**channel_terms / math.factorial(channel_terms) * math.exp(epsilon)
    return series + math.exp(epsilon) * (bend**2 / 2 if channel_bend else bend)


def fewest_channel_terms(
    epsilon: float,
    error: float,
    *,
    bend: float = 0.0,
    channel_bend: bool = True,
    channel_terms: int = MAX_CHANNEL_TERMS,
    dtype=np.float32,
) -> int:
    """The fewest terms, 1 to ``channel_terms``, of the analytic operator's series across a
    channel that hold cross terms of at most ``epsilon`` and bends of at most ``bend`` (rad;
    :func:`channel_series_error`) within ``error`` relative to the signal (never below
    ``dtype``'s epsilon); 0 (moments at every fine channel) where none does.

    Navigation satellites over an array a few km across (delay rates of about 2e-3 us/s, 10 kHz
    channels, 10 s integrations) have epsilon ~ 3e-4 rad: two terms, or three at a high
    signal-to-noise ratio.
    """
    _check_options(1, 1, 1, 0)
    allowed = max(float(error), float(np.finfo(dtype).eps))
    for k in range(1, channel_terms + 1):
        if channel_series_error(epsilon, k, bend, channel_bend) <= allowed:
            return k
    return 0


def curvature_switch(terms: int = 6, dtype=np.float32) -> float:
    """The largest |β| (rad), the quadratic phase across one piece, that the curvature
    expansion of ``terms`` terms takes in ``dtype``'s working precision; a piece at or above
    it takes the curved method, about twenty times the cost (module docstring). On
    ``segments`` pieces β = (b + 3c x_i) / segments², so a cubic with |b| + 3|c| below
    ``segments²`` times this takes no curved piece.

    0.20 at the default six terms in float32, 0.007 in float64.
    """
    _check_options(1, 1, terms, 0)
    return expansion_switch(terms, log_tolerance(np.dtype(dtype)))


def fewest_cubic_terms(
    cubic: float, error: float, *, segments: int = 2, cubic_terms: int = 3, dtype=np.float32
) -> int:
    """The fewest cubic terms, at most ``cubic_terms``, that hold the moments of cubics
    φ0 + a x + b x² + c x³ with |c| <= ``cubic`` (rad), on ``segments`` pieces, within
    ``error`` relative to the signal (:func:`cubic_series_error`); the working precision of
    ``dtype`` is always enough. ``cubic_terms`` where none fewer does.

    Navigation satellites seen from an array a few km across in 10 s integrations have
    |c| ~ 1e-5 rad or less: one term, or none, where the analytic operator's forward
    evaluation with one costs 0.6 of its cost with three on a CPU (tabascal's
    benchmarks/analytic_options.py). tests/test_phase_moments.py holds the choices to dense
    quadrature.
    """
    _check_options(1, segments, 1, cubic_terms)
    allowed = max(float(error), float(np.finfo(dtype).eps))
    cubic = abs(float(cubic))
    for k in range(cubic_terms):
        if cubic_series_error(cubic if k == 0 else cubic / segments**3, k) <= allowed:
            return k
    return cubic_terms
