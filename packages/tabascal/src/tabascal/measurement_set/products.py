"""What each column export-ms writes holds, formed one chunk of table rows at a time.

Every function returns ``fill(rows, shape)``: the values of the column at the ascending table
rows ``rows``, whose cells are ``shape`` (n_chan, n_corr). The fit's cells are those of
:class:`Cells`; every other cell holds what the column holds outside the fit (0, the data, the
original weights or flags). The cubes are (n_bl, n_chan, n_time) with their channels in the
order the MS stores them (:func:`ms_order`). The formulas are in :mod:`.export`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tabascal.measurement_set.columns import get_rows


@dataclass(frozen=True)
class Cells:
    """Where the fit's cells are in the table. position: (n_rows_table,) t * n_bl + b of the
    (integration, baseline) each table row holds, -1 for rows outside the selection.
    channels: the selection's MS channels. indices: the correlations fitted."""

    position: np.ndarray
    n_bl: int
    channels: slice
    indices: tuple[int, ...]

    def of(self, rows: np.ndarray):
        """(positions in ``rows`` of the rows in the selection, their baseline, integration)."""
        pos = self.position[rows]
        hit = np.flatnonzero(pos >= 0)
        t, b = np.divmod(pos[hit], self.n_bl)
        return hit, b, t


def selection_cells(sel, plan) -> Cells:
    """The :class:`Cells` of the selection ``sel`` read with the correlation plan ``plan``."""
    position = np.full(sel.n_rows_table, -1, np.int64)
    held = np.flatnonzero(sel.row_index.ravel() >= 0)  # filled cells have no row to write
    position[sel.row_index.ravel()[held]] = held
    return Cells(position, sel.n_bl, sel.channels, plan.indices)


def ms_order(cube: np.ndarray, sel) -> np.ndarray:
    """A (n, n_freq, n_time) cube with its channels in the order the MS stores them."""
    return cube[:, ::-1] if sel.reversed else cube


def cube_fill(cube: np.ndarray, cells: Cells):
    """A TAB_*_DATA column: ``cube`` in the fitted correlations, 0 elsewhere."""

    def fill(rows, shape):
        hit, b, t = cells.of(rows)
        out = np.zeros((rows.size, *shape), np.complex64)
        for i in cells.indices:
            out[hit, cells.channels, i] = cube[b, :, t]
        return out

    return fill


def cleaned_fill(ms, data_column: str, rfi, gains, a1, a2, cells: Cells):
    """The data column less ``g[a1] rfi conj(g[a2])`` (formed in complex128) in the fitted
    correlations, the data elsewhere."""

    def fill(rows, shape):
        out = get_rows(ms, data_column, rows)
        hit, b, t = cells.of(rows)
        g1 = gains[a1[b], :, t].astype(np.complex128)
        g2 = gains[a2[b], :, t].astype(np.complex128)
        seen = g1 * rfi[b, :, t] * np.conj(g2)
        for i in cells.indices:
            out[hit, cells.channels, i] -= seen
        return out

    return fill


def weight_fill(ms, column: str, weight: np.ndarray, cells: Cells, keep_others: bool):
    """WEIGHT (rows, n_corr) or WEIGHT_SPECTRUM (rows, n_chan, n_corr): ``weight`` (n_bl,) in
    the fit's cells where ``column`` is not 0; elsewhere ``column`` (keep_others) or 0."""

    def fill(rows, shape):
        original = get_rows(ms, column, rows)
        out = original.copy() if keep_others else np.zeros_like(original)
        hit, b, _ = cells.of(rows)
        for i in cells.indices:
            if original.ndim == 3:
                was = original[hit, cells.channels, i]
                out[hit, cells.channels, i] = np.where(was != 0, weight[b][:, None], 0)
            else:
                out[hit, i] = np.where(original[hit, i] != 0, weight[b], 0)
        return out

    return fill


def flag_fill(ms, bad: np.ndarray, cells: Cells, merge: bool):
    """``bad`` (n_bl, n_chan, n_time) on every correlation of the fit's cells, ORed into FLAG
    (merge) or into False."""

    def fill(rows, shape):
        out = get_rows(ms, "FLAG", rows) if merge else np.zeros((rows.size, *shape), bool)
        hit, b, t = cells.of(rows)
        out[hit, cells.channels, :] |= bad[b, :, t][..., None]
        return out

    return fill
