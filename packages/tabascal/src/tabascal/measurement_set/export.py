"""Writing a fit's results into the Measurement Set it came from (``tabascal export-ms``).

The fit's cubes (results.zarr of ``tabascal run``, (n_bl, n_freq, n_time) in the baseline
order of the selection the fit read) become columns described and stored like the data
column the fit read (``DATA`` by default):

- ``TAB_SKY_DATA``, ``TAB_RFI_DATA``, ``TAB_RES_DATA``: the results' ``sky_vis``, ``rfi_vis``
  (both before the gains) and ``residual`` (data minus the full model); 0 in every other cell.
- per satellite (``per_satellite``): ``TAB_RFI_SAT<k>``, the results' ``rfi_vis_by_satellite[k]``
  (satellite k alone, before the gains; k its index in the store, its name in the column's
  comment); 0 in every other cell. Only results written with it (``output.per_satellite``
  of ``tabascal run``) have it.
- the cleaned data (``cleaned_column``, ``TAB_CLEANED_DATA`` on the command line): the data
  column minus the fitted RFI as it appears in the data. The model is
  ``model[b] = g[a1[b]] (sky[b] + rfi[b]) conj(g[a2[b]])`` (``model.gains.apply``) and
  results.zarr holds ``rfi_vis`` before the gains, so the cleaned data are
  ``data - g[a1] rfi_vis conj(g[a2])`` with the results' ``gains`` (n_ant, n_freq, n_time).
  Every other cell holds the data column's value.
- weights (``weights``): ``TAB_WEIGHT`` and, where the MS has ``WEIGHT_SPECTRUM``,
  ``TAB_WEIGHT_SPECTRUM``, ``1 / noise[b]^2`` with noise the std of each of the real and
  imaginary parts (CASA's ``WEIGHT = 1 / SIGMA^2``) as the fit used it. A noise per baseline
  and channel gives ``1 / noise[b, f]^2`` channel by channel in WEIGHT_SPECTRUM, and in
  WEIGHT, which has no channel axis, their mean over the row's channels fitted (as CASA's
  mstransform sets WEIGHT from WEIGHT_SPECTRUM). The noise is the results' ``noise``
  (n_bl,), or, in results that do not record it, the store's (which is not the fit's after a
  run with ``data.noise: estimate``);
  ``write_weights`` writes ``WEIGHT`` and ``WEIGHT_SPECTRUM`` themselves instead, keeping every
  cell the fit did not read, and the originals in ``TAB_WEIGHT_BACKUP`` and
  ``TAB_WEIGHT_SPECTRUM_BACKUP`` unless those exist. A weight of 0 stays 0 (import-ms read it
  as a flag). Every other cell of a new column is 0.
- residual flags (``flag_residual`` K; the noise as for the weights): ``TAB_FLAG_RESIDUAL``,
  True where ``|residual| > K noise[b]`` (``noise[b, f]`` per channel); for pure noise a cell
  exceeds it with probability
  ``exp(-K^2 / 2)`` (|r| / noise is Rayleigh-distributed). ``write_flags`` ORs them into
  ``FLAG``, the original kept in ``TAB_FLAG_BACKUP`` unless that exists.

**Correlations.** The model is of one scalar visibility, an unpolarised (Stokes I) sky and
RFI. A value goes into the correlation(s) it was fitted from: the one correlation for XX,
YY, RR, LL or a stored I; both parallel hands for Stokes I formed as ``(XX + YY) / 2``
(unpolarised, XX = YY = I, so ``(XX + YY) / 2`` of a new column is the fitted I). The cleaned
data subtract the fitted RFI from each of those hands, leaving the cross hands as they are
(unpolarised RFI puts nothing there); RFI that is polarised leaves its ``(XX - YY) / 2`` in
each hand. For I from two hands, each hand's weight is ``1 / (2 noise_I^2)``: two hands of
that weight make an I of noise ``noise_I`` by the import's rule
``sigma_I = sqrt(sigma_XX^2 + sigma_YY^2) / 2``, so a read of the weights gives back the
noise the fit used. A residual flag flags every correlation of its cell: the RFI the fit
left is in every hand.

**Partial imports.** Given the store the fit read, its ``metadata.measurement_set`` gives the
selection (column, correlation, spectral window, field, time tolerance, and the channels and
integrations of ``--channels``/``--times``); only those cells are written, and every other
cell of a new column holds what it would outside the selection. A band of several spectral
windows read side by side (``--spw 0,1``) is written back window by window: each window's
rows get its channels of the band, in the order the window stores them; a window of the band
that held none of the channels read is not written.

No existing column is modified unless named (``cleaned_column``, ``write_weights``,
``write_flags``). Columns are written under a temporary name and renamed when complete
(:mod:`.columns`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr

from tabascal.measurement_set import _casacore, columns, products
from tabascal.measurement_set.correlations import correlation_plan
from tabascal.measurement_set.selection import TIME_TOLERANCE, MsError, cell_shapes, scan
from tabascal.store import read_meta

RESULT_COLUMNS = {"TAB_SKY_DATA": "sky_vis", "TAB_RFI_DATA": "rfi_vis", "TAB_RES_DATA": "residual"}
CLEANED_COLUMN = "TAB_CLEANED_DATA"
WEIGHT_COLUMNS = {"WEIGHT": "TAB_WEIGHT", "WEIGHT_SPECTRUM": "TAB_WEIGHT_SPECTRUM"}
FLAG_COLUMN = "TAB_FLAG_RESIDUAL"
NOISE_ARRAY = "noise"  # results.zarr's noise of the fit, (n_bl,) or (n_bl, n_freq)
NOISE_FROM_RESULTS, NOISE_FROM_STORE = "results", "store"
SATELLITE_ARRAY = "rfi_vis_by_satellite"  # as fitting.satellites.ARRAY
SATELLITE_PREFIX = "TAB_RFI_SAT"  # + the satellite's index in the store
COMMENTS = {
    "TAB_SKY_DATA": "tabascal: fitted sky visibilities",
    "TAB_RFI_DATA": "tabascal: fitted RFI visibilities",
    "TAB_RES_DATA": "tabascal: residual, data minus fitted model",
    "TAB_WEIGHT": "tabascal: 1 / noise^2 of the fit",
    "TAB_WEIGHT_SPECTRUM": "tabascal: 1 / noise^2 of the fit",
    FLAG_COLUMN: "tabascal: |residual| beyond the threshold",
}
OPTION_NAMES = {
    "column": "--column",
    "correlation": "--correlation",
    "spw": "--spw",
    "field": "--field",
    "time_tolerance": "--time-tolerance",
}


@dataclass(frozen=True)
class ExportReport:
    """What export_results wrote.

    columns: the columns written, in order; replaced: those of them that existed before
    (TAB_* columns overwritten, FLAG, WEIGHT, a named cleaned column). n_rows: table rows of the
    selection. correlations: the fitted correlation as import-ms read it. data_column: the
    column the fit read. backups: the backup made now of each column replaced (FLAG:
    TAB_FLAG_BACKUP, WEIGHT, WEIGHT_SPECTRUM). n_flagged, n_cells: cells
    of the fit whose residual exceeds the threshold, and all its cells (n_flagged None without
    flag_residual). channels, integrations: (start, stop, of how many) written (channels of
    the window, or of the band of the windows written: ``MsSelection.channel_range``).
    recovered: what an interrupted earlier export had left, and what was done with it.
    noise_from: where the noise of the weights and residual flags came from,
    ``NOISE_FROM_RESULTS`` or ``NOISE_FROM_STORE`` (None when neither was asked);
    noise_median: its median over the baselines (and channels, per channel).
    """

    columns: tuple[str, ...]
    n_rows: int
    correlations: str
    data_column: str = "DATA"
    replaced: tuple[str, ...] = ()
    backups: dict[str, str] = dataclasses.field(default_factory=dict)
    n_flagged: int | None = None
    n_cells: int = 0
    channels: tuple[int, int, int] | None = None
    integrations: tuple[int, int, int] | None = None
    recovered: tuple[str, ...] = ()
    noise_from: str | None = None
    noise_median: float | None = None


def default_cleaned_column(results) -> str | None:
    """The cleaned data's column when none is named: TAB_CLEANED_DATA when ``results`` holds
    the gains they need (every results.zarr of tabascal run does), else None."""
    try:
        return CLEANED_COLUMN if "gains" in zarr.open_group(str(results), mode="r") else None
    except Exception:  # not a zarr group: export_results says so
        return None


def records_fit_noise(results) -> bool:
    """Whether ``results`` record the noise the fit used (their array ``noise``), which the
    weights and residual flags then take without the store."""
    try:
        return NOISE_ARRAY in zarr.open_group(str(results), mode="r")
    except Exception:  # not a zarr group: export_results says so
        return False


def _results(path) -> dict:
    path = Path(path)
    try:
        group = zarr.open_group(str(path), mode="r")
    except Exception as err:  # zarr raises several types for "no group here"
        raise MsError(f"{path} is not a results store (not a zarr group: {err})") from None
    missing = [name for name in (*RESULT_COLUMNS.values(), "a1", "a2") if name not in group]
    if missing:
        raise MsError(f"{path} has no array(s) {', '.join(missing)}; is it a results.zarr?")
    shapes = {name: group[name].shape for name in RESULT_COLUMNS.values()}
    if len(set(shapes.values())) != 1:
        raise MsError(f"{path}: the result arrays have different shapes {shapes}")
    shape = shapes["sky_vis"]
    return {
        "group": group,
        "shape": shape,
        "a1": group["a1"][:],
        "a2": group["a2"][:],
        "noise": _fit_noise(group, path, shape),
    }


def _fit_noise(group, path: Path, shape: tuple[int, ...]) -> np.ndarray | None:
    """The results' noise of the fit, (n_bl,) or (n_bl, n_freq) float64 for cubes of ``shape``
    (n_bl, n_freq, n_time), None when they do not record it (results.zarr written before
    tabascal run recorded it)."""
    if NOISE_ARRAY not in group:
        return None
    noise = np.asarray(group[NOISE_ARRAY][...], np.float64)
    if noise.shape not in (shape[:1], shape[:2]):
        raise MsError(
            f"{path}: its {NOISE_ARRAY} has shape {noise.shape}, not ({shape[0]},), one value per "
            f"baseline of its cubes, or {shape[:2]}, one per baseline and channel; is it a "
            "results.zarr of tabascal run?"
        )
    bad = np.argwhere(~(np.isfinite(noise) & (noise > 0)))
    if bad.size:
        channel = f", channel {bad[0][1]}," if noise.ndim == 2 else ""
        cells = "cells" if noise.ndim == 2 else "baselines"
        raise MsError(
            f"{path}: its {NOISE_ARRAY} of baseline {bad[0][0]}{channel} is "
            f"{float(noise[tuple(bad[0])])!r} ({len(bad)} {cells} in all); the noise must be "
            "finite and > 0"
        )
    return noise


def _satellites(found: dict, results) -> tuple[str, ...]:
    """The names of the satellites of ``rfi_vis_by_satellite``, whose cubes must be the
    other results' shape; refused, saying how to get it, when the results hold none."""
    group = found["group"]
    if SATELLITE_ARRAY not in group:
        raise MsError(
            f"{results} holds no {SATELLITE_ARRAY}, which --per-satellite writes: run tabascal "
            "run with output.per_satellite: always in its configuration (auto writes it only "
            "within output.per_satellite_mb; summary.json's rfi_vis_by_satellite says why it "
            "was left out)"
        )
    array = group[SATELLITE_ARRAY]
    if array.shape[1:] != found["shape"]:
        raise MsError(
            f"{results}: {SATELLITE_ARRAY} holds cubes of {array.shape[1:]}, the other results "
            f"{found['shape']}"
        )
    names = list(array.attrs.get("satellites", []))
    if len(names) != array.shape[0]:
        names = [f"satellite {k}" for k in range(array.shape[0])]
    return tuple(names)


