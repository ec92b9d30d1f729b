"""--channels A:B of a band of several spectral windows (--spw all): the range is of the band's
ascending channels; each window is read in its part of the range (the MS channels of a
descending window being those that map onto it), a window holding none of it is left out,
and export-ms and the gains table write back exactly the cells read."""

import numpy as np
import pytest
from casacore import tables
from msbuild import build_ms, expected_cube
from test_measurement_set_export import _snapshot
from test_measurement_set_export_products import CLEANED_RTOL, _fit, _unchanged_but
from test_measurement_set_gains_table import _antenna_held
from test_measurement_set_windows import _band

from tabascal.cli import main
from tabascal.config import dump_yaml
from tabascal.fitting import run_config
from tabascal.measurement_set import MsError, export_results, read_observation_ms
from tabascal.measurement_set.gains_table import write_gains_table
from tabascal.measurement_set.reader import MeasurementSetReader
from tabascal.store import read_observation

MHZ = 1e6
N_CHAN, N_TIME = 4, 3
# Window 1 lowest, then 0 (stored descending), then 2: the band's channels 0:4 are window
# 1's, 4:8 window 0's (MS channels 3, 2, 1, 0), 8:12 window 2's.
BAND_ORDER = (1, 0, 2)
FREQS = [(1300.8 * MHZ, 0.2 * MHZ), (1300.0 * MHZ, 0.2 * MHZ), (1301.6 * MHZ, 0.2 * MHZ)]


def _three_windows(path):
    """An MS of three contiguous windows of N_CHAN channels, window 0 stored descending (its
    CHAN_FREQ reversed, so that its rows hold its highest channel first)."""
    w = build_ms(path, n_spw=3, n_chan=N_CHAN, n_time=N_TIME, spw_freqs=FREQS)
    with tables.table(f"{path}/SPECTRAL_WINDOW", readonly=False, ack=False) as sw:
        sw.putcell("CHAN_FREQ", 0, sw.getcell("CHAN_FREQ", 0)[::-1])
        sw.putcell("CHAN_WIDTH", 0, -sw.getcell("CHAN_WIDTH", 0))
    w.freqs[0] = w.freqs[0][::-1]
    return w


def _window_cube(w, values, spw):
    """A column's values (n_rows, n_chan) of window ``spw`` as (n_bl, n_chan, n_time), its
    channels ascending: from the rows build_ms wrote, without the reader."""
    cube = expected_cube(w, values, w.ddid == spw, N_TIME)
    return cube if w.freqs[spw][0] < w.freqs[spw][-1] else cube[:, ::-1]


# (range, the windows read in band order, each one's MS channels, the range of their band)
RANGES = [
    ("2:9", [1, 0, 2], [[2, 4], [0, 4], [0, 1]], [2, 9, 12]),
    ("5:11", [0, 2], [[0, 3], [0, 3]], [1, 7, 8]),
    ("-7:-2", [0, 2], [[0, 3], [0, 2]], [1, 6, 8]),
]


