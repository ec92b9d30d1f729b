"""The rows of a Measurement Set that make one observation: a (time, baseline) grid.

tabascal reads one field and one spectral window, or several side by side as one band when
their channels are of equal width, each window above the one below (``spw=[0, 1]`` or
``spw="all"``; anything else is refused, naming the windows' channels). The channels read are
of one width and lie on one regular grid whose step is at least the width: evenly spaced,
side by side or spaced wider than they are wide (channels selected or decimated in frequency
are), or with channels missing between them (a channel cut from a window, a gap between
windows). The grid is the coarsest such, its step the smallest between centres divided by at
most ``GRID_DIVISORS``; a place of it no channel holds is filled with flagged cells (refused
when more would be filled than are read). The store keeps each channel's centre and the width
(the model's frequency grid is spaced by the grid's step, its smearing within a channel and
its noise by the width).
Each window then has a grid of rows of its own on the common integrations and baselines.
Autocorrelations (ANTENNA1 == ANTENNA2) are always dropped: the model is of
cross-correlations, and an autocorrelation's noise-power bias and statistics are not those
of the likelihood.

The rows are taken as telescopes write them, in any order. Each is placed on the nearest
integration of a grid spaced by the median INTERVAL (the integration time the store records,
so that grid and ``int_time`` agree), whose origin is the median offset of the rows' TIMEs
from it; a row may lie up to ``time_tolerance`` INTERVALs (default 0.1) from its
integration, and one further off is an :class:`MsError` naming it. An integration's time is
the median TIME of its rows (exactly theirs when they agree, as correlators write them).
The baselines are every pair that appears in some integration, in the order they first
appear in time order; a (integration, baseline) without a row, whether a baseline missing
from an integration or an integration missing from the grid, has row -1, which the reader
fills with flagged cells (refused when more integrations would be filled than hold rows, as
one stray TIME would make). Still refused, each with an :class:`MsError` naming the rows: a
baseline twice in an integration, an antenna not in the ANTENNA table, INTERVAL varying,
channels of unequal widths, channels that overlap (centres closer than a width) and channels
on no regular grid (the model's frequency grid is regular), naming the channels. Only the
small columns (TIME, ANTENNA1, ANTENNA2, INTERVAL and, when the MS has several of them,
DATA_DESC_ID and FIELD_ID) are read here.

A range of channels and of integrations may be read (``channels``, ``times``: Python slices
of step 1, as ``--channels A:B`` and ``--times A:B`` give them): channels of one window by
their index in the window as the MS stores it (before descending channels are made
ascending), channels of several by their index in the band, ascending in frequency (0 the
lowest channel of the lowest window); integrations by their index on the grid, which is in
time order whatever the rows' order. A range that is empty or reaches past the ends is an
:class:`MsError` naming the range there is. Only the selected channels of one window must be
of equal width and on a regular grid (several windows must be one band whole); the baselines are
those with a row in the selected integrations. Of several windows, each is read in the
channels of the range it holds, the MS channels of a descending one being those that map
onto them; a window holding none of the range is left out of the selection: not read, and
not written back.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tabascal import TabascalError
from tabascal.measurement_set.correlations import correlation_names
from tabascal.store.format import CHANNEL_RTOL

SPACING_RTOL = 1e-3  # allowed relative jitter of INTERVAL; the least time tolerance
TIME_TOLERANCE = 0.1  # default allowed offset of a TIME from its integration, in INTERVALs
GRID_DIVISORS = 16  # the finest channel grid tried: the smallest step between centres over this
SEVERAL_WINDOWS = (
    ", or several side by side as one band (--spw 0,1 or --spw all: windows of equal "
    "channels on one regular grid, each above the one below)"
)


class MsError(TabascalError, ValueError):
    """A Measurement Set tabascal cannot read as asked; the message says what and how to fix."""


@dataclass(frozen=True, eq=False)
class Window:
    """One spectral window of a selection.

    spw, ddid: its ids. row_index: (n_time, n_bl) int64, the table row of each (integration,
    baseline) in this window, -1 where the MS has none (filled with flagged cells when read).
    channels: the MS channels read (step 1) of the n_chan_spw it holds; reversed: whether the
    MS stores them descending. band: (n_chan,) int64, the place of each (ascending) on the
    selection's grid of channels: consecutive unless channels are missing between them.
    """

    spw: int
    ddid: int
    row_index: np.ndarray
    channels: slice
    n_chan_spw: int
    reversed: bool
    band: np.ndarray

    def band_in_ms_order(self) -> np.ndarray:
        """``band`` in the order the MS stores the window's channels: the places on the
        selection's grid of the channels as the window's rows hold them."""
        return self.band[::-1] if self.reversed else self.band

    def ascending_channels(self) -> slice:
        """``channels`` counted in ascending frequency: the window's channels, lowest 0,
        that are read (``channels`` itself unless the MS stores them descending)."""
        if not self.reversed:
            return self.channels
        n = self.n_chan_spw
        return slice(n - self.channels.stop, n - self.channels.start)


@dataclass(frozen=True, eq=False)
class MsSelection:
    """One field of an MS, in one spectral window or several side by side, as grids of rows.

    windows: the :class:`Window` of each, in ascending frequency. ant1, ant2: (n_bl,) MS
    antenna ids, in the order the baselines first appear in time order. time_mjd_s: (n_time,)
    TIME of each integration (MJD seconds, UTC): the median of its rows', the grid's where it
    has none. interval_s: INTERVAL, the grid's spacing. pol, field: the ids selected.
    corr_types: (n_corr,) CASA codes. chan_freq_hz: (n_chan,) the regular grid of channels
    the windows' lie on, ascending: each channel read is a place of it (``Window.band``), a
    place none holds (a channel missing between them) is filled with flagged cells.
    chan_width_hz: each channel's width, > 0 (the grid's step is at least it).
    n_autocorrelations: rows dropped for being autocorrelations.
    n_rows_table: all rows. in_time_order: whether the selected rows were ordered by TIME.
    time_tolerance: the largest offset of a TIME from its integration allowed, max_time_offset:
    the largest found (both in INTERVALs). times: the integrations read of the n_time_grid.
    """

    windows: tuple[Window, ...]
    ant1: np.ndarray
    ant2: np.ndarray
    time_mjd_s: np.ndarray
    interval_s: float
    pol: int
    field: int
    corr_types: np.ndarray
    chan_freq_hz: np.ndarray
    chan_width_hz: float
    n_autocorrelations: int
    n_rows_table: int
    in_time_order: bool
    time_tolerance: float
    max_time_offset: float
    times: slice
    n_time_grid: int

    @property
    def n_time(self) -> int:
        return self.windows[0].row_index.shape[0]

    @property
    def n_bl(self) -> int:
        return self.windows[0].row_index.shape[1]

    @property
    def spws(self) -> tuple[int, ...]:
        return tuple(w.spw for w in self.windows)

    @property
    def channel_range(self) -> tuple[int, int, int]:
        """(start, stop, of how many) of the channels read, as ``channels`` selects them
        again: of the window, as the MS stores them, when one is read; of the band of the
        windows read (ascending) when several are."""
        first = self.windows[0]
        if len(self.windows) == 1:
            return first.channels.start, first.channels.stop, first.n_chan_spw
        start = first.ascending_channels().start
        n_band = sum(w.n_chan_spw for w in self.windows)
        return start, start + sum(w.band.size for w in self.windows), n_band

    @property
    def n_channels_filled(self) -> int:
        """Channels of the grid that no window holds: missing between those read."""
        return self.chan_freq_hz.size - sum(w.band.size for w in self.windows)

    @property
    def row_grid(self) -> np.ndarray:
        """(n_windows * n_time, n_bl): every window's row_index, stacked along time."""
        return np.concatenate([w.row_index for w in self.windows])

    @property
    def n_rows_filled(self) -> int:
        """(integration, baseline) cells of the windows' grids without a row in the MS."""
        return sum(int(np.count_nonzero(w.row_index < 0)) for w in self.windows)

    @property
    def n_times_filled(self) -> int:
        """Integrations of the grid without any row in the MS."""
        held = np.zeros(self.n_time, bool)
        for w in self.windows:
            held |= np.any(w.row_index >= 0, axis=1)
        return int(np.count_nonzero(~held))