def _store(path, found: dict, results) -> dict:
    """The store the fit read: the selection import-ms made and the noise, (n_bl,) or (n_bl,
    n_freq)."""
    meta = read_meta(path)
    record = meta.metadata.get("measurement_set")
    if record is None:
        raise MsError(f"{path} was not imported from a Measurement Set (import-ms writes one)")
    shape = (meta.n_bl, meta.n_freq, meta.n_time)
    if shape != found["shape"]:
        raise MsError(
            f"{results} holds (n_bl, n_freq, n_time) = {found['shape']}, the store {path} "
            f"{shape}: give --data the store tabascal run read"
        )
    if not (np.array_equal(meta.a1, found["a1"]) and np.array_equal(meta.a2, found["a2"])):
        raise MsError(
            f"the baselines of {results} are not those of the store {path}: give --data the "
            "store tabascal run read"
        )
    noise = zarr.open_group(str(path), mode="r")["noise"][...]
    noise = noise if np.ndim(noise) == 2 else np.broadcast_to(noise, (meta.n_bl,))
    channels, integrations = record.get("channels"), record.get("integrations")
    options = {
        "column": record["column"],
        "correlation": record.get("correlation_in_place_of") or record["correlation"].split()[0],
        "spw": record["spw"],
        "field": record["field"],
        "time_tolerance": record.get("time_tolerance", TIME_TOLERANCE),
        "channels": None if channels is None else slice(*channels),
        "times": None if integrations is None else slice(*integrations),
    }
    return {"noise": np.asarray(noise, np.float64), "options": options}


