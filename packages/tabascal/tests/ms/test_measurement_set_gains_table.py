"""export-ms --gains-table: a fit's gains as a CASA calibration table, read back with casacore
alone and checked against the results cell by cell, applied by hand as applycal applies it,
and refused (leaving nothing behind) when the run fitted no gains or the path is taken."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from casacore import tables
from msbuild import build_ms, rewrite_rows
from test_measurement_set_export_products import _fit

from tabascal.cli import main
from tabascal.config import dump_yaml
from tabascal.fitting import run_config
from tabascal.measurement_set import MsError
from tabascal.measurement_set.gains_table import write_gains_table
from tabascal.store import read_observation

SIMULATION = """
array: {n_stations: 6}
observation: {n_time: 6, n_freq: 4, flag_fraction: 0.1, sefd_spread: 0.1}
sky: {n_sources: 2}
"""
FIT = "fit: {checkpoint_every: 0}\noutput: {plots: false}\ngains: {ref_ant: 2}\n"
MAIN_COLUMNS = {"TIME", "FIELD_ID", "SPECTRAL_WINDOW_ID", "ANTENNA1", "ANTENNA2", "INTERVAL",
                "SCAN_NUMBER", "OBSERVATION_ID", "CPARAM", "PARAMERR", "FLAG", "SNR",
                "WEIGHT"}  # fmt: skip
COPIED = ("ANTENNA", "FIELD", "SPECTRAL_WINDOW", "OBSERVATION")


def _files(path: Path) -> dict:
    """Every file under ``path``: its relative name and the SHA-256 of its bytes."""
    return {
        str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }


def _read(path: Path) -> dict:
    with tables.table(str(path), ack=False) as t:
        out = {name: t.getcol(name) for name in t.colnames()}
        out |= {"keywords": t.getkeywords(), "info": t.info(), "colnames": set(t.colnames())}
    return out


def _antenna_held(flags: np.ndarray, a1, a2, n_ant: int) -> np.ndarray:
    """(n_ant, n_chan, n_time): some baseline of the antenna unflagged, baseline by baseline."""
    held = np.zeros((n_ant, *flags.shape[1:]), bool)
    for b in range(flags.shape[0]):
        held[a1[b]] |= ~flags[b]
        held[a2[b]] |= ~flags[b]
    return held


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A simulated MS of one correlation (Stokes I), imported with --channels 1:4 --times
    1:5, fitted for a few steps with Gaussian-process gains (reference antenna 2)."""
    where = tmp_path_factory.mktemp("gains")
    (where / "sim.yaml").write_text(SIMULATION)
    (where / "fit.yaml").write_text(FIT)
    ms, store, fit = where / "obs.ms", where / "obs.zarr", where / "fit"
    simulate = ["simulate", "--preset", "demo", "-c", str(where / "sim.yaml"), "--seed", "3"]
    assert main([*simulate, "-o", str(ms), "-q"]) == 0
    imported = ["import-ms", str(ms), "-o", str(store), "--channels", "1:4", "--times", "1:5"]
    assert main(imported) == 0
    run = ["run", "-c", str(where / "fit.yaml"), "--data", str(store), "-o", str(fit)]
    assert main([*run, "--steps", "3", "-q"]) == 0
    return where


def _export(where: Path, tmp_path: Path, *more: str) -> tuple[Path, Path, int]:
    """A copy of the fixture's MS exported with --gains-table; (MS, table, exit status)."""
    ms, table = tmp_path / "obs.ms", tmp_path / "obs.B"
    shutil.copytree(where / "obs.ms", ms)
    export = ["export-ms", str(where / "fit" / "results.zarr"), "--ms", str(ms)]
    status = main([*export, "--data", str(where / "obs.zarr"), "--gains-table", str(table), *more])
    return ms, table, status


