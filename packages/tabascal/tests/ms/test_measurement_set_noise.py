"""The noise of an imported Measurement Set: estimated from the data where SIGMA and WEIGHT are
placeholders, read from the per-channel columns where they are present, and the estimator
itself (tabascal.measurement_set.noise) against simulations of known noise."""

import numpy as np
import pytest
from casacore import tables
from msbuild import add_cell_column, build_ms, expected_cells

from tabascal.cli import main
from tabascal.measurement_set import (
    MeasurementSetReader,
    MsError,
    import_measurement_set,
    observation_info,
    read_observation_ms,
)
from tabascal.measurement_set import noise as ms_noise
from tabascal.store import read_observation


def _rfi_scene(seed: int, n_ant=16, n_chan=64, n_time=30):
    """Complex Gaussian noise of known std per baseline (per-antenna factors, as the
    radiometer equation gives), a satellite-like signal 100x the largest noise (a band of
    channels, its amplitude and phase drifting so that it changes between adjacent
    integrations by up to half the smallest noise), 0.5 % impulses 1000x the noise, 10 % of
    cells flagged. Returns vis, flags (n_bl, n_chan, n_time), a1, a2, n_ant, sigma (n_bl,)."""
    rng = np.random.default_rng(seed)
    a1, a2 = np.triu_indices(n_ant, 1)
    factor = rng.uniform(0.5, 2.0, n_ant)
    sigma = 2.0 * np.sqrt(factor[a1] * factor[a2])
    shape = (a1.size, n_chan, n_time)
    vis = sigma[:, None, None] * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    t, f = np.arange(n_time), np.arange(n_chan)[:, None]
    drift = 1e-3  # of the amplitude, and rad, per integration
    band = 100 * sigma.max() * np.exp(-0.5 * ((f - 20) / 12) ** 2) * (1 + drift * t)
    winding = drift * rng.choice([-1, 1], a1.size)[:, None, None] * t + 0.01 * f
    vis += band * np.exp(1j * winding)
    impulses = rng.uniform(size=shape) < 0.005
    vis[impulses] += 1000 * sigma.max() * np.exp(2j * np.pi * rng.uniform(size=impulses.sum()))
    flags = rng.uniform(size=shape) < 0.1
    return vis.astype(np.complex64), flags, a1, a2, n_ant, sigma


def test_estimate_recovers_known_noise_under_strong_rfi_and_impulses():
    vis, flags, a1, a2, n_ant, sigma = _rfi_scene(seed=0)
    step = np.diff(vis, axis=-1).reshape(a1.size, -1)
    # the signal is there: a plain standard deviation of the differences is 84x the noise
    assert np.median(np.std(step, axis=1) / 2 / sigma) > 50
    fit = ms_noise.estimate_noise(vis, flags, a1, a2, n_ant)
    error = fit.noise / sigma - 1
    # measured: worst baseline 3.6 %, mean +2.0 % (the impulses' 1 % of the differences lift
    # the median), rms 2.1 %; statistical, so bounded at under 2x those, not 100x
    assert np.abs(error).max() < 0.06 and abs(error.mean()) < 0.03
    assert fit.scatter == pytest.approx(fit.expected_scatter, rel=0.5)  # 0.0203 and 0.0214


def test_per_baseline_estimate_follows_any_baseline_noise():
    """baseline_noise alone, on noise that no per-antenna factors describe."""
    rng = np.random.default_rng(1)
    sigma = rng.uniform(0.1, 10.0, 40)
    shape = (40, 32, 20)
    vis = sigma[:, None, None] * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    flags = rng.uniform(size=shape) < 0.2
    noise, n_samples = ms_noise.baseline_noise(vis, flags)
    good = ~flags[..., 1:] & ~flags[..., :-1]
    np.testing.assert_array_equal(n_samples, 2 * good.sum(axis=(1, 2)))
    error = noise / sigma - 1
    # sampling: 1.17 / sqrt(777 samples) = 4.2 %; measured rms 4.4 %, worst 10.0 %
    assert np.sqrt(np.mean(error**2)) < 0.07 and np.abs(error).max() < 0.15
    along_channels, _ = ms_noise.baseline_noise(vis, flags, axis=1)
    assert np.sqrt(np.mean((along_channels / sigma - 1) ** 2)) < 0.07  # measured 4.2 %


