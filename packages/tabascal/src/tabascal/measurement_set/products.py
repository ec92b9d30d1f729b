"""What each column export-ms writes holds, formed one chunk of table rows at a time.

Every function returns ``fill(rows, shape)``: the values of the column at the ascending table
rows ``rows``, whose cells are ``shape`` (n_chan, n_corr). The fit's cells are those of
:class:`Cells`; every other cell holds what the column holds outside the fit (0, the data, the
original weights or flags). The cubes are (n_bl, n_freq, n_time) with their channels
ascending, as the fit holds them; :meth:`Cells.of` maps each spectral window's rows to their
part of the band in the order the window stores its channels. The formulas are in
:mod:`.export`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tabascal.measurement_set.columns import get_rows


@dataclass(frozen=True)
class Cells:
    """Where the fit's cells are in the table. position: (n_rows_table,) t * n_bl + b of the
    (integration, baseline) each table row holds, -1 for rows outside the selection. window:
    (n_rows_table,) the index in ``windows`` of each row's spectral window. windows: for each
    window, the MS channels read and the places on the band's grid of channels they are, in
    the window's order. indices: the correlations fitted."""

    position: np.ndarray
    window: np.ndarray
    n_bl: int
    windows: tuple[tuple[slice, np.ndarray], ...]
    indices: tuple[int, ...]

    def of(self, rows: np.ndarray):
        """For each spectral window with rows among ``rows``: the positions in ``rows`` of
        those rows, their baseline and integration, the MS channels read and the places of the
        band's grid they hold (indices into a cube's channel axis: :func:`at`)."""
        pos = self.position[rows]
        for k, (channels, band) in enumerate(self.windows):
            hit = np.flatnonzero((pos >= 0) & (self.window[rows] == k))
            if hit.size:
                t, b = np.divmod(pos[hit], self.n_bl)
                yield hit, b, t, channels, band


def at(cube: np.ndarray, b: np.ndarray, band: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``cube`` (n_bl, n_freq, n_time) at rows (b, t) and channels ``band``: (n_rows, n_band)."""
    return cube[b[:, None], band[None, :], t[:, None]]


def selection_cells(sel, plan) -> Cells:
    """The :class:`Cells` of the selection ``sel`` read with the correlation plan ``plan``."""
    position = np.full(sel.n_rows_table, -1, np.int64)
    window = np.full(sel.n_rows_table, -1, np.int64)
    for k, w in enumerate(sel.windows):
        held = np.flatnonzero(w.row_index.ravel() >= 0)  # filled cells have no row to write
        position[w.row_index.ravel()[held]] = held
        window[w.row_index.ravel()[held]] = k
    windows = tuple((w.channels, w.band_in_ms_order()) for w in sel.windows)
    return Cells(position, window, sel.n_bl, windows, plan.indices)


def cube_fill(cube: np.ndarray, cells: Cells):
    """A TAB_*_DATA column: ``cube`` in the fitted correlations, 0 elsewhere."""

    def fill(rows, shape):
        out = np.zeros((rows.size, *shape), np.complex64)
        for hit, b, t, channels, band in cells.of(rows):
            for i in cells.indices:
                out[hit, channels, i] = at(cube, b, band, t)
        return out

    return fill


def cleaned_fill(ms, data_column: str, rfi, gains, a1, a2, cells: Cells):
    """The data column less ``g[a1] rfi conj(g[a2])`` (formed in complex128) in the fitted
    correlations, the data elsewhere."""

    def fill(rows, shape):
        out = get_rows(ms, data_column, rows)
        for hit, b, t, channels, band in cells.of(rows):
            g1 = at(gains, a1[b], band, t).astype(np.complex128)
            g2 = at(gains, a2[b], band, t).astype(np.complex128)
            seen = g1 * at(rfi, b, band, t) * np.conj(g2)
            for i in cells.indices:
                out[hit, channels, i] -= seen
        return out

    return fill


def weight_fill(ms, column: str, weight: np.ndarray, cells: Cells, keep_others: bool):
    """WEIGHT (rows, n_corr) or WEIGHT_SPECTRUM (rows, n_chan, n_corr): ``weight`` (n_bl,), or
    (n_bl, n_chan) per channel, in the fit's cells where ``column`` is not 0; elsewhere
    ``column`` (keep_others) or 0. A per-channel weight goes into WEIGHT as its mean over the
    row's channels fitted."""

    def fill(rows, shape):
        original = get_rows(ms, column, rows)
        out = original.copy() if keep_others else np.zeros_like(original)
        for hit, b, _, channels, band in cells.of(rows):
            row_weight = weight[b][:, band] if weight.ndim == 2 else weight[b][:, None]
            for i in cells.indices:
                if original.ndim == 3:
                    was = original[hit, channels, i]
                    out[hit, channels, i] = np.where(was != 0, row_weight, 0)
                else:
                    mean = np.mean(row_weight, axis=1)
                    out[hit, i] = np.where(original[hit, i] != 0, mean, 0)
        return out

    return fill


def flag_fill(ms, bad: np.ndarray, cells: Cells, merge: bool):
    """``bad`` (n_bl, n_chan, n_time) on every correlation of the fit's cells, ORed into FLAG
    (merge) or into False."""

    def fill(rows, shape):
        out = get_rows(ms, "FLAG", rows) if merge else np.zeros((rows.size, *shape), bool)
        for hit, b, t, channels, band in cells.of(rows):
            out[hit, channels, :] |= at(bad, b, band, t)[..., None]
        return out

    return fill
