"""The rows of a Measurement Set that make one observation: a (time, baseline) grid.

tabascal reads one spectral window and one field. Autocorrelations (ANTENNA1 == ANTENNA2) are
always dropped: the model is of cross-correlations, and an autocorrelation's noise-power
bias and statistics are not those of the likelihood. The selected rows must be ordered by
TIME and every integration must hold the same set of baselines, each once, as correlators
write them (their order within an integration may differ); integrations must be evenly spaced
by INTERVAL without gaps, and channels evenly spaced by their width. Each irregularity is an
:class:`MsError` that names it. Only the small columns (TIME, ANTENNA1, ANTENNA2, INTERVAL and,
when the MS has several of them, DATA_DESC_ID and FIELD_ID) are read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tabascal import TabascalError

SPACING_RTOL = 1e-3  # allowed relative jitter of integration starts and of INTERVAL
CHANNEL_RTOL = 1e-6  # allowed relative jitter of channel widths and spacings


class MsError(TabascalError, ValueError):
    """A Measurement Set tabascal cannot read as asked; the message says what and how to fix."""


@dataclass(frozen=True, eq=False)
class MsSelection:
    """One spectral window and field of an MS as a grid of rows.

    row_index: (n_time, n_bl) int64, the table row of each (integration, baseline), baselines
    in the order of the first integration. ant1, ant2: (n_bl,) MS antenna ids. time_mjd_s:
    (n_time,) TIME of each integration (MJD seconds, UTC). interval_s: INTERVAL. ddid, spw,
    pol, field: the ids selected. corr_types: (n_corr,) CASA codes. chan_freq_hz: (n_chan,)
    ascending; reversed: whether the MS stores them descending. chan_width_hz: > 0.
    n_autocorrelations: rows dropped for being autocorrelations. n_rows_table: all rows.
    """

    row_index: np.ndarray
    ant1: np.ndarray
    ant2: np.ndarray
    time_mjd_s: np.ndarray
    interval_s: float
    ddid: int
    spw: int
    pol: int
    field: int
    corr_types: np.ndarray
    chan_freq_hz: np.ndarray
    chan_width_hz: float
    reversed: bool
    n_autocorrelations: int
    n_rows_table: int

    @property
    def n_time(self) -> int:
        return self.row_index.shape[0]

    @property
    def n_bl(self) -> int:
        return self.row_index.shape[1]


def subtable(tables, path: Path, name: str):
    return tables.table(str(path / name), ack=False, readonly=True)


def _choose(kind: str, option: str, used: np.ndarray, wanted: int | None) -> int:
    """The one id of ``used`` to read, or ``wanted``; an MsError names the choices."""
    listed = ", ".join(str(int(u)) for u in used)
    if wanted is None:
        if used.size != 1:
            raise MsError(f"the data hold {used.size} {kind}s ({listed}); choose one with {option}")
        return int(used[0])
    if wanted not in used:
        raise MsError(f"{kind} {wanted} has no data rows ({kind}s with data: {listed})")
    return int(wanted)


def _data_description(tables, path: Path, ms, spw: int | None):
    """Row mask of the chosen spectral window, its DATA_DESC_ID, POLARIZATION_ID and id."""
    with subtable(tables, path, "DATA_DESCRIPTION") as dd:
        spw_of = dd.getcol("SPECTRAL_WINDOW_ID")
        pol_of = dd.getcol("POLARIZATION_ID")
    ddid_col = ms.getcol("DATA_DESC_ID") if len(spw_of) > 1 else np.zeros(ms.nrows(), int)
    used_ddids = np.unique(ddid_col)
    chosen = _choose("spectral window", "--spw", np.unique(spw_of[used_ddids]), spw)
    ddids = used_ddids[spw_of[used_ddids] == chosen]
    if ddids.size > 1:
        raise MsError(
            f"spectral window {chosen} appears with {ddids.size} polarization setups "
            f"(DATA_DESC_ID {', '.join(map(str, ddids))}); tabascal reads one"
        )
    return ddid_col == ddids[0], int(ddids[0]), int(pol_of[ddids[0]]), chosen


def _field_mask(tables, path: Path, ms, in_spw: np.ndarray, field: int | None):
    with subtable(tables, path, "FIELD") as fields:
        n_fields = fields.nrows()
    field_col = ms.getcol("FIELD_ID") if n_fields > 1 else np.zeros(ms.nrows(), int)
    chosen = _choose("field", "--field", np.unique(field_col[in_spw]), field)
    return field_col == chosen, chosen


def _baseline_grid(keys: np.ndarray, starts: np.ndarray, n_ant: int, times: np.ndarray):
    """Check that every integration holds the baselines of the first once each; returns the
    (n_time, n_bl) positions (into the selected rows) in the first integration's order."""
    counts = np.diff(np.append(starts, keys.size))
    first = keys[: counts[0]]
    first_sorted = np.sort(first)
    if np.any(first_sorted[1:] == first_sorted[:-1]):
        k = int(first_sorted[np.flatnonzero(first_sorted[1:] == first_sorted[:-1])[0]])
        raise MsError(f"baseline {divmod(k, n_ant)} appears twice in integration 0")
    uneven = np.flatnonzero(counts != counts[0])
    if uneven.size:
        t = int(uneven[0])
        block = set(keys[starts[t] : starts[t] + counts[t]].tolist())
        missing = sorted(set(first.tolist()) - block)[:5]
        extra = sorted(block - set(first.tolist()))[:5]
        raise MsError(
            f"integration {t} (TIME {times[t]:.3f}) holds {counts[t]} baselines, the first "
            f"{counts[0]}: missing {[divmod(k, n_ant) for k in missing]}, extra "
            f"{[divmod(k, n_ant) for k in extra]} (ANTENNA1, ANTENNA2); every integration must "
            "hold the same baselines: flag missing data rather than removing its rows"
        )
    grid = keys.reshape(counts.size, counts[0])
    order = np.argsort(grid, axis=1, kind="stable")
    sorted_keys = np.take_along_axis(grid, order, axis=1)
    bad = np.flatnonzero(np.any(sorted_keys != first_sorted, axis=1))
    if bad.size:
        t = int(bad[0])
        diff = sorted(set(sorted_keys[t].tolist()) ^ set(first.tolist()))[:5]
        raise MsError(
            f"integration {t} (TIME {times[t]:.3f}) holds other baselines than the first "
            f"(differing: {[divmod(k, n_ant) for k in diff]}) or one twice; every integration "
            "must hold the same baselines"
        )
    rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    positions = order + (starts[:, None])
    return positions[:, rank]