def _options(store_options: dict | None, store, given: dict) -> dict:
    """The selection to export into: the store's, which an option given must agree with;
    without a store the options given, else the import's defaults."""
    if store_options is None:
        defaults = {"column": "DATA", "correlation": "I", "time_tolerance": TIME_TOLERANCE}
        chosen = {k: given[k] if given[k] is not None else defaults.get(k) for k in given}
        return chosen | {"channels": None, "times": None}
    for name, value in given.items():
        there = store_options[name]
        if value is None or value == there:
            continue
        if name == "correlation" and str(value).upper() == there:
            continue
        if name == "time_tolerance" and math.isclose(value, there, rel_tol=1e-12):
            continue
        if name == "spw" and isinstance(there, list) and _same_windows(value, there):
            continue
        flag = OPTION_NAMES[name]
        raise MsError(
            f"{store} was imported with {flag} {_text(there)}, not {_text(value)}; export-ms "
            f"writes into the selection the fit read (leave {flag} out)"
        )
    return store_options


def _same_windows(given, stored: list[int]) -> bool:
    """Whether --spw as given (an id, ids or 'all') names the windows a store of several was
    imported from ('all' did, if the MS is the one imported: its selection is checked)."""
    return given == "all" or (np.ndim(given) == 1 and sorted(given) == sorted(stored))


