"""Small Measurement Sets built with python-casacore's own table tools, for the tests.

build_ms writes a regular MS (rows by time, then spectral window, then baseline) from random
values and returns what it wrote, so that tests can compute what tabascal should read with
plain numpy; tests make it irregular afterwards with casacore table operations
(rewrite_rows reorders or drops rows), and expected_cells says, row by row, what a grid
read of the result holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from casacore import tables

from tabascal.observation import geometry as geo

CODES = {"I": 1, "RR": 5, "RL": 6, "LR": 7, "LL": 8, "XX": 9, "XY": 10, "YX": 11, "YY": 12}
START_MJD_S = 5225680800.0  # 2024-06-21T10:00:00 UTC
LAT, LON = np.deg2rad(-30.7), np.deg2rad(21.4)
ROW_COLUMNS = ("TIME", "TIME_CENTROID", "INTERVAL", "EXPOSURE", "ANTENNA1", "ANTENNA2",
               "DATA_DESC_ID", "FIELD_ID", "DATA", "FLAG", "FLAG_ROW", "SIGMA", "WEIGHT",
               "UVW")  # fmt: skip


@dataclass
class Written:
    """What build_ms wrote, one entry per table row unless said otherwise."""

    data: np.ndarray  # (n_rows, n_chan, n_corr) complex64
    flag: np.ndarray  # (n_rows, n_chan, n_corr) bool
    flag_row: np.ndarray  # (n_rows,)
    sigma: np.ndarray  # (n_rows, n_corr) float32
    ant1: np.ndarray
    ant2: np.ndarray
    time: np.ndarray
    ddid: np.ndarray
    field_id: np.ndarray
    positions: np.ndarray  # (n_ant, 3) ITRF
    dish: np.ndarray  # (n_ant,)
    freqs: list  # per spectral window (n_chan,)
    chan_width: float  # of the first window
    phase_dir: np.ndarray  # (n_field, 2) J2000 rad
    corr_types: list
    t_index: np.ndarray  # (n_rows,) the integration of each row
    extra: dict = field(default_factory=dict)


def _subtable(path, name):
    return tables.table(f"{path}/{name}", readonly=False, ack=False)


def build_ms(
    path,
    *,
    n_ant=5,
    n_time=4,
    n_chan=3,
    corr=("XX", "YY"),
    n_spw=1,
    spw_freqs=None,
    n_field=1,
    interval=2.0,
    autocorrelations=False,
    descending=False,
    sigma="per baseline",
    tiled=False,
    seed=0,
) -> Written:
    """A regular MS at ``path``. sigma: 'scalar', 'per baseline', 'varying' (in time) or
    'ones' (SIGMA and WEIGHT 1 everywhere, as pyuvdata writes them). spw_freqs: per window,
    (lowest channel's frequency, channel width) in Hz; None: 1.3 GHz and 10 MHz higher for
    each further window, channels of 200 kHz. Every window has ``n_chan`` channels."""
    rng = np.random.default_rng(seed)
    n_corr = len(corr)
    pairs = [(a, b) for a in range(n_ant) for b in range(a, n_ant) if autocorrelations or a < b]
    cell = [n_chan, n_corr]
    if tiled:
        col = tables.makearrcoldesc("DATA", 0j, ndim=2, shape=cell, valuetype="complex",
                                    datamanagertype="TiledColumnStMan",
                                    datamanagergroup="TiledData")  # fmt: skip
        desc = tables.maketabdesc([col])
        tables.tabledefinehypercolumn(desc, "TiledData", 3, ["DATA"])
        spec = {"DEFAULTTILESHAPE": np.array([n_corr, n_chan, 16])}
        dminfo = {"*1": {"NAME": "TiledData", "TYPE": "TiledColumnStMan", "SPEC": spec,
                         "COLUMNS": ["DATA"]}}  # fmt: skip
    else:
        desc = tables.maketabdesc(
            [tables.makearrcoldesc("DATA", 0j, ndim=2, shape=cell, valuetype="complex")]
        )
        dminfo = None
    ms = tables.default_ms(str(path), desc, dminfo)

    enu = rng.uniform(-500, 500, (n_ant, 3)) * [1, 1, 0.01]
    positions = geo.enu_to_itrf(enu, LAT, LON, 1000.0)
    dish = np.full(n_ant, 13.5)
    with _subtable(path, "ANTENNA") as t:
        t.addrows(n_ant)
        t.putcol("POSITION", positions)
        t.putcol("DISH_DIAMETER", dish)
        t.putcol("NAME", [f"M{a:03d}" for a in range(n_ant)])
    spw_freqs = spw_freqs or [(1.3e9 + 1e7 * s, 2e5) for s in range(n_spw)]
    assert len(spw_freqs) == n_spw
    width = spw_freqs[0][1]
    freqs = []
    with _subtable(path, "SPECTRAL_WINDOW") as t:
        t.addrows(n_spw)
        for s, (lowest, step) in enumerate(spw_freqs):
            f = lowest + step * np.arange(n_chan)
            f = f[::-1] if descending else f
            freqs.append(f)
            t.putcell("CHAN_FREQ", s, f)
            t.putcell("CHAN_WIDTH", s, np.full(n_chan, -step if descending else step))
            t.putcell("NUM_CHAN", s, n_chan)
    with _subtable(path, "POLARIZATION") as t:
        t.addrows(1)
        t.putcell("CORR_TYPE", 0, np.array([CODES[c] for c in corr]))
        t.putcell("NUM_CORR", 0, n_corr)
    with _subtable(path, "DATA_DESCRIPTION") as t:
        t.addrows(n_spw)
        t.putcol("SPECTRAL_WINDOW_ID", np.arange(n_spw))
        t.putcol("POLARIZATION_ID", np.zeros(n_spw, int))
    phase_dir = np.array([[3.0 + 0.1 * f, -0.5 - 0.05 * f] for f in range(n_field)])
    with _subtable(path, "FIELD") as t:
        t.addrows(n_field)
        t.putcol("PHASE_DIR", phase_dir[:, None, :])
        t.putcol("NUM_POLY", np.zeros(n_field, int))

    ant1 = np.array([p[0] for p in pairs])
    ant2 = np.array([p[1] for p in pairs])
    n_bl = len(pairs)
    t_idx = np.repeat(np.arange(n_time), n_spw * n_bl)
    n_rows = t_idx.size
    time = START_MJD_S + (t_idx + 0.5) * interval
    ddid = np.tile(np.repeat(np.arange(n_spw), n_bl), n_time)
    field_id = t_idx * n_field // n_time
    data = rng.normal(size=(n_rows, *cell)) + 1j * rng.normal(size=(n_rows, *cell))
    data = data.astype(np.complex64)
    flag = rng.uniform(size=(n_rows, *cell)) < 0.1
    flag_row = rng.uniform(size=n_rows) < 0.05
    per_bl = rng.uniform(0.5, 2.0, (n_bl, n_corr)).astype(np.float32)
    sigma = {
        "scalar": np.full((n_rows, n_corr), 1.25, np.float32),
        "per baseline": np.tile(per_bl, (n_time * n_spw, 1)),
        "varying": np.tile(per_bl, (n_time * n_spw, 1))
        * (1 + 0.2 * t_idx[:, None]).astype(np.float32),
        "ones": np.ones((n_rows, n_corr), np.float32),
    }[sigma]
    ms.addrows(n_rows)
    columns = {
        "TIME": time, "TIME_CENTROID": time, "INTERVAL": np.full(n_rows, interval),
        "EXPOSURE": np.full(n_rows, interval), "ANTENNA1": np.tile(ant1, n_time * n_spw),
        "ANTENNA2": np.tile(ant2, n_time * n_spw), "DATA_DESC_ID": ddid,
        "FIELD_ID": field_id, "DATA": data, "FLAG": flag, "FLAG_ROW": flag_row,
        "SIGMA": sigma, "WEIGHT": 1 / sigma**2, "UVW": np.zeros((n_rows, 3)),
    }  # fmt: skip
    assert set(columns) == set(ROW_COLUMNS)
    for name, value in columns.items():
        ms.putcol(name, value)
    ms.close()
    return Written(
        data=data, flag=flag, flag_row=flag_row, sigma=sigma, ant1=columns["ANTENNA1"],
        ant2=columns["ANTENNA2"], time=time, ddid=ddid, field_id=field_id,
        positions=positions, dish=dish, freqs=freqs, chan_width=width, phase_dir=phase_dir,
        corr_types=list(corr), t_index=t_idx,
    )  # fmt: skip


def add_cell_column(path, name: str, values: np.ndarray) -> None:
    """Add the float column ``name`` (WEIGHT_SPECTRUM, SIGMA_SPECTRUM) holding ``values``
    (n_rows, n_chan, n_corr) to the MS at ``path``."""
    with tables.table(str(path), readonly=False, ack=False) as ms:
        desc = tables.makearrcoldesc(name, 0.0, ndim=2, shape=list(values.shape[1:]),
                                     valuetype="float")  # fmt: skip
        ms.addcols(tables.maketabdesc([desc]))
        ms.putcol(name, values.astype(np.float32))


def expected_cube(written: Written, values: np.ndarray, rows_mask: np.ndarray, n_time: int):
    """Rows selected by ``rows_mask`` (time-major, baselines in row order) as (n_bl, ..., n_time)
    (the trailing axes of ``values`` kept between)."""
    picked = values[rows_mask]
    cube = picked.reshape(n_time, -1, *picked.shape[1:])
    return np.moveaxis(cube, 0, -1)


def rewrite_rows(path, source: np.ndarray) -> None:
    """Make table row r of the MS at ``path`` its row ``source[r]`` (every column build_ms
    fills): ``source`` may reorder the rows and leave some out."""
    with tables.table(str(path), readonly=False, ack=False) as ms:
        columns = {name: ms.getcol(name) for name in ROW_COLUMNS}
        ms.removerows(np.arange(len(source), ms.nrows()))
        for name, value in columns.items():
            ms.putcol(name, value[source])


def expected_cells(written: Written, source, a1, a2, n_time: int, corr: int = 0):
    """vis, flags (n_bl, n_chan, n_time) that a read of correlation ``corr`` should give from
    a table holding the written rows ``source`` (any order), with the baselines (a1, a2) (MS
    antenna ids, the reader's order): each row's values copied to its (baseline, integration),
    vis 0 and flagged where no row is. Written row by row, independently of the reader."""
    column = {(int(p), int(q)): b for b, (p, q) in enumerate(zip(a1, a2, strict=True))}
    n_chan = written.data.shape[1]
    vis = np.zeros((len(column), n_chan, n_time), np.complex64)
    flags = np.ones((len(column), n_chan, n_time), bool)
    for r in source:
        b, t = column[(int(written.ant1[r]), int(written.ant2[r]))], written.t_index[r]
        vis[b, :, t] = written.data[r, :, corr]
        flags[b, :, t] = written.flag[r, :, corr] | written.flag_row[r]
    return vis, flags
