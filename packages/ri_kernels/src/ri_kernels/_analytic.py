"""Closed-form (analytic) RFI-visibility operator (docs/kernels.md, "The analytic operator").

Within a cell each antenna's amplitude is a polynomial in x = 2 tau / int_time, and the
pair's phase difference is the cubic ``phi0 + a x + b x**2 + c x**3`` of the delay's Taylor
series (orders above 3 dropped). The time average is then exact:
``sum_{j,k} c_p[j] conj(c_q[k]) W_{j+k}`` with the phase moments ``W_m`` of the pair
(:mod:`ri_kernels._pair_moments`). This module lays the work out in blocks of (baseline, cell)
and forms each block's amplitude coefficients and their sums with the moments.

``amp``, ``phase`` and ``delay_us`` are differentiated. The cubic is linear in the pair's
phase and delay differences, and ``dW_m/d(phi0, a, b, c) = i W_{m + (0, 1, 2, 3)}``: a phase
or delay tangent costs three more moments (none for a phase alone), formed in the same pass,
never a pass back through the moments' recurrences (:func:`_pair_sum`, a custom JVP).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from ri_kernels import _phase_moments, _validate
from ri_kernels._blocks import (
    DEFAULT_MEMORY_BUDGET_BYTES,
    block_size,
    map_blocks,
)
from ri_kernels._docstrings import described
from ri_kernels._pair_moments import (
    MOMENTS,
    SLOPES,
    across_channel,
    at_centre,
    block_shape,
    cell_constants,
    centre_orders,
    pair_ends,
    pair_moments,
    radian_cubic,
    tiled_ends,
)
from ri_kernels._phase_moments import from_elements, to_elements
from ri_kernels._tables import AnalyticTables

_FN = "analytic_eval_with_indices"
_HIGHEST = jax.lax.Precision.HIGHEST

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


class _BlockGrid(NamedTuple):
    """Static shape (Python ints) of the analytic operator's blocks: n_row_blocks x
    n_cell_blocks blocks, each of rows_per_block baselines by cells_per_block cells."""

    n_row_blocks: int
    n_cell_blocks: int
    rows_per_block: int
    cells_per_block: int


def _coefficients(signal, tables, antenna, cell_f, cell_t):
    """Monomial coefficients in x of each pair end, from the operator's
    :class:`~ri_kernels.AnalyticTables` ``tables``: (B,) antennas -> (m, B, C, n_rfi, u)."""
    freq_rows = tables.start_freq[cell_f][:, None] + jnp.arange(tables.w_freq.shape[1])
    time_rows = tables.start_time[cell_t][:, None] + jnp.arange(tables.g_time.shape[1])
    at = (antenna[:, None, None, None], freq_rows[None, :, :, None], time_rows[None, :, None])
    if signal.factor is None:
        stencil = signal.amp[at]  # (B, C, k, l, n_rfi)
    else:  # the product at the stencil's cells, before the interpolation: the signal's own
        stencil = signal.amp[0][at[1:]] * signal.factor[at]
    w_freq, g_time = tables.w_freq[cell_f], tables.g_time[cell_t]
    return jnp.einsum("bcklr,cku,clm->mbcru", stencil, w_freq, g_time, precision=_HIGHEST)


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
    """:func:`_products` of a block's coefficients and the moments of its :class:`PairEnds`
    ``ends``, differentiable in both. The :class:`CellConstants` ``cells`` are constants:
    their tangents (zero: the operator stops their gradients) are not read.

    The custom JVP spans the sum, not only the moments, so that its rule names every moment
    reverse mode keeps: with a rule of the moments alone, the moments named for the amp
    gradient (outside the rule) and those the rule keeps for the phase and delay tangents
    would be saved twice, or the latter formed again in reverse mode.
    """
    w, _ = pair_moments(ends, cells, n_mom, options)
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
    w, slopes = pair_moments(ends, cells, n_mom, options, n_slopes)
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
        d_cubic = radian_cubic(d_p - d_q, d_delay_p - d_delay_q, cells)[: n_slopes + 1]
        extended = w if slopes is None else jnp.concatenate([w, slopes])
        real = ends.phase_p.dtype
        d_w = 1j * sum(
            extended[k : k + n_mom] * to_elements(t.astype(real), 0) for k, t in enumerate(d_cubic)
        )
        tangent.append(_products(coef_p, conj_q, d_w))
    total = from_elements(total, 0, shape)
    return total, from_elements(sum(tangent), 0, shape) if tangent else jnp.zeros_like(total)


def _tiled_pair_sum(signal, tables, constants, p, q, cell_f, cell_t, n_mom, options, antennas):
    """A block's sums over sources and fine channels of :func:`_pair_sum`, (B, C), from the
    operator's tables and the grid's :func:`cell_constants`, with its elements in tiles from
    the start: (n_rfi, n_int_f, rows, 128), the block's (pair, cell)
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
    ends, cells = tiled_ends(signal, constants, p, q, at)
    total = _pair_sum(laid(p), laid(q).conj(), ends, cells, n_mom, options)
    return jnp.sum(total, axis=(0, 1)).reshape(-1)[:n_pos].reshape(p.shape[0], n_cells)


