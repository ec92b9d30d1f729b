"""The fitted RFI satellite by satellite: rfi_vis_by_satellite in results.zarr, the summary's
per-satellite table, the memory budget that leaves the array out, and satellites.png."""

import json
import re

import numpy as np
import pytest
import zarr

from tabascal.fitting import checkpoint, job, optimiser, plots, run_config, satellites
from tabascal.model import joint, likelihood, rfi_signal, rfi_vis
from tabascal.observation import geometry
from tabascal.store import read_observation

# quadrature_limit 1 puts the baselines that need 2 samples per integration on the analytic
# operator, whose phase moments (which have a satellite axis) the run keeps across steps.
CONFIG = {
    "fit": {"steps": 3, "second_phase_steps": 0, "polish_steps": 0},
    "rfi": {"quadrature_limit": 1},
}


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@pytest.fixture(scope="module")
def obs(small_store):
    return read_observation(small_store)


@pytest.fixture(scope="module")
def fitted(obs, tmp_path_factory):
    """(output folder, summary.json, config) of a short fit of the 2-satellite observation."""
    out = tmp_path_factory.mktemp("per_satellite") / "out"
    config = run_config.load(CONFIG)
    job.run(obs, out, config, progress=False)
    return out, json.loads((out / "summary.json").read_text()), config


def _fitted_params(obs, out, config):
    """The run's model (built again, as the run built it) and its fitted parameters, read from
    the run's last checkpoint."""
    model = joint.build(obs, run_config.model_config(config), init="data", seed=0)
    template = optimiser.init_state(
        model.params, optimiser.make_optimizer(run_config.fit_config(config))
    )
    state, _ = checkpoint.load_checkpoint(out / "checkpoints", template)
    return model, state.params


@pytest.mark.slow
def test_satellite_cubes_add_up_to_rfi_vis_and_each_is_that_satellite_alone(obs, fitted):
    out, summary, config = fitted
    results = zarr.open_group(str(out / "results.zarr"), mode="r")
    by_satellite = results["rfi_vis_by_satellite"]
    assert by_satellite.shape == (2, *obs.vis.shape) and by_satellite.dtype == np.complex64
    assert by_satellite.chunks == (1, *obs.vis.shape)  # one block of every row, per satellite
    assert by_satellite.attrs["satellites"] == [obs.orbits.label(s) for s in range(2)]
    assert summary["model"]["rfi_groups"] == {"quadrature t1 f1": 12, "analytic t1 f2": 16}
    assert summary["model"]["rfi_phase_cache"]["groups"]["analytic t1 f2"]["kept"]
    cubes = by_satellite[...]
    rfi = results["rfi_vis"][...]
    scale = np.sqrt(np.mean(np.abs(rfi) ** 2))
    apart = np.max(np.abs(cubes.sum(axis=0) - rfi)) / scale
    print(f"sum over satellites against rfi_vis: {apart:.2e} of rfi_vis's rms")
    assert apart < 2e-5  # float32 sums in another order: measured 1.4e-7
    # Each satellite alone, evaluated independently: the RFI operators on that satellite's
    # slice of the fitted signal and the geometry, with no phase moments kept.
    model, params = _fitted_params(obs, out, config)
    c, spec = model.constants, model.spec
    amp = rfi_signal.forward(params.rfi, c.rfi_signal)
    for s in range(2):
        alone = rfi_vis.forward(
            amp[:, s : s + 1],
            c.phase[:, s : s + 1],
            c.delay_us[:, s : s + 1],
            c.freq_mhz,
            c.groups,
            spec.groups,
            spec.n_bl,
            spec.rfi_vis,
        )
        alone = np.asarray(alone)
        apart = np.max(np.abs(cubes[s] - alone)) / np.sqrt(np.mean(np.abs(alone) ** 2))
        print(f"satellite {s} against its own evaluation: {apart:.2e} of its rms")
        assert apart < 5e-5, s  # measured 4.0e-7 and 4.6e-7
        assert np.sqrt(np.mean(np.abs(alone) ** 2)) > 0.05 * scale  # both satellites matter


def test_summary_table_figures_are_those_of_the_written_cubes(obs, fitted):
    out, summary, _ = fitted
    results = zarr.open_group(str(out / "results.zarr"), mode="r")
    g = results["gains"][...].astype(np.complex128)
    flags = results["flags"][...]
    noise = likelihood.resolve_noise(obs.noise, obs.vis.shape[0])[:, None, None]
    elevation = geometry.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)
    table = summary["satellites"]
    assert [entry["index"] for entry in table] == [0, 1]
    for s, entry in enumerate(table):
        cube = results["rfi_vis_by_satellite"][s].astype(np.complex128)
        seen = np.abs(g[obs.a1] * cube * np.conj(g[obs.a2])) / noise
        peak, rms = seen[~flags].max(), np.sqrt(np.mean(seen[~flags] ** 2))
        print(f"{entry['name']}: peak {entry['peak_over_noise'] / peak - 1:.1e}, "
              f"rms {entry['rms_over_noise'] / rms - 1:.1e} from numpy")  # fmt: skip
        assert entry["name"] == obs.orbits.label(s)
        # float32 on the devices against float64 here: measured 1.5e-7 and 3.2e-7 apart
        assert entry["peak_over_noise"] == pytest.approx(peak, rel=3e-5)
        assert entry["rms_over_noise"] == pytest.approx(rms, rel=3e-5)
        assert entry["in_view_fraction"] == np.mean(elevation[s] > 0)
    assert table[0]["peak_over_noise"] > 10 and table[1]["peak_over_noise"] > 10
    assert summary["rfi_vis_by_satellite"]["written"] is True
    assert summary["rfi_vis_by_satellite"]["reason"] is None
    mib = 2 * obs.vis.size * 8 / 2**20  # complex64
    assert summary["rfi_vis_by_satellite"]["mib"] == pytest.approx(mib, rel=1e-12)


