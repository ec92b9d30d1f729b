"""Closed-form (analytic) RFI-visibility operator (DESIGN.md section 3).

Within a cell each antenna's amplitude is a polynomial in x = 2 tau / int_time, and the
pair's phase difference is the cubic ``phi0 + a x + b x**2 + c x**3`` of the delay's Taylor
series (orders above 3 dropped). The time average is then exact:
``sum_{j,k} c_p[j] conj(c_q[k]) W_{j+k}`` with the phase moments ``W_m`` of
:func:`ri_kernels._phase_moments.phase_moments`. Only ``amp`` is differentiated.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from ri_kernels import _two_float as tf
from ri_kernels import _validate
from ri_kernels._blocks import (
    DEFAULT_MEMORY_BUDGET_BYTES,
    block_size,
    map_blocks,
)
from ri_kernels._phase_moments import (
    MAX_CUBIC_TERMS,
    MAX_SEGMENTS,
    MAX_TERMS,
    Cubic,
    TurnsCubic,
    cubic_moments_by_order,
)

_FN = "analytic_eval_with_indices"
_HIGHEST = jax.lax.Precision.HIGHEST
_MOMENTS = "phase_moments"

# Real values phase_moments keeps per element and segment (its quadratic moments, and the
# stacked carries of its downward and elimination recurrences: about eight per moment
# computed), plus the linear moments of its curvature expansion. An estimate for sizing
# blocks; its arithmetic is float64 whenever x64 is enabled.
_REALS_PER_MOMENT_SEGMENT = 8
_REALS_PER_TERM = 4
_REALS_FIXED = 32


class _Signal(NamedTuple):
    """Per-antenna inputs in the layouts the blocks gather from (antenna axis first)."""

    amp: jax.Array  # (n_ant, n_freq, n_time, n_rfi)
    phase: jax.Array  # (n_ant, n_freq, n_time, n_rfi)
    delay: jax.Array  # (n_ant, n_time, n_rfi, 4): orders 0..3


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
    """

    w_freq: jax.Array
    start_freq: jax.Array
    g_time: jax.Array
    start_time: jax.Array
    dnu_mhz: jax.Array
    freq_mhz: jax.Array


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
    stencil = signal.amp[
        antenna[:, None, None, None], freq_rows[None, :, :, None], time_rows[None, :, None]
    ]  # (B, C, k, l, n_rfi)
    w_freq, g_time = tables.w_freq[cell_f], tables.g_time[cell_t]
    return jnp.einsum("bcklr,cku,clm->mbcru", stencil, w_freq, g_time, precision=_HIGHEST)


def _phase_cubic(signal, tables, half_time, p, q, cell_f, cell_t):
    """Pair phase ``phi0 + a x + b x**2 + c x**3`` over the cell, x in [-1, 1].

    Returns a :class:`Cubic` (rad) of (B, C, n_rfi, n_int_f) arrays in the working dtype,
    from the differences of the centre phases and of the delay orders 0..3 of p and q;
    nu = freq_mhz + dnu_mhz (MHz), delays in us: MHz x us = cycles. With jax's 64-bit mode
    off, the same cubic in turns from :func:`_phase_turns`.
    """
    work = jax.dtypes.canonicalize_dtype(np.float64)
    if work == np.float32:
        return _phase_turns(signal, tables, half_time, p, q, cell_f, cell_t)
    dnu_mhz = tables.dnu_mhz.astype(work)
    phase = signal.phase.astype(work)
    delay = signal.delay.astype(work)
    half_time = half_time.astype(work)
    d_phase = phase[p[:, None], cell_f, cell_t] - phase[q[:, None], cell_f, cell_t]
    d_delay = delay[p[:, None], cell_t] - delay[q[:, None], cell_t]
    d = [d_delay[..., k, None] for k in range(4)]  # (B, C, n_rfi, 1)
    nu = (tables.freq_mhz[cell_f].astype(work)[:, None] + dnu_mhz)[:, None, :]  # (C, 1, n_int_f)
    phi0 = d_phase[..., None] + 2 * math.pi * dnu_mhz * d[0]
    a = 2 * math.pi * nu * d[1] * half_time
    b = math.pi * nu * d[2] * half_time**2
    c = (math.pi / 3) * nu * d[3] * half_time**3
    return Cubic(*jnp.broadcast_arrays(phi0, a, b, c))