def subtable(tables, path: Path, name: str):
    return tables.table(str(path / name), ack=False, readonly=True)


def cell_shapes(tables, path: Path, ddids) -> dict[int, tuple[int, int]]:
    """(n_chan, n_corr) of the cells of the rows of each DATA_DESC_ID in ``ddids``."""
    with subtable(tables, path, "DATA_DESCRIPTION") as dd:
        spw_of, pol_of = dd.getcol("SPECTRAL_WINDOW_ID"), dd.getcol("POLARIZATION_ID")
    with subtable(tables, path, "SPECTRAL_WINDOW") as sw:
        n_chan = sw.getcol("NUM_CHAN")
    with subtable(tables, path, "POLARIZATION") as pol:
        n_corr = pol.getcol("NUM_CORR")
    return {int(d): (int(n_chan[spw_of[d]]), int(n_corr[pol_of[d]])) for d in ddids}


def _choose(kind: str, option: str, used: np.ndarray, wanted: int | None, more: str = "") -> int:
    """The one id of ``used`` to read, or ``wanted``; an MsError names the choices (and
    ``more`` ways to choose, when there are several)."""
    listed = ", ".join(str(int(u)) for u in used)
    if wanted is None:
        if used.size != 1:
            raise MsError(
                f"the data hold {used.size} {kind}s ({listed}); choose one with {option}{more}"
            )
        return int(used[0])
    if wanted not in used:
        raise MsError(f"{kind} {wanted} has no data rows ({kind}s with data: {listed})")
    return int(wanted)


