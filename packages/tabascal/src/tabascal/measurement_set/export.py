"""Writing a fit's results into the Measurement Set it came from (``tabascal export-ms``).

Three new columns, shaped like the data column they are modelled on (``DATA`` by default) and
stored the same way: ``TAB_SKY_DATA`` (the fitted sky), ``TAB_RFI_DATA`` (the fitted RFI) and
``TAB_RES_DATA`` (the residual, data minus model), read from the results' ``sky_vis``,
``rfi_vis`` and ``residual`` arrays (n_bl, n_freq, n_time), in the baseline order of the
selection the fit read (same spectral window, field and correlation options as import-ms).
Each fitted value goes into the correlation(s) it was fitted from: the one correlation for XX,
YY, RR, LL or a stored Stokes I, and both parallel hands for Stokes I formed from them (an
unpolarised model has XX = YY = I, so ``(XX + YY) / 2`` of the new column is the fitted I).
Every other cell (other correlations, rows of other spectral windows or fields,
autocorrelations) is 0. No existing column is touched; an existing TAB_* column is an error
naming it unless ``overwrite_columns``, and then only the TAB_* columns are rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr

from tabascal.measurement_set import _casacore
from tabascal.measurement_set.correlations import correlation_plan
from tabascal.measurement_set.selection import TIME_TOLERANCE, MsError, scan, subtable

RESULT_COLUMNS = {"TAB_SKY_DATA": "sky_vis", "TAB_RFI_DATA": "rfi_vis", "TAB_RES_DATA": "residual"}
COMMENTS = {
    "TAB_SKY_DATA": "tabascal: fitted sky visibilities",
    "TAB_RFI_DATA": "tabascal: fitted RFI visibilities",
    "TAB_RES_DATA": "tabascal: residual, data minus fitted model",
}
CHUNK_ROWS = 65536


@dataclass(frozen=True)
class ExportReport:
    """What export_results wrote: columns, rows of the selection, correlations filled."""

    columns: tuple[str, ...]
    n_rows: int
    correlations: str


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
    return {"group": group, "shape": shapes["sky_vis"], "a1": group["a1"][:], "a2": group["a2"][:]}


def _add_column(tables, ms, name: str, template: str) -> None:
    """A new column ``name`` with the description and storage of ``template``."""
    desc = dict(ms.getcoldesc(template))
    desc["comment"] = COMMENTS[name]
    dminfo = ms.getdminfo(template)
    desc["dataManagerGroup"] = f"{name}_dm"
    manager = {"TYPE": dminfo["TYPE"], "NAME": f"{name}_dm", "SPEC": dminfo["SPEC"]}
    ms.addcols(tables.maketabdesc(tables.makecoldesc(name, desc)), manager)


def _cell_shapes(tables, path: Path, template_fixed, ddids: np.ndarray) -> dict:
    """(n_chan, n_corr) of the rows of each DATA_DESC_ID."""
    if template_fixed is not None:
        return {int(d): tuple(template_fixed) for d in ddids}
    with subtable(tables, path, "DATA_DESCRIPTION") as dd:
        spw_of, pol_of = dd.getcol("SPECTRAL_WINDOW_ID"), dd.getcol("POLARIZATION_ID")
    with subtable(tables, path, "SPECTRAL_WINDOW") as sw:
        n_chan = sw.getcol("NUM_CHAN")
    with subtable(tables, path, "POLARIZATION") as pol:
        n_corr = pol.getcol("NUM_CORR")
    return {int(d): (int(n_chan[spw_of[d]]), int(n_corr[pol_of[d]])) for d in ddids}


def _put(ms, column: str, rows: np.ndarray, values: np.ndarray) -> None:
    if rows[-1] - rows[0] + 1 == rows.size:
        ms.putcol(column, values, startrow=int(rows[0]), nrow=rows.size)
    else:
        ms.selectrows(rows).putcol(column, values)


def _write_column(ms, column: str, fitted: np.ndarray, sel, indices, shapes: dict, ddid_col):
    """Every row of ``column``: the fitted values (n_bl, n_freq, n_time) in the selection's
    rows and correlations ``indices``, zeros elsewhere."""
    position = np.full(sel.n_rows_table, -1, np.int64)
    held = np.flatnonzero(sel.row_index.ravel() >= 0)  # filled cells have no row to write
    position[sel.row_index.ravel()[held]] = held
    if sel.reversed:
        fitted = fitted[:, ::-1]
    for ddid, shape in shapes.items():
        rows_of = np.flatnonzero(ddid_col == ddid)
        for k in range(0, rows_of.size, CHUNK_ROWS):
            rows = rows_of[k : k + CHUNK_ROWS]
            values = np.zeros((rows.size, *shape), np.complex64)
            pos = position[rows]
            hit = np.flatnonzero(pos >= 0)
            t, b = np.divmod(pos[hit], sel.n_bl)
            for i in indices:
                values[hit, :, i] = fitted[b, :, t]
            _put(ms, column, rows, values)


def export_results(
    results,
    ms_path,
    *,
    template: str = "DATA",
    correlation: str = "I",
    spw: int | None = None,
    field: int | None = None,
    overwrite_columns: bool = False,
    time_tolerance: float = TIME_TOLERANCE,
) -> ExportReport:
    """Add TAB_SKY_DATA, TAB_RFI_DATA and TAB_RES_DATA from ``results`` (a results.zarr) to
    the Measurement Set ``ms_path``; the options select what the fit read (see module).
    Cells the reader filled (no row in the MS) are not written anywhere."""
    tables = _casacore.tables()
    found = _results(results)
    ms_path = Path(ms_path)
    if not (ms_path / "table.dat").exists():
        raise MsError(f"{ms_path} is not a Measurement Set (no table.dat)")
    with tables.table(str(ms_path), readonly=False, ack=False) as ms:
        names = ms.colnames()
        if template not in names:
            raise MsError(f"{ms_path} has no column '{template}' to model the new columns on")
        existing = [c for c in RESULT_COLUMNS if c in names]
        if existing and not overwrite_columns:
            raise MsError(
                f"{ms_path} already has column {existing[0]}; add --overwrite-columns to "
                "replace the TAB_* columns (no other column is ever modified)"
            )
        sel = scan(tables, ms_path, ms, spw, field, time_tolerance)
        try:
            plan = correlation_plan(sel.corr_types, correlation)
        except ValueError as err:
            raise MsError(f"{ms_path}: {err}") from None
        expected = (sel.n_bl, sel.chan_freq_hz.size, sel.n_time)
        if found["shape"] != expected:
            raise MsError(
                f"{results} holds (n_bl, n_freq, n_time) = {found['shape']}, the selection of "
                f"{ms_path} {expected}; export with the options the data were read with"
            )
        used = np.unique(np.concatenate([sel.ant1, sel.ant2]))
        a1, a2 = np.searchsorted(used, sel.ant1), np.searchsorted(used, sel.ant2)
        if not (np.array_equal(a1, found["a1"]) and np.array_equal(a2, found["a2"])):
            raise MsError(
                f"the baselines of {results} are not those of {ms_path} in its row order; "
                "export with the options the data were read with"
            )
        desc = ms.getcoldesc(template)
        fixed = desc["shape"] if "shape" in desc else None  # (n_chan, n_corr)
        ddid_col = ms.getcol("DATA_DESC_ID")
        shapes = _cell_shapes(tables, ms_path, fixed, np.unique(ddid_col))
        for column, array in RESULT_COLUMNS.items():
            if column not in names:
                _add_column(tables, ms, column, template)
            fitted = np.asarray(found["group"][array][...], np.complex64)
            _write_column(ms, column, fitted, sel, plan.indices, shapes, ddid_col)
    n_rows = sel.row_index.size - sel.n_rows_filled
    return ExportReport(tuple(RESULT_COLUMNS), n_rows, plan.describe())