def _check_times(times: np.ndarray, interval: np.ndarray) -> float:
    int_time = float(np.median(interval))
    if np.ptp(interval) > SPACING_RTOL * int_time:
        raise MsError(
            f"INTERVAL varies from {interval.min():.6g} to {interval.max():.6g} s; tabascal "
            "needs one integration time"
        )
    steps = np.diff(times)
    off = np.flatnonzero(np.abs(steps - int_time) > SPACING_RTOL * int_time)
    if off.size:
        k = int(off[0])
        raise MsError(
            f"integration {k + 1} starts {steps[k]:.6g} s after integration {k}, expected "
            f"{int_time:.6g} s (INTERVAL): integrations must be evenly spaced without gaps "
            "(flag missing integrations rather than removing their rows)"
        )
    return int_time


def _channels(tables, path: Path, spw: int):
    with subtable(tables, path, "SPECTRAL_WINDOW") as sw:
        freq = np.asarray(sw.getcell("CHAN_FREQ", spw), dtype=np.float64)
        width = np.abs(np.asarray(sw.getcell("CHAN_WIDTH", spw), dtype=np.float64))
    if np.ptp(width) > CHANNEL_RTOL * width.max():
        raise MsError(
            f"channel widths of spectral window {spw} vary ({width.min():.6g} to "
            f"{width.max():.6g} Hz); tabascal needs equal channels"
        )
    reverse = freq.size > 1 and freq[1] < freq[0]
    freq = freq[::-1] if reverse else freq
    spacing = np.diff(freq)
    if np.any(np.abs(spacing - width[0]) > CHANNEL_RTOL * width[0]):
        raise MsError(
            f"channels of spectral window {spw} are not evenly spaced by their width "
            f"{width[0]:.6g} Hz (spacings {spacing.min():.6g} to {spacing.max():.6g} Hz)"
        )
    return freq, float(width[0]), bool(reverse)


def scan(tables, path: Path, ms, spw: int | None = None, field: int | None = None):
    """The :class:`MsSelection` of spectral window ``spw`` and field ``field`` (each may be
    None when the data hold only one) of the open main table ``ms``."""
    in_spw, ddid, pol, spw_id = _data_description(tables, path, ms, spw)
    in_field, field_id = _field_mask(tables, path, ms, in_spw, field)
    ant1, ant2 = ms.getcol("ANTENNA1"), ms.getcol("ANTENNA2")
    chosen = in_spw & in_field
    auto = chosen & (ant1 == ant2)
    rows = np.flatnonzero(chosen & ~auto)
    if rows.size == 0:
        raise MsError(f"{path} has no cross-correlation rows in the selection")
    times = ms.getcol("TIME")[rows]
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        r = rows[back[0] + 1]
        raise MsError(
            f"rows are not in time order (row {r} has an earlier TIME than row {rows[back[0]]}); "
            f'sort the MS, e.g. taql "select from {path} orderby TIME, ANTENNA1, ANTENNA2 '
            f'giving sorted.ms as plain"'
        )
    starts = np.flatnonzero(np.r_[True, np.diff(times) > 0])
    with subtable(tables, path, "ANTENNA") as ants:
        n_ant = ants.nrows()
    keys = ant1[rows].astype(np.int64) * n_ant + ant2[rows]
    positions = _baseline_grid(keys, starts, n_ant, times[starts])
    int_time = _check_times(times[starts], ms.getcol("INTERVAL")[rows])
    with subtable(tables, path, "POLARIZATION") as pols:
        corr_types = np.asarray(pols.getcell("CORR_TYPE", pol))
    freq, width, reverse = _channels(tables, path, spw_id)
    first = rows[positions[0]]
    return MsSelection(
        row_index=rows[positions],
        ant1=ant1[first],
        ant2=ant2[first],
        time_mjd_s=times[starts],
        interval_s=int_time,
        ddid=ddid,
        spw=spw_id,
        pol=pol,
        field=field_id,
        corr_types=corr_types,
        chan_freq_hz=freq,
        chan_width_hz=width,
        reversed=reverse,
        n_autocorrelations=int(auto.sum()),
        n_rows_table=ms.nrows(),
    )
