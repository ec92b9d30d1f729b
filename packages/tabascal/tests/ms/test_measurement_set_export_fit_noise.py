"""export-ms's weights and residual flags take the noise the fit used, which results.zarr
records (its array ``noise``), not the store's: after a run with ``data.noise: estimate`` on a
store whose noise was set to 1, TAB_WEIGHT is 1 / noise_fit^2 cell by cell and the flags are
cut at K noise_fit. Results that do not record it take the store's noise, as before.

The reference noise is the estimator's own figure (``data_noise.estimate``), formed here from
the store, and the MS's cells are mapped to (baseline, channel, integration) from its ANTENNA1,
ANTENNA2, TIME and CHAN_FREQ read back with casacore.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import zarr
from casacore import tables

from tabascal.cli import main
from tabascal.fitting import data_noise, job, run_config
from tabascal.measurement_set import MsError, export_results, import_measurement_set
from tabascal.parallel.blockwise import StoreRows
from tabascal.simulate import simulate, simulation_config
from tabascal.store import read_meta

# As test_run_noise: 8 stations (28 baselines of per-baseline noise, 2.9 to 6.4 Jy), 30
# integrations, 4 channels, 10 % flagged, the satellites at 1 % of the noise so that the data
# change between adjacent integrations by less than the noise (the estimator's premise).
SCENE = {
    "array": {"n_stations": 8},
    "observation": {"n_time": 30, "n_freq": 4, "sefd_spread": 0.3, "flag_fraction": 0.1},
    "satellites": {"count": 2, "eirp_dbw_hz": -80.0},
}
RUN = {
    "data": {"noise": "estimate"},
    "fit": {"steps": 2, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 0},
    "output": {"plots": False},
}
K = 3.0
# The fit holds the noise in float32 and the MS's weights are float32: measured 1.1e-7
# relative between TAB_WEIGHT and 1 / noise^2 from the float64 estimate.
WEIGHT_RTOL = 1e-5
# float32 rounding of the estimate: measured 4.4e-8 relative
NOISE_RTOL = 6e-6


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(MS, store, results, the estimated noise (n_bl,) float64): a simulated MS imported
    into a store whose noise was then set to 1, fitted with data.noise: estimate."""
    where = tmp_path_factory.mktemp("fit_noise")
    ms, store = where / "obs.ms", where / "obs.zarr"
    simulate(simulation_config("demo", SCENE), ms)
    import_measurement_set(ms, store)
    zarr.open_group(str(store), mode="r+")["noise"][...] = 1.0
    source = StoreRows(store, read_meta(store))
    job.run(source, where / "fit", run_config.load(RUN), progress=False)
    estimate = data_noise.estimate(StoreRows(store, read_meta(store))).noise
    # the estimate is the simulated noise (2.9 to 6.4 Jy), far from the store's 1
    assert estimate.shape == (28,) and np.all(estimate > 2)
    return ms, store, where / "fit" / "results.zarr", estimate


def _fresh_ms(fitted, tmp_path):
    ms = tmp_path / "a.ms"
    shutil.copytree(fitted[0], ms)
    return ms


def _cells(ms, store):
    """For each table row its baseline and integration (n_rows,), and for each of the MS's
    channels its index in the store's (n_chan,)."""
    meta = read_meta(store)
    with tables.table(str(ms), ack=False) as t:
        a1, a2, time = t.getcol("ANTENNA1"), t.getcol("ANTENNA2"), t.getcol("TIME")
    with tables.table(f"{ms}/SPECTRAL_WINDOW", ack=False) as t:
        chan_freq = t.getcol("CHAN_FREQ")[0]
    baseline = {(int(p), int(q)): b for b, (p, q) in enumerate(zip(meta.a1, meta.a2, strict=True))}
    b = np.array([baseline[int(p), int(q)] for p, q in zip(a1, a2, strict=True)])
    t = np.searchsorted(np.unique(time), time)
    channel = np.searchsorted(np.asarray(meta.freqs_hz), chan_freq)
    np.testing.assert_allclose(np.asarray(meta.freqs_hz)[channel], chan_freq, rtol=1e-12)
    return b, t, channel


def _check_weights_and_flags(ms, store, results, noise):
    """TAB_WEIGHT (n_rows, 1: the MS holds Stokes I alone) is 1 / noise^2 and
    TAB_FLAG_RESIDUAL is |residual| > K noise, cell by cell; returns the flags' count."""
    b, t, channel = _cells(ms, store)
    with tables.table(str(ms), ack=False) as table:
        weight, flags = table.getcol("TAB_WEIGHT"), table.getcol("TAB_FLAG_RESIDUAL")
    np.testing.assert_allclose(weight[:, 0], 1 / noise[b] ** 2, rtol=WEIGHT_RTOL)
    residual = np.asarray(zarr.open_group(str(results), mode="r")["residual"][...])
    want = np.abs(residual) > K * noise[:, None, None]
    np.testing.assert_array_equal(flags[..., 0], want[b[:, None], channel[None, :], t[:, None]])
    return int(np.count_nonzero(want))


