"""The phase moments of a block's pairs (docs/kernels.md, "The analytic operator").

From the phases and delays at a pair's ends the pair's phase over a cell is the cubic
``phi0 + a x + b x**2 + c x**3`` of the delay's Taylor series (orders above 3 dropped), in rad,
or in turns as two-float pairs where the work is float32; taken onto the part of the cell in
which the source is in view where it is not in view throughout. Its moments ``W_m``, the mean
over x in [-1, 1] of ``x**m exp(i phase)`` (:func:`ri_kernels._phase_moments.laid_moments`),
are formed at every fine channel, or once at each channel's centre and made at each fine
channel by the series across a channel.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from ri_kernels import _two_float as tf
from ri_kernels._phase_moments import (
    Cubic,
    TurnsCubic,
    from_elements,
    laid_moments,
    to_elements,
)

# Names of the moments reverse mode may keep (jax.checkpoint_policies.save_only_these_names):
# W_0..W_{n_mom-1}, and the moments W_{n_mom}.. that only the derivatives in phase and delay use.
MOMENTS = "phase_moments"
SLOPES = "phase_moment_slopes"


class PairEnds(NamedTuple):
    """The centre phases (rad), (B, C, n_rfi, 1), and delays (us, us/s**k; orders 0..3),
    (4, B, C, n_rfi, 1), of the ends p and q of a block's pairs at its cells; in tiles
    (:func:`tiled_ends`) (n_rfi, 1, rows, 128) and (4, n_rfi, 1, rows, 128)."""

    phase_p: jax.Array
    phase_q: jax.Array
    delay_p: jax.Array
    delay_q: jax.Array


class CellConstants(NamedTuple):
    """Cells' channel centres freq_mhz and fine offsets dnu_mhz (MHz), half the integration
    time half_time (s, a scalar), and where each source is in view: None (throughout), or
    view_centre and view_half, the centre and half-width in x of the part of the cell in
    which it is.

    Of the whole grid (:func:`cell_constants`): (n_freq,), (n_int_f,), and (n_rfi, n_time)
    each. Of a block's cells (:func:`pair_ends`): (C, 1, 1), (n_int_f,) and (1, C, n_rfi, 1),
    shaped to broadcast against :class:`PairEnds` to the block's elements (B, C, n_rfi,
    n_int_f); in tiles (:func:`tiled_ends`): (1, rows, 128), (n_int_f, 1, 1) and (n_rfi, 1,
    rows, 128)."""

    freq_mhz: jax.Array
    dnu_mhz: jax.Array
    half_time: jax.Array
    view_centre: jax.Array | None = None
    view_half: jax.Array | None = None


def cell_constants(tables, freq_mhz, view):
    """The :class:`CellConstants` of every cell of the grid, from the operator's
    :class:`~ri_kernels.AnalyticTables`, the channel centres freq_mhz (n_freq,) and view:
    None, or the part [lo, hi] of each integration in which each source is in view, (n_rfi,
    n_time, 2) in x."""
    constants = CellConstants(freq_mhz, tables.dnu_mhz, tables.int_time / 2)
    if view is None:
        return constants
    lo, hi = view[..., 0], view[..., 1]
    return constants._replace(view_centre=(lo + hi) / 2, view_half=(hi - lo) / 2)


def pair_ends(signal, constants, p, q, cell_f, cell_t):
    """The :class:`PairEnds` and :class:`CellConstants` of pairs (p, q) at cells
    (cell_f, cell_t), from the signal's block layout and the grid's :func:`cell_constants`."""
    phase_p, phase_q = (signal.phase[i[:, None], cell_f, cell_t][..., None] for i in (p, q))
    delay_p, delay_q = (signal.delay[:, i[:, None], cell_t][..., None] for i in (p, q))
    freq = constants.freq_mhz[cell_f][:, None, None]
    cells = CellConstants(freq, constants.dnu_mhz, constants.half_time)
    if constants.view_centre is not None:
        centre, half = (
            v[:, cell_t].T[None, :, :, None] for v in (constants.view_centre, constants.view_half)
        )
        cells = cells._replace(view_centre=centre, view_half=half)
    return PairEnds(phase_p, phase_q, delay_p, delay_q), cells


def tiled_ends(signal, constants, p, q, at):
    """The :class:`PairEnds` and :class:`CellConstants` of :func:`_tiled_pair_sum`'s
    positions, whose pairs, channels and times are the (rows, 128) arrays ``at``."""
    pair, freq, time = at
    ant_p, ant_q = p[pair], q[pair]
    phases = (signal.phase[:, ant, freq, time][:, None] for ant in (ant_p, ant_q))
    delays = (signal.delay[:, :, ant, time][:, :, None] for ant in (ant_p, ant_q))
    cells = CellConstants(
        constants.freq_mhz[freq][None], constants.dnu_mhz[:, None, None], constants.half_time
    )
    if constants.view_centre is not None:
        centre, half = (v[:, time][:, None] for v in (constants.view_centre, constants.view_half))
        cells = cells._replace(view_centre=centre, view_half=half)
    return PairEnds(*phases, *delays), cells


def _phase_cubic(ends, cells):
    """Pair phase ``phi0 + a x + b x**2 + c x**3`` over the cell, x in [-1, 1], of
    :class:`PairEnds` ``ends``: a :class:`Cubic` (rad) of (B, C, n_rfi, n_int_f) arrays in the
    working dtype or, with jax's 64-bit mode off, the same cubic in turns from
    :func:`_phase_turns`."""
    work = jax.dtypes.canonicalize_dtype(np.float64)
    if work == np.float32:
        return _phase_turns(ends, cells)
    ends, cells = jax.tree.map(lambda v: v.astype(work), (ends, cells))
    return radian_cubic(ends.phase_p - ends.phase_q, ends.delay_p - ends.delay_q, cells)


def radian_cubic(d_phase, d_delay, cells):
    """The :class:`Cubic` (rad) of phase differences d_phase (B, C, n_rfi, 1) and delay
    differences d_delay (4, B, C, n_rfi, 1) at :class:`CellConstants` ``cells`` (or their
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


def pair_moments(ends, cells, n_mom, options, n_slopes=0):
    """The phase moments of the pairs of :class:`PairEnds` ``ends``, formed in one pass:
    W_0..W_{n_mom-1} and W_{n_mom}..W_{n_mom+n_slopes-1} (None without ``n_slopes``), complex
    (count,) + element layout arrays in amp's dtype: the
    :func:`~ri_kernels._phase_moments.to_elements` of (count, B, C, n_rfi, n_int_f).

    With ``options["channel_terms"]`` J > 0 the moments are formed once per element at the
    channel's centre, a few orders more (:func:`centre_orders`), and each fine channel's come
    from them
    (:func:`across_channel`); those formed are what reverse mode keeps (named MOMENTS and
    SLOPES), n_int_f times fewer."""
    real = ends.phase_p.dtype
    channel_terms = options["channel_terms"]
    per_channel = cells
    if channel_terms:
        cells = at_centre(cells)
    count = n_mom + n_slopes
    formed = count + centre_orders(options)
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
    w = named(slice(0, split), MOMENTS)
    slopes = named(slice(split, None), SLOPES) if n_slopes else None
    if channel_terms:
        both = w if slopes is None else jnp.concatenate([w, slopes])
        both = across_channel(both, ends, cells, per_channel, count, options)
        w, slopes = both[:n_mom], both[n_mom:] if n_slopes else None
    return w, slopes


def centre_orders(options, kept=False):
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


def across_channel(centre, ends, cells, per_channel, count, options):
    """Each fine channel's moments W_0..W_{count-1} from those at the channel's centre,
    ``centre`` (count + :func:`centre_orders`,) + element layout, J = ``channel_terms`` of the
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
    centre's :class:`CellConstants`, ``per_channel`` the fine channels'."""
    centre = from_elements(centre, 1, block_shape(ends, cells))
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
    return to_elements(jnp.broadcast_to(total, (count, *block_shape(ends, per_channel))), 1)


def block_shape(ends, cells):
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


def block_moments(signal, constants, p, q, cell_f, cell_t, n_mom, options):
    """The phase moments W_0..W_{n_mom-1} of a block's pairs and cells: a complex
    (n_mom, B, C, n_rfi, n_int_f) array in amp's dtype; with ``options["channel_terms"]`` J
    > 0 those at each channel's centre, J + 2 orders more, (n_mom + J + 2, B, C, n_rfi, 1)."""
    ends, cells = pair_ends(signal, constants, p, q, cell_f, cell_t)
    if options["channel_terms"]:
        n_mom += centre_orders(options, kept=True)
        cells = at_centre(cells)
        options = {**options, "channel_terms": 0}
    return from_elements(pair_moments(ends, cells, n_mom, options)[0], 1, block_shape(ends, cells))


def at_centre(cells):
    """:class:`CellConstants` ``cells`` with one fine channel, at the channel's centre."""
    return cells._replace(dnu_mhz=jnp.zeros_like(cells.dnu_mhz[:1]))
