"""Closed-form (analytic) RFI-visibility operator (docs/kernels.md, "The analytic operator").

Within a cell each antenna's amplitude is a polynomial in x = 2 tau / int_time, and the
pair's phase difference is the cubic ``phi0 + a x + b x**2 + c x**3`` of the delay's Taylor
series (orders above 3 dropped). The time average is then exact:
``sum_{j,k} c_p[j] conj(c_q[k]) W_{j+k}`` with the phase moments ``W_m`` of
:func:`ri_kernels._phase_moments.phase_moments`.

``amp``, ``phase`` and ``delay_us`` are differentiated. The cubic is linear in the pair's
phase and delay differences, and ``dW_m/d(phi0, a, b, c) = i W_{m + (0, 1, 2, 3)}``: a phase
or delay tangent costs three more moments (none for a phase alone), formed in the same pass,
never a pass back through the moments' recurrences (:func:`_pair_sum`, a custom JVP).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.custom_derivatives import SymbolicZero

from ri_kernels import _phase_moments, _validate
from ri_kernels import _two_float as tf
from ri_kernels._blocks import (
    DEFAULT_MEMORY_BUDGET_BYTES,
    block_size,
    map_blocks,
)
from ri_kernels._phase_moments import (
    MAX_CHANNEL_TERMS,
    MAX_CUBIC_TERMS,
    MAX_SEGMENTS,
    MAX_TERMS,
    Cubic,
    TurnsCubic,
    from_elements,
    laid_moments,
    to_elements,
)

_FN = "analytic_eval_with_indices"
_HIGHEST = jax.lax.Precision.HIGHEST
_MOMENTS = "phase_moments"
# The moments W_{n_mom}.. that only the derivatives in phase and delay use.
_SLOPES = "phase_moment_slopes"

# Real values phase_moments keeps per element and segment (its quadratic moments, and the
# stacked carries of its downward and elimination recurrences: about eight per moment
# computed), plus the linear moments of its curvature expansion. An estimate for sizing
# blocks; its arithmetic is float64 whenever x64 is enabled.
_REALS_PER_MOMENT_SEGMENT = 8
_REALS_PER_TERM = 4
_REALS_FIXED = 32
# (antenna, cell) columns of the one-hot matrix that lays a block's pair ends' coefficients
# in tiles (:func:`_tiled_grid`) at which that product costs a position about as much as the
# rest of its work: an estimate (float32 at HIGHEST precision is six bf16 passes, about
# 33 TFLOP/s on a TPU v5e, 56 flops per column per element, against 7.8 ns per element for
# the forward evaluation at 64 antennas, benchmarks/op_profile.py).
_ONE_HOT_COLUMNS = 4096


class _Signal(NamedTuple):
    """Per-antenna inputs in the layouts the blocks gather from: amp (n_ant, n_freq, n_time,
    n_rfi), or (1, ...) with a factor; phase (n_ant, n_freq, n_time, n_rfi) and delay
    (4, n_ant, n_time, n_rfi) (orders 0..3 first), or in tiles (:func:`_tiled_pair_sum`),
    sources before antennas, phase (n_rfi, n_ant, n_freq, n_time) and delay
    (4, n_rfi, n_ant, n_time)."""

    amp: jax.Array
    phase: jax.Array
    delay: jax.Array
    factor: jax.Array | None = None  # None, or amp's real factor per antenna, amp's layout


class _AnalyticTables(NamedTuple):
    """Interpolation tables and fine offsets of the analytic operator. Real arrays are float32
    with complex64 ``amp`` and float64 with complex128.

    w_freq: (n_freq, n_sf, n_int_f) real weights of data channels start_freq[f] + k at fine
        channel u of channel f.
    start_freq: (n_freq,) int32 first data channel of each channel's stencil.
    g_time: (n_time, n_st, n_coef) real coefficient of x**m, x = 2 tau / int_time in [-1, 1],
        of data time start_time[t] + l in integration t.
    start_time: (n_time,) int32 first data time of each integration's stencil.
    dnu_mhz: (n_int_f,) real fine-channel offsets from the channel centre (MHz).
    freq_mhz: (n_freq,) real channel centres (MHz).
    view: None (every source in view throughout), or (n_rfi, n_time, 2) real: the part
        [lo, hi] of [-1, 1] (in x) of each integration in which each source is in view.
    """

    w_freq: jax.Array
    start_freq: jax.Array
    g_time: jax.Array
    start_time: jax.Array
    dnu_mhz: jax.Array
    freq_mhz: jax.Array
    view: jax.Array | None = None


class _BlockGrid(NamedTuple):
    """Static shape (Python ints) of the analytic operator's blocks: n_row_blocks x
    n_cell_blocks blocks, each of rows_per_block baselines by cells_per_block cells."""

    n_row_blocks: int
    n_cell_blocks: int
    rows_per_block: int
    cells_per_block: int


def _coefficients(signal, tables, antenna, cell_f, cell_t):
    """Monomial coefficients in x of each pair end, from :class:`_AnalyticTables` ``tables``:
    (B,) antennas -> (m, B, C, n_rfi, u)."""
    freq_rows = tables.start_freq[cell_f][:, None] + jnp.arange(tables.w_freq.shape[1])
    time_rows = tables.start_time[cell_t][:, None] + jnp.arange(tables.g_time.shape[1])
    at = (antenna[:, None, None, None], freq_rows[None, :, :, None], time_rows[None, :, None])
    if signal.factor is None:
        stencil = signal.amp[at]  # (B, C, k, l, n_rfi)
    else:  # the product at the stencil's cells, before the interpolation: the signal's own
        stencil = signal.amp[0][at[1:]] * signal.factor[at]
    w_freq, g_time = tables.w_freq[cell_f], tables.g_time[cell_t]
    return jnp.einsum("bcklr,cku,clm->mbcru", stencil, w_freq, g_time, precision=_HIGHEST)


class _PairEnds(NamedTuple):
    """The centre phases (rad), (B, C, n_rfi, 1), and delays (us, us/s**k; orders 0..3),
    (4, B, C, n_rfi, 1), of the ends p and q of a block's pairs at its cells; in tiles
    (:func:`_tiled_ends`) (n_rfi, 1, rows, 128) and (4, n_rfi, 1, rows, 128)."""

    phase_p: jax.Array
    phase_q: jax.Array
    delay_p: jax.Array
    delay_q: jax.Array


class _CellConstants(NamedTuple):
    """A block's cells' channel centres freq_mhz, (C, 1, 1), and fine offsets dnu_mhz,
    (n_int_f,) (MHz), shaped to broadcast against :class:`_PairEnds` to the block's elements
    (B, C, n_rfi, n_int_f); half the integration time half_time (s, a scalar); and where each
    source is in view: None (throughout), or view_centre and view_half, (1, C, n_rfi, 1)
    each, the centre and half-width in x of the part of the cell in which it is. In tiles
    (:func:`_tiled_ends`): (1, rows, 128), (n_int_f, 1, 1) and (n_rfi, 1, rows, 128)."""

    freq_mhz: jax.Array
    dnu_mhz: jax.Array
    half_time: jax.Array
    view_centre: jax.Array | None = None
    view_half: jax.Array | None = None


def _pair_ends(signal, tables, int_time, p, q, cell_f, cell_t):
    """The :class:`_PairEnds` and :class:`_CellConstants` of pairs (p, q) at cells
    (cell_f, cell_t)."""
    phase_p, phase_q = (signal.phase[i[:, None], cell_f, cell_t][..., None] for i in (p, q))
    delay_p, delay_q = (signal.delay[:, i[:, None], cell_t][..., None] for i in (p, q))
    freq = tables.freq_mhz[cell_f][:, None, None]
    cells = _CellConstants(freq, tables.dnu_mhz, int_time / 2)
    if tables.view is not None:
        lo, hi = (tables.view[:, cell_t, k].T[None, :, :, None] for k in (0, 1))
        cells = cells._replace(view_centre=(lo + hi) / 2, view_half=(hi - lo) / 2)
    return _PairEnds(phase_p, phase_q, delay_p, delay_q), cells


def _phase_cubic(ends, cells):
    """Pair phase ``phi0 + a x + b x**2 + c x**3`` over the cell, x in [-1, 1], of
    :class:`_PairEnds` ``ends``: a :class:`Cubic` (rad) of (B, C, n_rfi, n_int_f) arrays in the
    working dtype or, with jax's 64-bit mode off, the same cubic in turns from
    :func:`_phase_turns`."""
    work = jax.dtypes.canonicalize_dtype(np.float64)
    if work == np.float32:
        return _phase_turns(ends, cells)
    ends, cells = jax.tree.map(lambda v: v.astype(work), (ends, cells))
    return _radian_cubic(ends.phase_p - ends.phase_q, ends.delay_p - ends.delay_q, cells)


def _radian_cubic(d_phase, d_delay, cells):
    """The :class:`Cubic` (rad) of phase differences d_phase (B, C, n_rfi, 1) and delay
    differences d_delay (4, B, C, n_rfi, 1) at :class:`_CellConstants` ``cells`` (or their
    shapes in tiles): nu = freq_mhz + dnu_mhz (MHz), delays in us: MHz x us = cycles. Linear
    in the differences, so that it also maps their tangents to the cubic's."""
    d = list(d_delay)  # orders 0..3, (B, C, n_rfi, 1) each
    nu = cells.freq_mhz + cells.dnu_mhz  # (C, 1, n_int_f)
    half_time = cells.half_time
    phi0 = d_phase + 2 * math.pi * cells.dnu_mhz * d[0]
    a = 2 * math.pi * nu * d[1] * half_time
    b = math.pi * nu * d[2] * half_time**2
    c = (math.pi / 3) * nu * d[3] * half_time**3
    return Cubic(*jnp.broadcast_arrays(phi0, a, b, c))


