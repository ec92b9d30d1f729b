"""tabascal run: outputs, resume, refusal to overwrite, configuration errors and plan."""

import json

import jax
import numpy as np
import pytest
import zarr

from tabascal.cli import main
from tabascal.config import ConfigError
from tabascal.fitting import job, run_config
from tabascal.store import read_observation

FEW_STEPS = {
    "fit": {"steps": 6, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 3},
    "output": {"plots": False},
}


@pytest.fixture(scope="module")
def obs(small_store):
    return read_observation(small_store)


def test_run_writes_results_summary_and_plots(obs, tmp_path):
    config = run_config.load({"fit": {"steps": 4, "second_phase_steps": 0, "polish_steps": 0}})
    summary = job.run(obs, tmp_path / "out", config, progress=False)
    out = tmp_path / "out"
    for name in ("results.zarr", "summary.json", "config.yaml", "loss.png", "baselines.png"):
        assert (out / name).exists(), name
    written = json.loads((out / "summary.json").read_text())
    assert written == json.loads(json.dumps(dict(summary)))
    for key in ("chi2_init", "chi2_final", "steps", "seconds_fit", "n_devices", "shard_axis"):
        assert key in written
    assert written["steps"] == 4 and written["shard_axis"] == "none"
    assert len(written["per_device_peak_bytes"]) == written["n_devices"]
    assert set(written["truth"]) == {"sky", "rfi", "gains", "raw_data", "apparent_sky"}
    # The apparent sky and the gains over their spread, against numpy from the outputs.
    results = zarr.open_group(str(out / "results.zarr"), mode="r")
    g, t = results["gains"][...], obs.truth
    a1, a2 = obs.a1, obs.a2
    fitted = g[a1] * results["sky_vis"][...] * g[a2].conj()
    true = t.gains[a1] * t.sky_vis * t.gains[a2].conj()
    apparent = np.sqrt(np.mean(np.abs(fitted - true) ** 2))
    assert written["truth"]["apparent_sky"]["rmse"] == pytest.approx(apparent, rel=1e-5)
    spread = np.sqrt(np.mean(np.abs(t.gains - 1) ** 2))
    error = np.sqrt(np.mean(np.abs(g - t.gains) ** 2))
    assert written["truth"]["gains"]["over_spread"] == pytest.approx(error / spread, rel=1e-5)
    results = zarr.open_group(str(out / "results.zarr"), mode="r")
    n_bl, n_freq, n_time = obs.vis.shape
    for name in ("sky_vis", "rfi_vis", "model_vis", "residual"):
        assert results[name].shape == (n_bl, n_freq, n_time)
    # The residual is data minus model, row for row in the data's order.
    np.testing.assert_allclose(
        results["residual"][...], obs.vis - results["model_vis"][...], rtol=1e-5, atol=1e-4
    )
    np.testing.assert_array_equal(results["a1"][...], obs.a1)


def _stopped_and_resumed(obs, tmp_path, settings: dict, stop: dict):
    """Fit ``settings`` whole, and stopped where ``stop`` (fit keys) ends it then resumed;
    check both end alike (steps, final chi-squared, model visibilities to the last bit) and
    return their summaries (whole, resumed)."""
    whole = job.run(obs, tmp_path / "whole", run_config.load(settings), progress=False)
    first = run_config.load(settings)
    first["fit"].update(stop)
    job.run(obs, tmp_path / "split", first, progress=False)
    resumed = job.run(
        obs, tmp_path / "split", run_config.load(settings), resume=True, progress=False
    )
    assert resumed["steps"] == whole["steps"]
    assert resumed["chi2_final"] == whole["chi2_final"]
    a = zarr.open_group(str(tmp_path / "whole" / "results.zarr"), mode="r")
    b = zarr.open_group(str(tmp_path / "split" / "results.zarr"), mode="r")
    np.testing.assert_array_equal(a["model_vis"][...], b["model_vis"][...])
    return whole, resumed


