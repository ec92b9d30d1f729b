"""import-ms, run and export-ms on two real observations (tests/ms/data/README.md): HERA-19
fitted with satellites from a TLE file and written back; MWA imported in Stokes I and in each
hand, cell by cell against the MS read with casacore alone."""

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from casacore import tables

from tabascal.cli import main
from tabascal.store import read_observation

DATA = Path(__file__).parent / "data"
HERA = "hera19_2457698.40355_xx.ms"
MWA = "mwa_1088285600_24ant.ms"
TLE = DATA / "sgp4_ver_deep_space.tle"
# tarfile's "data" filter (Python 3.11.4 on) refuses members that would land outside the folder
SAFE = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _unpack(name: str, where: Path) -> Path:
    with tarfile.open(DATA / f"{name}.tar.gz") as tar:
        tar.extractall(where, **SAFE)
    return where / name


def _columns(path: Path) -> dict:
    """Every column of the main table that holds arrays: dtype, shape and bytes."""
    out = {}
    with tables.table(str(path), ack=False) as ms:
        for name in ms.colnames():
            try:
                value = ms.getcol(name)
            except RuntimeError:  # FLAG_CATEGORY holds no arrays
                continue
            out[name] = (value.dtype.str, value.shape, value.tobytes())
    return out


def _cells(path: Path, antenna_ids, a1, a2):
    """From the MS with casacore alone: the main table, and for each cross-correlation row its
    baseline (in the store's order, a1 and a2 indexing ``antenna_ids``) and integration."""
    with tables.table(str(path), ack=False) as ms:
        table = {name: ms.getcol(name) for name in ("ANTENNA1", "ANTENNA2", "TIME", "DATA")}
        table |= {name: ms.getcol(name) for name in ("FLAG", "FLAG_ROW")}
    ids = np.asarray(antenna_ids)
    baseline = {(int(p), int(q)): b for b, (p, q) in enumerate(zip(ids[a1], ids[a2], strict=True))}
    cross = np.flatnonzero(table["ANTENNA1"] != table["ANTENNA2"])
    b = np.array([baseline[int(table["ANTENNA1"][r]), int(table["ANTENNA2"][r])] for r in cross])
    t = np.searchsorted(np.unique(table["TIME"]), table["TIME"][cross])
    return table, cross, b, t


def _cube(values: np.ndarray, cross, b, t, n_bl: int, n_time: int) -> np.ndarray:
    """Row values (n_rows, n_chan) as (n_bl, n_chan, n_time), every cell from exactly one row."""
    cube = np.zeros((n_bl, values.shape[1], n_time), values.dtype)
    count = np.zeros((n_bl, n_time), int)
    np.add.at(count, (b, t), 1)
    assert np.all(count == 1)
    cube[b, :, t] = values[cross]
    return cube


@pytest.mark.parametrize("correlation", ["I", "XX", "YY"])
def test_mwa_import_in_stokes_i_and_each_hand_equals_casacore_cell_by_cell(
    tmp_path, capsys, correlation
):
    """Stokes I = (XX + YY) / 2, flagged where either hand is, and each hand alone, as numpy
    forms them from the MS's DATA, FLAG and FLAG_ROW; antennas, channels and times too."""
    ms = _unpack(MWA, tmp_path)
    store = tmp_path / "mwa.zarr"
    assert main(["import-ms", str(ms), "-o", str(store), "--correlation", correlation]) == 0
    out = capsys.readouterr().out
    described = "I = (XX + YY) / 2" if correlation == "I" else correlation
    assert f"(DATA, correlation {described}, spectral window 0, field 0)" in out
    assert "24 stations, 276 baselines, 16 channels, 2 integrations of 2 s" in out
    assert "48 autocorrelation rows left out" in out

    obs = read_observation(store)
    info = obs.metadata["measurement_set"]
    table, cross, b, t = _cells(ms, info["antenna_ids"], obs.a1, obs.a2)
    data, flag = table["DATA"].astype(np.complex128), table["FLAG"]
    hands = {"I": [0, 1], "XX": [0], "YY": [1]}[correlation]
    vis = np.mean(data[..., hands], axis=-1).astype(np.complex64)
    bad = np.any(flag[..., hands], axis=-1) | table["FLAG_ROW"][:, None]
    assert obs.vis.shape == (276, 16, 2) and obs.vis.dtype == np.complex64
    np.testing.assert_array_equal(obs.vis, _cube(vis, cross, b, t, 276, 2))
    np.testing.assert_array_equal(obs.flags, _cube(bad, cross, b, t, 276, 2))
    assert np.count_nonzero(obs.flags) == 3 * 276 * 2  # channels 0, 14 and 15 are flagged

    with tables.table(str(ms / "SPECTRAL_WINDOW"), ack=False) as sw:
        np.testing.assert_array_equal(obs.freqs_hz, sw.getcell("CHAN_FREQ", 0))
    with tables.table(str(ms / "ANTENNA"), ack=False) as ants:
        np.testing.assert_array_equal(obs.ant_itrf, ants.getcol("POSITION")[info["antenna_ids"]])
    assert info["antenna_ids"] == [12, 13, 14, 16, 17, 18, 19, 22, 23, 24, 25, 26, 27, 28, 29,
                                   32, 33, 34, 35, 36, 37, 38, 39, 42]  # fmt: skip
    assert obs.int_time == 2.0 and info["noise"]["method"] == "estimate"