def test_fitted_gains_table_holds_the_results_gains_in_the_cells_the_fit_read(
    fitted, tmp_path, capsys
):
    ms, table, status = _export(fitted, tmp_path)
    assert status == 0
    out = capsys.readouterr().out
    assert f"wrote the gains table {table} (B Jones, for applycal): 24 rows, 6 antennas x 4 " in out
    assert "gains of receptor(s) I, reference antenna 2;" in out
    got = _read(table)
    assert got["info"]["type"] == "Calibration" and got["info"]["subType"] == "B Jones"
    keywords = got["keywords"]
    assert (keywords["ParType"], keywords["VisCal"]) == ("Complex", "B Jones")
    assert keywords["MSName"] == str(ms) and keywords["PolBasis"] == "unknown"  # a stored I
    assert got["colnames"] == MAIN_COLUMNS
    for name in (*COPIED, "HISTORY"):
        assert keywords[name] == f"Table: {table / name}"
    for name in COPIED:  # copies of the MS's, column by column
        with (
            tables.table(str(ms / name), ack=False) as a,
            tables.table(str(table / name), ack=False) as b,
        ):
            assert b.nrows() == a.nrows() and b.colnames() == a.colnames()
            for column in a.colnames():
                if a.nrows() and a.iscelldefined(column, 0):
                    np.testing.assert_array_equal(b.getcol(column), a.getcol(column))
    with tables.table(str(table / "HISTORY"), ack=False) as history:
        assert history.nrows() == 1 and history.getcell("ORIGIN", 0) == "tabascal"

    # One row per (integration, antenna): integrations 1:5 of the MS's six, every antenna.
    with tables.table(str(ms), ack=False) as main_table:
        ms_times = np.unique(main_table.getcol("TIME"))
    assert got["CPARAM"].shape == got["FLAG"].shape == (24, 4, 1)
    assert got["CPARAM"].dtype == np.complex64
    t, antenna = np.divmod(np.arange(24), 6)
    np.testing.assert_array_equal(got["TIME"], ms_times[1 + t])
    np.testing.assert_array_equal(got["ANTENNA1"], antenna)
    assert np.all(got["ANTENNA2"] == 2) and np.all(got["INTERVAL"] == 2.0)
    assert np.all(got["SPECTRAL_WINDOW_ID"] == 0) and np.all(got["FIELD_ID"] == 0)
    assert np.all(got["SCAN_NUMBER"] == 1) and np.all(got["PARAMERR"] == -1)

    results = zarr.open_group(str(fitted / "fit" / "results.zarr"), mode="r")
    gains, flags = results["gains"][...], results["flags"][...]
    obs = read_observation(fitted / "obs.zarr")
    assert obs.metadata["measurement_set"]["antenna_ids"] == list(range(6))
    held = _antenna_held(flags, obs.a1, obs.a2, 6)
    assert held.mean() > 0.9  # most antenna cells have data (10 % of the cells flagged)
    for r in range(24):
        want = np.where(held[antenna[r], :, t[r]], gains[antenna[r], :, t[r]], 1)
        # CPARAM is the results' complex64 gains as they are: measured equal
        np.testing.assert_array_equal(got["CPARAM"][r, 1:, 0], want)
        np.testing.assert_array_equal(got["FLAG"][r, 1:, 0], ~held[antenna[r], :, t[r]])
    assert np.all(got["FLAG"][:, 0]) and np.all(got["CPARAM"][:, 0] == 1)  # channel 0 unread
    np.testing.assert_array_equal(got["SNR"], (~got["FLAG"]).astype(np.float32))
    np.testing.assert_array_equal(got["WEIGHT"], got["SNR"])
    assert np.all(np.angle(got["CPARAM"][antenna == 2, 1:]) == 0)  # the reference antenna


