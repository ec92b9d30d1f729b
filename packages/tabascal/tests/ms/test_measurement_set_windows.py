"""Several spectral windows read side by side as one band (--spw 0,1, --spw all), written back
each into its own rows by export-ms; windows that are not one band are refused, naming them."""

import numpy as np
import pytest
from casacore import tables
from msbuild import build_ms, expected_cube, rewrite_rows
from test_measurement_set_export import _results
from test_measurement_set_export_products import CLEANED_RTOL, WEIGHT_RTOL, _fit

from tabascal.cli import main
from tabascal.measurement_set import MsError, export_results, read_observation_ms
from tabascal.store import read_observation

MHZ = 1e6
# window 0 above window 1, so that the band's order is not the windows' ids
SIDE_BY_SIDE = [(1300.6 * MHZ, 0.2 * MHZ), (1300.0 * MHZ, 0.2 * MHZ)]


def _band(w, values, n_time, order=(1, 0)):
    """Each window's rows (n_rows, n_chan) as a (n_bl, n_chan, n_time) cube, channels made
    ascending, side by side in ascending frequency (window ``order``): from what build_ms
    wrote, without the reader."""
    cubes = []
    for spw in order:
        cube = expected_cube(w, values, w.ddid == spw, n_time)
        ascending = w.freqs[spw][0] < w.freqs[spw][-1]
        cubes.append(cube if ascending else cube[:, ::-1])
    return np.concatenate(cubes, axis=1)


@pytest.mark.parametrize("descending", [False, True])
def test_contiguous_windows_import_as_one_band_equal_to_the_windows_side_by_side(
    tmp_path, capsys, descending
):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_spw=2, spw_freqs=SIDE_BY_SIDE, n_time=3, descending=descending)
    store = tmp_path / "a.zarr"
    assert main(["import-ms", str(path), "-o", str(store), "--spw", "all"]) == 0
    out = capsys.readouterr().out
    assert "(DATA, correlation I = (XX + YY) / 2, spectral windows 1, 0 side by side" in out
    assert "10 baselines, 6 channels, 3 integrations" in out
    obs = read_observation(store)
    data = w.data.astype(np.complex128)
    np.testing.assert_array_equal(
        obs.vis, _band(w, (0.5 * (data[..., 0] + data[..., 1])).astype(np.complex64), 3)
    )
    bad = w.flag[..., 0] | w.flag[..., 1] | w.flag_row[:, None]
    np.testing.assert_array_equal(obs.flags, _band(w, bad, 3))
    np.testing.assert_array_equal(obs.freqs_hz, 1300.0 * MHZ + 0.2 * MHZ * np.arange(6))
    assert obs.chan_width == 0.2 * MHZ
    # SIGMA is the same in both windows here: the band's noise is each window's
    np.testing.assert_array_equal(obs.noise, read_observation_ms(path, spw=0).noise)
    info = obs.metadata["measurement_set"]
    assert info["spw"] == [1, 0] and info["channels_reversed"] == [descending, descending]

    listed = read_observation_ms(path, spw=[0, 1])
    np.testing.assert_array_equal(listed.vis, obs.vis)
    one = [read_observation_ms(path, spw=spw) for spw in (1, 0)]
    np.testing.assert_array_equal(np.concatenate([o.vis for o in one], axis=1), obs.vis)


@pytest.mark.parametrize(
    ("spw_freqs", "problem"),
    [
        ([(1300.0 * MHZ, 0.2 * MHZ), (1300.65 * MHZ, 0.2 * MHZ)],
         "channels of the band are not evenly spaced, nor on a regular grid with channels "
         "missing (steps 200 to 250 kHz; channels 0:2 and 1:0 (250 kHz) are not a whole number "
         "of 200 kHz steps apart)"),
        ([(1300.0 * MHZ, 0.2 * MHZ), (1300.6 * MHZ, 0.4 * MHZ)],
         "their channels differ in width"),
        ([(1300.0 * MHZ, 0.2 * MHZ), (1300.4 * MHZ, 0.2 * MHZ)],
         "the first channel of window 1 is +0 kHz from the last of window 0"),
    ],
    ids=["off-grid", "widths", "overlap"],
)  # fmt: skip
def test_windows_that_are_not_one_band_are_refused_naming_them(
    tmp_path, capsys, spw_freqs, problem
):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_spw=2, spw_freqs=spw_freqs)
    assert main(["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--spw", "0,1"]) == 2
    err = capsys.readouterr().err
    assert f"spectral windows 0, 1 cannot be read as one band: {problem}" in err
    for spw, freqs in enumerate(w.freqs):
        width = abs(freqs[1] - freqs[0]) / 1e3
        named = f"{spw} (3 channels of {width:g} kHz, {freqs[0] / MHZ:.9g} to "
        assert f"{named}{freqs[-1] / MHZ:.9g} MHz)" in err
    assert not (tmp_path / "a.zarr").exists()