def test_antenna_factors_cut_the_error_of_few_samples():
    """With the MWA file's sizes (126 antennas, 2 integrations, 13 channels: 26 samples a
    baseline) a baseline's own estimate is off by 23 % rms; fitted to per-antenna factors,
    by 3 %."""
    rng = np.random.default_rng(2)
    n_ant = 126
    a1, a2 = np.triu_indices(n_ant, 1)
    factor = rng.uniform(0.7, 1.4, n_ant)
    sigma = np.sqrt(factor[a1] * factor[a2])
    shape = (a1.size, 13, 2)
    vis = sigma[:, None, None] * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    own, n_samples = ms_noise.baseline_noise(vis, np.zeros(shape, bool))
    fit = ms_noise.antenna_noise(own, n_samples, a1, a2, n_ant)
    rms = [np.sqrt(np.mean(np.log(x / sigma) ** 2)) for x in (own, fit.noise)]
    assert rms[0] > 0.2 and rms[1] < 0.05  # measured 0.225 and 0.029
    assert abs(np.mean(np.log(fit.noise / sigma))) < 0.01  # measured 0.002 (LOG_BIAS)


def test_column_preference_and_placeholders():
    every = ["SIGMA", "WEIGHT", "SIGMA_SPECTRUM", "WEIGHT_SPECTRUM"]
    assert ms_noise.noise_columns("DATA", every) == [
        "SIGMA_SPECTRUM",
        "WEIGHT_SPECTRUM",
        "SIGMA",
        "WEIGHT",
    ]
    assert ms_noise.noise_columns("CORRECTED_DATA", every) == ["WEIGHT_SPECTRUM", "WEIGHT"]
    assert ms_noise.is_placeholder("SIGMA", 1.0, 1.0)
    assert not ms_noise.is_placeholder("SIGMA", 1.25, 1.25)  # a constant noise, measured
    assert ms_noise.is_placeholder("WEIGHT_SPECTRUM", 4.0, 4.0)
    assert not ms_noise.is_placeholder("WEIGHT", 1.0, 4.0)
    np.testing.assert_array_equal(ms_noise.noise_from_column("WEIGHT", [4.0, 0.0]), [0.5, np.inf])


def _noisy_ms(path, n_time=20, n_chan=32, sigma="ones", seed=3):
    """build_ms with DATA replaced by complex Gaussian noise of std 3 sqrt(f_p f_q) on baseline
    (p, q) (both hands); returns what build_ms wrote and that std per MS baseline."""
    w = build_ms(path, n_ant=6, n_time=n_time, n_chan=n_chan, sigma=sigma, seed=seed)
    rng = np.random.default_rng(seed)
    factor = rng.uniform(0.5, 2.0, 6)
    std = 3.0 * np.sqrt(factor[w.ant1] * factor[w.ant2])
    shape = w.data.shape
    w.data[:] = std[:, None, None] * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    with tables.table(str(path), readonly=False, ack=False) as ms:
        ms.putcol("DATA", w.data)
    return w, {(int(p), int(q)): s for p, q, s in zip(w.ant1, w.ant2, std, strict=False)}


def _truth(obs, std: dict) -> np.ndarray:
    ids = np.asarray(obs.metadata["measurement_set"]["antenna_ids"])
    return np.array([std[(int(ids[p]), int(ids[q]))] for p, q in zip(obs.a1, obs.a2, strict=True)])


