"""A Measurement Set read as a tabascal :class:`~tabascal.store.Observation`.

What is read (see :mod:`tabascal.measurement_set.selection` for which rows, and how rows in
any order, with jittered times or missing, make a (time, baseline) grid):

- the visibilities of one data column (``DATA`` by default) in one correlation
  (:mod:`~tabascal.measurement_set.correlations`), flags from ``FLAG`` (of the correlations
  used) OR ``FLAG_ROW``, non-finite values flagged too; a (time, baseline) without a row in
  the MS is filled with vis 0, flagged (a warning counts them);
- the noise from ``SIGMA``, taken as the standard deviation of each of the real and imaginary
  parts (CASA's convention: ``WEIGHT = 1 / SIGMA^2``). Per baseline, the quadratic mean over
  the rows not flagged by ``FLAG_ROW`` (all rows if every one is); a warning is logged when a
  baseline's SIGMA varies by more than 1 % in time, since the store keeps one noise per
  baseline. The noise is a scalar when every selected row has the same SIGMA, else per baseline;
- antennas: only those in a selected baseline are kept (``a1``, ``a2`` index them in MS order;
  ``metadata['measurement_set']['antenna_ids']`` maps back), positions from ANTENNA
  ``POSITION`` (ITRF), the dish diameter is the smallest of theirs (its beam is the widest, so
  the sky model's field covers every station's; a warning when they differ);
- times from ``TIME`` (each integration's median) and ``INTERVAL``, channels from
  SPECTRAL_WINDOW ``CHAN_FREQ`` and ``CHAN_WIDTH`` (descending channels are reversed to
  ascending), the phase centre from FIELD ``PHASE_DIR``
  (:mod:`~tabascal.measurement_set.frames`), gast0 the IAU 1982 GMST of the start;
- satellites: given orbits, else a TLE file and catalogue numbers, else the orbits tabascal
  stored in the MS when it wrote it (table keyword ``TABASCAL_ORBITS``), else none.

Only the rows of the baselines asked for are read from the big columns, one block of
integrations at a time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tabascal.measurement_set import _casacore, frames
from tabascal.measurement_set.correlations import correlation_names, correlation_plan
from tabascal.measurement_set.selection import TIME_TOLERANCE, MsError, scan, subtable
from tabascal.observation import geometry as geo
from tabascal.observation.tle import TleOrbits, load_tle_orbits
from tabascal.store import Observation, ObservationMeta, row_blocks

log = logging.getLogger(__name__)

ORBITS_KEYWORD = "TABASCAL_ORBITS"
METADATA_KEYWORD = "TABASCAL_METADATA"
BLOCK_BYTES = 64 * 2**20  # visibility cells read per block of integrations
SIGMA_SPREAD = 0.01


@dataclass(frozen=True)
class ReadStats:
    """Table rows read from the big columns by the last :meth:`MeasurementSetReader.read`."""

    rows_read: int
    calls: int


def orbits_from_keyword(record: dict, epoch_utc: str, gast0_rad: float):
    """Orbits stored by :func:`tabascal.measurement_set.write_measurement_set`."""
    names = tuple(record["names"]) if "names" in record else None
    if record["kind"] == "tle":
        return TleOrbits(
            tuple(record["line1"]),
            tuple(record["line2"]),
            epoch_utc,
            gast0_rad=gast0_rad,
            names=names,
            ut1_utc_s=float(record["ut1_utc_s"]),
        )
    fields = ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad")
    return geo.CircularOrbits(
        *(np.asarray(record[f], dtype=np.float64) for f in fields), names=names
    )


class MeasurementSetReader:
    """An open Measurement Set as an observation: metadata at once, rows on demand.

    column: data column ('DATA', 'CORRECTED_DATA', ...). correlation: 'I' (default), 'XX',
    'YY', 'RR' or 'LL'. spw, field: ids to read (needed when the data hold several). orbits:
    the satellites; or tle_file with satellites (catalogue numbers, None: all in the file) and
    ut1_utc_s. time_tolerance: how far (in INTERVALs, at least 0.001 and below 0.5) a row's
    TIME may lie from its integration of the grid (:mod:`.selection`). Use as a context
    manager, or call :meth:`close`.
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
        time_tolerance: float = TIME_TOLERANCE,
    ):
        tables = _casacore.tables()
        self.path = Path(path)
        if not self.path.exists():
            raise MsError(f"{self.path} does not exist")
        if not (self.path / "table.dat").exists():
            raise MsError(f"{self.path} is not a Measurement Set (no table.dat)")
        self._table = tables.table(str(self.path), ack=False, readonly=True)
        try:
            self._open(tables, column, correlation, spw, field, time_tolerance)
            self.meta = self._read_meta(tables, orbits, tle_file, satellites, ut1_utc_s)
            noise = self._noise()
        except BaseException:
            self._table.close()
            raise
        #: () when every selected row has the same SIGMA, else (n_bl,): float64 Jy
        self.noise = np.float64(noise[0]) if np.all(noise == noise[0]) else noise
        self.stats = ReadStats(0, 0)

    def _open(self, tables, column, correlation, spw, field, time_tolerance):
        names = self._table.colnames()
        if column not in names:
            data_columns = [c for c in names if c.endswith("DATA")]
            raise MsError(f"{self.path} has no column '{column}' (data columns: {data_columns})")
        if self._table.getcoldesc(column).get("valueType") not in ("complex", "dcomplex"):
            raise MsError(f"column '{column}' of {self.path} is not complex")
        self.column = column
        self.selection = scan(tables, self.path, self._table, spw, field, time_tolerance)
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
                sel.row_index.size,
                sel.n_times_filled,
            )
        time_ref = self._table.getcolkeyword("TIME", "MEASINFO").get("Ref", "UTC")
        if time_ref != "UTC":
            raise MsError(f"{self.path}: TIME is in {time_ref}; tabascal reads UTC times")

    def _antennas(self, tables):
        sel = self.selection
        used = np.unique(np.concatenate([sel.ant1, sel.ant2]))
        with subtable(tables, self.path, "ANTENNA") as ants:
            position = ants.getcol("POSITION")[used]
            dish = ants.getcol("DISH_DIAMETER")[used]
            names = [str(n) for n in np.asarray(ants.getcol("NAME"))[used]]
        if np.ptp(dish) > 0:
            log.warning(
                "dish diameters differ (%g to %g m); using the smallest", dish.min(), dish.max()
            )
        a1, a2 = np.searchsorted(used, sel.ant1), np.searchsorted(used, sel.ant2)
        return used, names, position, float(dish.min()), a1.astype(np.int32), a2.astype(np.int32)

    def _noise(self) -> np.ndarray:
        """Per-baseline noise (n_bl,) float64 from SIGMA and FLAG_ROW."""
        idx = self.selection.row_index
        held = idx >= 0
        idx = np.where(held, idx, 0)
        sigma = self.plan.sigma(self._table.getcol("SIGMA")[idx])  # (n_time, n_bl)
        good = held & ~self._table.getcol("FLAG_ROW")[idx]
        unflagged = good.any(axis=0)
        good[:, ~unflagged] = held[:, ~unflagged]
        var = np.where(good, sigma**2, 0.0).sum(axis=0) / good.sum(axis=0)
        noise = np.sqrt(var)
        bad = np.flatnonzero(~np.isfinite(noise) | (noise <= 0))
        if bad.size:
            b = int(bad[0])
            raise MsError(
                f"{self.path}: SIGMA of baseline ({self.selection.ant1[b]}, "
                f"{self.selection.ant2[b]}) is {noise[b]}; tabascal needs positive noise"
            )
        kept = np.where(good, sigma, np.nan)
        spread = (np.nanmax(kept, axis=0) - np.nanmin(kept, axis=0)) / noise
        if spread.max() > SIGMA_SPREAD:
            log.warning(
                "SIGMA varies in time by up to %.1f %% on a baseline; using each baseline's "
                "quadratic mean over time",
                100 * spread.max(),
            )
        return noise

    def _phase_centre(self, tables, ant_itrf, epoch, gast0: float, t_mid: float):
        """(ra, dec) in tabascal's frame, and the FIELD PHASE_DIR record for the metadata."""
        field = self.selection.field
        with subtable(tables, self.path, "FIELD") as fields:
            direction = np.asarray(fields.getcell("PHASE_DIR", field))
            ref = fields.getcolkeyword("PHASE_DIR", "MEASINFO").get("Ref", "J2000")
        if np.any(direction[1:] != 0):
            raise MsError(
                f"{self.path}: the phase centre of field {field} moves (PHASE_DIR has "
                "polynomial terms); tabascal needs a fixed one"
            )
        try:
            ra, dec = frames.phase_centre_from_ms(*direction[0], ref, ant_itrf, epoch, gast0, t_mid)
        except ValueError as err:
            raise MsError(f"{self.path}: {err}") from None
        record = {"ref": ref, "ra_rad": float(direction[0, 0]), "dec_rad": float(direction[0, 1])}
        return ra, dec, record

    def _orbits(self, orbits, tle_file, satellites, ut1_utc_s, epoch, gast0: float):
        """Given orbits, else those of the TLE file, else those tabascal stored, else none."""
        if orbits is not None:
            return orbits
        if tle_file is not None:
            return load_tle_orbits(
                tle_file, satellites, epoch, gast0_rad=gast0, ut1_utc_s=ut1_utc_s
            )
        keywords = self._table.getkeywords()
        if ORBITS_KEYWORD in keywords:
            return orbits_from_keyword(keywords[ORBITS_KEYWORD], epoch.isoformat(), gast0)
        return geo.CircularOrbits([], [], [], [])

    def _read_meta(self, tables, orbits, tle_file, satellites, ut1_utc_s) -> ObservationMeta:
        sel = self.selection
        used, names, ant_itrf, dish, a1, a2 = self._antennas(tables)
        epoch = frames.datetime_from_mjd_seconds(sel.time_mjd_s[0] - sel.interval_s / 2)
        times_s = sel.time_mjd_s - frames.mjd_seconds(epoch)
        gast0 = geo.greenwich_sidereal_angle(epoch)
        t_mid = float(times_s[0] + times_s[-1]) / 2
        ra, dec, phase_dir = self._phase_centre(tables, ant_itrf, epoch, gast0, t_mid)
        metadata = json.loads(self._table.getkeywords().get(METADATA_KEYWORD, "{}"))
        metadata["measurement_set"] = {
            "path": str(self.path.resolve()),
            "column": self.column,
            "correlation": self.plan.describe(),
            "correlations_in_data": correlation_names(sel.corr_types),
            "spw": sel.spw,
            "field": sel.field,
            "phase_dir": phase_dir,
            "antenna_ids": used.tolist(),
            "antenna_names": names,
            "autocorrelation_rows_dropped": sel.n_autocorrelations,
            "channels_reversed": sel.reversed,
            "correlation_in_place_of": self.plan.stands_for,
            "rows_in_time_order": sel.in_time_order,
            "time_tolerance": sel.time_tolerance,
            "max_time_offset": sel.max_time_offset,
            "rows_filled": sel.n_rows_filled,
            "integrations_filled": sel.n_times_filled,
        }
        return ObservationMeta(
            a1=a1,
            a2=a2,
            ant_itrf=ant_itrf,
            dish_diameter_m=dish,
            times_s=times_s,
            int_time=sel.interval_s,
            freqs_hz=sel.chan_freq_hz,
            chan_width=sel.chan_width_hz,
            gast0_rad=gast0,
            epoch_utc=epoch.isoformat(),
            ra_rad=ra,
            dec_rad=dec,
            orbits=self._orbits(orbits, tle_file, satellites, ut1_utc_s, epoch, gast0),
            metadata=metadata,
        )

    def _cells(self, name: str, rownrs: np.ndarray) -> np.ndarray:
        """Column ``name`` at table rows ``rownrs`` (any order), reading the covering span when
        at most half of it is unwanted, else just those rows."""
        lo, hi = int(rownrs.min()), int(rownrs.max()) + 1
        if hi - lo <= 2 * rownrs.size:
            self._count(hi - lo)
            return self._table.getcol(name, startrow=lo, nrow=hi - lo)[rownrs - lo]
        wanted = np.unique(rownrs)
        self._count(wanted.size)
        cells = self._table.selectrows(wanted).getcol(name)
        return cells[np.searchsorted(wanted, rownrs)]

    def _count(self, rows: int):
        self.stats = ReadStats(self.stats.rows_read + rows, self.stats.calls + 1)

    def read(self, rows: slice | None = None) -> Observation:
        """Baseline ``rows`` (a contiguous slice of the selection's baselines; all when None)."""
        meta, sel = self.meta, self.selection
        start, stop, step = (rows or slice(None)).indices(sel.n_bl)
        if step != 1:
            raise ValueError(f"read: rows must be contiguous, got step {step}")
        rows = slice(start, max(start, stop))
        n_rows = rows.stop - rows.start
        n_chan, n_corr = meta.n_freq, len(sel.corr_types)
        vis = np.zeros((n_rows, n_chan, meta.n_time), np.complex64)
        flags = np.ones((n_rows, n_chan, meta.n_time), bool)
        per_time = max(1, n_rows * n_chan * n_corr * 8)
        self.stats = ReadStats(0, 0)
        channels = slice(None, None, -1) if sel.reversed else slice(None)
        blocks = row_blocks(meta.n_time, max(1, BLOCK_BYTES // per_time)) if n_rows else []
        for times in blocks:
            rownrs = sel.row_index[times, rows].T  # (n_rows, n_time in the block)
            held = rownrs >= 0
            if not held.any():
                continue
            rownrs = rownrs[held]
            cells = self.plan.vis(self._cells(self.column, rownrs)[:, channels])
            bad = self.plan.flags(self._cells("FLAG", rownrs)[:, channels])
            bad |= self._cells("FLAG_ROW", rownrs)[:, None]
            bad |= ~np.isfinite(cells)
            block = (slice(None), slice(None), times)
            vis[block] = _scatter(held, cells, 0).transpose(0, 2, 1)
            flags[block] = _scatter(held, bad, True).transpose(0, 2, 1)
        noise = self.noise if np.ndim(self.noise) == 0 else self.noise[rows]
        fields = {f.name: getattr(meta, f.name) for f in dataclasses.fields(ObservationMeta)}
        return Observation(
            **(fields | {"a1": meta.a1[rows], "a2": meta.a2[rows]}),
            vis=vis,
            flags=flags,
            noise=np.asarray(noise, np.float64),
            rows=rows,
            n_bl_total=sel.n_bl,
            truth=None,
        )

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