def _text(value) -> str:
    """An option's value as the command line writes it (window ids 0,1)."""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _cell_shapes(tables, path: Path, template_fixed, ddids: np.ndarray) -> dict:
    """(n_chan, n_corr) of the rows of each DATA_DESC_ID."""
    if template_fixed is not None:
        return {int(d): tuple(template_fixed) for d in ddids}
    return cell_shapes(tables, path, ddids)


def _check_cleaned_name(cleaned: str | None, column: str) -> None:
    if cleaned is None:
        return
    if cleaned == column:
        raise MsError(
            f"the cleaned data cannot replace {column}, the data they are computed from; name "
            f"another column with --cleaned-column (CORRECTED_DATA, or {CLEANED_COLUMN})"
        )
    reserved = {*RESULT_COLUMNS, *WEIGHT_COLUMNS, *WEIGHT_COLUMNS.values(), FLAG_COLUMN, "FLAG"}
    if (
        cleaned in reserved
        or cleaned in columns.BACKUPS.values()
        or cleaned.startswith((columns.TMP_PREFIX, columns.OLD_PREFIX, SATELLITE_PREFIX))
    ):
        raise MsError(f"--cleaned-column {cleaned}: export-ms writes that column for another use")


def _check_names(
    ms, ms_path, cleaned: str | None, overwrite: tuple[bool, bool], satellites=()
) -> None:
    """Refuse, before anything is written, a column that would be replaced unasked.
    overwrite: (TAB_* columns, the cleaned column when it is another); satellites: the names
    of the per-satellite columns to write."""
    names = ms.colnames()
    written = (*RESULT_COLUMNS, *satellites, *WEIGHT_COLUMNS.values(), FLAG_COLUMN)
    ours = [c for c in written if c in names]
    if cleaned is not None and cleaned.startswith("TAB_") and cleaned in names:
        ours.append(cleaned)
    if ours and not overwrite[0]:
        raise MsError(
            f"{ms_path} already has column {ours[0]}; add --overwrite-columns to replace the "
            "TAB_* columns (other columns are modified only when named: --cleaned-column, "
            "--write-weights, --write-flags)"
        )
    if cleaned is None or cleaned not in names:
        return
    if ms.getcoldesc(cleaned).get("valueType") not in ("complex", "dcomplex"):
        raise MsError(f"column {cleaned} of {ms_path} is not complex: it cannot hold visibilities")
    if not cleaned.startswith("TAB_") and not overwrite[1]:
        raise MsError(
            f"{ms_path} already has column {cleaned}; add --overwrite-column to replace it "
            "with the cleaned data (what it holds now is lost)"
        )


