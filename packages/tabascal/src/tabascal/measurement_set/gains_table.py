"""A fit's gains as a CASA calibration table (``tabascal export-ms --gains-table PATH``).

**Convention.** The model is ``V[b] = g[a1[b]] (V_sky[b] + V_rfi[b]) conj(g[a2[b]])``
(``model.gains.apply``). CASA's applycal corrects the visibility of baseline (i, j) with an
antenna-based G or B Jones table as ``V_corrected = V_obs / (g_i conj(g_j))``, each g the
table's CPARAM of that antenna and of the receptor of the hand corrected. So CPARAM holds the
fitted g as it is, and applying the table to the model gives back ``V_sky + V_rfi``.

**The table** is a CASA calibration table of ``B Jones`` semantics (antenna-based complex
gains per channel, as bandpass writes them) that is also time-dependent: one row per
(spectral window, integration, antenna), in that order, with

- TIME (MJD seconds, UTC: the integration's time as import-ms read it), INTERVAL (the
  integration time), FIELD_ID (the field fitted), SPECTRAL_WINDOW_ID, ANTENNA1 (the MS's
  antenna id, for every antenna of its ANTENNA table), ANTENNA2 (the fit's reference antenna,
  whose phase is exactly 0), SCAN_NUMBER and OBSERVATION_ID (of the MS's rows of that
  integration);
- CPARAM (n_chan, n_receptor) complex64, every channel of the window in the order the MS
  stores them; FLAG, the same shape; PARAMERR -1 (the fit estimates no errors); SNR and
  WEIGHT 1 where a gain is given, 0 where flagged;
- the keywords ParType 'Complex', MSName (the MS as named), VisCal 'B Jones' and PolBasis
  (LINEAR for X/Y hands, CIRCULAR for R/L, else unknown); table.info type 'Calibration',
  subType 'B Jones';
- the subtables ANTENNA, FIELD, SPECTRAL_WINDOW and OBSERVATION copied from the MS, and
  HISTORY described as the MS's with one row saying what wrote the table.

**Receptors.** An MS of one correlation has one receptor, any other two (X and Y, or R and
L). The model is of one scalar visibility: a Stokes I fit (of ``(XX + YY) / 2`` or a stored
I) gives both receptors the fitted gain (an unpolarised sky, XX = YY = I, leaves nothing to
tell them apart), a fit of one hand gives its receptor the gain and flags the other.

**Cells and flags.** The fit's channels, spectral windows and integrations are those of its
selection (the store's ``--channels``, ``--times``, ``--spw``), found as export-ms finds them
(:func:`.export.fitted_selection`): a band of several windows goes back window by window,
each window's rows holding its channels of the band. A cell is flagged (and holds 1) where
the fit had no data for it: a channel the fit did not read (of a window it read part of), an
antenna none of whose baselines was unflagged there (its gain rests on the prior alone), an
antenna of the MS not in the fit. Integrations the fit did not read have no rows, nor do
windows of the band none of whose channels it read (``--channels`` of a band, which leaves
them out of the selection).

The table is built under a hidden sibling name and renamed into place when complete
(``store.writer.publish_folder``); a run whose gains were fixed (``gains.kind: unitary``) and
an existing PATH (without ``overwrite``) are refused before anything is written.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tabascal.measurement_set import _casacore
from tabascal.measurement_set.correlations import correlation_names
from tabascal.measurement_set.export import fitted_selection
from tabascal.measurement_set.selection import MsError
from tabascal.store.writer import clear_leftovers, publish_folder, temporary_sibling

VIS_CAL = "B Jones"
RUN_CONFIG = "config.yaml"  # beside results.zarr in the run's output folder
COPIED_SUBTABLES = ("ANTENNA", "FIELD", "SPECTRAL_WINDOW", "OBSERVATION")
PARAM_ERROR = -1.0  # PARAMERR of every cell: no error estimated
UNIX_EPOCH_MJD_S = 40587.0 * 86400.0  # 1970-01-01 in MJD seconds


@dataclass(frozen=True)
class RunGains:
    """What the run's config.yaml says of its gains: fitted (``gains.kind`` gp) with the
    reference antenna ``ref_ant`` (an index into the store's antennas)."""

    ref_ant: int


@dataclass(frozen=True)
class GainsTableReport:
    """What write_gains_table wrote.

    path; n_rows; spws: the windows written; n_integrations; n_antennas: of the MS's
    ANTENNA table, of which n_fitted had a gain fitted; receptors: the receptor names (X, Y;
    R, L; or one), fitted: those given the gain; ref_antenna: the reference antenna's MS id;
    n_flagged, n_cells: flagged (channel, antenna, integration) cells of the fit's channels,
    and all of them.
    """

    path: Path
    n_rows: int
    spws: tuple[int, ...]
    n_integrations: int
    n_antennas: int
    n_fitted: int
    receptors: tuple[str, ...]
    fitted: tuple[str, ...]
    ref_antenna: int
    n_flagged: int
    n_cells: int


def check_gains_table(results, path, *, overwrite: bool = False) -> RunGains:
    """Refuse, before anything is written, a gains table that cannot or may not be written:
    ``path`` existing (unless ``overwrite``, and then only a table), ``results`` without its
    run's config.yaml beside it, a run whose gains were fixed, results without gains or flags.
    Returns the run's gains settings."""
    from tabascal.config import ConfigError, load_yaml

    path, results = Path(path), Path(results)
    if path.exists() and not overwrite:
        raise MsError(f"{path} exists; add --overwrite-gains-table to replace it")
    if path.exists() and not (path / "table.dat").exists():
        raise MsError(
            f"{path} exists and is not a table; --overwrite-gains-table replaces only a table: "
            "name another path"
        )
    config_path = results.parent / RUN_CONFIG
    try:
        gains = load_yaml(config_path).get("gains", {})
    except ConfigError as err:
        raise MsError(
            f"the gains table needs the run's gains settings, from {config_path} beside "
            f"{results} in the run's output folder: {err}"
        ) from None
    if gains.get("kind", "gp") != "gp":
        raise MsError(
            f"the run of {results} did not fit the gains (gains.kind {gains['kind']!r} in "
            f"{config_path}: fixed at 1), so there is no gains table to write; fit with "
            "gains.kind gp, or leave --gains-table out"
        )
    import zarr

    try:
        group = zarr.open_group(str(results), mode="r")
    except Exception as err:  # zarr raises several types for "no group here"
        raise MsError(f"{results} is not a results store (not a zarr group: {err})") from None
    missing = [name for name in ("gains", "flags") if name not in group]
    if missing:
        raise MsError(f"{results} has no array(s) {', '.join(missing)}; is it a results.zarr?")
    return RunGains(ref_ant=int(gains.get("ref_ant", 0)))


def _receptors(corr_types, fitted: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The receptors of the MS's correlations and the indices of those given the gain of a
    fit of ``fitted`` (the plan's name: I or a hand)."""
    names = correlation_names(corr_types)
    if len(names) == 1:
        return (names[0][0] if names[0] != "I" else "I",), (0,)
    circular = any(name[0] in "RL" for name in names)
    receptors = ("R", "L") if circular else ("X", "Y")
    if fitted == "I":
        return receptors, (0, 1)
    return receptors, (receptors.index(fitted[0]),)


def _pol_basis(corr_types) -> str:
    """PolBasis from the hands the correlations are of (unknown for Stokes parameters)."""
    hands = {name[0] for name in correlation_names(corr_types)}
    if hands & set("XY"):
        return "LINEAR"
    return "CIRCULAR" if hands & set("RL") else "unknown"


def _antenna_held(flags, a1: np.ndarray, a2: np.ndarray, n_ant: int) -> np.ndarray:
    """(n_ant, n_freq, n_time) bool: whether any baseline of the antenna is unflagged in
    the cell. flags: the results' (n_bl, n_freq, n_time) zarr array, read a chunk at a time."""
    held = np.zeros((n_ant, *flags.shape[1:]), bool)
    step = flags.chunks[0]
    for start in range(0, flags.shape[0], step):
        unflagged = ~np.asarray(flags[start : start + step], bool)
        rows = slice(start, start + unflagged.shape[0])
        np.logical_or.at(held, a1[rows], unflagged)
        np.logical_or.at(held, a2[rows], unflagged)
    return held


def _integration_rows(sel) -> np.ndarray:
    """A table row of each integration of the selection (n_time,): one of its own rows in
    any window, the nearest integration's where it has none (the reader filled it)."""
    grid = np.concatenate([w.row_index for w in sel.windows], axis=1)
    has = grid >= 0
    first = grid[np.arange(grid.shape[0]), np.argmax(has, axis=1)]
    held = np.flatnonzero(has.any(axis=1))
    nearest = held[np.argmin(np.abs(np.arange(grid.shape[0])[:, None] - held), axis=1)]
    return first[nearest]


def _description(tables):
    scalar = tables.makescacoldesc
    array = tables.makearrcoldesc
    columns = [
        scalar("TIME", 0.0, comment="Time of the solution (MJD seconds, UTC)"),
        scalar("FIELD_ID", 0, comment="Field id"),
        scalar("SPECTRAL_WINDOW_ID", 0, comment="Spectral window id"),
        scalar("ANTENNA1", 0, comment="Antenna id"),
        scalar("ANTENNA2", 0, comment="Reference antenna id"),
        scalar("INTERVAL", 0.0, comment="Solution interval (s)"),
        scalar("SCAN_NUMBER", 0, comment="Scan number"),
        scalar("OBSERVATION_ID", 0, comment="Observation id"),
        array("CPARAM", 0j, ndim=2, valuetype="complex", comment="Complex gain"),
        array("PARAMERR", 0.0, ndim=2, valuetype="float", comment="Gain error"),
        array("FLAG", False, ndim=2, comment="Solution flag"),
        array("SNR", 0.0, ndim=2, valuetype="float", comment="Signal to noise ratio"),
        array("WEIGHT", 0.0, ndim=2, valuetype="float", comment="Weight"),
    ]
    return tables.maketabdesc(columns)


def _subtables(tables, ms_path: Path, tmp: Path, results: Path) -> None:
    """The copied subtables, and HISTORY with one row of what wrote the table."""
    for name in COPIED_SUBTABLES:
        if (ms_path / name / "table.dat").exists():
            with tables.table(str(ms_path / name), ack=False) as sub:
                sub.copy(str(tmp / name), deep=True).close()
        else:
            tables.default_ms_subtable(name, str(tmp / name)).close()
    if (ms_path / "HISTORY" / "table.dat").exists():
        with tables.table(str(ms_path / "HISTORY"), ack=False) as sub:
            sub.copy(str(tmp / "HISTORY"), deep=True, copynorows=True).close()
    else:
        tables.default_ms_subtable("HISTORY", str(tmp / "HISTORY")).close()
    with tables.table(str(tmp / "HISTORY"), readonly=False, ack=False) as history:
        history.addrows(1)
        values = {
            "TIME": UNIX_EPOCH_MJD_S + time.time(),
            "OBSERVATION_ID": -1,
            "MESSAGE": f"tabascal export-ms: the fitted gains of {results}",
            "PRIORITY": "NORMAL",
            "ORIGIN": "tabascal",
            "OBJECT_ID": -1,
            "APPLICATION": "tabascal",
            "CLI_COMMAND": np.array(["tabascal export-ms --gains-table"]),
            "APP_PARAMS": np.array([""]),
        }
        for name, value in values.items():
            if name in history.colnames():
                history.putcell(name, 0, value)


@dataclass(frozen=True)
class _Cells:
    """What the rows of one (window, integration) are formed from: gains (n_fitted, n_freq,
    n_time) and held (the same shape, bool) in the band's ascending channels; fitted_ids:
    (n_fitted,) the MS id of each; receptors: the indices given the gain."""

    gains: np.ndarray
    held: np.ndarray
    fitted_ids: np.ndarray
    receptors: tuple[int, ...]


def _window_rows(window, t: int, cells: _Cells, n_ant: int, n_receptor: int) -> dict:
    """CPARAM and FLAG of the n_ant rows of integration ``t`` of ``window``."""
    cparam = np.ones((n_ant, window.n_chan_spw, n_receptor), np.complex64)
    flag = np.ones(cparam.shape, bool)
    band = window.band_in_ms_order()
    gains = cells.gains[:, band, t]
    held = cells.held[:, band, t]
    for r in cells.receptors:
        cparam[cells.fitted_ids, window.channels, r] = np.where(held, gains, 1)
        flag[cells.fitted_ids, window.channels, r] = ~held
    return {"CPARAM": cparam, "FLAG": flag}


def _fill(table, sel, cells: _Cells, n_ant: int, n_receptor: int, ms, ref_id: int) -> int:
    """Write every row; returns how many."""
    scan, observation = ms.getcol("SCAN_NUMBER"), ms.getcol("OBSERVATION_ID")
    source = _integration_rows(sel)
    row = 0
    for window in sel.windows:
        for t in range(sel.n_time):
            values = _window_rows(window, t, cells, n_ant, n_receptor)
            good = (~values["FLAG"]).astype(np.float32)
            values |= {
                "TIME": np.full(n_ant, sel.time_mjd_s[t]),
                "FIELD_ID": np.full(n_ant, sel.field, np.int32),
                "SPECTRAL_WINDOW_ID": np.full(n_ant, window.spw, np.int32),
                "ANTENNA1": np.arange(n_ant, dtype=np.int32),
                "ANTENNA2": np.full(n_ant, ref_id, np.int32),
                "INTERVAL": np.full(n_ant, sel.interval_s),
                "SCAN_NUMBER": np.full(n_ant, scan[source[t]], np.int32),
                "OBSERVATION_ID": np.full(n_ant, observation[source[t]], np.int32),
                "PARAMERR": np.full(good.shape, PARAM_ERROR, np.float32),
                "SNR": good,
                "WEIGHT": good,
            }
            table.addrows(n_ant)
            for name, value in values.items():
                table.putcol(name, value, startrow=row, nrow=n_ant)
            row += n_ant
    return row


def _keywords(table, ms, ms_path: Path, corr_types) -> None:
    table.putkeyword("ParType", "Complex")
    table.putkeyword("MSName", str(ms_path))
    table.putkeyword("VisCal", VIS_CAL)
    table.putkeyword("PolBasis", _pol_basis(corr_types))
    for name in (*COPIED_SUBTABLES, "HISTORY"):
        table.putkeyword(name, f"Table: {Path(table.name()) / name}")
    table.putcolkeywords("TIME", ms.getcolkeywords("TIME"))
    table.putcolkeywords("INTERVAL", {"QuantumUnits": ["s"]})
    table.putinfo({"type": "Calibration", "subType": VIS_CAL, "readme": ""})


def write_gains_table(
    results,
    ms_path,
    path,
    *,
    store=None,
    column: str | None = None,
    correlation: str | None = None,
    spw=None,
    field: int | None = None,
    time_tolerance: float | None = None,
    overwrite: bool = False,
) -> GainsTableReport:
    """Write the gains of ``results`` (results.zarr of tabascal run, in its output folder)
    as a CASA calibration table at ``path`` for the Measurement Set ``ms_path``, which is
    only read. store and the selection options as in :func:`.export.export_results`; an
    existing ``path`` (a table) is replaced only with ``overwrite``. See the module."""
    tables = _casacore.tables()
    path, ms_path, results = Path(path), Path(ms_path), Path(results)
    run = check_gains_table(results, path, overwrite=overwrite)
    if not (ms_path / "table.dat").exists():
        raise MsError(f"{ms_path} is not a Measurement Set (no table.dat)")
    given = dict(column=column, correlation=correlation, spw=spw, field=field)
    given["time_tolerance"] = time_tolerance
    with tables.table(str(ms_path), ack=False) as ms:
        found, sel, plan = fitted_selection(tables, ms, ms_path, results, store, given)
        fitted_ids = np.unique(np.concatenate([sel.ant1, sel.ant2]))
        gains = np.asarray(found["group"]["gains"][...], np.complex64)
        if gains.shape != (fitted_ids.size, *found["shape"][1:]):
            raise MsError(
                f"{results}: gains have shape {gains.shape}, expected (n_ant, n_freq, n_time) "
                f"= {(fitted_ids.size, *found['shape'][1:])} for the fit's antennas"
            )
        held = _antenna_held(found["group"]["flags"], found["a1"], found["a2"], fitted_ids.size)
        receptors, given_gain = _receptors(sel.corr_types, plan.name)
        cells = _Cells(gains, held, fitted_ids, given_gain)
        with tables.table(str(ms_path / "ANTENNA"), ack=False) as antennas:
            n_ant = antennas.nrows()
        ref_id = int(fitted_ids[run.ref_ant])
        clear_leftovers(path)
        tmp = temporary_sibling(path, "partial")
        try:
            with tables.table(str(tmp), _description(tables), ack=False) as table:
                _subtables(tables, ms_path, tmp, results)
                n_rows = _fill(table, sel, cells, n_ant, len(receptors), ms, ref_id)
                _keywords(table, ms, ms_path, sel.corr_types)
            publish_folder(tmp, path, overwrite=overwrite)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return GainsTableReport(
        path=path,
        n_rows=n_rows,
        spws=sel.spws,
        n_integrations=sel.n_time,
        n_antennas=n_ant,
        n_fitted=fitted_ids.size,
        receptors=receptors,
        fitted=tuple(receptors[r] for r in given_gain),
        ref_antenna=ref_id,
        n_flagged=int(np.count_nonzero(~held)),
        n_cells=int(held.size),
    )
