"""A Measurement Set read as a tabascal :class:`~tabascal.store.Observation`.

What is read (see :mod:`tabascal.measurement_set.selection` for which rows, and how rows in
any order, with jittered times or missing, make a (time, baseline) grid):

- the visibilities of one data column (``DATA`` by default) in one correlation
  (:mod:`~tabascal.measurement_set.correlations`), flags from ``FLAG`` (of the correlations
  used) OR ``FLAG_ROW``, non-finite values flagged too; a (time, baseline) without a row in
  the MS is filled with vis 0, flagged (a warning counts them);
- the noise (:mod:`~tabascal.measurement_set.noise`, one value per baseline, the standard
  deviation of each of the real and imaginary parts): from the MS's noise column that
  describes the data column (SIGMA_SPECTRUM, WEIGHT_SPECTRUM, SIGMA or WEIGHT for DATA;
  WEIGHT_SPECTRUM or WEIGHT for CORRECTED_DATA; ``noise = 1 / sqrt(WEIGHT)``), per baseline
  the quadratic mean over its unflagged cells (rows for SIGMA and WEIGHT: those not flagged by
  ``FLAG_ROW``; all if every one is), a warning when it varies by more than 1 %; a scalar when
  a per-row column is the same on every selected row. Cells whose per-channel weight is 0
  (noise infinite) are flagged. Unless ``noise='column'``, a column that is a placeholder
  (SIGMA 1 everywhere, a constant WEIGHT) gives way to an estimate from the data
  (``noise='estimate'``): differences of adjacent integrations (adjacent channels for a
  single integration), fitted to per-antenna factors. With ``noise_per_channel`` the noise is
  one value per baseline and channel: a per-channel column's quadratic mean over each cell's
  integrations, or the estimate made within each channel from adjacent integrations
  (:func:`~tabascal.measurement_set.noise.channel_noise`), fitted to per-antenna factors
  channel by channel; a per-row column, which has no channel axis, still gives one per
  baseline (a warning says so). Reading a per-channel column or estimating reads the data
  once more, the first time the noise is needed;
- antennas: only those in a selected baseline are kept (``a1``, ``a2`` index them in MS order;
  ``metadata['measurement_set']['antenna_ids']`` maps back), positions from ANTENNA
  ``POSITION`` (ITRF), the dish diameter is the smallest of theirs (its beam is the widest, so
  the sky model's field covers every station's; a warning when they differ);
- times from ``TIME`` (each integration's median) and ``INTERVAL``, channels from
  SPECTRAL_WINDOW ``CHAN_FREQ`` and ``CHAN_WIDTH`` (descending channels are reversed to
  ascending; ``channels`` and ``times`` read a range of them, :mod:`.selection`; several
  windows are read side by side, each window's rows giving its channels), the phase
  centre from FIELD ``PHASE_DIR`` (:mod:`~tabascal.measurement_set.frames`), gast0 the IAU
  1982 GMST of the start;
- satellites: given orbits, else a TLE file and catalogue numbers, else the orbits tabascal
  stored in the MS when it wrote it (table keyword ``TABASCAL_ORBITS``), else none.

Only the rows of the baselines asked for are read from the big columns, one block of
integrations at a time.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tabascal.measurement_set import _casacore
from tabascal.measurement_set import noise as ms_noise
from tabascal.measurement_set.correlations import correlation_plan
from tabascal.measurement_set.metadata import METADATA_KEYWORD, read_meta
from tabascal.measurement_set.metadata import ORBITS_KEYWORD as ORBITS_KEYWORD  # writer's import
from tabascal.measurement_set.selection import (
    TIME_TOLERANCE,
    MsError,
    Window,
    cell_shapes,
    scan,
)
from tabascal.store import Observation, ObservationMeta, row_blocks

log = logging.getLogger(__name__)

BLOCK_BYTES = 64 * 2**20  # visibility cells read per block of integrations
SIGMA_SPREAD = 0.01
NOISE_METHODS = ("column", "estimate")
SCATTER_WARNING = 2.0  # estimates scattering this many times their sampling about the fit


@dataclass(frozen=True)
class ReadStats:
    """Table rows read from the big columns by the last :meth:`MeasurementSetReader.read`."""

    rows_read: int
    calls: int


@dataclass(frozen=True)
class NoiseSource:
    """Where the noise came from, for the import summary and the store's metadata.

    method: 'column' or 'estimate'. column: the MS column read ('column'), or the placeholder
    that gave way to the estimate (None when the estimate was asked for). reason: why, or
    None. axis: 'integrations' or 'channels', what the estimate differenced (else None).
    median: the median noise over the baselines (Jy; over the baselines and channels when per
    channel). scatter, expected_scatter: of the per-baseline estimates about their per-antenna
    fit, and from their sampling alone (:class:`~tabascal.measurement_set.noise.AntennaNoise`,
    per channel their rms over the channels: ``ChannelNoise``; estimate only). per_channel:
    whether the noise is per baseline and channel.
    """

    method: str
    column: str | None
    reason: str | None
    median: float
    axis: str | None = None
    scatter: float | None = None
    expected_scatter: float | None = None
    per_channel: bool = False


class MeasurementSetReader:
    """An open Measurement Set as an observation: metadata at once, rows on demand.

    column: data column ('DATA', 'CORRECTED_DATA', ...). correlation: 'I' (default), 'XX',
    'YY', 'RR' or 'LL'. spw: the spectral window id, or several (a sequence of ids, or 'all')
    read side by side as one band: windows of equal channels on one regular grid, each above
    the one below (:mod:`.selection`). field: the field id. Each is
    needed when the data hold several. orbits: the emitters; or tle_file with satellites
    (catalogue numbers, None: all in the file) and ut1_utc_s, and ground_file and
    aircraft_file (``observation.emitters.read_ground`` and ``read_tracks``): the ground
    transmitters and aircraft tracks. time_tolerance: how far (in INTERVALs, at least 0.001
    and below 0.5) a row's TIME may lie from its integration of the grid (:mod:`.selection`).
    channels, times: slices
    (step 1) of the spectral window's channels (MS order; of several, the band's, ascending)
    and of the grid's integrations to read, None for all. noise: 'column' (the MS's noise
    column), 'estimate' (from the data), or None: the column unless it is a placeholder (see
    the module). noise_per_channel: one noise per baseline and channel (see the module). Use
    as a context manager, or call :meth:`close`.

    ``meta`` holds what the small columns and subtables give; the noise (``noise``,
    ``noise_source``) is worked out the first time it is needed, which reads the data for an
    estimate or a per-channel column.
    """

    def __init__(
        self,
        path,
        *,
        column: str = "DATA",
        correlation: str = "I",
        spw: int | None = None,
        field: int | None = None,
        orbits=None,
        tle_file=None,
        satellites=None,
        ut1_utc_s: float = 0.0,
        ground_file=None,
        aircraft_file=None,
        time_tolerance: float = TIME_TOLERANCE,
        channels: slice | None = None,
        times: slice | None = None,
        noise: str | None = None,
        noise_per_channel: bool = False,
    ):
        if noise not in (None, *NOISE_METHODS):
            raise MsError(f"noise {noise!r}: choose one of {NOISE_METHODS}, or None")
        self._per_channel = noise_per_channel
        tables = _casacore.tables()
        self.path = Path(path)
        if not self.path.exists():
            raise MsError(f"{self.path} does not exist")
        if not (self.path / "table.dat").exists():
            raise MsError(f"{self.path} is not a Measurement Set (no table.dat)")
        self._table = tables.table(str(self.path), ack=False, readonly=True)
        try:
            self._open(tables, column, correlation, spw, field, time_tolerance, channels, times)
            self.meta = read_meta(
                tables,
                self.path,
                self._table,
                self.selection,
                column=column,
                plan=self.plan,
                orbits=orbits,
                tle_file=tle_file,
                satellites=satellites,
                ut1_utc_s=ut1_utc_s,
                ground_file=ground_file,
                aircraft_file=aircraft_file,
            )
            self.stats = ReadStats(0, 0)
            self._choose_noise(noise)
        except BaseException:
            self._table.close()
            raise

    def _open(self, tables, column, correlation, spw, field, time_tolerance, channels, times):
        names = self._table.colnames()
        if column not in names:
            data_columns = [c for c in names if c.endswith("DATA")]
            raise MsError(f"{self.path} has no column '{column}' (data columns: {data_columns})")
        if self._table.getcoldesc(column).get("valueType") not in ("complex", "dcomplex"):
            raise MsError(f"column '{column}' of {self.path} is not complex")
        self.column = column
        self.selection = scan(
            tables, self.path, self._table, spw, field, time_tolerance, channels, times
        )
        try:
            self.plan = correlation_plan(self.selection.corr_types, correlation)
        except ValueError as err:
            raise MsError(f"{self.path}: {err}") from None
        if self.plan.stands_for:
            log.warning(
                "%s holds one correlation, %s: reading it for the Stokes %s asked (an "
                "unpolarised sky has XX = YY = I); give --correlation %s to ask for it",
                self.path,
                self.plan.name,
                self.plan.stands_for,
                self.plan.name,
            )
        sel = self.selection
        if sel.n_rows_filled:
            log.warning(
                "%s has no row for %d of the %d (integration, baseline) cells of the grid "
                "(%d whole integrations): they are filled with vis 0, flagged",
                self.path,
                sel.n_rows_filled,
                sel.row_grid.size,
                sel.n_times_filled,
            )
        if sel.n_channels_filled:
            log.warning(
                "%s: %d of the %d channels of the grid the channels read lie on are missing "
                "from the data: they are filled with vis 0, flagged",
                self.path,
                sel.n_channels_filled,
                sel.chan_freq_hz.size,
            )
        # One getcol cannot read a span of rows whose cells differ in shape (windows of
        # different sizes in a column of varying shape); such rows are selected one by one.
        ddids = np.unique(self._table.getcol("DATA_DESC_ID"))
        self._one_cell_shape = len(set(cell_shapes(tables, self.path, ddids).values())) == 1
        time_ref = self._table.getcolkeyword("TIME", "MEASINFO").get("Ref", "UTC")
        if time_ref != "UTC":
            raise MsError(f"{self.path}: TIME is in {time_ref}; tabascal reads UTC times")

    def _choose_noise(self, method: str | None) -> None:
        """The noise columns that describe the data column, best first; the noise is worked
        out now when the best is a per-row column (cheap), else when first needed."""
        self._noise_method = method
        self._noise, self._noise_source = None, None
        grid = self.selection.row_grid
        held = grid[grid >= 0]
        present = [
            name
            for name in (*ms_noise.SPECTRUM_COLUMNS, *ms_noise.ROW_COLUMNS)
            if name in self._table.colnames() and self._table.iscelldefined(name, int(held[0]))
        ]
        self._noise_columns = ms_noise.noise_columns(self.column, present)
        if not self._noise_columns and method == "column":
            raise MsError(
                f"{self.path} has no noise column for {self.column} (SIGMA_SPECTRUM, "
                "WEIGHT_SPECTRUM, SIGMA or WEIGHT); estimate the noise from the data instead "
                "(--noise estimate)"
            )
        self._resolve_noise(without_data=True)

    def _resolve_noise(self, without_data: bool = False) -> None:
        """The first noise column that is not a placeholder (the first column whatever it
        holds when the column was asked for); the estimate when every one is, or when asked.
        ``without_data``: stop, leaving the noise unknown, where a per-channel column or the
        data would have to be read."""
        # A SIGMA of 1 that tabascal wrote is its simulation's noise, not a placeholder.
        trusted = METADATA_KEYWORD in self._table.getkeywords()
        placeholders = []
        for name in self._noise_columns if self._noise_method != "estimate" else []:
            per_row = name in ms_noise.ROW_COLUMNS
            if without_data and not per_row:
                return
            if per_row:
                grid = self.selection.row_grid
                values = self._table.getcol(name)[grid]
                used = values[grid >= 0][:, list(self.plan.indices)]
                lowest, highest = float(used.min()), float(used.max())
            else:
                lowest, highest = self._column_range(name)
            placeholder = not trusted and ms_noise.is_placeholder(name, lowest, highest)
            if placeholder and self._noise_method != "column":
                placeholders.append((name, lowest))
                continue
            reason = ms_noise.placeholder_text([(name, lowest)]) if placeholder else None
            if per_row:
                self._row_noise(name, values, reason)
            else:
                self._spectrum_noise(name, reason)
            return
        if without_data:
            return
        if placeholders:
            reason = ms_noise.placeholder_text(placeholders)
        elif self._noise_method is None:
            reason = f"{self.path} has no noise column for {self.column}"
        else:
            reason = None  # asked for
        self._estimate_noise(placeholders[0][0] if placeholders else None, reason)

    def _row_noise(self, name: str, values: np.ndarray, reason: str | None) -> None:
        """The noise from the per-row column ``name`` (SIGMA or WEIGHT; values at each
        (integration, baseline) of each window, (n_windows * n_time, n_bl, n_corr)) over rows
        not flagged by FLAG_ROW."""
        idx = self.selection.row_grid
        held = idx >= 0
        sigma = np.where(held, self.plan.sigma(ms_noise.noise_from_column(name, values)), np.nan)
        good = held & ~self._table.getcol("FLAG_ROW")[idx]
        noise, spread = ms_noise.quadratic_mean(sigma.T, good.T)
        self._check_noise(name, noise, spread, "in time")
        if self._per_channel:
            log.warning(
                "%s has no channel axis: the noise is one value per baseline, not per channel "
                "as asked (--noise estimate estimates it per channel from the data)",
                name,
            )
        scalar = np.all(noise == noise[0])
        self._set_noise(np.float64(noise[0]) if scalar else noise, "column", name, reason)

    def _spectrum_noise(self, name: str, reason: str | None) -> None:
        """The noise from the per-channel column ``name`` over each baseline's unflagged
        cells (each channel's, with a noise per channel): a pass over the data."""
        mean = ms_noise.channel_quadratic_mean if self._per_channel else ms_noise.quadratic_mean
        parts = []
        for rows in self._pass_blocks():
            _, flags, cell_noise = self._block(rows, name)
            parts.append(mean(cell_noise, ~flags))
        noise, spread = (np.concatenate(p) for p in zip(*parts, strict=True))
        over = "in time" if self._per_channel else "over a baseline's cells"
        self._check_noise(name, noise, spread, over)
        self._set_noise(noise, "column", name, reason)

    def _check_noise(self, name: str, noise: np.ndarray, spread: np.ndarray, over: str):
        bad = np.argwhere(~np.isfinite(noise) | (noise <= 0))
        if bad.size:
            b = int(bad[0][0])
            channel = f" in channel {int(bad[0][1])}" if noise.ndim == 2 else ""
            raise MsError(
                f"{self.path}: {name} of baseline ({self.selection.ant1[b]}, "
                f"{self.selection.ant2[b]}){channel} gives noise {noise[tuple(bad[0])]}; "
                "tabascal needs positive noise (--noise estimate estimates it from the data)"
            )
        if spread.max() > SIGMA_SPREAD:
            log.warning(
                "%s varies %s by up to %.1f %% on a baseline; using each baseline's quadratic mean",
                name,
                over,
                100 * spread.max(),
            )

    def _estimate_noise(self, column: str | None, reason: str | None) -> None:
        """The noise from the data (:mod:`.noise`): differences of adjacent integrations
        (channels when the selection holds one integration), fitted to per-antenna factors;
        per channel, differences of adjacent integrations within each channel, fitted channel
        by channel."""
        meta = self.meta
        axis, along = (2, "integrations") if meta.n_time > 1 else (1, "channels")
        if self._per_channel and meta.n_time == 1:
            raise MsError(
                f"{self.path}: a noise per channel is estimated from differences of adjacent "
                "integrations within each channel, and the selection holds one integration: "
                "read more integrations (--times), or leave out --noise-per-channel"
            )
        parts = []
        for rows in self._pass_blocks():
            vis, flags, _ = self._block(rows)
            if self._per_channel:
                parts.append(ms_noise.channel_noise(vis, flags))
            else:
                parts.append(ms_noise.baseline_noise(vis, flags, axis))
        noise_bl, n_samples = (np.concatenate(p) for p in zip(*parts, strict=True))
        if self._per_channel:
            fit_noise = ms_noise.antenna_noise_per_channel
        else:
            fit_noise = ms_noise.antenna_noise
        try:
            fit = fit_noise(noise_bl, n_samples, meta.a1, meta.a2, meta.n_ant)
        except ValueError as err:
            raise MsError(
                f"{self.path}: cannot estimate the noise from differences of adjacent {along}: "
                f"{err}; read more {along}, or give the noise in SIGMA (--noise column)"
            ) from None
        if fit.scatter > SCATTER_WARNING * fit.expected_scatter:
            log.warning(
                "the baselines' noise estimates scatter by %.1f %% about per-antenna factors, "
                "%.1f times what their sampling gives (%.1f %%): some baselines hold signal "
                "that changes between adjacent %s by more than the noise",
                100 * fit.scatter,
                fit.scatter / fit.expected_scatter,
                100 * fit.expected_scatter,
                along,
            )
        self._set_noise(
            fit.noise,
            "estimate",
            column,
            reason,
            axis=along,
            scatter=fit.scatter,
            expected_scatter=fit.expected_scatter,
        )

    def _set_noise(self, noise, method: str, column: str | None, reason: str | None, **fit):
        self._noise = noise
        median = float(np.median(noise))
        per_channel = np.ndim(noise) == 2
        self._noise_source = NoiseSource(
            method, column, reason, median, per_channel=per_channel, **fit
        )

    @property
    def noise(self) -> np.ndarray:
        """() float64 Jy when read from a per-row column equal on every selected row, else
        (n_bl,), or (n_bl, n_freq) per channel (``noise_per_channel``, but for a per-row
        column); worked out (reading the data if need be) the first time it is asked for."""
        if self._noise is None:
            self._resolve_noise()
        return self._noise

    @property
    def noise_source(self) -> NoiseSource:
        """Where :attr:`noise` came from, and why."""
        if self._noise is None:
            self._resolve_noise()
        return self._noise_source

    @property
    def noise_per_baseline(self) -> bool:
        """Whether the noise has a baseline axis, (n_bl,) or (n_bl, n_freq), known without
        reading the data: it has, unless read from a per-row column equal on every selected
        row."""
        return self._noise is None or np.ndim(self._noise) >= 1

    @property
    def noise_per_channel(self) -> bool:
        """Whether the noise is (n_bl, n_freq), known without reading the data: it is when
        asked for, unless it comes from a per-row column (worked out when the reader opens)."""
        return self._per_channel if self._noise is None else np.ndim(self._noise) == 2

    def _column_range(self, name: str) -> tuple[float, float]:
        """Smallest and largest value of the per-channel column ``name`` over the selected
        rows, channels and correlations used."""
        n_chan = self.meta.n_freq * len(self.selection.corr_types)
        step = max(1, BLOCK_BYTES // (8 * n_chan))
        lowest, highest = np.inf, -np.inf
        for window in self.selection.windows:
            rownrs = np.sort(window.row_index[window.row_index >= 0])
            for k in range(0, rownrs.size, step):
                cells = self._cells(name, rownrs[k : k + step], window)
                used = cells[..., list(self.plan.indices)]
                lowest, highest = min(lowest, used.min()), max(highest, used.max())
        return float(lowest), float(highest)

    def _pass_blocks(self):
        """Blocks of baselines for a pass over the data, about BLOCK_BYTES of vis each."""
        per_row = 16 * self.meta.n_freq * self.meta.n_time
        return row_blocks(self.selection.n_bl, max(1, BLOCK_BYTES // per_row))

    def _cells(self, name: str, rownrs: np.ndarray, window: Window | None = None) -> np.ndarray:
        """Column ``name`` at table rows ``rownrs`` (any order), reading the covering span when
        at most half of it is unwanted, else just those rows; of a column with a channel axis,
        only the channels read of ``window`` (the spectral window of the rows) when they are
        not all of them."""
        lo, hi = int(rownrs.min()), int(rownrs.max()) + 1
        uniform = self._one_cell_shape or self._table.isscalarcol(name)
        span = uniform and hi - lo <= 2 * rownrs.size
        wanted = None if span else np.unique(rownrs)
        table = self._table if span else self._table.selectrows(wanted)
        rows = {"startrow": lo, "nrow": hi - lo} if span else {}
        self._count(hi - lo if span else wanted.size)
        channels = None if window is None else window.channels
        if channels is None or channels == slice(0, window.n_chan_spw):
            cells = table.getcol(name, **rows)
        else:
            n_corr = len(self.selection.corr_types)
            blc, trc = [channels.start, 0], [channels.stop - 1, n_corr - 1]
            cells = table.getcolslice(name, blc, trc, **rows)
        return cells[rownrs - lo] if span else cells[np.searchsorted(wanted, rownrs)]

    def _count(self, rows: int):
        self.stats = ReadStats(self.stats.rows_read + rows, self.stats.calls + 1)

    def _block(self, rows: slice, spectrum: str | None = None):
        """vis (complex64), flags (n_rows, n_chan, n_time) of baseline ``rows`` and, when
        ``spectrum`` names a per-channel noise column, each cell's noise (float64; NaN where
        the MS has no row), else None. Flags: FLAG of the correlations used OR FLAG_ROW OR a
        non-finite value, and every cell without a row."""
        meta, sel = self.meta, self.selection
        n_rows = rows.stop - rows.start
        shape = (n_rows, meta.n_freq, meta.n_time)
        vis, flags = np.zeros(shape, np.complex64), np.ones(shape, bool)
        cell_noise = None if spectrum is None else np.full(shape, np.nan)
        per_time = max(1, n_rows * meta.n_freq * len(sel.corr_types) * 8)
        blocks = list(row_blocks(meta.n_time, max(1, BLOCK_BYTES // per_time))) if n_rows else []
        for window, times in ((w, t) for w in sel.windows for t in blocks):
            rownrs = window.row_index[times, rows].T  # (n_rows, n_time in the block)
            held = rownrs >= 0
            if not held.any():
                continue
            rownrs = rownrs[held]
            order = slice(None, None, -1) if window.reversed else slice(None)
            cells = self.plan.vis(self._cells(self.column, rownrs, window)[:, order])
            bad = self.plan.flags(self._cells("FLAG", rownrs, window)[:, order])
            bad |= self._cells("FLAG_ROW", rownrs)[:, None]
            bad |= ~np.isfinite(cells)
            block = (slice(None), window.band, times)
            vis[block] = _scatter(held, cells, 0).transpose(0, 2, 1)
            flags[block] = _scatter(held, bad, True).transpose(0, 2, 1)
            if spectrum is not None:
                raw = self._cells(spectrum, rownrs, window)[:, order]
                sigma = self.plan.sigma(ms_noise.noise_from_column(spectrum, raw))
                cell_noise[block] = _scatter(held, sigma, np.nan).transpose(0, 2, 1)
        return vis, flags, cell_noise

    def read(self, rows: slice | None = None) -> Observation:
        """Baseline ``rows`` (a contiguous slice of the selection's baselines; all when None).
        With the noise from a per-channel column, cells whose noise there is not finite and
        positive (a weight of 0) are flagged."""
        meta, sel = self.meta, self.selection
        start, stop, step = (rows or slice(None)).indices(sel.n_bl)
        if step != 1:
            raise ValueError(f"read: rows must be contiguous, got step {step}")
        rows = slice(start, max(start, stop))
        noise, source = self.noise, self.noise_source
        spectrum = source.column if source.method == "column" else None
        spectrum = spectrum if spectrum in ms_noise.SPECTRUM_COLUMNS else None
        self.stats = ReadStats(0, 0)
        vis, flags, cell_noise = self._block(rows, spectrum)
        if cell_noise is not None:
            with np.errstate(invalid="ignore"):
                flags |= ~(cell_noise > 0) | ~np.isfinite(cell_noise)
        noise = noise if np.ndim(noise) == 0 else noise[rows]
        fields = {f.name: getattr(meta, f.name) for f in dataclasses.fields(ObservationMeta)}
        return Observation(
            **(fields | {"a1": meta.a1[rows], "a2": meta.a2[rows], "metadata": self.metadata()}),
            vis=vis,
            flags=flags,
            noise=np.asarray(noise, np.float64),
            rows=rows,
            n_bl_total=sel.n_bl,
            truth=None,
        )

    def metadata(self) -> dict:
        """``meta.metadata`` with the noise's source (:class:`NoiseSource`) added under
        ``measurement_set.noise``; works the noise out if it is not yet."""
        record = dataclasses.asdict(self.noise_source)
        ms = self.meta.metadata["measurement_set"] | {"noise": record}
        return self.meta.metadata | {"measurement_set": ms}

    def close(self) -> None:
        self._table.close()

    def __enter__(self) -> MeasurementSetReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _scatter(held: np.ndarray, values: np.ndarray, fill) -> np.ndarray:
    """values (n_held, n_chan) into (n_rows, n_time, n_chan) at the True cells of ``held``
    (n_rows, n_time), ``fill`` elsewhere."""
    out = np.full((*held.shape, values.shape[-1]), fill, values.dtype)
    out[held] = values
    return out


def read_observation_ms(path, rows: slice | None = None, **options) -> Observation:
    """Baseline ``rows`` of the Measurement Set at ``path`` (all when None) as an Observation;
    ``options`` as for :class:`MeasurementSetReader`. Reads only those rows' cells."""
    with MeasurementSetReader(path, **options) as reader:
        return reader.read(rows)