def _bytes_per_pair_cell(
    amp, n_int_f, n_mom, segments, terms, cubic_terms, channel_terms=0, channel_bend=False
):
    """Approximate bytes of intermediates per (baseline, cell) while the moments are formed:
    at every fine channel, or with ``channel_terms`` once at the channel's centre."""
    options = {"cubic_terms": cubic_terms, "channel_terms": channel_terms}
    options["channel_bend"] = channel_bend
    n_computed = n_mom + 3 * cubic_terms + centre_orders(options)
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


def _signal(amp, phase, delay_us, amp_factor=None, tiled=False):
    """The per-antenna inputs in the blocks' layouts (:class:`_Signal`), those of
    :func:`_tiled_pair_sum` with ``tiled``; ``amp`` may be None (moments alone)."""
    amp, factor = (None if x is None else x.transpose(0, 2, 3, 1) for x in (amp, amp_factor))
    if tiled:
        return _Signal(amp, phase.transpose(1, 0, 2, 3), delay_us.transpose(3, 1, 0, 2), factor)
    return _Signal(amp, phase.transpose(0, 2, 3, 1), delay_us.transpose(3, 0, 2, 1), factor)


@functools.partial(jax.jit, static_argnames=("options", "budget"))
def _analytic(
    indices, amp, amp_factor, phase, delay_us, tables, freq_mhz, view, moments, options, budget
):
    channel_terms, options = options.channel_terms, options._asdict()
    n_ant, n_rfi, n_freq, n_time = phase.shape
    n_bl = indices.a1.shape[0]
    if n_bl == 0:
        return jnp.zeros((0, n_freq, n_time), amp.dtype)
    tables, freq_mhz, view, moments = jax.lax.stop_gradient((tables, freq_mhz, view, moments))
    constants = cell_constants(tables, freq_mhz, view)
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
            args = (signal, tables, constants, p, q, cell_f, cell_t, n_mom, options, antennas)
            return _tiled_pair_sum(*args) / n_int_f
        if per_antenna:
            coef = _coefficients(signal, tables, antennas, cell_f, cell_t)
            coef_p, conj_q = coef[:, p], coef[:, q].conj()
        else:
            coef_p = _coefficients(signal, tables, p, cell_f, cell_t)
            conj_q = _coefficients(signal, tables, q, cell_f, cell_t).conj()
        if moments is None:
            ends, cells = pair_ends(signal, constants, p, q, cell_f, cell_t)
            total = _pair_sum(coef_p, conj_q, ends, cells, n_mom, options)
        else:  # given: the block's pairs and cells of them, (n_mom, B, C, n_rfi, n_int_f)
            kept = moments[:, rows[:, None], cell_f[None], cell_t[None]]
            if channel_terms:  # at the channels' centres, (n_mom + a few, B, C, n_rfi, 1)
                ends, cells = jax.lax.stop_gradient(
                    pair_ends(signal, constants, p, q, cell_f, cell_t)
                )
                laid = across_channel(
                    to_elements(kept, 1), ends, at_centre(cells), cells, n_mom, options
                )
                kept = from_elements(laid, 1, block_shape(ends, cells))
            total = _products(coef_p, conj_q, kept)
        return jnp.sum(total, axis=(2, 3)) / n_int_f

    if moments is None:
        # Sized for the moments a value or an amp gradient forms; phase and delay tangents
        # form n_mom + 3 of them (about a fifth more intermediates at n_coef = 3).
        per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, n_mom, **options)
    else:  # only the given moments' gather and the sum: no moment is formed
        per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, n_mom, 0, 0, 0, 0)
    tile = _phase_moments._SUBLANES * _phase_moments._LANES if tiled else 1
    block_ids, grid = _block_plan(n_bl, n_freq, n_time, per_pair_cell, budget, tile, n_ant)
    # Keep the moments for reverse mode when all of them fit in the budget: they do not
    # depend on amp, and recomputing them is most of a value-and-gradient's cost. With phase
    # or delay tangents, keep the three more moments their derivatives take when those fit too.
    per_moment = n_bl * n_freq * n_time * n_rfi * n_int_f * amp.dtype.itemsize
    if channel_terms:  # formed at the channel's centre, a few orders more
        extra = centre_orders(options)
        per_moment = (per_moment // n_int_f) * (n_mom + extra) // n_mom
    saved = [
        n for n, count in ((MOMENTS, n_mom), (SLOPES, n_mom + 3)) if count * per_moment <= budget
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


@described
def analytic_eval_with_indices(
    indices,
    amp,
    phase,
    delay_us,
    tables: AnalyticTables,
    freq_mhz,
    *,
    moments=None,
    view=None,
    amp_factor=None,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    **options,
):
    """RFI visibilities in closed form over each integration, for the baselines of ``indices``.

    For pair (p, q) = (a1[b], a2[b]) and fine channel u, with ``x = 2 tau / int_time``:
    ``vis[b, f, t] = (1 / n_int_f) sum_{r, u} sum_{j, k} c_p[j] conj(c_q[k]) W_{j+k}`` where
    ``c[m] = sum_{k, l} w_freq[f, k, u] g_time[t, l, m] amp[a, r, start_freq[f] + k,
    start_time[t] + l]`` and ``W_m`` is the mean over x in [-1, 1] of
    ``x**m exp(i (phi0 + a x + b x**2 + c x**3))`` (docs/kernels.md, "The analytic operator";
    delay derivatives above the third are dropped).

    Args:
        $signal
        tables: the operator's :class:`AnalyticTables`.
        freq_mhz: (n_freq,) real channel centres (MHz).
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
        $amp_factor
        memory_budget_bytes: approximate bytes of intermediates per block of (baseline, cell).
        **options: the closed form's static options, by keyword:
            ``segments=2``, ``terms=6``, ``cubic_terms=3``: in 1..1024, 1..32 and 0..8
            (:mod:`ri_kernels._phase_moments`); ``cubic_terms=0`` drops the cubic phase
            ``c x**3``: the result is that of delays without a third derivative.
            ``channel_terms=0`` forms the moments at every fine channel; J in 1..8 forms them
            once at each channel's centre, a few orders more, and each fine channel's from
            them: ``W_m(u) = e^(i kappa) sum_{j < J} (i epsilon)^j / j! W_{m+j}``, kappa = 2
            pi dnu d0 and epsilon = 2 pi dnu d1 int_time / 2 (pair delay and rate
            differences d0, d1): about n_int_f times less of the operator's costliest work,
            within :func:`channel_series_error` of the signal. With ``moments``, the
            channel_terms they were formed with.
            ``channel_bend=True``: with channel_terms, whether the series takes the
            curvature's and the cubic's change across the channel (its bend, dnu / nu (|b| +
            |c|) rad) to first order, for 2 (3 with the cubic) more moments, or drops it: an
            error of :func:`channel_series_error`'s bend term. With ``moments``, as they were
            formed.

    Returns:
        (n_bl, n_freq, n_time) visibilities in amp's dtype.

    Real arrays must be float32 with complex64 and float64 with complex128. ``amp``,
    ``amp_factor``, ``phase`` and ``delay_us`` are differentiated, in forward and reverse
    mode; the delay orders above 3, which the operator drops, have zero derivative, and so has
    order 3 with ``cubic_terms=0``. With ``moments`` given, phase and delays are not
    differentiated (their derivatives are zero); only the delays' first two orders are read,
    with ``channel_terms``. The tables, channel centres and ``view`` are constants. A
    derivative along phase or delay costs three more moments per element (none along phase
    alone), formed with the others: the moments' derivatives are moments,
    ``dW_m/d(phi0, a, b, c) = i W_{m + (0, 1, 2, 3)}``. A value, or a derivative along amp
    alone, forms none of them.
    """
    signal = (indices, amp, phase, delay_us, tables, freq_mhz)
    tables, delay_us, options = _checked(_FN, *signal, view, amp_factor, options)
    budget = _validate.budget(_FN, memory_budget_bytes)
    if moments is not None:
        _check_kept(moments, indices, amp, tables, options)
    return _analytic(
        indices, amp, amp_factor, phase, delay_us, tables, freq_mhz, view, moments, options, budget
    )


def _checked(fn, indices, amp, phase, delay_us, tables, freq_mhz, view, amp_factor, options):
    """The checks both seams make (``amp`` may be a ``jax.ShapeDtypeStruct``; ``options`` the
    keyword options given). Returns the tables as the operator works on them (int32 starts,
    ``int_time`` a 0-d array), the delays with orders 0..3 and the static options."""
    real = _validate.signal(fn, indices, amp, phase, delay_us, freq_mhz, amp_factor)
    _validate.analytic_tables(fn, tables, amp.shape, real)
    options = _validate.analytic_options(fn, options)
    if view is not None:
        _validate.view(fn, view, amp.shape[1], amp.shape[3], real)
    if delay_us.shape[-1] < 4:
        # No third derivative: the cubic coefficient is exactly zero, and so is every term of
        # the residual cubic series. Skipping it leaves the moments unchanged and computes 5
        # instead of 14 of them at the defaults.
        options = options._replace(cubic_terms=0)
    tables = tables._replace(
        start_freq=tables.start_freq.astype("int32"),
        start_time=tables.start_time.astype("int32"),
        int_time=jnp.asarray(tables.int_time, real),
    )
    return tables, _cubic_orders(delay_us), options


def _check_kept(moments, indices, amp, tables, options):
    """Refuse kept moments whose shape is not that of these arguments' and options'."""
    n_bl, (_, n_rfi, n_freq, n_time) = indices.a1.shape[0], amp.shape
    n_mom, n_int_f = 2 * tables.g_time.shape[2] - 1, tables.dnu_mhz.shape[0]
    terms = options.channel_terms
    if terms:
        n_kept = n_mom + centre_orders(options._asdict(), kept=True)
        expected, words = (n_kept, n_bl, n_freq, n_time, n_rfi, 1), ("2 n_coef + J + 1", "1")
    else:
        expected, words = (n_mom, n_bl, n_freq, n_time, n_rfi, n_int_f), ("2 n_coef - 1", "n_int_f")
    meaning = (
        f"({words[0]}, n_bl, n_freq, n_time, n_rfi, {words[1]}) from "
        f"analytic_moments_with_indices with the same channel_terms={terms}"
    )
    _validate.array(_FN, "moments", moments, amp.dtype, expected, meaning)


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