def _phase_turns(signal, tables, half_time, p, q, cell_f, cell_t):
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
    phase_p, phase_q = (signal.phase[i[:, None], cell_f, cell_t][..., None] for i in (p, q))
    delay_p, delay_q = (signal.delay[i[:, None], cell_t][..., None, :] for i in (p, q))
    d_phase = tf.two_sum(phase_p, -phase_q)  # (B, C, n_rfi, 1)
    d0, d1 = (tf.two_sum(delay_p[..., k], -delay_q[..., k]) for k in (0, 1))
    d2, d3 = (delay_p[..., k] - delay_q[..., k] for k in (2, 3))
    nu = tf.two_sum(tables.freq_mhz[cell_f][:, None], tables.dnu_mhz)  # (C, n_int_f)
    nu_half = tuple(v[:, None, :] for v in tf.scale(nu, half_time))  # (C, 1, n_int_f)
    phi0 = tf.add(tf.times(d_phase, tf.INV_TWO_PI), tf.scale(d0, tables.dnu_mhz))
    a = tf.times(d1, nu_half)
    b = nu[0][:, None, :] * d2 * (half_time**2 / 2)
    c = nu[0][:, None, :] * d3 * (half_time**3 / 6)
    return TurnsCubic(*jnp.broadcast_arrays(*phi0, *a, b, c))


def _bytes_per_pair_cell(amp, n_int_f, n_mom, segments, terms, cubic_terms):
    """Approximate bytes of intermediates per (baseline, cell) while the moments are formed."""
    n_computed = n_mom + 3 * cubic_terms
    reals = _REALS_FIXED + _REALS_PER_TERM * terms
    reals += _REALS_PER_MOMENT_SEGMENT * n_computed * segments
    work = jax.dtypes.canonicalize_dtype(np.float64).itemsize
    return amp.shape[1] * n_int_f * (work * reals + 4 * n_mom * amp.dtype.itemsize)


def _block_plan(n_bl, n_freq, n_time, per_pair_cell, budget):
    """Blocks of (baseline rows, cells): all baselines and as many cells as the budget allows,
    or one cell and a share of the baselines. Returns the (n_blocks,) block ids, made in the
    program (``jnp.arange``), and the :class:`_BlockGrid`; ``_block_coordinates`` turns an id
    into its rows and cells there too, so that no per-block table of rows, which grows with the
    baselines, is captured into the compiled program as a constant (bench-512: 415 MB)."""
    n_cells = n_freq * n_time
    cells_per_block, n_cell_blocks = block_size(n_cells, n_bl * per_pair_cell, budget)
    rows_per_block, n_row_blocks = block_size(n_bl, cells_per_block * per_pair_cell, budget)
    grid = _BlockGrid(n_row_blocks, n_cell_blocks, rows_per_block, cells_per_block)
    return jnp.arange(n_row_blocks * n_cell_blocks, dtype=jnp.int32), grid


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
    (n_mom, B, C, n_rfi, n_int_f) array in amp's dtype."""
    cubic = _phase_cubic(signal, tables, int_time / 2, p, q, cell_f, cell_t)
    real = signal.phase.dtype
    # Real and imaginary parts named as such: jax 0.10.2 fails to save a complex residual by
    # name (its remat inserts reduce_precision, which refuses complex dtypes).
    re, im = (v.astype(real) for v in cubic_moments_by_order(cubic, n_mom, **options))
    return jax.lax.complex(checkpoint_name(re, _MOMENTS), checkpoint_name(im, _MOMENTS))


def _signal(amp, phase, delay_us):
    """The per-antenna inputs in the blocks' layouts; ``amp`` may be None (moments alone)."""
    amp = None if amp is None else amp.transpose(0, 2, 3, 1)
    return _Signal(amp, phase.transpose(0, 2, 3, 1), delay_us.transpose(0, 2, 1, 3))