def _phase_turns(ends, cells):
    """The pair phase cubic in turns for float32 work: a :class:`TurnsCubic` of
    (B, C, n_rfi, n_int_f) arrays, phi0 = d_phase / (2 pi) + dnu d0, a = nu d1 T/2,
    b = nu d2 (T/2)**2 / 2 and c = nu d3 (T/2)**3 / 6 (turns; T/2 = ``half_time``).

    The differences of phases and delays, nu = freq_mhz + dnu_mhz and the products forming
    phi0 and a are taken as two-float pairs, exactly or to 2^-47: the only rounding they keep
    is that of the float32 inputs themselves. In one float32, |a| = 1e4 rad (1600 turns) was
    rounded by about 1e-4 turn in each of these steps (tests/test_analytic_float32.py, pairs
    winding up to 1e4 rad: 2.0e-4 of the largest visibility, 1.2e-3 of a cell's own; now
    5.5e-7 and 5.9e-6).
    """
    delay_p, delay_q, half_time = ends.delay_p, ends.delay_q, cells.half_time
    d_phase = tf.two_sum(ends.phase_p, -ends.phase_q)  # (B, C, n_rfi, 1)
    d0, d1 = (tf.two_sum(delay_p[k], -delay_q[k]) for k in (0, 1))
    d2, d3 = (delay_p[k] - delay_q[k] for k in (2, 3))
    nu = tf.two_sum(cells.freq_mhz, cells.dnu_mhz)  # (C, 1, n_int_f)
    nu_half = tf.scale(nu, half_time)
    phi0 = tf.add(tf.times(d_phase, tf.INV_TWO_PI), tf.scale(d0, cells.dnu_mhz))
    a = tf.times(d1, nu_half)
    b = nu[0] * d2 * (half_time**2 / 2)
    c = nu[0] * d3 * (half_time**3 / 6)
    return TurnsCubic(*jnp.broadcast_arrays(*phi0, *a, b, c))


