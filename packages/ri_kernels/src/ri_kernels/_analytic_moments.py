"""Phase moments formed once and kept (docs/kernels.md, "Fixed orbits: moments kept").

With fixed phases and delays the moments ``W_m`` of :mod:`ri_kernels._analytic` are the same
at every call, and forming them is most of the operator's work: a fit forms them once with
:func:`analytic_moments_with_indices` and passes them to ``analytic_eval_with_indices`` as
``moments``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ri_kernels import _validate
from ri_kernels._analytic import (
    _block_plan,
    _bytes_per_pair_cell,
    _checked,
    _signal,
)
from ri_kernels._blocks import DEFAULT_MEMORY_BUDGET_BYTES
from ri_kernels._pair_moments import block_moments, cell_constants, centre_orders
from ri_kernels._tables import AnalyticTables

_FN = "analytic_moments_with_indices"


@functools.partial(jax.jit, static_argnames=("options", "budget"))
def _moments(indices, phase, delay_us, tables, freq_mhz, view, options, budget):
    """Every pair's and cell's phase moments: (n_mom, n_bl, n_freq, n_time, n_rfi, n_int_f),
    or with ``channel_terms`` J > 0 at the channels' centres, (n_mom + J + 2, ..., 1).

    Formed block by block straight into the result, which a loop updates in place: besides
    the moments themselves, forming them takes one block's working set (about ``budget``
    bytes), not a second and third copy of the moments as stacking the blocks and reordering
    them would. Blocks are the operator's (:func:`_block_plan`), the last of each axis moved
    back to end at the last row or cell (its first items formed twice, the same values), so
    that no block reaches past the result."""
    options = options._asdict()
    n_ant, n_rfi, n_freq, n_time = phase.shape
    n_bl, n_int_f = indices.a1.shape[0], tables.dnu_mhz.shape[0]
    n_cells = n_freq * n_time
    n_mom = 2 * tables.g_time.shape[2] - 1
    complex_dtype = jax.lax.complex(phase[:0], phase[:0]).dtype
    like = jax.ShapeDtypeStruct((n_ant, n_rfi), complex_dtype)
    per_pair_cell = _bytes_per_pair_cell(like, n_int_f, n_mom, **options)
    signal = _signal(None, phase, delay_us)
    constants = cell_constants(tables, freq_mhz, view)

    n_kept = n_mom
    if options["channel_terms"]:  # kept at the channels' centres, a few orders more
        n_kept, n_int_f = n_mom + centre_orders(options, kept=True), 1
    if n_bl == 0:
        return jnp.zeros((n_kept, 0, n_freq, n_time, n_rfi, n_int_f), complex_dtype)

    _, grid = _block_plan(n_bl, n_freq, n_time, per_pair_cell, budget)
    n_rows, n_cols = min(grid.rows_per_block, n_bl), min(grid.cells_per_block, n_cells)

    def block(first_row, first_cell):
        """(n_kept, n_rows, n_cols, n_rfi, n_int_f): the moments of the rows and cells from
        ``first_row`` and ``first_cell`` (traced)."""
        rows = first_row + jnp.arange(n_rows, dtype=jnp.int32)
        cells = first_cell + jnp.arange(n_cols, dtype=jnp.int32)
        p, q = indices.a1[rows], indices.a2[rows]
        y = block_moments(signal, constants, p, q, cells // n_time, cells % n_time, n_mom, options)
        return y.astype(complex_dtype)

    def step(k, moments):
        first_row = jnp.minimum((k // grid.n_cell_blocks) * n_rows, n_bl - n_rows)
        first_cell = jnp.minimum((k % grid.n_cell_blocks) * n_cols, n_cells - n_cols)
        y = block(first_row.astype(jnp.int32), first_cell.astype(jnp.int32))
        return jax.lax.dynamic_update_slice(moments, y, (0, first_row, first_cell, 0, 0))

    n_blocks = grid.n_row_blocks * grid.n_cell_blocks
    if n_blocks == 1:
        moments = block(jnp.int32(0), jnp.int32(0))
    else:
        moments = jnp.zeros((n_kept, n_bl, n_cells, n_rfi, n_int_f), complex_dtype)
        moments = jax.lax.fori_loop(0, n_blocks, step, moments)
    return moments.reshape(n_kept, n_bl, n_freq, n_time, n_rfi, n_int_f)


def analytic_moments_with_indices(
    indices,
    phase,
    delay_us,
    tables: AnalyticTables,
    freq_mhz,
    *,
    view=None,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    **options,
):
    """The phase moments :func:`analytic_eval_with_indices` forms from the same arguments
    (all but ``amp``; ``view``, the memory budget and the keyword ``options`` as it takes
    them), to be formed once and passed to it as ``moments`` at every call.

    ``W_m[b, f, t, r, u]``, m < 2 n_coef - 1, is the mean over x in [-1, 1] of
    ``x**m exp(i (phi0 + a x + b x**2 + c x**3))`` for pair b, source r and fine channel u of
    cell (f, t). They depend on the phases, the delays and the fine channels alone, so a fit
    with fixed orbits forms them once.

    With ``channel_terms`` J > 0 (and ``channel_bend``, as :func:`analytic_eval_with_indices`
    takes them) they are those at each channel's centre, J + 2 orders more (for the series and
    the bend, whichever of them the operator then takes), from which it makes each fine
    channel's at every call: n_int_f times fewer to keep, for the work of the series.

    Returns:
        (2 n_coef - 1, n_bl, n_freq, n_time, n_rfi, n_int_f) complex moments (complex64 with
        float32 arguments, complex128 with float64), with
        ``8 (2 n_coef - 1) n_bl n_freq n_time n_rfi n_int_f`` bytes in complex64 (twice in
        complex128): what keeping them costs; with channel_terms J > 0,
        (2 n_coef + J + 1, n_bl, n_freq, n_time, n_rfi, 1).
    """
    complex_of = {np.dtype(real): cplx for cplx, real in _validate.PRECISION_PAIRS.items()}
    real = np.dtype(getattr(phase, "dtype", None))
    if real not in complex_of or getattr(phase, "ndim", 0) != 4:
        raise TypeError(
            f"{_FN}: phase must be a float32 or float64 array (n_ant, n_rfi, n_freq, n_time); "
            f"got {real} of shape {tuple(getattr(phase, 'shape', ()))}"
        )
    # The checks of analytic_eval_with_indices, for an amp of phase's shape.
    like = jax.ShapeDtypeStruct(phase.shape, complex_of[real])
    signal = (indices, like, phase, delay_us, tables, freq_mhz)
    tables, delay_us, options = _checked(_FN, *signal, view, None, options)
    budget = _validate.budget(_FN, memory_budget_bytes)
    return _moments(indices, phase, delay_us, tables, freq_mhz, view, options, budget)
