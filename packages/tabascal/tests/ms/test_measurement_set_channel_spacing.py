"""Channels spaced wider than their width, as data selected or decimated in frequency are (a
HERA H4C window: 122 kHz channels every 610 kHz): import-ms keeps each channel's centre and
width, fills a channel missing between them as flagged, refuses only overlapping channels
and centres on no regular grid, naming them, and export writes them back; the simulator
writes such data with the noise of the width, and the model's frequency grid is spaced by
the centres' step."""

import re

import numpy as np
import pytest
from casacore import tables
from msbuild import build_ms, expected_cube
from test_measurement_set_export_products import _fit

from tabascal.cli import main
from tabascal.fitting import job, run_config
from tabascal.measurement_set import (
    MsError,
    export_results,
    import_measurement_set,
    read_observation_ms,
    write_measurement_set,
)
from tabascal.model import frame
from tabascal.simulate import simulate, simulation_config
from tabascal.store import read_observation, summarize, summary_lines

# HERA's 1024-channel band decimated by five: every value exact in binary, so that a store's
# centres and width equal the MS's cell for cell.
WIDTH = 122070.3125
SPACING = 5 * WIDTH  # 610351.5625
LOWEST = 117.1875e6
N_CHAN, N_TIME = 4, 3


def _respace(path, freq, width) -> None:
    """Give window 0 of the MS at ``path`` the CHAN_FREQ ``freq`` and CHAN_WIDTH ``width``."""
    with tables.table(f"{path}/SPECTRAL_WINDOW", readonly=False, ack=False) as sw:
        sw.putcell("CHAN_FREQ", 0, np.asarray(freq, np.float64))
        sw.putcell("CHAN_WIDTH", 0, np.asarray(width, np.float64))


def _spectral_window(path, names=("CHAN_FREQ", "CHAN_WIDTH")) -> dict:
    """Columns ``names`` of window 0 of the MS at ``path``."""
    with tables.table(f"{path}/SPECTRAL_WINDOW", ack=False) as sw:
        return {name: sw.getcell(name, 0) for name in names}


def _spaced_ms(path, descending=False):
    """An MS of one window of N_CHAN channels WIDTH wide every SPACING, its CHAN_FREQ and
    CHAN_WIDTH stored descending (and negative) when asked; returns what build_ms wrote and
    the ascending centres."""
    w = build_ms(path, n_chan=N_CHAN, n_time=N_TIME, spw_freqs=[(LOWEST, WIDTH)])
    centres = LOWEST + SPACING * np.arange(N_CHAN)
    if descending:
        _respace(path, centres[::-1], np.full(N_CHAN, -WIDTH))
    else:
        _respace(path, centres, np.full(N_CHAN, WIDTH))
    return w, centres


def _stokes_i(w):
    data = w.data.astype(np.complex128)
    return (0.5 * (data[..., 0] + data[..., 1])).astype(np.complex64)


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_spaced_channels_import_with_their_centres_and_width(tmp_path, descending):
    path, store = tmp_path / "a.ms", tmp_path / "a.zarr"
    w, centres = _spaced_ms(path, descending)
    import_measurement_set(path, store)
    obs = read_observation(store)
    stored = _spectral_window(path)
    ms_centres = stored["CHAN_FREQ"][::-1] if descending else stored["CHAN_FREQ"]
    np.testing.assert_array_equal(obs.freqs_hz, ms_centres)
    np.testing.assert_array_equal(obs.freqs_hz, centres)
    assert obs.chan_width == WIDTH == np.abs(stored["CHAN_WIDTH"]).max()
    assert obs.chan_spacing == SPACING
    cube = expected_cube(w, _stokes_i(w), w.ddid == 0, N_TIME)
    np.testing.assert_array_equal(obs.vis, cube[:, ::-1] if descending else cube)


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_overlapping_channels_are_refused_naming_them(tmp_path, descending):
    """Channels 2 and 3 (ascending) lie half a width apart: the MS numbers of that pair are
    named, whichever way the window is stored."""
    path = tmp_path / "a.ms"
    build_ms(path, n_chan=N_CHAN, n_time=N_TIME)
    centres = LOWEST + SPACING * np.arange(N_CHAN)
    centres[3] = centres[2] + WIDTH / 2
    pair = "0 and 1" if descending else "2 and 3"
    if descending:
        _respace(path, centres[::-1], np.full(N_CHAN, -WIDTH))
    else:
        _respace(path, centres, np.full(N_CHAN, WIDTH))
    message = (
        f"channels of spectral window 0 overlap: they are {WIDTH / 1e3:.9g} kHz wide but the "
        f"centres of channels {pair} ({WIDTH / 2e3:.9g} kHz) are closer"
    )
    with pytest.raises(MsError, match=re.escape(message)):
        read_observation_ms(path)