def _moments(ends, cells, n_mom, options, n_slopes=0):
    """The phase moments of the pairs of :class:`_PairEnds` ``ends``, formed in one pass:
    W_0..W_{n_mom-1} and W_{n_mom}..W_{n_mom+n_slopes-1} (None without ``n_slopes``), complex
    (count,) + element layout arrays in amp's dtype: the
    :func:`~ri_kernels._phase_moments.to_elements` of (count, B, C, n_rfi, n_int_f).

    With ``options["channel_terms"]`` J > 0 the moments are formed once per element at the
    channel's centre, a few orders more (:func:`_centre_orders`), and each fine channel's come
    from them
    (:func:`_across_channel`); those formed are what reverse mode keeps (named _MOMENTS and
    _SLOPES), n_int_f times fewer."""
    real = ends.phase_p.dtype
    channel_terms = options["channel_terms"]
    per_channel = cells
    if channel_terms:
        cells = _centre(cells)
    count = n_mom + n_slopes
    formed = count + _centre_orders(options)
    moment_options = {k: options[k] for k in ("segments", "terms", "cubic_terms")}
    cubic = _phase_cubic(ends, cells)
    laid = jax.tree.map(lambda v: to_elements(v, 0), cubic)
    if cells.view_centre is None:
        re, im = laid_moments(laid, formed, **moment_options)
    else:
        centre, half = (
            to_elements(jnp.broadcast_to(v.astype(cubic.b.dtype), cubic.b.shape), 0)
            for v in (cells.view_centre, cells.view_half)
        )
        moved = _in_view_cubic(laid, centre, half)
        in_y = laid_moments(moved, formed, **moment_options)
        re, im = _from_view(*in_y, centre, half)

    def named(orders, name):
        # Real and imaginary parts named as such: jax 0.10.2 fails to save a complex residual
        # by name (its remat inserts reduce_precision, which refuses complex dtypes).
        parts = (checkpoint_name(v[orders].astype(real), name) for v in (re, im))
        return jax.lax.complex(*parts)

    split = formed - n_slopes
    w = named(slice(0, split), _MOMENTS)
    slopes = named(slice(split, None), _SLOPES) if n_slopes else None
    if channel_terms:
        both = w if slopes is None else jnp.concatenate([w, slopes])
        both = _across_channel(both, ends, cells, per_channel, count, options)
        w, slopes = both[:n_mom], both[n_mom:] if n_slopes else None
    return w, slopes


def _centre_orders(options, kept=False):
    """The orders that moments formed at the channels' centres take beyond those asked for,
    under the operator's ``options``: J - 1 for the series across a channel (``channel_terms``
    J), and with ``channel_bend`` 2 (3 with the cubic) for the curvature's first-order change
    across it; none at every fine channel (J = 0). Kept moments (``kept``) always take J + 2,
    whatever the bend and the cubic, so that their shape depends on J alone."""
    if not options["channel_terms"]:
        return 0
    if kept:
        return options["channel_terms"] + 2
    bend = (3 if options["cubic_terms"] else 2) if options["channel_bend"] else 0
    return options["channel_terms"] - 1 + bend


def _across_channel(centre, ends, cells, per_channel, count, options):
    """Each fine channel's moments W_0..W_{count-1} from those at the channel's centre,
    ``centre`` (count + :func:`_centre_orders`,) + element layout, J = ``channel_terms`` of the
    operator's ``options``.

    At fine channel u, dnu from the centre, the pair's phase is the centre's plus
    ``kappa + epsilon x + beta x**2 + gamma x**3``: kappa = 2 pi dnu d0, epsilon = 2 pi dnu d1
    T/2 (the time-frequency cross term), and beta = pi dnu d2 (T/2)**2 and gamma = (pi/3) dnu
    d3 (T/2)**3 the change of the curvature and the cubic across the channel (its bend; gamma
    none where the moments drop the cubic). So
    ``W_m(u) = e^(i kappa) sum_{j < J} (i epsilon)^j / j! V_{m+j}``, with, under
    ``channel_bend``, ``V_n = W_n + i (beta W_{n+2} + gamma W_{n+3})`` the bend's first order,
    and without it V = W (the bend dropped), within
    :func:`~ri_kernels._phase_moments.channel_series_error` of the signal. ``cells`` are the
    centre's :class:`_CellConstants`, ``per_channel`` the fine channels'."""
    centre = from_elements(centre, 1, _block_shape(ends, cells))
    d = [ends.delay_p[k] - ends.delay_q[k] for k in range(4)]
    dnu, half = per_channel.dnu_mhz, per_channel.half_time
    kappa = (2 * math.pi) * dnu * d[0]
    epsilon = (2 * math.pi) * dnu * d[1] * half
    channel_terms = options["channel_terms"]
    bend = []  # beta, then gamma where the cubic is kept
    if options["channel_bend"]:
        bend.append(math.pi * dnu * d[2] * half**2)
    if options["channel_bend"] and options["cubic_terms"]:
        bend.append((math.pi / 3) * dnu * d[3] * half**3)
    n_series = count + channel_terms - 1
    series = centre[:n_series]
    for k, coefficient in enumerate(bend, start=2):
        series = (
            series
            + jax.lax.complex(jnp.zeros_like(coefficient), coefficient) * centre[k : k + n_series]
        )
    total = series[:count]
    power = None
    for j in range(1, channel_terms):
        step = jax.lax.complex(jnp.zeros_like(epsilon), epsilon / j)
        power = step if power is None else power * step
        total = total + power * series[j : j + count]
    total = total * jax.lax.complex(jnp.cos(kappa), jnp.sin(kappa))
    return to_elements(jnp.broadcast_to(total, (count, *_block_shape(ends, per_channel))), 1)


def _block_shape(ends, cells):
    """(B, C, n_rfi, n_int_f): the shape of a block's elements ((n_rfi, n_int_f, rows, 128)
    in tiles)."""
    return jnp.broadcast_shapes(ends.phase_p.shape, cells.dnu_mhz.shape)