def test_applying_the_table_as_applycal_does_recovers_the_sky_and_rfi(fitted, tmp_path):
    """V_corrected = V_obs / (g_i conj(g_j)), with g_i looked up in the table by TIME,
    ANTENNA1 and channel for every MS row, turns the fitted model (DATA - TAB_RES_DATA)
    into the fitted sky plus RFI (TAB_SKY_DATA + TAB_RFI_DATA)."""
    ms, table, status = _export(fitted, tmp_path)
    assert status == 0
    got = _read(table)
    gain = {
        (float(time), int(a)): cparam[:, 0]
        for time, a, cparam in zip(got["TIME"], got["ANTENNA1"], got["CPARAM"], strict=True)
    }
    with tables.table(str(ms), ack=False) as main_table:
        rows = {name: main_table.getcol(name) for name in ("TIME", "ANTENNA1", "ANTENNA2")}
        columns = ("DATA", "TAB_RES_DATA", "TAB_SKY_DATA", "TAB_RFI_DATA")
        rows |= {name: main_table.getcol(name)[..., 0].astype(np.complex128) for name in columns}
    n_checked = 0
    worst = 0.0
    for r in range(rows["TIME"].size):
        key1 = (float(rows["TIME"][r]), int(rows["ANTENNA1"][r]))
        key2 = (float(rows["TIME"][r]), int(rows["ANTENNA2"][r]))
        if key1 not in gain or key1[1] == key2[1]:  # an integration the fit did not read
            continue
        fitted_cells = rows["TAB_RES_DATA"][r, 1:] != 0  # the residual is 0 where flagged
        model = (rows["DATA"][r] - rows["TAB_RES_DATA"][r])[1:]
        corrected = model / (gain[key1][1:] * np.conj(gain[key2][1:]))
        want = (rows["TAB_SKY_DATA"][r] + rows["TAB_RFI_DATA"][r])[1:]
        scale = np.abs(rows["DATA"][r, 1:]) + np.abs(want)
        error = np.abs(corrected - want)[fitted_cells] / scale[fitted_cells]
        worst = max(worst, float(error.max(initial=0)))
        n_checked += int(fitted_cells.sum())
    assert n_checked > 0.8 * 15 * 3 * 4  # baselines x channels x integrations, less flags
    # measured: 6.5e-8 of |DATA| + |sky + RFI| at worst (the complex64 columns' rounding)
    assert worst < 6e-6, worst


def _fake_fit(tmp_path: Path, correlation: str, *, ref_ant: int = 1, kind: str = "gp"):
    """Two windows side by side (descending channels) of an MS of four correlations whose
    antenna 0 has no rows; a store imported from it and a results.zarr of random gains in a
    run folder whose config.yaml fits the gains (``kind``) with reference ``ref_ant``."""
    path = tmp_path / "a.ms"
    side_by_side = [(1300.0e6, 0.2e6), (1300.6e6, 0.2e6)]
    w = build_ms(path, n_ant=5, n_spw=2, spw_freqs=side_by_side, n_time=3, descending=True,
                 corr=("XX", "XY", "YX", "YY"))  # fmt: skip
    rewrite_rows(path, np.flatnonzero((w.ant1 != 0) & (w.ant2 != 0)))
    run = tmp_path / "run"
    run.mkdir()
    store, results, values, obs = _fit(run, path, correlation=correlation, spw="all")
    config = run_config.load({"gains": {"kind": kind, "ref_ant": ref_ant}})
    (run / "config.yaml").write_text(dump_yaml(config))
    return path, store, results, values, obs