def _asked_windows(used: np.ndarray, spw) -> list[int]:
    """The ids of the spectral windows ``spw`` asks for (None, an id, ids or 'all') among the
    ``used`` ones (those with data rows)."""
    if isinstance(spw, str):
        if spw != "all":
            raise MsError(f"--spw {spw}: give a window id, ids separated by commas, or all")
        return [int(u) for u in used]
    if spw is None or np.ndim(spw) == 0:
        return [_choose("spectral window", "--spw", used, spw, SEVERAL_WINDOWS)]
    ids = [_choose("spectral window", "--spw", used, int(s)) for s in spw]
    if not ids or len(set(ids)) != len(ids):
        raise MsError(f"--spw {','.join(map(str, ids))}: name each spectral window once")
    return ids


class _Asked(NamedTuple):
    """A spectral window asked for: its rows (mask over the table), DATA_DESC_ID,
    POLARIZATION_ID and id."""

    rows: np.ndarray
    ddid: int
    pol: int
    spw: int


class _Channels(NamedTuple):
    """The channels read of a window: ascending frequencies (n_chan,), width, whether the MS
    stores them descending, the MS channels read and how many the window holds."""

    freq: np.ndarray
    width: float
    reversed: bool
    chosen: slice
    n_chan_spw: int


def _spectral_windows(tables, path: Path, ms, spw) -> list[_Asked]:
    """The spectral windows asked for, in the order asked."""
    with subtable(tables, path, "DATA_DESCRIPTION") as dd:
        spw_of = dd.getcol("SPECTRAL_WINDOW_ID")
        pol_of = dd.getcol("POLARIZATION_ID")
    ddid_col = ms.getcol("DATA_DESC_ID") if len(spw_of) > 1 else np.zeros(ms.nrows(), int)
    used_ddids = np.unique(ddid_col)
    windows = []
    for chosen in _asked_windows(np.unique(spw_of[used_ddids]), spw):
        ddids = used_ddids[spw_of[used_ddids] == chosen]
        if ddids.size > 1:
            raise MsError(
                f"spectral window {chosen} appears with {ddids.size} polarization setups "
                f"(DATA_DESC_ID {', '.join(map(str, ddids))}); tabascal reads one"
            )
        windows.append(_Asked(ddid_col == ddids[0], int(ddids[0]), int(pol_of[ddids[0]]), chosen))
    return windows


def _correlations(tables, path: Path, windows: list[_Asked]) -> tuple[int, np.ndarray]:
    """The POLARIZATION_ID and CASA correlation codes of the windows, which must agree."""
    with subtable(tables, path, "POLARIZATION") as pols:
        types = [np.asarray(pols.getcell("CORR_TYPE", w.pol)) for w in windows]
    if any(not np.array_equal(t, types[0]) for t in types[1:]):
        held = "; ".join(
            f"{w.spw}: {', '.join(correlation_names(t))}"
            for w, t in zip(windows, types, strict=True)
        )
        raise MsError(
            f"the spectral windows hold different correlations ({held}); windows are read side "
            "by side only when they hold the same ones: choose one with --spw"
        )
    return windows[0].pol, types[0]


def _field_mask(tables, path: Path, ms, in_spw: np.ndarray, field: int | None):
    with subtable(tables, path, "FIELD") as fields:
        n_fields = fields.nrows()
    field_col = ms.getcol("FIELD_ID") if n_fields > 1 else np.zeros(ms.nrows(), int)
    chosen = _choose("field", "--field", np.unique(field_col[in_spw]), field)
    return field_col == chosen, chosen