def test_a_channel_missing_from_a_decimated_window_is_filled_as_flagged(tmp_path, capsys):
    """MS channels 1 and 2 lie two spacings apart (a channel cut from a decimated window):
    the store's grid holds the missing channel, flagged with vis 0, every other cell the MS's
    own, and export-ms writes the four channels back into the MS's cells."""
    path, store = tmp_path / "a.ms", tmp_path / "a.zarr"
    w = build_ms(path, n_chan=N_CHAN, n_time=N_TIME)
    centres = LOWEST + SPACING * np.array([0, 1, 3, 4])
    _respace(path, centres, np.full(N_CHAN, WIDTH))
    assert main(["import-ms", str(path), "-o", str(store)]) == 0
    out = capsys.readouterr().out
    assert "  1 channels of the grid missing between those read: filled as flagged" in out
    obs = read_observation(store)
    held = [0, 1, 3, 4]
    np.testing.assert_array_equal(obs.freqs_hz[held], _spectral_window(path)["CHAN_FREQ"])
    assert obs.freqs_hz[2] == LOWEST + 2 * SPACING  # exact in binary, as the centres are
    assert (obs.chan_width, obs.chan_spacing) == (WIDTH, SPACING)
    assert obs.metadata["measurement_set"]["channels_filled"] == 1
    cube = expected_cube(w, _stokes_i(w), w.ddid == 0, N_TIME)
    np.testing.assert_array_equal(obs.vis[:, held], cube)
    bad = w.flag[..., 0] | w.flag[..., 1] | w.flag_row[:, None]
    np.testing.assert_array_equal(obs.flags[:, held], expected_cube(w, bad, w.ddid == 0, N_TIME))
    assert not np.any(obs.vis[:, 2]) and np.all(obs.flags[:, 2])

    store, results, values, _ = _fit(tmp_path, path)
    export_results(results, path, store=store)
    with tables.table(str(path), ack=False) as ms:
        sky = ms.getcol("TAB_SKY_DATA")
    np.testing.assert_array_equal(
        expected_cube(w, sky[..., 0], w.ddid == 0, N_TIME), values["sky_vis"][:, held]
    )


def test_channels_on_no_regular_grid_are_refused_naming_them(tmp_path, capsys):
    """MS channels 1 and 2 lie 1.37 spacings apart: no grid of a step at least the width
    holds all four centres, so the window is refused naming that pair, and choosing the
    evenly spaced channels reads."""
    path = tmp_path / "a.ms"
    build_ms(path, n_chan=N_CHAN, n_time=N_TIME)
    centres = LOWEST + SPACING * np.array([0, 1, 2.37, 3.37])
    _respace(path, centres, np.full(N_CHAN, WIDTH))
    assert main(["import-ms", str(path), "-o", str(tmp_path / "a.zarr")]) == 2
    err = capsys.readouterr().err
    assert "channels of spectral window 0 are not evenly spaced, nor on a regular grid" in err
    assert f"channels 1 and 2 ({1.37 * SPACING / 1e3:.9g} kHz) are not a whole number" in err
    assert "the model's frequency grid is regular" in err
    assert not (tmp_path / "a.zarr").exists()
    assert read_observation_ms(path, channels=slice(2, 4)).chan_spacing == SPACING


def test_spaced_windows_side_by_side_are_one_band_with_their_gaps_filled(tmp_path, capsys):
    """Two spaced windows read as one band when the second begins one spacing above the
    first's last channel, and with a channel filled between them when it begins two above;
    one width above (the contiguous rule) puts them on a grid of the width with more
    channels missing than read, which is refused."""
    path = tmp_path / "a.ms"
    build_ms(path, n_spw=2, n_chan=N_CHAN, n_time=N_TIME)
    band = LOWEST + SPACING * np.arange(2 * N_CHAN + 1)
    held = np.r_[0:N_CHAN, N_CHAN + 1 : 2 * N_CHAN + 1]

    def place(second):
        with tables.table(f"{path}/SPECTRAL_WINDOW", readonly=False, ack=False) as sw:
            for spw, centres in enumerate((band[:N_CHAN], second)):
                sw.putcell("CHAN_FREQ", spw, centres)
                sw.putcell("CHAN_WIDTH", spw, np.full(N_CHAN, WIDTH))

    place(band[N_CHAN : 2 * N_CHAN])
    obs = read_observation_ms(path, spw="all")
    np.testing.assert_array_equal(obs.freqs_hz, band[: 2 * N_CHAN])
    assert (obs.chan_width, obs.chan_spacing) == (WIDTH, SPACING)

    place(band[held[N_CHAN:]])
    gap = read_observation_ms(path, spw="all")
    np.testing.assert_array_equal(gap.freqs_hz, band)
    np.testing.assert_array_equal(gap.vis[:, held], obs.vis)
    assert np.all(gap.flags[:, N_CHAN]) and not np.any(gap.vis[:, N_CHAN])

    place(band[N_CHAN - 1] + WIDTH + SPACING * np.arange(N_CHAN))
    assert main(["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--spw", "all"]) == 2
    err = capsys.readouterr().err
    assert (
        f"the 8 channels read of spectral windows 0, 1 lie on a grid of 32 channels "
        f"{WIDTH / 1e3:.9g} kHz apart: its 24 channels missing from the data would be filled "
        "as flagged, more than those read" in err
    )