@pytest.mark.parametrize(("correlation", "receptors"), [("I", (0, 1)), ("XX", (0,)), ("YY", (1,))])
def test_each_window_channel_and_receptor_gets_its_gain(tmp_path, correlation, receptors):
    """Each row's channels, found by frequency in the table's SPECTRAL_WINDOW, hold the gain
    of that channel of the band; a Stokes I fit gives both receptors the gain (equal), a fit
    of one hand only its receptor; an MS antenna without data is flagged; the MS is only read,
    left byte for byte as it was."""
    path, store, results, values, obs = _fake_fit(tmp_path, correlation)
    before = _files(path)
    report = write_gains_table(results, path, tmp_path / "a.B", store=store)
    assert _files(path) == before
    assert report.spws == (0, 1) and report.receptors == ("X", "Y") and report.ref_antenna == 2
    got = _read(tmp_path / "a.B")
    assert got["keywords"]["PolBasis"] == "LINEAR"
    assert len(got["CPARAM"]) == 2 * 3 * 5  # windows x integrations x antennas
    with tables.table(str(tmp_path / "a.B" / "SPECTRAL_WINDOW"), ack=False) as sw:
        window_freqs = [sw.getcell("CHAN_FREQ", s) for s in range(sw.nrows())]
    ids = np.asarray(obs.metadata["measurement_set"]["antenna_ids"])
    assert list(ids) == [1, 2, 3, 4]
    held = _antenna_held(obs.flags, obs.a1, obs.a2, 4)
    times = np.unique(got["TIME"])
    for r in range(len(got["CPARAM"])):
        spw, antenna = int(got["SPECTRAL_WINDOW_ID"][r]), int(got["ANTENNA1"][r])
        t = int(np.searchsorted(times, got["TIME"][r]))
        cparam, flag = got["CPARAM"][r], got["FLAG"][r]
        assert cparam.shape == (3, 2) and got["ANTENNA2"][r] == 2
        if antenna == 0:
            assert np.all(flag) and np.all(cparam == 1)
            continue
        k = int(np.flatnonzero(ids == antenna)[0])
        band = [int(np.flatnonzero(np.isclose(obs.freqs_hz, f, rtol=1e-12))[0])
                for f in window_freqs[spw]]  # fmt: skip
        want = np.where(held[k, band, t], values["gains"][k, band, t], 1)
        for receptor in range(2):
            if receptor in receptors:
                np.testing.assert_array_equal(cparam[:, receptor], want)
                np.testing.assert_array_equal(flag[:, receptor], ~held[k, band, t])
            else:
                assert np.all(flag[:, receptor]) and np.all(cparam[:, receptor] == 1)


def _leftovers(folder: Path, name: str) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(f".{name}.")]


def test_a_fit_without_gains_or_a_taken_path_is_refused_leaving_nothing(tmp_path, capsys):
    path, store, results, _, _ = _fake_fit(tmp_path, "I", kind="unitary")
    table = tmp_path / "a.B"
    before = _files(path)
    export = ["export-ms", str(results), "--ms", str(path), "--data", str(store)]
    assert main([*export, "--gains-table", str(table)]) == 2
    assert "did not fit the gains (gains.kind 'unitary'" in capsys.readouterr().err
    assert _files(path) == before and not table.exists()  # no column added, no table
    with pytest.raises(MsError, match="did not fit the gains"):
        write_gains_table(results, path, table, store=store)

    (results.parent / "config.yaml").write_text(dump_yaml(run_config.load({})))
    write_gains_table(results, path, table, store=store)
    written = _files(table)
    assert main([*export, "--gains-table", str(table)]) == 2
    assert f"{table} exists; add --overwrite-gains-table" in capsys.readouterr().err
    assert _files(path) == before and _files(table) == written
    group = zarr.open_group(str(results), mode="r+")
    group["gains"][...] = 2 * group["gains"][...]
    write_gains_table(results, path, table, store=store, overwrite=True)
    assert _files(table) != written

    taken = tmp_path / "notes"
    taken.mkdir()
    (taken / "mine.txt").write_text("mine")
    with pytest.raises(MsError, match="exists and is not a table"):
        write_gains_table(results, path, taken, store=store, overwrite=True)
    assert (taken / "mine.txt").read_text() == "mine"
    (results.parent / "config.yaml").unlink()
    with pytest.raises(MsError, match=r"needs the run's gains settings, from .*config.yaml"):
        write_gains_table(results, path, tmp_path / "b.B", store=store)
    assert not (tmp_path / "b.B").exists()
    assert _leftovers(tmp_path, "a.B") == _leftovers(tmp_path, "b.B") == []
    assert _files(path) == before