def _in_view_cubic(cubic, centre, half):
    """The pair phase over the in-view part of the cell, ``x = centre + half y``, as a cubic in
    y in [-1, 1]: phi0 + a x + b x^2 + c x^3 with x so substituted. A :class:`Cubic` (rad) or
    :class:`TurnsCubic` (turns, phi0 and a as two-float pairs); centre and half broadcast
    against its arrays. Exact where the source is in view throughout (centre 0, half 1)."""
    if isinstance(cubic, Cubic):
        phi0, a, b, c = cubic
        return Cubic(
            phi0 + centre * (a + centre * (b + centre * c)),
            half * (a + centre * (2 * b + 3 * c * centre)),
            half**2 * (b + 3 * c * centre),
            half**3 * c,
        )
    b, c = cubic.b, cubic.c
    a = (cubic.a_hi, cubic.a_lo)
    curvature = centre * centre * (b + centre * c)  # b x^2 + c x^3 at the centre
    phi0 = tf.add(tf.add((cubic.phi0_hi, cubic.phi0_lo), tf.scale(a, centre)), (curvature, 0.0))
    slope = tf.scale(tf.add(a, (centre * (2 * b + 3 * c * centre), 0.0)), half)
    return TurnsCubic(*phi0, *slope, half**2 * (b + 3 * c * centre), half**3 * c)


def _from_view(re, im, centre, half):
    """The moments over the cell, (1/2) int_lo^hi x^m e^(i phi) dx, from those in y over the
    in-view part, x = centre + half y: ``W_m = half sum_j binom(m, j) centre^(m-j) half^j
    W'_j``. re, im: (n, ...) in y; the same out, in x. Zero where the source is out of view
    for the whole cell (half 0), and W' itself where it is in view throughout."""
    n = re.shape[0]
    centre_powers, half_powers = [jnp.ones_like(centre)], [half]  # centre^k, half^(k+1)
    for _ in range(1, n):
        centre_powers.append(centre_powers[-1] * centre)
        half_powers.append(half_powers[-1] * half)
    out = []
    for part in (re, im):
        out.append(
            jnp.stack(
                [
                    sum(
                        math.comb(m, j) * centre_powers[m - j] * half_powers[j] * part[j]
                        for j in range(m + 1)
                    )
                    for m in range(n)
                ]
            )
        )
    return tuple(out)


def _products(coef_p, conj_q, w):
    """Σ_{j,k} c_p[j] conj(c_q[k]) W_{j+k} of coefficients (n_coef, B, C, n_rfi, n_int_f), q's
    conjugated, and moments (2 n_coef - 1, B, C, n_rfi, n_int_f): (B, C, n_rfi, n_int_f)."""
    n_coef = coef_p.shape[0]
    # Elementwise with the moment index leading: as a batched 3 x 3 matrix product over a
    # trailing index, XLA's CPU dots took more time than the sum itself in both directions.
    # Nested, c_p[j] (sum_k conj(c_q[k]) W_{j+k}): the flat double sum's reverse mode padded
    # each of its n_coef**2 terms' cotangent to all n_coef coefficients before adding them
    # (at a time stencil of 7, about half of a value-and-gradient's time).
    return sum(coef_p[j] * sum(conj_q[k] * w[j + k] for k in range(n_coef)) for j in range(n_coef))


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def _pair_sum(coef_p, conj_q, ends, cells, n_mom, options):
    """:func:`_products` of a block's coefficients and the moments of its :class:`_PairEnds`
    ``ends``, differentiable in both. The :class:`_CellConstants` ``cells`` are constants:
    their tangents (zero: the operator stops their gradients) are not read.

    The custom JVP spans the sum, not only the moments, so that its rule names every moment
    reverse mode keeps: with a rule of the moments alone, the moments named for the amp
    gradient (outside the rule) and those the rule keeps for the phase and delay tangents
    would be saved twice, or the latter formed again in reverse mode.
    """
    w, _ = _moments(ends, cells, n_mom, options)
    total = _products(to_elements(coef_p, 1), to_elements(conj_q, 1), w)
    return from_elements(total, 0, coef_p.shape[1:])


@functools.partial(_pair_sum.defjvp, symbolic_zeros=True)
def _pair_sum_jvp(n_mom, options, primals, tangents):
    coef_p, conj_q, ends, cells = primals
    d_coef_p, d_conj_q, d_ends, _ = tangents
    moves = [not isinstance(t, SymbolicZero) for t in d_ends]
    # dW_m/d(phi0, a, b, c) = i W_{m+(0, 1, 2, 3)}: a delay tangent moves all four (three when
    # the cubic is dropped: W does not depend on c), a phase tangent phi0 alone. The tangents
    # carry no winding: their cubic needs no two-float arithmetic, and is formed in rad.
    n_slopes = (3 if options["cubic_terms"] else 2) if any(moves[2:]) else 0
    w, slopes = _moments(ends, cells, n_mom, options, n_slopes)
    # The sums run in the moments' element layout; only their results are laid back.
    shape = coef_p.shape[1:]
    coef_p, conj_q = to_elements(coef_p, 1), to_elements(conj_q, 1)
    total = _products(coef_p, conj_q, w)
    tangent = []
    if not isinstance(d_coef_p, SymbolicZero):
        tangent.append(_products(to_elements(d_coef_p, 1), conj_q, w))
    if not isinstance(d_conj_q, SymbolicZero):
        tangent.append(_products(coef_p, to_elements(d_conj_q, 1), w))
    if any(moves):
        d_p, d_q, d_delay_p, d_delay_q = (
            t if move else jnp.zeros_like(x) for x, t, move in zip(ends, d_ends, moves, strict=True)
        )
        d_cubic = _radian_cubic(d_p - d_q, d_delay_p - d_delay_q, cells)[: n_slopes + 1]
        extended = w if slopes is None else jnp.concatenate([w, slopes])
        real = ends.phase_p.dtype
        d_w = 1j * sum(
            extended[k : k + n_mom] * to_elements(t.astype(real), 0) for k, t in enumerate(d_cubic)
        )
        tangent.append(_products(coef_p, conj_q, d_w))
    total = from_elements(total, 0, shape)
    return total, from_elements(sum(tangent), 0, shape) if tangent else jnp.zeros_like(total)


