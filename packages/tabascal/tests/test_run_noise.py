"""The run's noise option ``data.noise``: the store's (the default), or estimated from the data
when the run starts, on a simulated store whose noise was replaced by 1 (the simulator's
noise is the truth the estimate is measured against)."""

import dataclasses
import json

import numpy as np
import pytest
import zarr

from tabascal.config import ConfigError
from tabascal.fitting import data_noise, job, run_config
from tabascal.parallel.blockwise import MemoryRows, StoreRows
from tabascal.store import read_meta, read_observation

# 8 stations (28 baselines of per-baseline noise), 30 integrations, 4 channels, 10 % of the
# cells flagged; the two satellites at 1 % of the noise, so that the data change between
# adjacent integrations by less than the noise (the estimator's premise) while the baseline
# axis, which needs satellites, can still be taken.
SCENE = {
    "array": {"n_stations": 8},
    "observation": {"n_time": 30, "n_freq": 4, "sefd_spread": 0.3, "flag_fraction": 0.1},
    "satellites": {"count": 2, "eirp_dbw_hz": -80.0},
}
FEW_STEPS = {
    "fit": {"steps": 2, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 0},
    "output": {"plots": False},
}


@pytest.fixture(scope="module")
def store_of_ones(tmp_path_factory):
    """(the store, its simulated noise (n_bl,)), the store's noise replaced by 1."""
    from tabascal.simulate import simulate, simulation_config

    path = tmp_path_factory.mktemp("noise") / "obs.zarr"
    simulate(simulation_config("demo", SCENE), path, progress=False)
    group = zarr.open_group(str(path), mode="r+")
    truth = np.asarray(group["noise"][...], np.float64).copy()
    group["noise"][...] = 1.0
    assert truth.shape == (28,) and np.ptp(truth) > 0.5  # per baseline, 2.87 to 6.38
    return path, truth


def _config(noise=None):
    data = {} if noise is None else {"data": {"noise": noise}}
    return run_config.load(FEW_STEPS | data)


def _fit_noise_mean(summary) -> float:
    """The mean over the baselines of the noise the fit used: the raw data's RMSE over its
    RMSE / noise (``results.truth_metrics`` divides by that mean)."""
    raw = summary["truth"]["raw_data"]
    return raw["rmse"] / raw["rmse_over_noise"]


def test_estimate_recovers_the_simulated_noise_read_whole_or_by_blocks(store_of_ones):
    path, truth = store_of_ones
    source = StoreRows(path, read_meta(path))
    estimated = data_noise.estimate(source)
    error = estimated.noise / truth - 1
    # 28 baselines of ~190 samples (8.5 % each), fitted to 8 antennas: measured worst 10.3 %,
    # rms 4.5 %, mean +0.75 % (statistical, fixed seed: bounded at 2x, as the import-time
    # estimate's test bounds it, not 100x)
    assert np.abs(error).max() < 0.2 and np.sqrt(np.mean(error**2)) < 0.09
    assert estimated.record["median_noise_store"] == 1.0
    assert estimated.record["median_noise_estimated"] == np.median(estimated.noise)
    # Each baseline's figure rests on its own rows only: five rows at a time, or the whole
    # observation in memory, give the same estimate bit for bit.
    by_blocks = data_noise.estimate(source, rows_per_read=5)
    np.testing.assert_array_equal(by_blocks.noise, estimated.noise)
    in_memory = data_noise.estimate(MemoryRows(read_observation(path)))
    np.testing.assert_array_equal(in_memory.noise, estimated.noise)
    rows = np.array([3, 17, 4])
    np.testing.assert_array_equal(by_blocks.read(rows).noise, estimated.noise[rows])
    np.testing.assert_array_equal(by_blocks.read(rows).vis, source.read(rows).vis)


@pytest.mark.parametrize("shard_axis", ["none", "baseline"])
def test_run_with_estimated_noise_fits_with_it(store_of_ones, tmp_path, shard_axis):
    """On the whole-observation route and on the baseline axis, which reads the store block
    by block, the fit's noise is the estimate, and summary.json says so."""
    path, truth = store_of_ones
    source = StoreRows(path, read_meta(path))
    summary = job.run(
        source, tmp_path / "out", _config("estimate"), shard_axis=shard_axis, progress=False
    )
    assert summary["read_by_block"] == (shard_axis == "baseline")
    expected = data_noise.estimate(source).noise
    # measured: 2.9e-8 relative (the fit holds the noise in float32)
    assert _fit_noise_mean(summary) == pytest.approx(np.mean(expected), rel=3e-6)
    # measured +0.63 % from the simulated noise's mean (bounded at 2x, statistical)
    assert _fit_noise_mean(summary) == pytest.approx(np.mean(truth), rel=0.013)
    record = summary["data"]
    assert record["noise"] == "estimate" and record["axis"] == "integrations"
    assert record["median_noise_store"] == 1.0
    # measured +3.4 % from the simulated noise's median (of 28 baselines; bounded at 2x)
    assert record["median_noise_estimated"] == pytest.approx(np.median(truth), rel=0.07)
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["data"] == record


def test_store_noise_is_the_default_and_leaves_the_results_as_they_were(store_of_ones, tmp_path):
    path, _ = store_of_ones
    source = StoreRows(path, read_meta(path))
    default = job.run(source, tmp_path / "default", _config(), progress=False)
    named = job.run(source, tmp_path / "store", _config("store"), progress=False)
    assert default["data"] == named["data"] == {"noise": "store"}
    assert _fit_noise_mean(default) == 1.0  # the store's noise, as it is
    assert default["chi2_final"] == named["chi2_final"]
    a = zarr.open_group(str(tmp_path / "default" / "results.zarr"), mode="r")
    b = zarr.open_group(str(tmp_path / "store" / "results.zarr"), mode="r")
    for name in ("sky_vis", "rfi_vis", "model_vis", "residual", "gains"):
        np.testing.assert_array_equal(a[name][...], b[name][...])


def test_noise_key_is_checked_and_too_few_samples_are_refused(store_of_ones):
    with pytest.raises(ConfigError, match=r"'data.noise': 'estimated' is not allowed.*'store'"):
        run_config.load({"data": {"noise": "estimated"}})
    path, _ = store_of_ones
    obs = read_observation(path)
    flagged = MemoryRows(dataclasses.replace(obs, flags=np.ones_like(obs.flags)))
    with pytest.raises(ConfigError, match=r"data.noise: estimate: cannot estimate the noise"):
        data_noise.estimate(flagged)