def _check_antennas(rows: np.ndarray, ant1: np.ndarray, ant2: np.ndarray, n_ant: int):
    outside = np.flatnonzero((np.minimum(ant1, ant2) < 0) | (np.maximum(ant1, ant2) >= n_ant))
    if outside.size:
        named = ", ".join(f"{rows[r]} ({ant1[r]}, {ant2[r]})" for r in outside[:5])
        raise MsError(
            f"{outside.size} rows have a baseline of an antenna not in the ANTENNA table (ids "
            f"0 to {n_ant - 1}): rows {named} (ANTENNA1, ANTENNA2); the MS is inconsistent"
        )


def _interval(rows: np.ndarray, interval: np.ndarray) -> float:
    int_time = float(np.median(interval))
    off = np.flatnonzero(np.abs(interval - int_time) > SPACING_RTOL * int_time)
    if off.size:
        named = ", ".join(f"{rows[r]} ({interval[r]:.6g} s)" for r in off[:5])
        raise MsError(
            f"INTERVAL varies from {interval.min():.6g} to {interval.max():.6g} s (median "
            f"{int_time:.6g} s; rows {named}); tabascal needs one integration time"
        )
    return int_time


def _time_grid(rows: np.ndarray, times: np.ndarray, int_time: float, tolerance: float):
    """The integration of each row (n_rows,) int64 on a grid spaced by INTERVAL, its largest
    offset from the grid (a fraction of INTERVAL), and the (n_time,) TIME of each integration:
    the median of its rows' TIMEs (exactly theirs when they agree), the grid's where it has
    none. The grid's origin is the median offset of the rows from the first TIME's grid, so
    that no single jittered timestamp sets it."""
    if not SPACING_RTOL <= tolerance < 0.5:
        raise MsError(
            f"time tolerance {tolerance:g} is outside [{SPACING_RTOL:g}, 0.5): each row is "
            "placed on the nearest integration, so it must be nearer one than the next"
        )
    rel = times - times.min()
    slot = np.rint(rel / int_time)
    origin = float(np.median(rel - slot * int_time))
    slot = np.rint((rel - origin) / int_time)
    origin += slot.min() * int_time
    slot = (slot - slot.min()).astype(np.int64)
    offset = (rel - origin) / int_time - slot
    bad = np.flatnonzero(np.abs(offset) > tolerance)
    if bad.size:
        named = ", ".join(f"{rows[r]} (TIME {times[r]:.3f}, {offset[r]:+.3f})" for r in bad[:5])
        raise MsError(
            f"{bad.size} rows lie more than {tolerance:g} INTERVAL from the nearest integration "
            f"of the grid of {int_time:.6g} s (INTERVAL) steps from TIME "
            f"{times.min() + origin:.3f}: rows {named} (offsets in INTERVALs); raise the time "
            "tolerance (--time-tolerance, below 0.5) if each belongs to its nearest integration"
        )
    _check_gaps(rows, times, slot, int_time)
    n_time = int(slot.max()) + 1
    order = np.lexsort((times, slot))
    counts = np.bincount(slot, minlength=n_time)
    first = np.cumsum(counts) - counts
    time_mjd_s = times.min() + origin + int_time * np.arange(n_time)
    held = counts > 0
    low = times[order[first[held] + (counts[held] - 1) // 2]]
    high = times[order[first[held] + counts[held] // 2]]
    time_mjd_s[held] = (low + high) / 2
    return slot, float(np.abs(offset).max()), time_mjd_s


def _check_gaps(rows: np.ndarray, times: np.ndarray, slot: np.ndarray, int_time: float):
    """Refuse a grid that would be mostly filled cells (before allocating it: one stray TIME
    can put a row years from the others)."""
    held = np.unique(slot)
    n_empty = int(held[-1]) + 1 - held.size
    if n_empty > held.size:
        k = int(np.argmax(np.diff(held)))
        after = np.flatnonzero(slot == held[k + 1])[:5]
        raise MsError(
            f"the rows span {held[-1] + 1} integrations of {int_time:.6g} s but only "
            f"{held.size} hold any; the largest gap is {held[k + 1] - held[k] - 1} "
            f"integrations, before rows {', '.join(str(rows[r]) for r in after)} (TIME "
            f"{times[after[0]]:.3f}); tabascal fills missing integrations with flagged cells, "
            "which here would be most of the store: select the time range to read, e.g. taql "
            '"select from obs.ms where TIME < ... giving part.ms as plain"'
        )


def _baseline_grid(rows, slot, window, keys, n_ant: int, n_time: int, spws: list[int]):
    """The (n_windows, n_time, n_bl) table row of each (window, integration, baseline), -1
    where the MS has none, and the baselines' keys (ANTENNA1 * n_ant + ANTENNA2) in the order
    they first appear in time order (so a regular MS keeps its first integration's order).
    rows, slot, window, keys: (n_rows,) each row's table row, integration, index in ``spws``
    and baseline key."""
    in_time_order = np.argsort(slot, kind="stable")
    found, first = np.unique(keys[in_time_order], return_index=True)
    rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    n_bl = found.size
    cell = (window * n_time + slot) * n_bl + rank[np.searchsorted(found, keys)]
    by_cell = np.argsort(cell, kind="stable")
    twice = np.flatnonzero(np.diff(cell[by_cell]) == 0)
    if twice.size:
        r0, r1 = by_cell[twice[0]], by_cell[twice[0] + 1]
        where = f" of spectral window {spws[window[r0]]}" if len(spws) > 1 else ""
        raise MsError(
            f"baseline {divmod(int(keys[r0]), n_ant)} appears twice in integration "
            f"{slot[r0]}{where} (rows {rows[r0]} and {rows[r1]}; {twice.size} such pairs); "
            "each baseline may appear once per integration"
        )
    row_index = np.full(len(spws) * n_time * n_bl, -1, np.int64)
    row_index[cell] = rows
    order = found[np.argsort(first, kind="stable")]
    return row_index.reshape(len(spws), n_time, n_bl), order


def index_range(wanted: slice | None, n: int, kind: str, option: str, of: str = "") -> slice:
    """``wanted`` (Python slice semantics, step 1; None: all) of ``n`` indices as
    ``slice(start, stop)`` with 0 <= start < stop <= n. An MsError names the range there is
    (``of``: where they are, e.g. in which band) when it is empty, has a step or reaches past
    either end."""
    if wanted is None:
        return slice(0, n)
    text = f"{option} {_slice_text(wanted)}"
    there = f"the {n} {kind}s there are (indices 0 to {n - 1}, or -{n} to -1 from the end)"
    there = f"{there} {of}" if of else there
    if wanted.step not in (None, 1):
        raise MsError(f"{text}: {kind}s are read contiguously, without a step, from {there}")
    for end in (wanted.start, wanted.stop):
        if end is not None and not -n <= end <= n:
            raise MsError(f"{text} reaches past {there}")
    start, stop, _ = wanted.indices(n)
    if stop <= start:
        raise MsError(f"{text} selects none of {there}")
    return slice(start, stop)


def _slice_text(s: slice) -> str:
    text = f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
    return text if s.step is None else f"{text}:{s.step}"


def _channels(tables, path: Path, spw: int, channels: slice | None) -> _Channels:
    """The selected channels of window ``spw``, each of one width (else refused, naming the
    odd ones)."""
    with subtable(tables, path, "SPECTRAL_WINDOW") as sw:
        freq = np.asarray(sw.getcell("CHAN_FREQ", spw), dtype=np.float64)
        width = np.abs(np.asarray(sw.getcell("CHAN_WIDTH", spw), dtype=np.float64))
    n_chan_spw = freq.size
    chosen = index_range(channels, n_chan_spw, "channel", "--channels")
    freq, width = freq[chosen], width[chosen]
    if np.ptp(width) > CHANNEL_RTOL * width.max():
        odd = np.flatnonzero(np.abs(width - np.median(width)) > CHANNEL_RTOL * width.max())
        named = ", ".join(f"{chosen.start + c} ({width[c]:.6g} Hz)" for c in odd[:5])
        raise MsError(
            f"channel widths of spectral window {spw} vary ({width.min():.6g} to "
            f"{width.max():.6g} Hz; median {np.median(width):.6g} Hz, channels {named}); "
            "tabascal needs equal channels"
        )
    reverse = freq.size > 1 and freq[1] < freq[0]
    freq = freq[::-1] if reverse else freq
    return _Channels(freq, float(width[0]), bool(reverse), chosen, n_chan_spw)


def _ms_channels(part: _Channels) -> np.ndarray:
    """The MS channel number of each of ``part``'s ascending channels."""
    number = part.chosen.start + np.arange(part.freq.size)
    return number[::-1] if part.reversed else number


def _pairs_text(steps: np.ndarray, bad: np.ndarray, names: np.ndarray) -> str:
    """The neighbouring channels ``bad`` (indices into the ascending steps), named by
    ``names`` (each ascending channel's; MS numbers are given lower first), with their
    step: at most five."""
    named = []
    for k in bad[:5]:
        pair = names[k : k + 2]
        lo, hi = sorted(pair) if np.issubdtype(pair.dtype, np.integer) else pair
        named.append(f"{lo} and {hi} ({steps[k] / 1e3:.9g} kHz)")
    return ", ".join(named) + (f" and {bad.size - 5} more" if bad.size > 5 else "")


class _Grid(NamedTuple):
    """A regular frequency grid holding some channels: its step (Hz) and each channel's place
    on it (n_chan,) int64, the lowest 0."""

    spacing: float
    place: np.ndarray

    @property
    def size(self) -> int:
        return int(self.place[-1]) + 1


def _regular_grid(freq: np.ndarray, width: float, names: np.ndarray, where: str) -> _Grid:
    """The coarsest regular grid, of a step no less than ``width``, on which the ascending
    channel centres ``freq`` (Hz) of ``where`` lie (``_fitted_grid``). Refused: channels that
    overlap (centres closer than the width) and centres on no such grid, naming the channels
    by ``names``."""
    if freq.size < 2:
        return _Grid(width, np.zeros(freq.size, np.int64))
    steps = np.diff(freq)
    overlap = np.flatnonzero(steps < width * (1 - CHANNEL_RTOL))
    if overlap.size:
        raise MsError(
            f"channels of {where} overlap: they are {width / 1e3:.9g} kHz wide but the centres "
            f"of channels {_pairs_text(steps, overlap, names)} are closer; tabascal needs "
            "channels at least one width apart"
        )
    grid = _fitted_grid(freq, width)
    if grid is None:
        raise MsError(
            f"channels of {where} {_off_grid_text(freq, names)}: the model's frequency grid is "
            "regular; choose evenly spaced channels with --channels"
        )
    return grid


def _fitted_grid(freq: np.ndarray, width: float) -> _Grid | None:
    """The coarsest regular grid, of a step no less than ``width``, holding the ascending
    centres ``freq`` (at least two, none closer than ``width``) to ``CHANNEL_RTOL`` of its
    step: their step itself when they are evenly spaced; a step dividing their smallest one
    by at most ``GRID_DIVISORS`` when channels are missing between them. None: no such grid."""
    steps = np.diff(freq)
    smallest = float(steps.min())
    for divisor in range(1, GRID_DIVISORS + 1):
        base = smallest / divisor
        if base < width * (1 - CHANNEL_RTOL):
            break
        place = np.concatenate([[0], np.cumsum(np.rint(steps / base))]).astype(np.int64)
        spacing = float(freq[-1] - freq[0]) / int(place[-1])
        if np.all(np.abs(freq - freq[0] - place * spacing) <= CHANNEL_RTOL * spacing):
            return _Grid(spacing, place)
    return None


def _off_grid_text(freq: np.ndarray, names: np.ndarray) -> str:
    """Why the centres ``freq`` lie on no regular grid, naming the channels by ``names``:
    the neighbours not a whole number of the smallest step apart."""
    steps = np.diff(freq)
    smallest = float(steps.min())
    ratio = steps / smallest
    odd = np.flatnonzero(np.abs(ratio - np.rint(ratio)) > CHANNEL_RTOL * ratio)
    odd = odd if odd.size else np.flatnonzero(steps > smallest * (1 + CHANNEL_RTOL))
    return (
        f"are not evenly spaced, nor on a regular grid with channels missing (steps "
        f"{steps.min() / 1e3:.9g} to {steps.max() / 1e3:.9g} kHz; channels "
        f"{_pairs_text(steps, odd, names)} are not a whole number of {smallest / 1e3:.9g} kHz "
        "steps apart)"
    )


def _check_filled(grid: _Grid, n_read: int, where: str) -> None:
    """Refuse a grid whose channels missing from the data outnumber those read."""
    missing = grid.size - n_read
    if missing > n_read:
        raise MsError(
            f"the {n_read} channels read of {where} lie on a grid of {grid.size} channels "
            f"{grid.spacing / 1e3:.9g} kHz apart: its {missing} channels missing from the data "
            "would be filled as flagged, more than those read; choose channels closer together "
            "with --channels (or fewer windows with --spw)"
        )


def _window_text(spw: int, part: _Channels) -> str:
    freq, width = part.freq, part.width
    spacing = float(np.median(np.diff(freq))) if freq.size > 1 else width
    spaced = abs(spacing - width) > CHANNEL_RTOL * width
    every = f" every {spacing / 1e3:.6g} kHz" if spaced else ""
    return (
        f"{spw} ({freq.size} channels of {width / 1e3:.6g} kHz{every}, {freq[0] / 1e6:.9g} to "
        f"{freq[-1] / 1e6:.9g} MHz)"
    )


def _band_problem(spws: list[int], parts: list[_Channels]) -> str | None:
    """What keeps windows (ascending in frequency) from being one band, or None."""
    width = parts[0].width
    for k in range(1, len(spws)):
        if abs(parts[k].width - width) > CHANNEL_RTOL * width:
            return "their channels differ in width"
        step = parts[k].freq[0] - parts[k - 1].freq[-1]
        if step < width * (1 - CHANNEL_RTOL):
            return (
                f"the first channel of window {spws[k]} is {step / 1e3:+.9g} kHz from the last "
                f"of window {spws[k - 1]}, less than a channel's width: the channels overlap"
            )
    freq = np.concatenate([p.freq for p in parts])
    if _fitted_grid(freq, width) is not None:  # several windows: two channels at least
        return None
    pairs = zip(spws, parts, strict=True)
    names = np.array([f"{s}:{c}" for s, p in pairs for c in _ms_channels(p)])
    return f"channels of the band {_off_grid_text(freq, names)}"


def _check_side_by_side(spws: list[int], parts: list[_Channels]) -> None:
    """Refuse windows (ascending in frequency) that are not one band: equal channel widths,
    each above the one below, their channels together on one regular grid."""
    for spw, part in zip(spws, parts, strict=True):
        _regular_grid(part.freq, part.width, _ms_channels(part), f"spectral window {spw}")
    problem = _band_problem(spws, parts)
    if problem is None:
        return
    described = "; ".join(_window_text(s, p) for s, p in zip(spws, parts, strict=True))
    raise MsError(
        f"spectral windows {', '.join(map(str, spws))} cannot be read as one band: {problem}. "
        f"The windows: {described}. Windows are read side by side only when their channels "
        "are of equal width, each window above the one below, and their centres lie on one "
        "regular grid (channels missing between them are filled as flagged); choose one with "
        "--spw"
    )


def _band(tables, path: Path, spws: list[int], channels: slice | None):
    """The windows read in ascending frequency (their indices in ``spws``), the frequencies
    (n_chan,) of the regular grid their channels lie on (ascending; a channel missing from
    the data is a place of the grid between them) and the width, and per window read (in
    that order) its channels and their places on the grid. Several windows are joined side
    by side and ``channels`` taken of the band they make; a window holding none of them is
    not read."""
    if len(spws) == 1:
        read, parts = [0], [_channels(tables, path, spws[0], channels)]
        names, where = _ms_channels(parts[0]), f"spectral window {spws[0]}"
    else:
        whole = [_channels(tables, path, spw, None) for spw in spws]
        order = sorted(range(len(spws)), key=lambda k: whole[k].freq[0])
        whole = [whole[k] for k in order]
        in_order = [spws[k] for k in order]
        _check_side_by_side(in_order, whole)
        read, parts, names = _band_channels(order, in_order, whole, channels)
        where = f"spectral windows {', '.join(map(str, in_order))}"
    freq = np.concatenate([p.freq for p in parts])
    width = parts[0].width
    grid = _regular_grid(freq, width, names, where)
    _check_filled(grid, freq.size, where)
    grid_freq = freq[0] + grid.spacing * np.arange(grid.size)
    grid_freq[grid.place] = freq  # the channels held keep their centres exactly
    ends = np.cumsum([0] + [p.freq.size for p in parts])
    places = [grid.place[a:b] for a, b in itertools.pairwise(ends)]
    return read, grid_freq, width, list(zip(parts, places, strict=True))


def _band_channels(order: list[int], spws: list[int], whole: list[_Channels], channels):
    """Of windows read whole (ascending in frequency; ``order``: their indices in the windows
    asked), those holding some of ``channels`` of the band they make: their indices, their
    channels in the range, and the names ("spw:channel") of those channels."""
    n_band = sum(p.freq.size for p in whole)
    of = f"in the band of spectral windows {', '.join(map(str, spws))}, counted from its lowest"
    chosen = index_range(channels, n_band, "channel", "--channels", f"{of} frequency")
    read, parts, names = [], [], []
    first = 0  # the band's channel where the window begins
    for k, spw, part in zip(order, spws, whole, strict=True):
        lo = max(chosen.start - first, 0)
        hi = min(chosen.stop - first, part.freq.size)
        if lo < hi:
            read.append(k)
            parts.append(_part(part, slice(lo, hi)))
            names.extend(f"{spw}:{c}" for c in _ms_channels(parts[-1]))
        first += part.freq.size
    return read, parts, np.asarray(names)


def _part(whole: _Channels, ascending: slice) -> _Channels:
    """The channels ``ascending`` (counted in ascending frequency) of a window read whole:
    the MS channels that hold them are counted from the top when it stores them descending."""
    n = whole.n_chan_spw
    chosen = slice(n - ascending.stop, n - ascending.start) if whole.reversed else ascending
    return whole._replace(freq=whole.freq[ascending], chosen=chosen)


def scan(
    tables,
    path: Path,
    ms,
    spw=None,
    field: int | None = None,
    time_tolerance: float = TIME_TOLERANCE,
    channels: slice | None = None,
    times: slice | None = None,
):
    """The :class:`MsSelection` of spectral window(s) ``spw`` (an id, ids, 'all', or None
    when the data hold only one) and field ``field`` (None when the data hold only one) of
    the open main table ``ms``; rows may lie up to ``time_tolerance`` INTERVALs from their
    integration of the grid; ``channels`` (of the window, or of the band of several windows)
    and ``times`` the ranges to read, None for all (see the module)."""
    asked = _spectral_windows(tables, path, ms, spw)
    pol, corr_types = _correlations(tables, path, asked)
    order, freq, width, channel_parts = _band(tables, path, [w.spw for w in asked], channels)
    asked = [asked[k] for k in order]
    in_spw = np.any([w.rows for w in asked], axis=0)
    in_field, field_id = _field_mask(tables, path, ms, in_spw, field)
    ant1, ant2 = ms.getcol("ANTENNA1"), ms.getcol("ANTENNA2")
    chosen = in_spw & in_field
    auto = chosen & (ant1 == ant2)
    rows = np.flatnonzero(chosen & ~auto)
    if rows.size == 0:
        raise MsError(f"{path} has no cross-correlation rows in the selection")
    window = np.zeros(ms.nrows(), np.int64)
    for k, w in enumerate(asked):
        window[w.rows] = k
    window = window[rows]
    ant1, ant2 = ant1[rows].astype(np.int64), ant2[rows].astype(np.int64)
    with subtable(tables, path, "ANTENNA") as ants:
        n_ant = ants.nrows()
    _check_antennas(rows, ant1, ant2, n_ant)
    row_time = ms.getcol("TIME")[rows]
    int_time = _interval(rows, ms.getcol("INTERVAL")[rows])
    slot, max_offset, time_mjd_s = _time_grid(rows, row_time, int_time, time_tolerance)
    n_time_grid = time_mjd_s.size
    spws = [w.spw for w in asked]
    keys = ant1 * n_ant + ant2
    row_index, keys = _baseline_grid(rows, slot, window, keys, n_ant, n_time_grid, spws)
    chosen_times = index_range(times, n_time_grid, "integration", "--times")
    row_index, time_mjd_s = row_index[:, chosen_times], time_mjd_s[chosen_times]
    in_times = np.any(row_index >= 0, axis=(0, 1))
    if not in_times.any():
        raise MsError(
            f"integrations {chosen_times.start}:{chosen_times.stop} of the {n_time_grid} hold "
            "no rows (they are a gap in the observation); choose others with --times"
        )
    row_index, keys = row_index[:, :, in_times], keys[in_times]
    windows = tuple(
        Window(w.spw, w.ddid, grid, part.chosen, part.n_chan_spw, part.reversed, band)
        for w, grid, (part, band) in zip(asked, row_index, channel_parts, strict=True)
    )
    return MsSelection(
        windows=windows,
        ant1=keys // n_ant,
        ant2=keys % n_ant,
        time_mjd_s=time_mjd_s,
        interval_s=int_time,
        pol=pol,
        field=field_id,
        corr_types=corr_types,
        chan_freq_hz=freq,
        chan_width_hz=width,
        n_autocorrelations=int(auto.sum()),
        n_rows_table=ms.nrows(),
        in_time_order=bool(np.all(np.diff(row_time) >= 0)),
        time_tolerance=float(time_tolerance),
        max_time_offset=max_offset,
        times=chosen_times,
        n_time_grid=n_time_grid,
    )