@functools.partial(
    jax.jit, static_argnames=("segments", "terms", "cubic_terms", "memory_budget_bytes")
)
def _analytic(
    indices,
    amp,
    phase,
    delay_us,
    tables,
    int_time,
    moments,
    segments,
    terms,
    cubic_terms,
    memory_budget_bytes,
):
    options = {"segments": segments, "terms": terms, "cubic_terms": cubic_terms}
    _, n_rfi, n_freq, n_time = amp.shape
    n_bl = indices.a1.shape[0]
    if n_bl == 0:
        return jnp.zeros((0, n_freq, n_time), amp.dtype)
    phase, delay_us, tables, int_time, moments = jax.lax.stop_gradient(
        (phase, delay_us, tables, int_time, moments)
    )
    signal = _signal(amp, phase, delay_us)
    n_int_f, n_coef = tables.w_freq.shape[2], tables.g_time.shape[2]
    n_mom = 2 * n_coef - 1

    def block(block_id):
        rows, cell_f, cell_t = _block_coordinates(grid, block_id, n_bl, n_freq, n_time)
        p, q = indices.a1[rows], indices.a2[rows]
        if moments is None:
            w = _moments_of_block(signal, tables, int_time, p, q, cell_f, cell_t, n_mom, options)
        else:  # given: the block's pairs and cells of them, (n_mom, B, C, n_rfi, n_int_f)
            w = moments[:, rows[:, None], cell_f[None], cell_t[None]]
        coef_p = _coefficients(signal, tables, p, cell_f, cell_t)
        coef_q = _coefficients(signal, tables, q, cell_f, cell_t).conj()
        # Σ_{j,k} c_p[j] conj(c_q[k]) W_{j+k}, elementwise with the moment index leading: as
        # a batched 3 x 3 matrix product over a trailing index, XLA's CPU dots took more
        # time than the sum itself in both directions.
        total = sum(coef_p[j] * coef_q[k] * w[j + k] for j in range(n_coef) for k in range(n_coef))
        return jnp.sum(total, axis=(2, 3)) / n_int_f

    if moments is None:
        per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, n_mom, **options)
    else:  # only the given moments' gather and the sum: no moment is formed
        per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, n_mom, 0, 0, 0)
    block_ids, grid = _block_plan(n_bl, n_freq, n_time, per_pair_cell, memory_budget_bytes)
    # Keep the moments for reverse mode when all of them fit in the budget: they do not
    # depend on amp, and recomputing them is most of a value-and-gradient's cost.
    saved_bytes = n_bl * n_freq * n_time * n_rfi * n_int_f * n_mom * amp.dtype.itemsize
    policy = None
    if moments is None and saved_bytes <= memory_budget_bytes:
        policy = jax.checkpoint_policies.save_only_these_names(_MOMENTS)
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
):
    """RFI visibilities in closed form over each integration, for the baselines of ``indices``.

    For pair (p, q) = (a1[b], a2[b]) and fine channel u, with ``x = 2 tau / int_time``:
    ``vis[b, f, t] = (1 / n_int_f) sum_{r, u} sum_{j, k} c_p[j] conj(c_q[k]) W_{j+k}`` where
    ``c[m] = sum_{k, l} w_freq[f, k, u] g_time[t, l, m] amp[a, r, start_freq[f] + k,
    start_time[t] + l]`` and ``W_m`` is the mean over x in [-1, 1] of
    ``x**m exp(i (phi0 + a x + b x**2 + c x**3))`` (DESIGN.md section 3; delay derivatives
    above the third are dropped).

    Args:
        indices: from :func:`make_indices` for ``n_ant`` antennas and ``n_bl`` baselines.
        amp: (n_ant, n_rfi, n_freq, n_time) complex64 or complex128 signal per data cell.
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
        memory_budget_bytes: approximate bytes of intermediates per block of (baseline, cell).
        moments: None (the moments are formed here), or the phase moments of these same
            arguments from :func:`analytic_moments_with_indices`, formed once and reused: with
            fixed phases and delays they are the same at every call, and forming them is most
            of the operator's work. ``segments``, ``terms`` and ``cubic_terms`` are then those
            the moments were formed with; they are not used here.

    Returns:
        (n_bl, n_freq, n_time) visibilities in amp's dtype.

    Real arrays must be float32 with complex64 and float64 with complex128. Only ``amp`` is
    differentiated: phase, delays, tables, offsets, channel centres and moments are constants.
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
    )
    tables, delay_us, int_time, options = checked
    if moments is not None:
        n_bl, (_, n_rfi, n_freq, n_time) = indices.a1.shape[0], amp.shape
        _validate.array(
            _FN,
            "moments",
            moments,
            amp.dtype,
            (2 * g_time.shape[2] - 1, n_bl, n_freq, n_time, n_rfi, dnu_mhz.shape[0]),
            "(2 n_coef - 1, n_bl, n_freq, n_time, n_rfi, n_int_f) from "
            "analytic_moments_with_indices",
        )
    return _analytic(indices, amp, phase, delay_us, tables, int_time, moments, **options)


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
):
    """The checks both seams make (``amp`` may be a ``jax.ShapeDtypeStruct``), then the
    operator's tables, delays with orders 0..3, integration time and static options."""
    real, _, _, _ = _validate.signal(
        fn, indices, amp, phase, delay_us, w_freq, start_freq, dnu_mhz, freq_mhz
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
        "memory_budget_bytes": _validate.budget(fn, memory_budget_bytes),
    }
    tables = _AnalyticTables(
        w_freq, start_freq.astype("int32"), g_time, start_time.astype("int32"), dnu_mhz, freq_mhz
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