def test_a_gap_of_whole_channels_between_windows_is_filled_as_flagged(tmp_path, capsys):
    """Window 0 begins two channels above where window 1 ends: the band's grid holds the
    channel missing between them, flagged with vis 0, every other cell the windows' own;
    export-ms writes each window's channels back into its own rows. Windows 9.6 MHz apart
    would fill more channels than they hold: refused."""
    path, store = tmp_path / "a.ms", tmp_path / "a.zarr"
    w = build_ms(path, n_spw=2, spw_freqs=[(1300.8 * MHZ, 0.2 * MHZ), SIDE_BY_SIDE[1]], n_time=3)
    assert main(["import-ms", str(path), "-o", str(store), "--spw", "all"]) == 0
    assert "  1 channels of the grid missing between those read" in capsys.readouterr().out
    obs = read_observation(store)
    held = [0, 1, 2, 4, 5, 6]
    np.testing.assert_array_equal(obs.freqs_hz[held], np.concatenate([w.freqs[1], w.freqs[0]]))
    np.testing.assert_allclose(obs.freqs_hz, 1300.0 * MHZ + 0.2 * MHZ * np.arange(7), rtol=1e-15)
    data = w.data.astype(np.complex128)
    np.testing.assert_array_equal(
        obs.vis[:, held], _band(w, (0.5 * (data[..., 0] + data[..., 1])).astype(np.complex64), 3)
    )
    bad = w.flag[..., 0] | w.flag[..., 1] | w.flag_row[:, None]
    np.testing.assert_array_equal(obs.flags[:, held], _band(w, bad, 3))
    assert np.all(obs.flags[:, 3]) and not np.any(obs.vis[:, 3])
    assert obs.metadata["measurement_set"]["channels_filled"] == 1

    store, results, values, _ = _fit(tmp_path, path, spw="all")
    export_results(results, path, store=store)
    with tables.table(str(path), ack=False) as ms:
        sky = ms.getcol("TAB_SKY_DATA")[..., 0]
    np.testing.assert_array_equal(_band(w, sky, 3), values["sky_vis"][:, held])

    far = tmp_path / "far.ms"
    build_ms(far, n_spw=2)
    message = (
        r"the 6 channels read of spectral windows 0, 1 lie on a grid of 53 channels 200 kHz "
        r"apart: its 47 channels missing from the data would be filled as flagged"
    )
    with pytest.raises(MsError, match=message):
        read_observation_ms(far, spw="all")


def test_window_choices_that_cannot_be_read_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_spw=2, spw_freqs=SIDE_BY_SIDE)
    with pytest.raises(MsError, match=r"choose one with --spw, or several side by side"):
        read_observation_ms(path)
    with pytest.raises(MsError, match=r"--spw 0,0: name each spectral window once"):
        read_observation_ms(path, spw=[0, 0])
    with pytest.raises(MsError, match=r"spectral window 3 has no data rows"):
        read_observation_ms(path, spw=[0, 3])


def test_windows_with_different_correlations_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_spw=2, spw_freqs=SIDE_BY_SIDE)
    with tables.table(f"{path}/POLARIZATION", readonly=False, ack=False) as pol:
        pol.addrows(1)
        pol.putcell("CORR_TYPE", 1, np.array([5, 8]))  # RR, LL
        pol.putcell("NUM_CORR", 1, 2)
    with tables.table(f"{path}/DATA_DESCRIPTION", readonly=False, ack=False) as dd:
        dd.putcell("POLARIZATION_ID", 1, 1)
    with pytest.raises(MsError, match=r"hold different correlations \(0: XX, YY; 1: RR, LL\)"):
        read_observation_ms(path, spw="all")


def test_a_row_missing_from_one_window_flags_only_its_channels(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_spw=2, spw_freqs=SIDE_BY_SIDE, n_time=3)
    # rows go by time, then window, then baseline: leave out window 1's baseline 4 at time 1
    gone = 1 * 2 * 10 + 1 * 10 + 4
    rewrite_rows(path, np.delete(np.arange(w.time.size), gone))
    obs = read_observation_ms(path, spw="all", correlation="YY")
    full = _band(w, w.data[..., 1], 3)
    assert np.all(obs.flags[4, :3, 1]) and not np.any(obs.vis[4, :3, 1])  # window 1's channels
    np.testing.assert_array_equal(obs.vis[4, 3:, 1], full[4, 3:, 1])
    bad = _band(w, w.flag[..., 1] | w.flag_row[:, None], 3)
    bad[4, :3, 1] = True
    np.testing.assert_array_equal(obs.flags, bad)
    assert obs.metadata["measurement_set"]["rows_filled"] == 1