def _check_selection(found: dict, sel, results, ms_path, store) -> None:
    """Refuse results that are not of the selection: shape, baselines, frequencies."""
    expected = (sel.n_bl, sel.chan_freq_hz.size, sel.n_time)
    if found["shape"] != expected:
        hint = "; results of an import of part of the channels or integrations need --data "
        hint = "" if store is not None else f"{hint}STORE, the store the fit read"
        raise MsError(
            f"{results} holds (n_bl, n_freq, n_time) = {found['shape']}, the selection of "
            f"{ms_path} {expected}; export with the options the data were read with{hint}"
        )
    used = np.unique(np.concatenate([sel.ant1, sel.ant2]))
    a1, a2 = np.searchsorted(used, sel.ant1), np.searchsorted(used, sel.ant2)
    if not (np.array_equal(a1, found["a1"]) and np.array_equal(a2, found["a2"])):
        raise MsError(
            f"the baselines of {results} are not those of {ms_path} in its row order; "
            "export with the options the data were read with"
        )
    if "freqs_hz" in found["group"]:
        freqs = np.asarray(found["group"]["freqs_hz"][...], np.float64)
        if not np.allclose(freqs, sel.chan_freq_hz, rtol=1e-9, atol=0):
            raise MsError(
                f"the channels of {results} ({freqs[0] / 1e6:.6g} to {freqs[-1] / 1e6:.6g} MHz) "
                f"are not those of the selection of {ms_path} ({sel.chan_freq_hz[0] / 1e6:.6g} "
                f"to {sel.chan_freq_hz[-1] / 1e6:.6g} MHz); export with the options the data "
                "were read with"
            )


def _selection(tables, ms, ms_path, chosen: dict):
    """The selection ``chosen`` of the open MS and its correlation plan."""
    sel = scan(
        tables,
        ms_path,
        ms,
        chosen["spw"],
        chosen["field"],
        chosen["time_tolerance"],
        chosen["channels"],
        chosen["times"],
    )
    try:
        return sel, correlation_plan(sel.corr_types, chosen["correlation"])
    except ValueError as err:
        raise MsError(f"{ms_path}: {err}") from None


def fitted_selection(tables, ms, ms_path, results, store=None, given: dict | None = None):
    """The results.zarr at ``results`` (its group, shape, a1 and a2), the selection of the
    open MS ``ms`` the fit read and its correlation plan, as :func:`export_results` finds
    them: for another product of the same fit (the gains table, :mod:`.gains_table`).

    store and given (column, correlation, spw, field, time_tolerance; None where not named)
    as in :func:`export_results`. Raises MsError when the results are not of the selection.
    """
    found = _results(results)
    given = dict.fromkeys(OPTION_NAMES) | (given or {})
    from_store = None if store is None else _store(store, found, results)
    chosen = _options(None if from_store is None else from_store["options"], store, given)
    sel, plan = _selection(tables, ms, ms_path, chosen)
    _check_selection(found, sel, results, ms_path, store)
    return found, sel, plan


def _row_groups(tables, ms, ms_path, column: str) -> list:
    """(cell shape (n_chan, n_corr), ascending table rows) of each DATA_DESC_ID."""
    desc = ms.getcoldesc(column)
    fixed = desc["shape"] if "shape" in desc else None
    ddid_col = ms.getcol("DATA_DESC_ID")
    shapes = _cell_shapes(tables, ms_path, fixed, np.unique(ddid_col))
    return [(shape, np.flatnonzero(ddid_col == d)) for d, shape in shapes.items()]