def _tiled_pair_sum(signal, tables, int_time, p, q, cell_f, cell_t, n_mom, options, antennas):
    """A block's sums over sources and fine channels of :func:`_pair_sum`, (B, C), with its
    elements in tiles from the start: (n_rfi, n_int_f, rows, 128), the block's (pair, cell)
    positions b C + c in the last two axes, zero-padded to whole (8, 128) tiles.

    Off the CPU the block layout's short trailing axes (32 sources by 7 fine channels) filled
    7 of a tile's 128 lanes, and every element-shaped array was copied into tiles and back:
    on a TPU v5e those copies were half of the forward evaluation (benchmarks/op_profile.py).
    Here each pair end's coefficients come from each antenna's by a matrix product with a
    one-hot (antenna, cell) x position matrix, whose reverse is a matrix product too; the pair
    ends' phases and delays are gathered straight into tiles; the sums over sources and fine
    channels are sums of whole tiles."""
    n_cells = cell_f.shape[0]
    n_pos = p.shape[0] * n_cells
    rows = _phase_moments.element_layout(n_pos)[0]
    position = jnp.arange(rows * _phase_moments._LANES, dtype=jnp.int32)
    pair = jnp.minimum(position // n_cells, p.shape[0] - 1)
    cell = position % n_cells
    real = signal.phase.dtype
    # (n_coef, n_rfi, n_int_f, n_ant, C): each antenna's coefficients at the block's cells
    coef = _coefficients(signal, tables, antennas, cell_f, cell_t).transpose(0, 3, 4, 1, 2)
    n_coef, n_rfi, n_int_f = coef.shape[:3]
    parts = jnp.stack([coef.real, coef.imag]).reshape(-1, coef.shape[3] * n_cells)

    def laid(antenna):
        # padding positions match no column: zero coefficients, so a zero sum
        target = jnp.where(position < n_pos, antenna[pair] * n_cells + cell, -1)
        one_hot = (jnp.arange(parts.shape[1])[:, None] == target[None, :]).astype(real)
        both = jnp.matmul(parts, one_hot, precision=_HIGHEST)
        both = both.reshape(2, n_coef, n_rfi, n_int_f, rows, _phase_moments._LANES)
        return jax.lax.complex(both[0], both[1])

    at = tuple(v.reshape(rows, -1) for v in (pair, cell_f[cell], cell_t[cell]))
    ends, cells = _tiled_ends(signal, tables, int_time, p, q, at)
    total = _pair_sum(laid(p), laid(q).conj(), ends, cells, n_mom, options)
    return jnp.sum(total, axis=(0, 1)).reshape(-1)[:n_pos].reshape(p.shape[0], n_cells)


def _tiled_ends(signal, tables, int_time, p, q, at):
    """The :class:`_PairEnds` and :class:`_CellConstants` of :func:`_tiled_pair_sum`'s
    positions, whose pairs, channels and times are the (rows, 128) arrays ``at``."""
    pair, freq, time = at
    ant_p, ant_q = p[pair], q[pair]
    phases = (signal.phase[:, ant, freq, time][:, None] for ant in (ant_p, ant_q))
    delays = (signal.delay[:, :, ant, time][:, :, None] for ant in (ant_p, ant_q))
    cells = _CellConstants(tables.freq_mhz[freq][None], tables.dnu_mhz[:, None, None], int_time / 2)
    if tables.view is not None:
        lo, hi = (tables.view[:, time, k][:, None] for k in (0, 1))
        cells = cells._replace(view_centre=(lo + hi) / 2, view_half=(hi - lo) / 2)
    return _PairEnds(*phases, *delays), cells


def _bytes_per_pair_cell(
    amp, n_int_f, n_mom, segments, terms, cubic_terms, channel_terms=0, channel_bend=False
):
    """Approximate bytes of intermediates per (baseline, cell) while the moments are formed:
    at every fine channel, or with ``channel_terms`` once at the channel's centre."""
    options = {"cubic_terms": cubic_terms, "channel_terms": channel_terms}
    options["channel_bend"] = channel_bend
    n_computed = n_mom + 3 * cubic_terms + _centre_orders(options)
    reals = _REALS_FIXED + _REALS_PER_TERM * terms
    reals += _REALS_PER_MOMENT_SEGMENT * n_computed * segments
    work = jax.dtypes.canonicalize_dtype(np.float64).itemsize
    formed_at = 1 if channel_terms else n_int_f
    return amp.shape[1] * (formed_at * work * reals + n_int_f * 4 * n_mom * amp.dtype.itemsize)


def _block_plan(n_bl, n_freq, n_time, per_pair_cell, budget, tile=1, n_ant=1):
    """Blocks of (baseline rows, cells): all baselines and as many cells as the budget allows,
    or one cell and a share of the baselines; with ``tile`` > 1 (elements in tiles, of
    ``n_ant`` antennas), :func:`_tiled_grid` near the same size. Returns the (n_blocks,) block
    ids, made in the program (``jnp.arange``), and the :class:`_BlockGrid`;
    ``_block_coordinates`` turns an id into its rows and cells there too, so that no
    per-block table of rows, which grows with the baselines, is captured into the compiled
    program as a constant (bench-512: 415 MB)."""
    n_cells = n_freq * n_time
    cells_per_block, n_cell_blocks = block_size(n_cells, n_bl * per_pair_cell, budget)
    rows_per_block, n_row_blocks = block_size(n_bl, cells_per_block * per_pair_cell, budget)
    grid = _BlockGrid(n_row_blocks, n_cell_blocks, rows_per_block, cells_per_block)
    if tile > 1:
        grid = _tiled_grid(n_bl, n_cells, rows_per_block * cells_per_block, tile, n_ant)
    return jnp.arange(grid.n_row_blocks * grid.n_cell_blocks, dtype=jnp.int32), grid


def _tiled_grid(n_bl, n_cells, positions, tile, n_ant):
    """The :class:`_BlockGrid` of blocks of about ``positions`` (row, cell) positions each, a
    whole number of ``tile`` (a power of two) per block: each block of 2^k cells and a
    multiple of tile / 2^k rows, the nearest to ``positions`` / 2^k, the k that costs least.
    Positions past the last row or cell are padding, worked and dropped; and the pair ends'
    coefficients cost each position one product per (antenna, cell) of its block
    (``_ONE_HOT_COLUMNS``).

    At 1128 baselines (48 antennas) and 30 cells in blocks of about 564 positions, one cell
    per block made 61440 positions of 33840 (1.82 times the work); 8 cells per block make
    36864 (1.09) at 384 columns."""
    best = None
    cells = 1
    while cells <= min(n_cells, tile):
        step = tile // cells
        rows = max(step, round(positions / cells / step) * step)
        rows = min(rows, -(-n_bl // step) * step)
        n_row_blocks, n_cell_blocks = -(-n_bl // rows), -(-n_cells // cells)
        work = n_row_blocks * rows * n_cell_blocks * cells
        work *= 1 + cells * n_ant / _ONE_HOT_COLUMNS
        if best is None or work < best[0]:
            best = (work, _BlockGrid(n_row_blocks, n_cell_blocks, rows, cells))
        cells *= 2
    return best[1]


def _block_coordinates(grid: _BlockGrid, block, n_bl: int, n_freq: int, n_time: int):
    """The rows (B,) and the cells' channels and times (C,) of block ``block`` (traced):
    row block ``block // n_cell_blocks``, cell block ``block % n_cell_blocks``, the tail of the
    last of each repeating its last item (``padded_blocks``); cells ``c = f * n_time + t``."""
    rows = (block // grid.n_cell_blocks) * grid.rows_per_block + jnp.arange(grid.rows_per_block)
    cells = (block % grid.n_cell_blocks) * grid.cells_per_block + jnp.arange(grid.cells_per_block)
    rows = jnp.minimum(rows, n_bl - 1).astype(jnp.int32)
    cells = jnp.minimum(cells, n_freq * n_time - 1).astype(jnp.int32)
    return rows, cells // n_time, cells % n_time


def _moments_of_block(signal, tables, int_time, p, q, cell_f, cell_t, n_mom, options):
    """The phase moments W_0..W_{n_mom-1} of a block's pairs and cells: a complex
    (n_mom, B, C, n_rfi, n_int_f) array in amp's dtype; with ``options["channel_terms"]`` J
    > 0 those at each channel's centre, J + 2 orders more, (n_mom + J + 2, B, C, n_rfi, 1)."""
    ends, cells = _pair_ends(signal, tables, int_time, p, q, cell_f, cell_t)
    if options["channel_terms"]:
        n_mom += _centre_orders(options, kept=True)
        cells = _centre(cells)
        options = {**options, "channel_terms": 0}
    return from_elements(_moments(ends, cells, n_mom, options)[0], 1, _block_shape(ends, cells))


def _centre(cells):
    """:class:`_CellConstants` ``cells`` with one fine channel, at the channel's centre."""
    return cells._replace(dnu_mhz=jnp.zeros_like(cells.dnu_mhz[:1]))


def _signal(amp, phase, delay_us, amp_factor=None, tiled=False):
    """The per-antenna inputs in the blocks' layouts (:class:`_Signal`), those of
    :func:`_tiled_pair_sum` with ``tiled``; ``amp`` may be None (moments alone)."""
    amp, factor = (None if x is None else x.transpose(0, 2, 3, 1) for x in (amp, amp_factor))
    if tiled:
        return _Signal(amp, phase.transpose(1, 0, 2, 3), delay_us.transpose(3, 1, 0, 2), factor)
    return _Signal(amp, phase.transpose(0, 2, 3, 1), delay_us.transpose(3, 0, 2, 1), factor)


@functools.partial(
    jax.jit,
    static_argnames=(
        "segments",
        "terms",
        "cubic_terms",
        "channel_terms",
        "channel_bend",
        "memory_budget_bytes",
    ),
)
def _analytic(
    indices,
    amp,
    amp_factor,
    phase,
    delay_us,
    tables,
    int_time,
    moments,
    segments,
    terms,
    cubic_terms,
    channel_terms,
    channel_bend,
    memory_budget_bytes,
):
    options = {
        "segments": segments,
        "terms": terms,
        "cubic_terms": cubic_terms,
        "channel_terms": channel_terms,
        "channel_bend": channel_bend,
    }
    n_ant, n_rfi, n_freq, n_time = phase.shape
    n_bl = indices.a1.shape[0]
    if n_bl == 0:
        return jnp.zeros((0, n_freq, n_time), amp.dtype)
    tables, int_time, moments = jax.lax.stop_gradient((tables, int_time, moments))
    # Off the CPU the elements lie in tiles from the start (kept moments are read in the
    # block layout they were made in).
    tiled = moments is None and _phase_moments._tiled()
    signal = _signal(amp, phase, delay_us, amp_factor, tiled)
    n_int_f, n_coef = tables.w_freq.shape[2], tables.g_time.shape[2]
    n_mom = 2 * n_coef - 1

    def block(block_id):
        rows, cell_f, cell_t = _block_coordinates(grid, block_id, n_bl, n_freq, n_time)
        p, q = indices.a1[rows], indices.a2[rows]
        if tiled:
            args = (signal, tables, int_time, p, q, cell_f, cell_t, n_mom, options, antennas)
            return _tiled_pair_sum(*args) / n_int_f
        if per_antenna:
            coef = _coefficients(signal, tables, antennas, cell_f, cell_t)
            coef_p, conj_q = coef[:, p], coef[:, q].conj()
        else:
            coef_p = _coefficients(signal, tables, p, cell_f, cell_t)
            conj_q = _coefficients(signal, tables, q, cell_f, cell_t).conj()
        if moments is None:
            ends, cells = _pair_ends(signal, tables, int_time, p, q, cell_f, cell_t)
            total = _pair_sum(coef_p, conj_q, ends, cells, n_mom, options)
        else:  # given: the block's pairs and cells of them, (n_mom, B, C, n_rfi, n_int_f)
            kept = moments[:, rows[:, None], cell_f[None], cell_t[None]]
            if channel_terms:  # at the channels' centres, (n_mom + a few, B, C, n_rfi, 1)
                ends, cells = jax.lax.stop_gradient(
                    _pair_ends(signal, tables, int_time, p, q, cell_f, cell_t)
                )
                laid = _across_channel(
                    to_elements(kept, 1), ends, _centre(cells), cells, n_mom, options
                )
                kept = from_elements(laid, 1, _block_shape(ends, cells))
            total = _products(coef_p, conj_q, kept)
        return jnp.sum(total, axis=(2, 3)) / n_int_f

    if moments is None:
        # Sized for the moments a value or an amp gradient forms; phase and delay tangents
        # form n_mom + 3 of them (about a fifth more intermediates at n_coef = 3).
        per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, n_mom, **options)
    else:  # only the given moments' gather and the sum: no moment is formed
        per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, n_mom, 0, 0, 0, 0)
    tile = _phase_moments._SUBLANES * _phase_moments._LANES if tiled else 1
    block_ids, grid = _block_plan(
        n_bl, n_freq, n_time, per_pair_cell, memory_budget_bytes, tile, n_ant
    )
    # Keep the moments for reverse mode when all of them fit in the budget: they do not
    # depend on amp, and recomputing them is most of a value-and-gradient's cost. With phase
    # or delay tangents, keep the three more moments their derivatives take when those fit too.
    per_moment = n_bl * n_freq * n_time * n_rfi * n_int_f * amp.dtype.itemsize
    if channel_terms:  # formed at the channel's centre, a few orders more
        extra = _centre_orders(options)
        per_moment = (per_moment // n_int_f) * (n_mom + extra) // n_mom
    saved = [
        n
        for n, count in ((_MOMENTS, n_mom), (_SLOPES, n_mom + 3))
        if count * per_moment <= memory_budget_bytes
    ]
    policy = None
    if moments is None and saved:
        policy = jax.checkpoint_policies.save_only_these_names(*saved)
    # Each antenna's coefficients once per block and then each pair end's, where the block's
    # pair ends outnumber the antennas; else each end's own (the interpolation, and in reverse
    # mode its cotangent, cost per end what they cost per antenna).
    per_antenna = n_ant <= 2 * grid.rows_per_block
    antennas = jnp.arange(n_ant, dtype=jnp.int32)
    ys = map_blocks(block, block_ids, policy).reshape(grid)
    vis = ys.transpose(0, 2, 1, 3).reshape(
        grid.n_row_blocks * grid.rows_per_block, grid.n_cell_blocks * grid.cells_per_block
    )
    return vis[:n_bl, : n_freq * n_time].reshape(n_bl, n_freq, n_time)


def analytic_eval_with_indices(
    indices,
    amp,
    phase,
    delay_us,
    w_freq,
    start_freq,
    g_time,
    start_time,
    dnu_mhz,
    int_time,
    freq_mhz,
    *,
    segments: int = 2,
    terms: int = 6,
    cubic_terms: int = 3,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    moments=None,
    view=None,
    amp_factor=None,
    channel_terms: int = 0,
    channel_bend: bool = True,
):
    """RFI visibilities in closed form over each integration, for the baselines of ``indices``.

    For pair (p, q) = (a1[b], a2[b]) and fine channel u, with ``x = 2 tau / int_time``:
    ``vis[b, f, t] = (1 / n_int_f) sum_{r, u} sum_{j, k} c_p[j] conj(c_q[k]) W_{j+k}`` where
    ``c[m] = sum_{k, l} w_freq[f, k, u] g_time[t, l, m] amp[a, r, start_freq[f] + k,
    start_time[t] + l]`` and ``W_m`` is the mean over x in [-1, 1] of
    ``x**m exp(i (phi0 + a x + b x**2 + c x**3))`` (docs/kernels.md, "The analytic operator";
    delay derivatives above the third are dropped).

    Args:
        indices: from :func:`make_indices` for ``n_ant`` antennas and ``n_bl`` baselines.
        amp: (n_ant, n_rfi, n_freq, n_time) complex64 or complex128 signal per data cell; with
            ``amp_factor``, (1, n_rfi, n_freq, n_time), the part every antenna shares.
        phase: (n_ant, n_rfi, n_freq, n_time) real phase (rad) at each channel and cell centre.
        delay_us: (n_ant, n_rfi, n_time, n_path >= 1) real delay (us) relative to the array
            mean at each cell centre, then its time derivatives (us/s**k).
        w_freq, start_freq: (n_freq, n_sf, n_int_f) real weights, (n_freq,) integer starts.
        g_time, start_time: (n_time, n_st, n_coef) real monomial coefficients in x, n_coef in
            1..9, and (n_time,) integer starts.
        dnu_mhz: (n_int_f,) fine offsets from the channel centre (MHz).
        int_time: integration time (s), a positive scalar.
        freq_mhz: (n_freq,) channel centres (MHz).
        segments, terms, cubic_terms: closed-form options, in 1..1024, 1..32 and 0..8
            (:mod:`ri_kernels._phase_moments`); ``cubic_terms=0`` drops the cubic phase
            ``c x**3``: the result is that of delays without a third derivative.
        channel_terms: 0 (the default) forms the moments at every fine channel; J in 1..8
            forms them once at each channel's centre, a few orders more, and each fine
            channel's from them: ``W_m(u) = e^(i kappa) sum_{j < J} (i epsilon)^j / j!
            W_{m+j}``, kappa = 2 pi dnu d0 and epsilon = 2 pi dnu d1 int_time / 2 (pair delay
            and rate differences d0, d1): about n_int_f times less of the operator's costliest
            work, within :func:`channel_series_error` of the signal. With ``moments``, the
            channel_terms they were formed with.
        channel_bend: with channel_terms, whether the series takes the curvature's and the
            cubic's change across the channel (its bend, dnu / nu (|b| + |c|) rad) to first
            order, for 2 (3 with the cubic) more moments, or drops it: an error of
            :func:`channel_series_error`'s bend term. With ``moments``, as they were formed.
        memory_budget_bytes: approximate bytes of intermediates per block of (baseline, cell).
        moments: None (the moments are formed here), or the phase moments of these same
            arguments from :func:`analytic_moments_with_indices`, formed once and reused: with
            fixed phases and delays they are the same at every call, and forming them is most
            of the operator's work. ``segments``, ``terms`` and ``cubic_terms`` are then those
            the moments were formed with; they are not used here. ``channel_terms`` is, and
            must be the moments' own: with J > 0 they are kept at the channels' centres,
            n_int_f times fewer, and each fine channel's are made from them at every call.
            Kept moments are constants: pass moments=None when the delays are fitted.
        view: None (every source in view throughout), or (n_rfi, n_time, 2) real, the part
            ``[lo, hi]`` of [-1, 1] (in x) of each integration in which each source is in view
            (a satellite rising or setting within it; ``lo = hi`` for none of it): the time
            average then runs over that part alone, relative to the whole integration, with
            the phase cubic and the moments taken exactly onto it. With ``moments`` given,
            the moments are to have been formed with the same ``view``.
        amp_factor: None, or (n_ant, n_rfi, n_freq, n_time) real: each antenna's factor of a
            signal ``amp_factor[a] * amp[0]`` whose varying part ``amp`` all antennas share,
            as in :func:`quadrature_eval_with_indices`: the same result as passing the
            product, which is formed only at each block's pair ends and cells.

    Returns:
        (n_bl, n_freq, n_time) visibilities in amp's dtype.

    Real arrays must be float32 with complex64 and float64 with complex128. ``amp``,
    ``amp_factor``, ``phase`` and ``delay_us`` are differentiated, in forward and reverse
    mode; the delay orders above 3, which the operator drops, have zero derivative, and so has
    order 3 with ``cubic_terms=0``. With ``moments`` given, phase and delays are not
    differentiated (their derivatives are zero); only the delays' first two orders are read,
    with ``channel_terms``. The tables, offsets, channel centres and ``int_time`` are
    constants. A derivative along phase or delay costs three more moments per element (none
    along phase alone), formed with the others: the moments' derivatives are moments,
    ``dW_m/d(phi0, a, b, c) = i W_{m + (0, 1, 2, 3)}``. A value, or a derivative along amp
    alone, forms none of them.
    """
    checked = _checked(
        _FN,
        indices,
        amp,
        phase,
        delay_us,
        w_freq,
        start_freq,
        g_time,
        start_time,
        dnu_mhz,
        int_time,
        freq_mhz,
        segments,
        terms,
        cubic_terms,
        memory_budget_bytes,
        view,
        amp_factor,
        channel_terms,
        channel_bend,
    )
    tables, delay_us, int_time, options = checked
    if moments is not None:
        n_bl, (_, n_rfi, n_freq, n_time) = indices.a1.shape[0], amp.shape
        terms = options["channel_terms"]
        n_mom, n_int_f = 2 * g_time.shape[2] - 1, dnu_mhz.shape[0]
        expected, *words = (
            (
                (n_mom + _centre_orders(options, kept=True), n_bl, n_freq, n_time, n_rfi, 1),
                "2 n_coef + J + 1",
                "1",
            )
            if terms
            else ((n_mom, n_bl, n_freq, n_time, n_rfi, n_int_f), "2 n_coef - 1", "n_int_f")
        )
        _validate.array(
            _FN,
            "moments",
            moments,
            amp.dtype,
            expected,
            f"({words[0]}, n_bl, n_freq, n_time, n_rfi, {words[1]}) from "
            f"analytic_moments_with_indices with the same channel_terms={terms}",
        )
    return _analytic(
        indices, amp, amp_factor, phase, delay_us, tables, int_time, moments, **options
    )


def _checked(
    fn,
    indices,
    amp,
    phase,
    delay_us,
    w_freq,
    start_freq,
    g_time,
    start_time,
    dnu_mhz,
    int_time,
    freq_mhz,
    segments,
    terms,
    cubic_terms,
    memory_budget_bytes,
    view=None,
    amp_factor=None,
    channel_terms=0,
    channel_bend=True,
):
    """The checks both seams make (``amp`` may be a ``jax.ShapeDtypeStruct``), then the
    operator's tables, delays with orders 0..3, integration time and static options."""
    real, _, _, _ = _validate.signal(
        fn, indices, amp, phase, delay_us, w_freq, start_freq, dnu_mhz, freq_mhz, amp_factor
    )
    _, n_coef = _validate.stencil(
        fn, "g_time", g_time, "start_time", start_time, amp.shape[3], "n_time", real, "n_coef"
    )
    _validate.coefficients(fn, n_coef)
    _validate.int_time(fn, int_time, real)
    options = {
        "segments": _validate.option(fn, "segments", segments, 1, MAX_SEGMENTS),
        "terms": _validate.option(fn, "terms", terms, 1, MAX_TERMS),
        "cubic_terms": _validate.option(fn, "cubic_terms", cubic_terms, 0, MAX_CUBIC_TERMS),
        "channel_terms": _validate.option(fn, "channel_terms", channel_terms, 0, MAX_CHANNEL_TERMS),
        "channel_bend": _validate.flag(fn, "channel_bend", channel_bend),
        "memory_budget_bytes": _validate.budget(fn, memory_budget_bytes),
    }
    if view is not None:
        _validate.view(fn, view, amp.shape[1], amp.shape[3], real)
    tables = _AnalyticTables(
        w_freq,
        start_freq.astype("int32"),
        g_time,
        start_time.astype("int32"),
        dnu_mhz,
        freq_mhz,
        view,
    )
    if delay_us.shape[-1] < 4:
        # No third derivative: the cubic coefficient is exactly zero, and so is every term of
        # the residual cubic series. Skipping it leaves the moments unchanged and computes 5
        # instead of 14 of them at the defaults.
        options["cubic_terms"] = 0
    return tables, _cubic_orders(delay_us), jnp.asarray(int_time, real), options


def _cubic_orders(delay_us):
    """delay_us with exactly the orders 0..3 the phase cubic uses: higher ones dropped, missing
    ones zero. One compiled operator then serves every n_path from 4 up, and another every
    n_path below (without the cubic series)."""
    n_path = delay_us.shape[-1]
    if n_path >= 4:
        return delay_us[..., :4]
    xp = np if isinstance(delay_us, np.ndarray) else jnp
    zeros = xp.zeros((*delay_us.shape[:-1], 4 - n_path), delay_us.dtype)
    return xp.concatenate([delay_us, zeros], axis=-1)