def test_results_record_the_noise_the_fit_used(fitted):
    _, _, results, estimate = fitted
    noise = zarr.open_group(str(results), mode="r")["noise"]
    assert noise.shape == (28,) and noise.dtype == np.float32  # the fit's own precision
    np.testing.assert_allclose(noise[...], estimate, rtol=NOISE_RTOL)


def test_weights_and_residual_flags_take_the_fit_noise_cell_by_cell(fitted, tmp_path):
    _, store, results, estimate = fitted
    ms = _fresh_ms(fitted, tmp_path)
    report = export_results(results, ms, store=store, weights=True, flag_residual=K)
    assert report.columns[-2:] == ("TAB_WEIGHT", "TAB_FLAG_RESIDUAL")
    assert report.noise_from == "results"
    assert report.noise_median == pytest.approx(np.median(estimate), rel=NOISE_RTOL)
    n_flagged = _check_weights_and_flags(ms, store, results, estimate)
    assert report.n_flagged == n_flagged
    # The store's noise of 1 would flag most cells of a residual of 2.9 to 6.4 Jy noise:
    # measured 2603 of 3360 against 536 with the fit's.
    residual = zarr.open_group(str(results), mode="r")["residual"][...]
    assert np.count_nonzero(np.abs(residual) > K) > 2 * n_flagged


def test_the_command_needs_no_store_for_the_fit_noise_and_says_where_it_came_from(
    fitted, tmp_path, capsys
):
    _, store, results, estimate = fitted
    ms = _fresh_ms(fitted, tmp_path)
    assert main(["export-ms", str(results), "--ms", str(ms), "--flag-residual", str(K)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("added TAB_SKY_DATA, TAB_RFI_DATA, TAB_RES_DATA, TAB_CLEANED_DATA, ")
    assert "TAB_WEIGHT, TAB_FLAG_RESIDUAL" in out[0]
    median = np.median(zarr.open_group(str(results), mode="r")["noise"][...])
    assert out[-1] == f"  noise: the fit's, as {results} records it, median {median:.4g} Jy"
    _check_weights_and_flags(ms, store, results, estimate)


def test_results_without_noise_export_with_the_store_noise_as_before(fitted, tmp_path, capsys):
    _, store, results, _ = fitted
    old = tmp_path / "results.zarr"
    shutil.copytree(results, old)
    del zarr.open_group(str(old), mode="r+")["noise"]
    ms = _fresh_ms(fitted, tmp_path)
    with pytest.raises(MsError, match="need the noise the fit used, which its store holds: give"):
        export_results(old, ms, weights=True)
    with pytest.raises(MsError, match=r"does not record it \(it has no array noise"):
        export_results(old, ms, flag_residual=K)
    args = ["export-ms", str(old), "--ms", str(ms), "--flag-residual", str(K)]
    assert main(args) == 2
    assert "give --data STORE" in capsys.readouterr().err
    assert main([*args, "--data", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"  noise: the store's, median 1 Jy: {old} does not record the fit's")
    _check_weights_and_flags(ms, store, old, np.ones(28))
    assert main(["export-ms", str(old), "--ms", str(ms), "--overwrite-columns"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "TAB_WEIGHT" not in out[0]
    assert out[-1].startswith(f"  no weights: {old} does not record the noise the fit used")


def test_reuse_plan_on_four_devices_records_the_noise_in_the_data_row_order(fitted, tmp_path):
    """On the baseline axis with the antenna-reuse plan the placed rows are permuted and leave
    block by block; the recorded noise is in the data's order all the same."""
    _, store, _, estimate = fitted
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(RUN))  # YAML reads JSON
    out = tmp_path / "fit"
    argv = ["run", "-c", str(config), "--data", str(store), "-o", str(out), "-q", "--devices", "4"]
    argv += ["--shard-axis", "baseline", "--reuse-plan"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run([sys.executable, "-m", "tabascal", *argv], env=env, check=True)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_devices"] == 4 and summary["reuse_plan"]
    noise = zarr.open_group(str(out / "results.zarr"), mode="r")["noise"][...]
    np.testing.assert_allclose(noise, estimate, rtol=NOISE_RTOL)


def test_a_recorded_noise_that_cannot_be_the_fit_noise_is_refused(fitted, tmp_path):
    _, store, results, _ = fitted
    bad = tmp_path / "results.zarr"
    shutil.copytree(results, bad)
    ms = _fresh_ms(fitted, tmp_path)
    group = zarr.open_group(str(bad), mode="r+")
    noise = group["noise"][...]
    del group["noise"]
    group.create_array("noise", data=noise[:-1])
    with pytest.raises(MsError, match=r"noise has shape \(27,\), not \(28,\), one value per"):
        export_results(bad, ms, store=store, weights=True)
    noise[5] = 0
    del group["noise"]
    group.create_array("noise", data=noise)
    with pytest.raises(MsError, match=r"noise of baseline 5 is 0.0 \(1 baselines in all\)"):
        export_results(bad, ms, store=store, weights=True)
    with tables.table(str(ms), ack=False) as t:
        assert not any(c.startswith("TAB_") for c in t.colnames())  # refused before writing