@pytest.mark.parametrize(("channels", "spws", "ms_channels", "recorded"), RANGES)
def test_a_range_across_windows_equals_the_slice_of_the_whole_band(
    tmp_path, capsys, channels, spws, ms_channels, recorded
):
    path = tmp_path / "a.ms"
    w = _three_windows(path)
    whole = read_observation_ms(path, spw="all")
    data = w.data.astype(np.complex128)
    stokes_i = (0.5 * (data[..., 0] + data[..., 1])).astype(np.complex64)
    np.testing.assert_array_equal(whole.vis, _band(w, stokes_i, N_TIME, order=BAND_ORDER))
    store = tmp_path / "a.zarr"
    args = ["import-ms", str(path), "-o", str(store), "--spw", "all", f"--channels={channels}"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"spectral windows {', '.join(map(str, spws))} side by side" in out
    band = slice(*(int(c) if c else None for c in channels.split(":")))
    n_read = len(range(12)[band])
    assert f"10 baselines, {n_read} channels, {N_TIME} integrations" in out
    obs = read_observation(store)
    np.testing.assert_array_equal(obs.vis, whole.vis[:, band])
    np.testing.assert_array_equal(obs.flags, whole.flags[:, band])
    np.testing.assert_array_equal(obs.freqs_hz, whole.freqs_hz[band])
    np.testing.assert_array_equal(obs.noise, whole.noise)  # SIGMA is each window's alike
    info = obs.metadata["measurement_set"]
    assert info["spw"] == spws
    assert [info["channels"], info["channels_in_window"]] == [recorded[:2], recorded[2]]
    assert [c["spw"] for c in info["window_channels"]] == spws
    assert [c["channels"] for c in info["window_channels"]] == ms_channels
    # the record selects the same cells again, as export-ms reads it
    again = read_observation_ms(path, spw=spws, channels=slice(*recorded[:2]))
    np.testing.assert_array_equal(again.vis, obs.vis)


def test_a_range_inside_one_window_reads_only_that_window(tmp_path, capsys):
    """Band channels 5:7 are MS channels 1:3 of window 0 (stored descending); the store is
    what --spw 0 --channels 1:3 reads, and only window 0's rows are read."""
    path = tmp_path / "a.ms"
    w = _three_windows(path)
    store = tmp_path / "a.zarr"
    args = ["import-ms", str(path), "-o", str(store), "--spw", "all", "--channels", "5:7"]
    assert main([*args, "--correlation", "XX"]) == 0
    out = capsys.readouterr().out
    assert "spectral window 0, field 0)" in out
    assert "  channels 1:3 of the window's 4 (1301 to 1301.2 MHz)" in out
    obs = read_observation(store)
    np.testing.assert_array_equal(obs.vis, _window_cube(w, w.data[..., 0], 0)[:, 1:3])
    alone = read_observation_ms(path, spw=0, channels=slice(1, 3), correlation="XX")
    np.testing.assert_array_equal(obs.vis, alone.vis)
    info = obs.metadata["measurement_set"]
    assert (info["spw"], info["channels"], info["channels_in_window"]) == (0, [1, 3], 4)
    with MeasurementSetReader(path, spw="all", channels=slice(5, 7), correlation="XX") as r:
        assert r.selection.spws == (0,)
        assert set(w.ddid[r.selection.row_grid.ravel()]) == {0}
        r.read()
        # DATA, FLAG and FLAG_ROW of window 0's 10 baselines x 3 integrations, at most
        assert 0 < r.stats.rows_read <= 3 * 10 * N_TIME

    _, results, values, _ = _fit(tmp_path, path, correlation="XX", spw="all", channels=slice(5, 7))
    report = export_results(results, path, store=store)
    assert report.channels == (1, 3, 4)
    with tables.table(str(path), ack=False) as ms:
        sky = ms.getcol("TAB_SKY_DATA")
    window = _window_cube(w, sky[..., 0], 0)
    np.testing.assert_array_equal(window[:, 1:3], values["sky_vis"])
    assert not np.any(window[:, [0, 3]]) and not np.any(sky[w.ddid != 0])


def test_export_and_gains_table_write_exactly_the_cells_read(tmp_path):
    """Band channels 5:11: window 1 not read, window 0's MS channels 0:3 (its three highest),
    window 2's 0:3. The TAB_* columns hold the results there and what they hold outside a
    fit elsewhere; every column not named is left as it was; the gains table has rows for
    windows 0 and 2 only, the channels not read flagged."""
    path = tmp_path / "a.ms"
    w = _three_windows(path)
    run = tmp_path / "run"
    run.mkdir()
    options = dict(correlation="XX", spw="all", channels=slice(5, 11))
    store, results, values, obs = _fit(run, path, **options)
    assert obs.vis.shape == (10, 6, N_TIME)
    before = _snapshot(path)
    report = export_results(
        results, path, store=store, cleaned_column="TAB_CLEANED_DATA", weights=True,
        flag_residual=1.0,
    )  # fmt: skip
    assert report.channels == (1, 7, 8)
    _unchanged_but(before, _snapshot(path))
    with tables.table(str(path), ack=False) as ms:
        written = {name: ms.getcol(name) for name in ms.colnames() if name.startswith("TAB_")}
    assert not np.any(written["TAB_SKY_DATA"][..., 1])  # YY: only XX was fitted
    # the band's channels 5:11 are window 0's ascending channels 1:4 and window 2's 0:3
    parts = {0: (slice(1, 4), slice(0, 3)), 2: (slice(0, 3), slice(3, 6))}
    g = values["gains"].astype(np.complex128)
    seen = g[obs.a1] * values["rfi_vis"] * np.conj(g[obs.a2])
    bad = np.abs(values["residual"]) > obs.noise[:, None, None]
    assert np.any(bad) and not np.all(bad)
    for spw in range(3):
        inside = np.zeros((10, N_CHAN, N_TIME), bool)
        cube = lambda name: _window_cube(w, written[name][..., 0], spw)  # noqa: B023, E731
        data = _window_cube(w, w.data[..., 0].astype(np.complex128), spw)
        if spw in parts:
            mine, band = parts[spw]
            inside[:, mine] = True
            for name, array in (("TAB_SKY_DATA", "sky_vis"), ("TAB_RES_DATA", "residual")):
                np.testing.assert_array_equal(cube(name)[:, mine], values[array][:, band])
            want = data[:, mine] - seen[:, band]
            got = cube("TAB_CLEANED_DATA")[:, mine]
            np.testing.assert_allclose(got, want, rtol=CLEANED_RTOL, atol=0)
            np.testing.assert_array_equal(cube("TAB_FLAG_RESIDUAL")[:, mine], bad[:, band])
        for name in ("TAB_SKY_DATA", "TAB_RFI_DATA", "TAB_RES_DATA", "TAB_FLAG_RESIDUAL"):
            assert not np.any(cube(name)[~inside]), (name, spw)
        np.testing.assert_array_equal(cube("TAB_CLEANED_DATA")[~inside], data[~inside])
        weight = written["TAB_WEIGHT"][w.ddid == spw, 0]
        assert np.all(weight > 0) if spw in parts else not np.any(weight)
    back = read_observation_ms(path, column="TAB_RFI_DATA", **options)
    np.testing.assert_array_equal(back.vis, values["rfi_vis"])

    config = run_config.load({"gains": {"kind": "gp", "ref_ant": 1}})
    (run / "config.yaml").write_text(dump_yaml(config))
    table_path = tmp_path / "a.B"
    gains_report = write_gains_table(results, path, table_path, store=store)
    assert gains_report.spws == (0, 2)
    with tables.table(str(table_path), ack=False) as table:
        got = {name: table.getcol(name) for name in table.colnames()}
    with tables.table(str(table_path / "SPECTRAL_WINDOW"), ack=False) as sw:
        window_freqs = [sw.getcell("CHAN_FREQ", s) for s in range(sw.nrows())]
    assert len(got["CPARAM"]) == 2 * N_TIME * 5  # windows read x integrations x antennas
    assert set(got["SPECTRAL_WINDOW_ID"]) == {0, 2}
    held = _antenna_held(obs.flags, obs.a1, obs.a2, 5)
    times = np.unique(got["TIME"])
    n_unread = 0
    for r in range(len(got["CPARAM"])):
        spw, antenna = int(got["SPECTRAL_WINDOW_ID"][r]), int(got["ANTENNA1"][r])
        t = int(np.searchsorted(times, got["TIME"][r]))
        cparam, flag = got["CPARAM"][r][:, 0], got["FLAG"][r][:, 0]
        assert got["CPARAM"][r].shape == (N_CHAN, 2)
        for c, f in enumerate(window_freqs[spw]):  # each MS channel, found by frequency
            band = np.flatnonzero(np.isclose(obs.freqs_hz, f, rtol=1e-12))
            if band.size == 0:  # a channel not read
                assert flag[c] and cparam[c] == 1
                n_unread += 1
                continue
            k = int(band[0])
            assert flag[c] == ~held[antenna, k, t]
            assert cparam[c] == (values["gains"][antenna, k, t] if held[antenna, k, t] else 1)
    assert n_unread == 2 * N_TIME * 5  # window 0's MS channel 3, window 2's channel 3


def test_a_range_past_the_band_or_empty_is_refused_naming_its_size(tmp_path, capsys):
    path = tmp_path / "a.ms"
    _three_windows(path)
    band = "in the band of spectral windows 1, 0, 2, counted from its lowest frequency"
    there = "the 12 channels there are (indices 0 to 11, or -12 to -1 from the end)"
    with pytest.raises(MsError) as err:
        read_observation_ms(path, spw="all", channels=slice(4, 13))
    assert str(err.value) == f"--channels 4:13 reaches past {there} {band}"
    with pytest.raises(MsError) as err:
        read_observation_ms(path, spw=[2, 1, 0], channels=slice(6, 6))
    assert str(err.value) == f"--channels 6:6 selects none of {there} {band}"
    store = tmp_path / "a.zarr"
    args = ["import-ms", str(path), "-o", str(store), "--spw", "all", "--channels=-13:"]
    assert main(args) == 2
    assert f"--channels -13: reaches past {there} {band}" in capsys.readouterr().err
    assert not store.exists()