def test_sigma_of_one_gives_an_estimate_by_default_and_says_so(tmp_path, capsys):
    path = tmp_path / "a.ms"
    w, std = _noisy_ms(path)
    assert (
        main(["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--correlation", "XX"]) == 0
    )
    out = capsys.readouterr().out
    assert (
        "  SIGMA and WEIGHT are 1 everywhere (defaults and relative weights, not measurements): "
        "noise estimated from adjacent-integration differences, median " in out
    )
    assert "per-antenna factors fitted to the baselines' estimates, which scatter by" in out
    obs = read_observation(tmp_path / "a.zarr")
    record = obs.metadata["measurement_set"]["noise"]
    assert (record["method"], record["column"], record["axis"]) == (
        "estimate",
        "SIGMA",
        "integrations",
    )
    error = obs.noise / _truth(obs, std) - 1
    # 15 baselines of ~970 samples (3.8 % each), fitted to 6 antennas: measured worst 6.0 %,
    # rms 2.7 % (statistical, fixed seed: bounded at under 2x, not 100x)
    assert obs.noise.shape == (15,) and np.abs(error).max() < 0.1
    assert f"median {np.median(obs.noise):.4g} Jy" in out
    vis, flags = expected_cells(w, np.arange(w.time.size), *_ms_ids(obs), obs.n_time)
    np.testing.assert_array_equal(obs.vis, vis)  # the data themselves are untouched
    np.testing.assert_array_equal(obs.flags, flags)


def _ms_ids(obs):
    ids = np.asarray(obs.metadata["measurement_set"]["antenna_ids"])
    return ids[obs.a1], ids[obs.a2]


def test_noise_column_keeps_the_placeholder_and_says_what_it_is(tmp_path, capsys):
    path = tmp_path / "a.ms"
    _noisy_ms(path)
    args = ["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--correlation", "XX"]
    assert main([*args, "--noise", "column"]) == 0
    out = capsys.readouterr().out
    assert (
        "  noise from SIGMA as asked, median 1 Jy; SIGMA is 1 everywhere (a default, not a "
        "measurement)" in out
    )
    obs = read_observation(tmp_path / "a.zarr")
    assert obs.noise.shape == () and obs.noise == 1.0
    assert obs.metadata["measurement_set"]["noise"]["method"] == "column"


def test_measured_sigma_is_kept_and_estimate_can_be_asked_for(tmp_path):
    path = tmp_path / "a.ms"
    w, std = _noisy_ms(path, sigma="per baseline")
    by_default = read_observation_ms(path, correlation="XX")
    np.testing.assert_array_equal(by_default.noise, w.sigma[:15, 0].astype(np.float64))
    assert by_default.metadata["measurement_set"]["noise"]["reason"] is None
    estimated = read_observation_ms(path, correlation="XX", noise="estimate")
    assert np.abs(estimated.noise / _truth(estimated, std) - 1).max() < 0.1  # measured 6.0 %
    record = estimated.metadata["measurement_set"]["noise"]
    assert (record["method"], record["column"], record["reason"]) == ("estimate", None, None)


def test_blocks_agree_on_the_estimate_and_sizes_read_no_data(tmp_path, monkeypatch):
    """The estimate rests on every baseline (per-antenna factors), so it is made once for all
    of them: a block of baselines gets the values of the whole read. observation_info tells
    that the noise is per baseline without reading DATA."""
    path = tmp_path / "a.ms"
    _noisy_ms(path, n_time=6, n_chan=8)
    full = read_observation_ms(path, correlation="XX")
    read = []
    original = tables.table.getcol

    def getcol(self, name, *args, **kwargs):
        read.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(tables.table, "getcol", getcol)
    assert observation_info(path, correlation="XX").noise_per_baseline
    assert "DATA" not in read
    with MeasurementSetReader(path, correlation="XX") as reader:
        block = reader.read(slice(4, 9))
    np.testing.assert_array_equal(block.noise, full.noise[4:9])
    np.testing.assert_array_equal(block.vis, full.vis[4:9])


def test_sigma_of_one_written_by_tabascal_is_its_simulated_noise(tmp_path):
    path = tmp_path / "a.ms"
    _noisy_ms(path)
    with tables.table(str(path), readonly=False, ack=False) as ms:
        ms.putkeyword("TABASCAL_METADATA", "{}")
    obs = read_observation_ms(path, correlation="XX")
    assert obs.noise.shape == () and obs.noise == 1.0