def test_satellites_plot_is_a_png_with_one_panel_per_satellite(fitted):
    out, _, _ = fitted
    assert _png_size(out / "satellites.png") == (800, 440)  # 2.2 inches a panel at 100 dpi


def test_satellites_plot_shows_only_the_brightest_of_many(tmp_path):
    rng = np.random.default_rng(0)
    n_sat, times = 20, np.arange(30.0)
    signal = rng.uniform(1, 2, size=(n_sat, times.size))
    elevation = rng.uniform(10, 80, size=(n_sat, times.size))
    labels = [f"SAT-{s}" for s in range(n_sat)]
    path = plots.plot_satellites(times, signal, elevation, labels, tmp_path / "s.png", most=4)
    assert _png_size(path) == (800, 880)


@pytest.mark.parametrize(
    "output, reason",
    [
        ({"per_satellite": "never"}, "output.per_satellite is never"),
        ({"per_satellite_mb": 0.001}, r"0\.02563 MiB, more than output\.per_satellite_mb = 0\.001"),
    ],
)
def test_a_budget_that_leaves_the_array_out_says_why(obs, fitted, tmp_path, output, reason):
    config = run_config.load(CONFIG | {"output": output})
    summary = job.run(obs, tmp_path / "out", config, progress=False)
    results = zarr.open_group(str(tmp_path / "out" / "results.zarr"), mode="r")
    assert "rfi_vis_by_satellite" not in results and "rfi_vis" in results
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["rfi_vis_by_satellite"]["written"] is False
    assert written["rfi_vis_by_satellite"] == summary["rfi_vis_by_satellite"]
    assert re.search(reason, written["rfi_vis_by_satellite"]["reason"])
    # The table is there all the same, each figure as the run that wrote the cubes has it (the
    # same fit, its figures reduced by the same program: measured 0 apart).
    for entry, full in zip(written["satellites"], fitted[1]["satellites"], strict=True):
        for key in ("peak_over_noise", "rms_over_noise", "in_view_fraction"):
            assert entry[key] == pytest.approx(full[key], rel=1e-6), key


def test_output_plan_follows_the_mode_and_the_budget():
    cube = (28, 2, 30)
    mib = 3 * 28 * 2 * 30 * 16 / 2**20
    over = satellites.output_plan("always", 0.0, 3, cube, np.complex128)
    assert over["written"] and over["mib"] == pytest.approx(mib, rel=1e-12)
    assert satellites.output_plan("auto", mib, 3, cube, np.complex128)["written"]
    assert not satellites.output_plan("auto", 0.99 * mib, 3, cube, np.complex128)["written"]
    none = satellites.output_plan("always", 1024.0, 0, cube, np.complex64)
    assert not none["written"] and none["reason"] == "the observation has no satellites"


def test_an_observation_without_satellites_writes_no_satellite_outputs(tmp_path):
    from tabascal.simulate import simulate, simulation_config

    overrides = {"array": {"n_stations": 6}, "observation": {"n_time": 12, "n_freq": 2},
                 "satellites": {"count": 0}}  # fmt: skip
    simulate(simulation_config("demo", overrides), tmp_path / "obs.zarr")
    obs = read_observation(tmp_path / "obs.zarr")
    config = run_config.load(
        {
            "fit": {"steps": 1, "second_phase_steps": 0, "polish_steps": 0},
            "output": {"per_satellite": "always"},
        }
    )
    summary = job.run(obs, tmp_path / "out", config, progress=False)
    results = zarr.open_group(str(tmp_path / "out" / "results.zarr"), mode="r")
    assert "rfi_vis_by_satellite" not in results
    assert summary["satellites"] == []
    assert summary["rfi_vis_by_satellite"]["reason"] == "the observation has no satellites"
    assert not (tmp_path / "out" / "satellites.png").exists()
    assert (tmp_path / "out" / "loss.png").exists()


def test_satellite_table_merges_extra_fields_and_refuses_clashes():
    figures = [satellites.Apparent(5.0, 2.0), satellites.Apparent(3.0, 1.0)]
    table = satellites.satellite_table(
        ["A", "B"], figures, [1.0, 0.5], extra=[{"time_offset_s": 0.1}, {"time_offset_s": -2.0}]
    )
    assert table[1] == {
        "index": 1,
        "name": "B",
        "peak_over_noise": 3.0,
        "rms_over_noise": 1.0,
        "in_view_fraction": 0.5,
        "time_offset_s": -2.0,
    }
    with pytest.raises(ValueError, match=r"repeats \['name'\]"):
        satellites.satellite_table(["A"], figures[:1], [1.0], extra=[{"name": "other"}])
    with pytest.raises(ValueError, match=r"2 satellites but \{'in_view_fraction': 1\}"):
        satellites.satellite_table(["A", "B"], figures, [1.0])