def _shorten_window(path, spw: int, n_chan: int) -> None:
    """Keep only the first ``n_chan`` channels of window ``spw``: DATA and FLAG become columns
    whose cells differ in shape from window to window, as in an MS of windows of different
    sizes."""
    with tables.table(str(path), readonly=False, ack=False) as ms:
        ddid = ms.getcol("DATA_DESC_ID")
        for name, kind in (("DATA", "complex"), ("FLAG", "boolean")):
            value = ms.getcol(name)
            ms.removecols([name])
            ms.addcols(tables.maketabdesc([tables.makearrcoldesc(name, 0, 2, valuetype=kind)]))
            for r in range(ms.nrows()):
                ms.putcell(name, r, value[r, :n_chan] if ddid[r] == spw else value[r])
    with tables.table(f"{path}/SPECTRAL_WINDOW", readonly=False, ack=False) as sw:
        for name in ("CHAN_FREQ", "CHAN_WIDTH"):
            sw.putcell(name, spw, sw.getcell(name, spw)[:n_chan])
        sw.putcell("NUM_CHAN", spw, n_chan)


def test_windows_of_different_sizes_read_alone_and_side_by_side_and_export(tmp_path):
    """Rows of windows of 4 and 3 channels interleave in the table; one getcol over a span
    of them fails (casacore: shapes not conforming), so each window's rows are selected.
    export-ms writes each window's cells in its own shape."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_spw=2, n_chan=4, n_time=3,
                 spw_freqs=[(1300.0 * MHZ, 0.2 * MHZ), (1300.8 * MHZ, 0.2 * MHZ)])  # fmt: skip
    _shorten_window(path, 1, 3)
    cubes = [expected_cube(w, w.data[..., 0], w.ddid == spw, 3) for spw in (0, 1)]
    alone = read_observation_ms(path, spw=1, correlation="XX")
    np.testing.assert_array_equal(alone.vis, cubes[1][:, :3])
    band = read_observation_ms(path, spw="all", correlation="XX")
    np.testing.assert_array_equal(band.vis, np.concatenate([cubes[0], cubes[1][:, :3]], axis=1))
    np.testing.assert_array_equal(band.freqs_hz, 1300.0 * MHZ + 0.2 * MHZ * np.arange(7))
    values = _results(tmp_path / "r.zarr", band)
    export_results(tmp_path / "r.zarr", path, spw="all", correlation="XX")
    back = read_observation_ms(path, column="TAB_SKY_DATA", spw="all", correlation="XX")
    np.testing.assert_array_equal(back.vis, values["sky_vis"])


@pytest.mark.parametrize("descending", [False, True])
def test_export_writes_each_window_into_its_own_rows(tmp_path, descending):
    """The results of a band of two windows go back into each window's rows and channels, in
    the order the window stores them; read back they are the results."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_spw=2, spw_freqs=SIDE_BY_SIDE, n_time=3, descending=descending)
    store, results, values, obs = _fit(tmp_path, path, correlation="XX", spw="all")
    export_results(results, path, store=store, cleaned_column="TAB_CLEANED_DATA", weights=True)
    with tables.table(str(path), ack=False) as ms:
        written = {name: ms.getcol(name) for name in ("TAB_RFI_DATA", "TAB_CLEANED_DATA")}
        weight = ms.getcol("TAB_WEIGHT")[:, 0]
    np.testing.assert_array_equal(_band(w, written["TAB_RFI_DATA"][..., 0], 3), values["rfi_vis"])
    assert not np.any(written["TAB_RFI_DATA"][..., 1])  # YY: only XX was fitted
    g = values["gains"].astype(np.complex128)
    seen = g[obs.a1] * values["rfi_vis"] * np.conj(g[obs.a2])
    cleaned = _band(w, written["TAB_CLEANED_DATA"][..., 0], 3)
    want = _band(w, w.data[..., 0].astype(np.complex128), 3) - seen
    np.testing.assert_allclose(cleaned, want, rtol=CLEANED_RTOL)
    for spw in (0, 1):
        got = expected_cube(w, weight, w.ddid == spw, 3)
        np.testing.assert_allclose(got, np.repeat(obs.noise[:, None] ** -2, 3, 1), rtol=WEIGHT_RTOL)
    back = read_observation_ms(path, column="TAB_RFI_DATA", correlation="XX", spw=[0, 1])
    np.testing.assert_array_equal(back.vis, values["rfi_vis"])
    with pytest.raises(MsError, match=r"was imported with --spw 1,0, not 0; export-ms writes"):
        export_results(results, path, store=store, spw=0, overwrite_columns=True)