def test_resume_reaches_the_same_result_as_an_uninterrupted_run(obs, tmp_path):
    # Stop after the first checkpoint (3 steps), then resume to 6.
    whole, _ = _stopped_and_resumed(obs, tmp_path, FEW_STEPS, {"steps": 3})
    assert whole["steps"] == 6


@pytest.mark.slow
def test_resume_from_a_checkpoint_written_in_the_polish_reaches_the_same_result(obs, tmp_path):
    """Three gradient steps, then trust-region steps: stopped after the first polish step (its
    checkpoint holds the polish's state alone) and resumed to the third, as one run."""
    settings = {
        "fit": {
            "steps": 3, "second_phase_steps": 0, "polish": "trust-region", "polish_steps": 3,
            "polish_cg_steps": 5, "polish_tolerance": 0.0, "checkpoint_every": 100,
        },
        "output": {"plots": False},
    }  # fmt: skip
    whole, resumed = _stopped_and_resumed(obs, tmp_path, settings, {"polish_steps": 1})
    assert whole["steps"] == 6
    assert set(resumed["step_phases"]) == {"polish"}  # nothing of the gradient phases to run
    assert set(whole["step_phases"]) == {"gradient", "polish"}


@pytest.mark.slow
def test_a_gauss_newton_polish_runs_and_lowers_the_fit_below_its_gradient_phases(obs, tmp_path):
    """fit.polish_curvature: gauss-newton reaches the polish's products through ``tabascal
    run`` (``routes.Route.curvature_fn``): three trust-region steps on them after three
    gradient steps end below where the gradient steps alone end."""
    settings = {
        "fit": {
            "steps": 3, "second_phase_steps": 0, "polish": "trust-region", "polish_steps": 3,
            "polish_cg_steps": 5, "polish_tolerance": 0.0, "polish_curvature": "gauss-newton",
        },
        "output": {"plots": False},
    }  # fmt: skip
    polished = job.run(obs, tmp_path / "polished", run_config.load(settings), progress=False)
    settings["fit"]["polish_steps"] = 0
    gradient = job.run(obs, tmp_path / "gradient", run_config.load(settings), progress=False)
    assert polished["steps"] == 6 and set(polished["step_phases"]) == {"gradient", "polish"}
    # Measured (reduced chi-squared): 113.3 after the gradient steps, 9.1 after the polish
    # (11.7 with the Hessian's products).
    assert polished["chi2_final"] < 0.5 * gradient["chi2_final"], (polished, gradient)


def test_a_non_empty_output_folder_is_never_overwritten_silently(obs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(job.OutputExistsError, match="--overwrite"):
        job.run(obs, out, run_config.load(FEW_STEPS), progress=False)
    with pytest.raises(FileNotFoundError, match="--resume"):
        job.run(obs, out, run_config.load(FEW_STEPS), resume=True, progress=False)
    job.run(obs, out, run_config.load(FEW_STEPS), overwrite=True, progress=False)
    # Overwriting replaces this program's outputs and leaves the user's own files alone.
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "summary.json").exists()


def test_unknown_key_suggests_the_closest_and_bad_values_name_the_key():
    with pytest.raises(ConfigError, match=r"did you mean 'fit\.learning_rate'"):
        run_config.load({"fit": {"learning_rat": 0.1}})
    with pytest.raises(ConfigError, match=r"'rfi\.quadrature_limit'"):
        run_config.load({"rfi": {"quadrature_limit": -1}})
    with pytest.raises(ConfigError, match=r"'gains\.kind'.*'unitary', 'gp'"):
        run_config.load({"gains": {"kind": "spline"}})


def test_shard_axis_precedence_command_line_then_config_then_environment(monkeypatch):
    config = run_config.load({"sharding": {"axis": "source"}})
    monkeypatch.setenv("TABASCAL_SHARD_AXIS", "baseline")
    assert run_config.shard_axis("none", config) == "none"
    assert run_config.shard_axis(None, config) == "source"
    assert run_config.shard_axis(None, run_config.load(None)) == "baseline"
    monkeypatch.setenv("TABASCAL_SHARD_AXIS", "antenna")
    with pytest.raises(ConfigError, match="none, source, baseline"):
        run_config.shard_axis(None, run_config.load(None))