def _quadratic_means(w, obs, cell_noise, flags) -> np.ndarray:
    """Each store baseline's quadratic mean of ``cell_noise`` (n_rows, n_chan) over its cells
    not in ``flags`` (the store's), gathered row by row, independently of the reader."""
    column = {(int(p), int(q)): b for b, (p, q) in enumerate(zip(*_ms_ids(obs), strict=True))}
    squares = [[] for _ in range(obs.n_bl)]
    for r in range(w.time.size):
        b = column[(int(w.ant1[r]), int(w.ant2[r]))]
        for c in range(cell_noise.shape[1]):
            if not flags[b, c, w.t_index[r]]:
                squares[b].append(cell_noise[r, c] ** 2)
    return np.sqrt([np.mean(s) for s in squares])


@pytest.mark.parametrize("varying", [False, True])
def test_weight_spectrum_is_used_cell_by_cell(tmp_path, capsys, varying):
    """WEIGHT_SPECTRUM, present, is preferred to SIGMA: each baseline's noise is the quadratic
    mean of 1 / sqrt(WEIGHT_SPECTRUM) over its unflagged cells (exactly 1 / sqrt(w) where w is
    the same on all of them), and cells of weight 0 are flagged."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_ant=5, n_time=4, n_chan=3, corr=("XX", "YY"))
    rng = np.random.default_rng(4)
    per_baseline = rng.uniform(0.5, 8.0, (10, 1, 2))[np.arange(w.time.size) % 10]
    weight = per_baseline * (
        rng.uniform(0.5, 2.0, w.data.shape) if varying else np.ones(3)[:, None]
    )
    weight[7, 1, 0] = weight[23, 2, 0] = 0.0
    add_cell_column(path, "WEIGHT_SPECTRUM", weight)
    args = ["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--correlation", "XX"]
    assert main(args) == 0
    assert "  noise from WEIGHT_SPECTRUM, median " in capsys.readouterr().out
    obs = read_observation(tmp_path / "a.zarr")
    _, flags = expected_cells(w, np.arange(w.time.size), *_ms_ids(obs), obs.n_time)
    ids = _ms_ids(obs)
    for r, c in ((7, 1), (23, 2)):
        b = np.flatnonzero((ids[0] == w.ant1[r]) & (ids[1] == w.ant2[r]))[0]
        flags[b, c, w.t_index[r]] = True
    np.testing.assert_array_equal(obs.flags, flags)
    weight32 = weight[..., 0].astype(np.float32).astype(np.float64)
    with np.errstate(divide="ignore"):
        expected = _quadratic_means(w, obs, 1 / np.sqrt(weight32), flags)
    np.testing.assert_allclose(obs.noise, expected, rtol=3e-14)  # measured 3.3e-16
    if not varying:  # measured 1.1e-16
        np.testing.assert_allclose(obs.noise, 1 / np.sqrt(weight32[:10, 0]), rtol=1e-14)


def test_sigma_spectrum_comes_before_weight_spectrum(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_ant=4, n_time=3, n_chan=2, corr=("XX", "YY"))
    rng = np.random.default_rng(5)
    sigma = rng.uniform(0.5, 2.0, w.data.shape)
    add_cell_column(path, "SIGMA_SPECTRUM", sigma)
    add_cell_column(path, "WEIGHT_SPECTRUM", np.full(w.data.shape, 9.0))
    obs = read_observation_ms(path, correlation="YY")
    assert obs.metadata["measurement_set"]["noise"]["column"] == "SIGMA_SPECTRUM"
    _, flags = expected_cells(w, np.arange(w.time.size), *_ms_ids(obs), obs.n_time, corr=1)
    np.testing.assert_array_equal(obs.flags, flags)
    sigma32 = sigma[..., 1].astype(np.float32).astype(np.float64)
    expected = _quadratic_means(w, obs, sigma32, flags)
    np.testing.assert_allclose(obs.noise, expected, rtol=3e-14)  # measured 0


def test_too_few_samples_to_estimate_is_refused(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_ant=4, n_time=1, n_chan=1, sigma="ones")
    refusal = "cannot estimate the noise from differences of adjacent channels: no baseline has 10"
    with pytest.raises(MsError, match=refusal):
        import_measurement_set(path, tmp_path / "a.zarr", correlation="XX")