@dataclass(frozen=True)
class _Asked:
    """The products asked for: cleaned column (or None), weights into TAB_WEIGHT ('new') or
    WEIGHT ('replace') or none (None), residual flags (bad cells (n_bl, n_chan, n_time),
    channels ascending, or None), whether they go into FLAG, and the satellites of the
    per-satellite columns (none when not asked)."""

    cleaned: str | None
    weights: str | None
    bad: np.ndarray | None
    write_flags: bool
    satellites: tuple[str, ...] = ()  # the names of the per-satellite columns' satellites


def _jobs(ms, found: dict, sel, cells: products.Cells, column: str, noise, asked: _Asked):
    """(name, template, comment, fill) of each column to write, in order; each cube is read
    when its column is reached."""
    group = found["group"]
    for name, array in RESULT_COLUMNS.items():
        cube = np.asarray(group[array][...], np.complex64)
        yield name, column, COMMENTS[name], products.cube_fill(cube, cells)
    for k, satellite in enumerate(asked.satellites):
        cube = np.asarray(group[SATELLITE_ARRAY][k], np.complex64)
        comment = f"tabascal: fitted RFI visibilities of satellite {k}, {satellite}"
        yield f"{SATELLITE_PREFIX}{k}", column, comment, products.cube_fill(cube, cells)
    if asked.cleaned is not None:
        rfi = np.asarray(group["rfi_vis"][...], np.complex64)
        gains = np.asarray(group["gains"][...], np.complex64)
        fill = products.cleaned_fill(ms, column, rfi, gains, found["a1"], found["a2"], cells)
        if asked.cleaned in ms.colnames():  # replaced: keeps its own description
            yield asked.cleaned, asked.cleaned, None, fill
        else:
            yield asked.cleaned, column, f"tabascal: {column} minus the fitted RFI", fill
    if asked.weights is not None:
        weight = 1.0 / (len(cells.indices) * noise**2)
        grid = sel.row_grid
        first = int(grid[grid >= 0][0])
        for source, new in WEIGHT_COLUMNS.items():
            if source not in ms.colnames() or not ms.iscelldefined(source, first):
                continue
            replace = asked.weights == "replace"
            fill = products.weight_fill(ms, source, weight, cells, keep_others=replace)
            yield (source, source, None, fill) if replace else (new, source, COMMENTS[new], fill)
    if asked.bad is not None:
        fill = products.flag_fill(ms, asked.bad, cells, merge=False)
        yield FLAG_COLUMN, "FLAG", COMMENTS[FLAG_COLUMN], fill
        if asked.write_flags:
            yield "FLAG", "FLAG", None, products.flag_fill(ms, asked.bad, cells, merge=True)


def _noise(found: dict, from_store: dict | None, asked: bool):
    """(the noise (n_bl,) or (n_bl, n_freq) of the weights and residual flags, where it came
    from): the fit's,
    which the results record, else the store's; (None, None) when neither is asked."""
    if not asked:
        return None, None
    if found["noise"] is not None:
        return found["noise"], NOISE_FROM_RESULTS
    return from_store["noise"], NOISE_FROM_STORE


def _refuse_unusable(found, results, store, cleaned_column, weights, flag_residual, write_flags):
    if write_flags and flag_residual is None:
        raise MsError("--write-flags merges the residual flags into FLAG: give --flag-residual K")
    if flag_residual is not None and not (np.isfinite(flag_residual) and flag_residual > 0):
        raise MsError(f"--flag-residual {flag_residual}: the threshold K must be a number > 0")
    if store is None and found["noise"] is None and (weights or flag_residual is not None):
        raise MsError(
            "the weights and residual flags need the noise the fit used, which its store "
            f"holds: give --data STORE (the store tabascal run read); {results} does not "
            f"record it (it has no array {NOISE_ARRAY}: written before tabascal run recorded it)"
        )
    if cleaned_column is not None and "gains" not in found["group"]:
        raise MsError(f"{results} has no array gains, which the cleaned data need")