def test_the_api_takes_the_shard_axis_from_the_config_unless_the_caller_names_one(obs, tmp_path):
    """``job.run`` without ``shard_axis`` resolves it as ``tabascal run`` does without its
    flag: the config's ``sharding.axis`` (it fitted on one device before, whatever the
    config said); a caller's axis wins."""
    config = run_config.load({**FEW_STEPS, "sharding": {"axis": "source"}})
    summary = job.run(obs, tmp_path / "config", config, progress=False)
    assert summary["shard_axis"] == "source"
    summary = job.run(obs, tmp_path / "caller", config, shard_axis="none", progress=False)
    assert summary["shard_axis"] == "none"
    blocks = run_config.load({**FEW_STEPS, "sharding": {"axis": "none", "row_blocks": 2}})
    with pytest.raises(ConfigError, match="needs the baseline axis"):
        job.run(obs, tmp_path / "blocks", blocks, progress=False)
    assert not (tmp_path / "blocks").exists()


def test_reuse_plan_precedence_command_line_then_config_and_baseline_axis_only():
    on = run_config.load({"sharding": {"reuse_plan": True}})
    off = run_config.load(None)
    assert run_config.reuse_plan(None, on, "baseline") is True
    assert run_config.reuse_plan(False, on, "baseline") is False  # --no-reuse-plan wins
    assert run_config.reuse_plan(True, off, "baseline") is True
    assert run_config.reuse_plan(None, off, "source") is False
    with pytest.raises(ConfigError, match=r"--reuse-plan .* shard axis is 'none'"):
        run_config.reuse_plan(True, off, "none")
    with pytest.raises(ConfigError, match=r"'sharding\.reuse_plan' .* shard axis is 'source'"):
        run_config.reuse_plan(None, on, "source")


def test_summary_names_the_collectives_of_the_step(obs, tmp_path):
    summary = job.run(obs, tmp_path / "out", run_config.load(FEW_STEPS), progress=False)
    # One device: nothing crosses devices, and the peak is that device's alone.
    assert summary["collectives"] == {} and summary["reuse_plan"] is False
    assert summary["n_devices"] == 1 and len(summary["per_device_peak_bytes"]) == 1
    assert summary["per_device_peak_bytes"][0] >= summary["step_memory"]["arguments"]


