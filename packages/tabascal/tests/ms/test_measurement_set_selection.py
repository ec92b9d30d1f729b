"""Reading a range of channels and integrations (import-ms --channels A:B --times A:B): the
store holds only the selected cells, checked cell by cell against what build_ms wrote."""

import numpy as np
import pytest
from casacore import tables
from msbuild import build_ms, expected_cells, rewrite_rows

from tabascal.cli import main
from tabascal.measurement_set import MsError, import_measurement_set, read_observation_ms
from tabascal.store import read_observation


def _ms_ids(obs):
    ids = np.asarray(obs.metadata["measurement_set"]["antenna_ids"])
    return ids[obs.a1], ids[obs.a2]


def test_channel_and_time_ranges_hold_only_the_selected_cells(tmp_path, capsys):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=6, n_chan=8)
    source = np.random.default_rng(7).permutation(w.time.size)  # integrations after sorting
    rewrite_rows(path, source)
    store = tmp_path / "a.zarr"
    args = ["import-ms", str(path), "-o", str(store), "--correlation", "YY"]
    assert main([*args, "--channels", "2:-1", "--times", "1:4"]) == 0
    out = capsys.readouterr().out
    assert "  channels 2:7 of the window's 8 (1300.4 to 1301.2 MHz)" in out
    assert "  integrations 1:4 of 6" in out
    obs = read_observation(store)
    vis, flags = expected_cells(w, source, *_ms_ids(obs), 6, corr=1)
    np.testing.assert_array_equal(obs.vis, vis[:, 2:7, 1:4])
    np.testing.assert_array_equal(obs.flags, flags[:, 2:7, 1:4])
    np.testing.assert_array_equal(obs.freqs_hz, w.freqs[0][2:7])
    full = read_observation_ms(path, correlation="YY")
    np.testing.assert_allclose(obs.times_s, full.times_s[1:4] - full.times_s[1] + 1.0, atol=1e-6)
    assert obs.epoch_utc > full.epoch_utc and obs.chan_width == w.chan_width
    info = obs.metadata["measurement_set"]
    assert (info["channels"], info["channels_in_window"]) == ([2, 7], 8)
    assert (info["integrations"], info["integrations_in_grid"]) == ([1, 4], 6)


def test_descending_channels_are_chosen_by_their_ms_index(tmp_path):
    """MS channels 0:2 of a descending window are its two highest, stored ascending."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=2, n_chan=5, descending=True)
    obs = read_observation_ms(path, correlation="XX", channels=slice(0, 2))
    np.testing.assert_array_equal(obs.freqs_hz, w.freqs[0][1::-1])
    vis, flags = expected_cells(w, np.arange(w.time.size), *_ms_ids(obs), 2)
    np.testing.assert_array_equal(obs.vis, vis[:, 1::-1])
    np.testing.assert_array_equal(obs.flags, flags[:, 1::-1])


def test_noise_comes_from_the_selected_integrations(tmp_path):
    """SIGMA growing in time: each baseline's noise is the quadratic mean over the selected
    integrations' rows (not flagged by FLAG_ROW), and baselines without a row there are left
    out."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=4, sigma="varying")
    keep = np.flatnonzero(~((w.t_index >= 2) & (w.ant1 == 0) & (w.ant2 == 1)))
    rewrite_rows(path, keep)
    obs = read_observation_ms(path, correlation="XX", times=slice(2, None))
    a1, a2 = _ms_ids(obs)
    assert obs.n_bl == 9 and not np.any((a1 == 0) & (a2 == 1))
    expected = []
    for p, q in zip(a1, a2, strict=True):
        rows = [r for r in keep if (w.ant1[r], w.ant2[r]) == (p, q) and w.t_index[r] >= 2]
        good = [r for r in rows if not w.flag_row[r]] or rows
        expected.append(np.sqrt(np.mean(w.sigma[good, 0].astype(np.float64) ** 2)))
    np.testing.assert_allclose(obs.noise, expected, rtol=1e-15)  # measured 0


def test_one_integration_estimates_the_noise_along_channels(tmp_path, capsys):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=3, n_chan=256, sigma="ones")
    args = ["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--correlation", "XX"]
    assert main([*args, "--times=-1:"]) == 0  # with "=": argparse takes "-1:" for an option
    assert "noise estimated from adjacent-channel differences, median" in capsys.readouterr().out
    obs = read_observation(tmp_path / "a.zarr")
    assert obs.n_time == 1 and obs.metadata["measurement_set"]["noise"]["axis"] == "channels"
    # build_ms's data are noise of std 1: 10 baselines of ~400 samples (6 % each), fitted to 5
    # antennas; measured worst 8.5 %, rms 4.9 % (statistical, fixed seed)
    assert np.all(np.abs(obs.noise - 1) < 0.15)


@pytest.mark.parametrize(
    "option, wanted, message",
    [
        ("channels", slice(2, 9), r"--channels 2:9 reaches past the 8 channels there are "
                                  r"\(indices 0 to 7, or -8 to -1 from the end\)"),
        ("channels", slice(-9, None), r"--channels -9: reaches past the 8 channels"),
        ("channels", slice(5, 5), r"--channels 5:5 selects none of the 8 channels there are"),
        ("channels", slice(0, 8, 2), r"--channels 0:8:2: channels are read contiguously, "
                                     r"without a step, from the 8 channels"),
        ("times", slice(3, 1), r"--times 3:1 selects none of the 4 integrations there are "
                               r"\(indices 0 to 3, or -4 to -1 from the end\)"),
        ("times", slice(None, 5), r"--times :5 reaches past the 4 integrations"),
    ],
)  # fmt: skip
def test_empty_or_outside_ranges_are_refused_naming_what_there_is(
    tmp_path, option, wanted, message
):
    build_ms(tmp_path / "a.ms", n_time=4, n_chan=8)
    with pytest.raises(MsError, match=message):
        import_measurement_set(tmp_path / "a.ms", tmp_path / "a.zarr", **{option: wanted})
    assert not (tmp_path / "a.zarr").exists()


def test_a_range_of_only_missing_integrations_is_refused(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=5)
    rewrite_rows(path, np.flatnonzero(w.t_index != 2))
    with pytest.raises(MsError, match=r"integrations 2:3 of the 5 hold no rows \(they are a gap"):
        read_observation_ms(path, times=slice(2, 3))


def test_command_line_range_must_be_start_stop(tmp_path, capsys):
    build_ms(tmp_path / "a.ms", n_time=2)
    with pytest.raises(SystemExit):
        main(["import-ms", str(tmp_path / "a.ms"), "-o", "x.zarr", "--channels", "3"])
    assert "'3' is not a range START:STOP of indices (e.g. 10:200, :64, =-8:)" in (
        capsys.readouterr().err
    )


def test_equal_channels_of_an_unequal_window_can_be_read(tmp_path):
    """Only the channels read must be of equal width; the refusal names MS channel numbers."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=2, n_chan=6)
    width = np.full(6, w.chan_width)
    width[4:] *= 2
    with tables.table(str(path / "SPECTRAL_WINDOW"), readonly=False, ack=False) as spw:
        spw.putcell("CHAN_WIDTH", 0, width)
    with pytest.raises(MsError, match=r"channel widths of spectral window 0 vary .* channels "
                                      r"4 \(400000 Hz\), 5 \(400000 Hz\)"):  # fmt: skip
        read_observation_ms(path, channels=slice(1, None))
    obs = read_observation_ms(path, correlation="XX", channels=slice(0, 4))
    np.testing.assert_array_equal(obs.freqs_hz, w.freqs[0][:4])