def export_results(
    results,
    ms_path,
    *,
    store=None,
    column: str | None = None,
    correlation: str | None = None,
    spw: int | None = None,
    field: int | None = None,
    time_tolerance: float | None = None,
    overwrite_columns: bool = False,
    cleaned_column: str | None = None,
    overwrite_column: bool = False,
    weights: bool = False,
    write_weights: bool = False,
    flag_residual: float | None = None,
    write_flags: bool = False,
    per_satellite: bool = False,
) -> ExportReport:
    """Write the fit in ``results`` (a results.zarr) into the Measurement Set ``ms_path``.

    store: the observation store the fit read (from import-ms); its metadata gives the
    selection (an option given must agree) and, for results that do not record the noise the
    fit used (their array ``noise``), its noise the weights and residual flags.
    Without it, ``column`` (default DATA), ``correlation`` (I), ``spw`` (an id, ids or
    'all'), ``field`` and ``time_tolerance`` must be those the data were read with, of all
    channels and integrations. Always writes TAB_SKY_DATA, TAB_RFI_DATA and TAB_RES_DATA;
    per_satellite a TAB_RFI_SAT<k> for each satellite of the results' rfi_vis_by_satellite
    (refused when they hold none); cleaned_column names the column of the cleaned data (None:
    none); weights (TAB_WEIGHT), write_weights (WEIGHT), flag_residual (K > 0:
    TAB_FLAG_RESIDUAL) and write_flags (into FLAG) as in the module. An existing TAB_* column
    (TAB_RFI_SAT<k> too) is refused unless ``overwrite_columns``,
    an existing other ``cleaned_column`` unless ``overwrite_column``; nothing is written when
    anything is refused. Cells the reader filled (no row in the MS) are not written anywhere.
    """
    tables = _casacore.tables()
    found = _results(results)
    ms_path = Path(ms_path)
    if not (ms_path / "table.dat").exists():
        raise MsError(f"{ms_path} is not a Measurement Set (no table.dat)")
    weights = weights or write_weights
    _refuse_unusable(found, results, store, cleaned_column, weights, flag_residual, write_flags)
    satellites = _satellites(found, results) if per_satellite else ()
    given = dict(column=column, correlation=correlation, spw=spw, field=field)
    given["time_tolerance"] = time_tolerance
    from_store = None if store is None else _store(store, found, results)
    chosen = _options(None if from_store is None else from_store["options"], store, given)
    column = chosen["column"]
    _check_cleaned_name(cleaned_column, column)
    with tables.table(str(ms_path), readonly=False, ack=False) as ms:
        recovered = columns.recover(ms)
        if column not in ms.colnames():
            raise MsError(f"{ms_path} has no column '{column}' to model the new columns on")
        satellite_columns = [f"{SATELLITE_PREFIX}{k}" for k in range(len(satellites))]
        overwrite = (overwrite_columns, overwrite_column)
        _check_names(ms, ms_path, cleaned_column, overwrite, satellite_columns)
        sel, plan = _selection(tables, ms, ms_path, chosen)
        _check_selection(found, sel, results, ms_path, store)
        noise, noise_from = _noise(found, from_store, weights or flag_residual is not None)
        bad = None
        if flag_residual is not None:
            residual = np.asarray(found["group"]["residual"][...])
            per_cell = noise.reshape(*noise.shape, *(1,) * (3 - noise.ndim))  # (n_bl, 1|n_freq, 1)
            bad = np.abs(residual) > flag_residual * per_cell
        mode = None if not weights else "replace" if write_weights else "new"
        asked = _Asked(cleaned_column, mode, bad, write_flags, satellites)
        groups = _row_groups(tables, ms, ms_path, column)
        cells = products.selection_cells(sel, plan)
        existed = set(ms.colnames())
        written, backups = [], {}
        for name, template, comment, fill in _jobs(ms, found, sel, cells, column, noise, asked):
            chunks = columns.row_chunks(groups, lambda shape: 16 * math.prod(shape))
            made = columns.write_column(tables, ms, name, template, chunks, fill, comment=comment)
            written.append(name)
            if made is not None:
                backups[name] = made
    return ExportReport(
        columns=tuple(written),
        n_rows=sel.row_grid.size - sel.n_rows_filled,
        correlations=plan.describe(),
        data_column=column,
        replaced=tuple(c for c in written if c in existed),
        backups=backups,
        n_flagged=None if bad is None else int(np.count_nonzero(bad)),
        n_cells=int(math.prod(found["shape"])),
        channels=sel.channel_range,
        integrations=(sel.times.start, sel.times.stop, sel.n_time_grid),
        recovered=tuple(recovered),
        noise_from=noise_from,
        noise_median=None if noise_from is None else float(np.median(noise)),
    )