def test_export_writes_the_spaced_channels_back(tmp_path):
    """A spaced store written as an MS has the original CHAN_FREQ and the width in
    CHAN_WIDTH, EFFECTIVE_BW and RESOLUTION (TOTAL_BANDWIDTH their sum), and reads back the
    same; export-ms of results into the spaced MS writes every cell and leaves its
    SPECTRAL_WINDOW as it was."""
    path = tmp_path / "a.ms"
    w, centres = _spaced_ms(path)
    before = _spectral_window(path)
    store, results, values, obs = _fit(tmp_path, path)
    written = tmp_path / "written.ms"
    write_measurement_set(store, written)
    after = _spectral_window(written, (*before, "EFFECTIVE_BW", "RESOLUTION", "TOTAL_BANDWIDTH"))
    np.testing.assert_array_equal(after["CHAN_FREQ"], before["CHAN_FREQ"])
    np.testing.assert_array_equal(after["CHAN_FREQ"], centres)
    for name in ("CHAN_WIDTH", "EFFECTIVE_BW", "RESOLUTION"):
        np.testing.assert_array_equal(after[name], np.full(N_CHAN, WIDTH), err_msg=name)
    assert after["TOTAL_BANDWIDTH"] == N_CHAN * WIDTH
    again = read_observation_ms(written)
    np.testing.assert_array_equal(again.freqs_hz, obs.freqs_hz)
    assert (again.chan_width, again.chan_spacing) == (WIDTH, SPACING)

    export_results(results, path, store=store)
    for name, value in _spectral_window(path).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    with tables.table(str(path), ack=False) as ms:
        sky = ms.getcol("TAB_SKY_DATA")
    np.testing.assert_array_equal(
        expected_cube(w, sky[..., 0], w.ddid == 0, N_TIME), values["sky_vis"]
    )


# The simulator's channels: 100 kHz wide every 500 kHz.
SIM_WIDTH, SIM_SPACING = 100e3, 500e3
SIMULATED = {
    "array": {"n_stations": 6},
    "observation": {
        "n_time": 12,
        "n_freq": 3,
        "chan_width_hz": SIM_WIDTH,
        "chan_spacing_hz": SIM_SPACING,
    },
    "sky": {"n_sources": 2},
}
FEW_STEPS = {
    "fit": {"steps": 2, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 0},
    "output": {"plots": False},
}


@pytest.fixture(scope="module")
def spaced_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("spaced") / "obs.zarr"
    simulate(simulation_config("demo", SIMULATED, seed=2), path)
    return path


def test_simulator_spaces_the_centres_and_keeps_the_noise_of_the_width(spaced_store):
    obs = read_observation(spaced_store)
    config = obs.metadata["simulation"]["observation"]
    np.testing.assert_array_equal(obs.freqs_hz, 150e6 + SIM_SPACING * np.arange(3))
    assert (obs.chan_width, obs.chan_spacing) == (SIM_WIDTH, SIM_SPACING)
    lines = summary_lines(summarize(spaced_store))
    assert "  channels      3 x 100 kHz every 500 kHz, centres 150 to 151 MHz" in lines
    # The radiometer equation with the width: 2500 Jy / sqrt(2 x 100 kHz x 2 s) = 3.953 Jy
    # (with the spacing it would be sqrt(5) = 2.24 times less).
    sigma = config["sefd_jy"] / np.sqrt(2 * SIM_WIDTH * config["int_time_s"])
    np.testing.assert_allclose(obs.noise, sigma, rtol=1e-12)  # measured: equal, bit for bit
    t = obs.truth
    g = t.gains.astype(np.complex128)
    signal = g[obs.a1] * (t.sky_vis + t.rfi_vis) * np.conj(g[obs.a2])
    drawn = (obs.vis - signal)[~obs.flags]
    measured = np.std(np.concatenate([drawn.real, drawn.imag]))
    # 15 baselines x 3 channels x 12 integrations x 2 parts: the std to 1/sqrt(2 x 1080) =
    # 2.2% (one standard error); measured 1.1% above sigma. The bound, 4.6 standard errors,
    # is statistical: the spacing's noise would lie 55% below.
    assert abs(measured / sigma - 1) < 0.1, measured / sigma


def test_simulator_refuses_a_spacing_below_the_width():
    overrides = {"observation": {"chan_width_hz": 200e3, "chan_spacing_hz": 100e3}}
    with pytest.raises(ValueError, match=r"observation.chan_spacing_hz' = 100000 Hz is less than"):
        simulation_config("demo", overrides)


def test_a_fit_of_spaced_channels_runs_on_a_grid_spaced_by_the_centres(spaced_store, tmp_path):
    obs = read_observation(spaced_store)
    config = run_config.load(FEW_STEPS)
    summary = job.run(obs, tmp_path / "out", config, progress=False)
    assert summary["steps"] == 2 and np.isfinite(summary["chi2_final"])
    model_config = run_config.model_config(config)
    built = frame.model_frame(obs, model_config, snr=100.0, rfi_level=1.0, init="prior", seed=0)
    assert built.grid.chan_spacing == SIM_SPACING != obs.chan_width