def test_hera_fit_with_a_tle_file_is_exported_into_the_cells_it_read(tmp_path, capsys):
    """The whole path on HERA-19: import-ms (Stokes I asked, the one hand XX read, channels
    0:64), tabascal run with ``satellites.tle_file`` (a few steps: the element sets are no
    real satellites of that night, the mechanics are tested), export-ms --data. In the cells
    the fit read the TAB_* columns hold the results and TAB_CLEANED_DATA = DATA - g[a1] rfi
    conj(g[a2]); every other cell holds 0 (the data in TAB_CLEANED_DATA), and every column
    the MS had is unchanged."""
    ms = _unpack(HERA, tmp_path)
    store, fit = tmp_path / "hera.zarr", tmp_path / "fit"
    assert main(["import-ms", str(ms), "-o", str(store), "--channels", "0:64"]) == 0
    out = capsys.readouterr().out
    assert "19 stations, 171 baselines, 64 channels, 3 integrations of 10.7374 s" in out
    assert "the data hold one correlation, XX, read in its place" in out
    assert "channels 0:64 of the window's 256 (137.5 to 143.652 MHz)" in out
    assert "no satellites" in out

    config = tmp_path / "fit.yaml"
    config.write_text(
        f"satellites: {{tle_file: {json.dumps(str(TLE))}}}\n"
        "fit: {checkpoint_every: 0, init: data, polish_steps: 2}\noutput: {plots: false}\n"
        # the per-antenna signal from the data start: the quick fit this test was written for
        "rfi: {signal: per_antenna, time_stencil: 3}\n"
    )
    run = ["run", "-c", str(config), "--data", str(store), "-o", str(fit)]
    assert main([*run, "--steps", "3", "-q"]) == 0
    assert f"tabascal run: wrote {fit}" in capsys.readouterr().out
    summary = json.loads((fit / "summary.json").read_text())
    # --steps 3: 3 gradient steps, then 2 Levenberg-Marquardt steps (or 1, converged)
    stopped = summary["fit"]["stopped"]
    assert summary["steps"] == 3 + 2 or (summary["steps"] == 4 and stopped == "converged")
    assert len(summary["model"]["rfi_corr_time_s"]) == 2
    results = zarr.open_group(str(fit / "results.zarr"), mode="r")
    got = {name: results[name][...] for name in ("sky_vis", "rfi_vis", "residual", "gains")}
    assert np.any(got["rfi_vis"] != 0)  # the two satellites of the TLE file were modelled

    before = _columns(ms)
    new = ("TAB_SKY_DATA", "TAB_RFI_DATA", "TAB_RES_DATA", "TAB_CLEANED_DATA", "TAB_WEIGHT",
           "TAB_WEIGHT_SPECTRUM")  # fmt: skip
    export = ["export-ms", str(fit / "results.zarr"), "--ms", str(ms), "--data", str(store)]
    assert main(export) == 0
    out = capsys.readouterr().out
    assert f"added {', '.join(new)} to {ms}: 513 rows" in out
    assert "only channels 0:64 of 256 and integrations 0:3 of 3" in out
    after = _columns(ms)
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == set(new)

    obs = read_observation(store)
    table, cross, b, t = _cells(ms, obs.metadata["measurement_set"]["antenna_ids"], obs.a1, obs.a2)
    fitted = np.zeros((570, 256, 1), bool)
    fitted[cross, :64] = True
    with tables.table(str(ms), ack=False) as main_table:
        written = {
            name: main_table.getcol(name)
            for name in main_table.colnames()
            if name.startswith("TAB_")
        }
    for column, name in (("TAB_SKY_DATA", "sky_vis"), ("TAB_RFI_DATA", "rfi_vis"),
                         ("TAB_RES_DATA", "residual")):  # fmt: skip
        assert written[column].shape == (570, 256, 1) and written[column].dtype == np.complex64
        np.testing.assert_array_equal(written[column][cross, :64, 0], got[name][b, :, t])
        assert not np.any(written[column][~fitted])
    cleaned, weight = written["TAB_CLEANED_DATA"], written["TAB_WEIGHT"]
    weight_spectrum = written["TAB_WEIGHT_SPECTRUM"]
    g = got["gains"].astype(np.complex128)
    seen = g[obs.a1[b], :, t] * got["rfi_vis"][b, :, t] * np.conj(g[obs.a2[b], :, t])
    expected = table["DATA"][cross, :64, 0] - seen
    assert np.abs(seen).max() > 0.1 * np.abs(expected).max()  # measured: 0.25
    # measured: 5.9e-8 relative at worst (the complex64 rounding of the stored result)
    np.testing.assert_allclose(cleaned[cross, :64, 0], expected, rtol=6e-6, atol=0)
    np.testing.assert_array_equal(cleaned[~fitted], table["DATA"][~fitted])
    noise = np.broadcast_to(zarr.open_group(str(store), mode="r")["noise"][...], (171,))
    # measured: 5.7e-8 relative (float32 weights)
    np.testing.assert_allclose(weight[cross, 0], 1 / noise[b] ** 2, rtol=6e-6)
    np.testing.assert_allclose(
        weight_spectrum[cross, :64, 0], np.repeat(1 / noise[b, None] ** 2, 64, 1), rtol=6e-6
    )
    autocorrelations = np.setdiff1d(np.arange(570), cross)
    assert not np.any(weight[autocorrelations]) and not np.any(weight_spectrum[~fitted])