@pytest.mark.slow
def test_run_and_plan_commands(small_store, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(
        "fit:\n  steps: 2\n  second_phase_steps: 0\n  polish_steps: 0\noutput:\n  plots: false\n"
    )
    out = tmp_path / "out"
    assert main(["run", "-c", str(config), "--data", str(small_store), "-o", str(out), "-q"]) == 0
    assert "reduced chi-squared" in capsys.readouterr().out
    # A second run into the same folder is refused with a message, not a traceback.
    assert main(["run", "-c", str(config), "--data", str(small_store), "-o", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["plan", "-c", str(config), "--data", str(small_store)]) == 0
    assert "peak estimate per device" in capsys.readouterr().out
    # Blocks of rows need the baseline axis (on one device, a mesh of that device alone).
    assert main(["plan", "-c", str(config), "--data", str(small_store), "--row-blocks", "2"]) == 2
    assert "pass --shard-axis baseline or set sharding.axis" in capsys.readouterr().err
    on_baseline = tmp_path / "baseline.yaml"
    on_baseline.write_text(config.read_text() + "sharding:\n  axis: baseline\n  row_blocks: 2\n")
    assert main(["plan", "-c", str(on_baseline), "--data", str(small_store)]) == 0
    assert "shard axis baseline, 2 blocks of rows per device" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("fit:\n  stepz: 2\n")
    assert main(["run", "-c", str(bad), "--data", str(small_store), "-o", str(tmp_path / "b")]) == 2
    assert "did you mean 'fit.steps'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def no_satellites(tmp_path_factory):
    """A small observation with no satellite in view: the sky and the gains alone."""
    from tabascal.simulate import simulate, simulation_config

    path = tmp_path_factory.mktemp("nosat") / "obs.zarr"
    overrides = {"array": {"n_stations": 6}, "observation": {"n_time": 12, "n_freq": 2},
                 "satellites": {"count": 0}}  # fmt: skip
    simulate(simulation_config("demo", overrides), path)
    return read_observation(path)


def test_an_observation_without_satellites_is_fitted_with_no_rfi_term(no_satellites, tmp_path):
    obs = no_satellites
    assert obs.n_sat == 0 and not np.any(obs.truth.rfi_vis)
    config = run_config.load({"fit": {"steps": 60, "second_phase_steps": 0, "polish_steps": 0,
                                      "checkpoint_every": 0},
                              "output": {"plots": False}})  # fmt: skip
    summary = job.run(obs, tmp_path / "out", config, progress=False)
    assert summary["model"]["rfi_groups"] == {}
    results = zarr.open_group(str(tmp_path / "out" / "results.zarr"), mode="r")
    np.testing.assert_array_equal(results["rfi_vis"][...], 0)
    # The data are the sky plus noise; the sky model alone takes chi-squared down without
    # fitting the noise (measured 0.917 -> 0.907 after 60 steps from the data-based start; with
    # the former fixed 200 kHz bandwidth and one-cycle time floor the per-baseline sky took
    # noise in on a grid this small, 0.92 -> 0.73) and brings the sky closer to the truth than
    # the raw data are.
    assert 0.85 < summary["chi2_final"] < summary["chi2_init"]
    truth = summary["truth"]
    assert truth["sky"]["rmse"] < truth["raw_data"]["rmse"], truth


def test_an_observation_without_satellites_is_refused_on_a_sharded_axis(no_satellites, tmp_path):
    config = run_config.load({"fit": {"steps": 1, "second_phase_steps": 0, "polish_steps": 0}})
    with pytest.raises(
        ValueError, match=r"no satellites, and the source axis .*\(--shard-axis none\)"
    ):
        job.run(obs := no_satellites, tmp_path / "out", config, shard_axis="source")
    assert not (tmp_path / "out").exists() and obs.n_sat == 0


def test_guard_paths_refuse_with_what_to_do(tmp_path):
    """The refusals before any work: contradictory output flags, a mesh larger than the
    devices, an impossible device count."""
    from tabascal.cli.fit import use_devices
    from tabascal.parallel import baseline_axis

    with pytest.raises(ConfigError, match="--resume and --overwrite contradict"):
        job.prepare_output(tmp_path / "out", resume=True, overwrite=True)
    assert not (tmp_path / "out").exists()  # nothing made
    too_many = jax.device_count() + 1
    with pytest.raises(ValueError, match=f"{too_many} devices asked for.*device_count={too_many}"):
        baseline_axis.make_mesh(too_many)
    assert use_devices(0) == "--devices 0: the device count must be at least 1"


@pytest.mark.slow
def test_run_and_plan_report_whether_the_phase_moments_are_kept(small_store, tmp_path, capsys):
    """The analytic group's phase moments kept (the default, within the budget) and formed at
    every step give the same fit, and summary.json and ``tabascal plan`` say which was done.

    In float64: in float32 the sky's gradient at the fringe start is rounding (6.5e-7 against
    the gains' 14) and AdaBelief's first steps follow its sign, so two sums of the same terms
    in another order (the moments formed inside the step's fusion or read) part by 0.5% in
    chi-squared after 3 steps; tests/test_phase_cache.py compares the loss and gradient.
    Formed at every fine channel (``rfi.channel_terms: 0``), as kept moments are: the series
    across a channel is held to the tolerance, not to float64's rounding."""
    summaries = {}
    for cache in ("auto", "never"):
        config = tmp_path / f"{cache}.yaml"
        config.write_text(
            f"precision: double\nfit:\n  steps: 3\n  second_phase_steps: 0\n  polish_steps: 0\n"
            f"output:\n  plots: false\n"
            f"rfi:\n  quadrature_limit: 0\n  phase_cache: {cache}\n  channel_terms: 0\n"
        )
        out = tmp_path / cache
        argv = ["-c", str(config), "--data", str(small_store)]
        assert main(["run", *argv, "-o", str(out), "-q"]) == 0
        summaries[cache] = json.loads((out / "summary.json").read_text())
        (group,) = summaries[cache]["model"]["rfi_groups"]  # one analytic group
        assert group.startswith("analytic"), group
        capsys.readouterr()
        assert main(["plan", *argv]) == 0
        printed = capsys.readouterr().out.splitlines()
        (line,) = [x for x in printed if "phase moments" in x]
        verb = "kept" if cache == "auto" else "formed every step"
        assert f"{group} {verb}" in line and f"phase_cache {cache}" in line, line
        # navigation satellites: one piece and no cubic terms (rfi.analytic_options auto),
        # said by both
        options = summaries[cache]["model"]["rfi_analytic_options"][group]
        assert (options["segments"], options["cubic_terms"]) == (1, 0)
        (line,) = [x for x in printed if f"{group} options" in x]
        assert "1 piece, 6 curvature terms, 0 cubic terms" in line, line
    kept, formed = (summaries[c]["model"]["rfi_phase_cache"] for c in ("auto", "never"))
    assert kept["groups"][group]["kept"] and kept["kept_mib_per_device"] > 0
    assert not formed["groups"][group]["kept"] and formed["kept_mib_per_device"] == 0
    a, b = summaries["auto"]["chi2_final"], summaries["never"]["chi2_final"]
    print(f"chi2_final kept {a!r}, formed {b!r}")
    # float64, 3 steps: measured 3.3e-12 apart.
    assert a == pytest.approx(b, rel=1e-9)


@pytest.mark.slow
def test_a_fit_whose_polish_would_not_fit_a_device_is_refused_before_its_first_step(
    obs, tmp_path, monkeypatch
):
    """Both phases' programs are compiled before the first step; with a device's memory
    between what the gradient phases' step needs and what the polish's does (read from an
    unconstrained run's summary), the fit is refused naming the polish, and no step is taken
    (no checkpoint is written)."""
    from tabascal.planning import memory

    settings = {
        "fit": {"steps": 2, "second_phase_steps": 0, "polish": "trust-region",
                "polish_steps": 1, "polish_cg_steps": 3},
        "output": {"plots": False},
    }  # fmt: skip
    summary = job.run(obs, tmp_path / "free", run_config.load(settings), progress=False)
    need = {
        phase: figures["memory"]["arguments"]
        + figures["memory"]["outputs"]
        + figures["memory"]["temporaries"]
        - figures["memory"]["aliased"]
        for phase, figures in summary["step_phases"].items()
    }
    assert need["gradient"] < need["polish"], need
    capacity = (need["gradient"] + need["polish"]) // 2
    monkeypatch.setattr(memory, "device_memory_bytes", lambda device: capacity)
    out = tmp_path / "small"
    with pytest.raises(memory.DeviceMemoryError, match="the fit's polish step needs") as caught:
        job.run(obs, out, run_config.load(settings), progress=False)
    print(caught.value)
    assert not (out / job.CHECKPOINTS).exists() or not any((out / job.CHECKPOINTS).iterdir())


def test_programs_that_fit_pass_and_one_that_does_not_is_named():
    from tabascal.planning import memory

    stage = memory.StageMemory(arguments=100, outputs=30, temporaries=50, aliased=30, peak=0)
    memory.check_programs_fit({"gradient": stage}, None)  # memory not known: nothing refused
    memory.check_programs_fit({"gradient": stage}, 150)  # exactly what it needs
    with pytest.raises(memory.DeviceMemoryError, match="the fit's gradient step needs"):
        memory.check_programs_fit({"gradient": stage}, 149)
