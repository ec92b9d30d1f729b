"""``tabascal run``: fit the model to an observation and write the results.

The output folder holds ``results.zarr`` (fitted sky and RFI visibilities, model, residual
data - model and gains, in the data's baseline order), ``summary.json``, PNG plots, the resolved
``config.yaml`` and ``checkpoints/``. Every file is written under a temporary name and renamed
into place, so an interrupted run never leaves a half-written result under a final name.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from functools import partial
from pathlib import Path

import jax
import numpy as np

from tabascal import fit, memory, plots, run_config, sharding, source_sharding
from tabascal.config import dump_yaml
from tabascal.model import gains, joint, likelihood

logger = logging.getLogger(__name__)

RESULTS = "results.zarr"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
OUTPUT_NAMES = (RESULTS, SUMMARY, "config.yaml", "loss.png", "baselines.png", CHECKPOINTS)


class OutputExistsError(FileExistsError):
    """The output folder holds earlier results and neither resume nor overwrite was asked."""


def prepare_output(out_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Create ``out_dir``, refusing a non-empty one unless resuming or overwriting."""
    out_dir = Path(out_dir)
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other; choose one")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir} exists and is not a folder")
    if resume:
        if not (out_dir / CHECKPOINTS / fit.CHECKPOINT_NAME).is_file():
            raise FileNotFoundError(
                f"--resume: {out_dir / CHECKPOINTS / fit.CHECKPOINT_NAME} does not exist; "
                "run without --resume to start a new fit"
            )
        return
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise OutputExistsError(
                f"{out_dir} is not empty; pass --overwrite to replace its results or --resume "
                "to continue its fit"
            )
        for name in OUTPUT_NAMES:
            path = out_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    partial_path = path.with_name(path.name + ".partial")
    partial_path.write_text(text)
    os.replace(partial_path, path)


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean(np.abs(np.asarray(a) - np.asarray(b)) ** 2)))


def truth_metrics(prediction: joint.Prediction, obs, noise: float) -> dict:
    """RMSE and RMSE/noise against the store's truth.

    ``sky``: the fitted sky against the true sky. ``rfi``: the RFI as it appears in the data,
    g[a1] V_rfi conj(g[a2]), against the same from the truth (the product is what the data
    constrain: a gain error is indistinguishable from an RFI amplitude error). ``gains``: the
    fitted gains against the true ones. ``raw_data``: the data against the true sky, the error
    of doing nothing.
    """
    t = obs.truth
    a1, a2 = np.asarray(obs.a1), np.asarray(obs.a2)
    fitted_rfi = gains.apply(prediction.rfi, prediction.gains, a1, a2)
    true_rfi = gains.apply(t.rfi_vis, t.gains, a1, a2)
    pairs = {
        "sky": (prediction.sky, t.sky_vis),
        "rfi": (fitted_rfi, true_rfi),
        "gains": (prediction.gains, t.gains),
        "raw_data": (obs.vis, t.sky_vis),
    }
    out = {}
    for name, (fitted, true) in pairs.items():
        value = _rmse(fitted, true)
        out[name] = {"rmse": value}
        if name != "gains":
            out[name]["rmse_over_noise"] = value / noise
    return out


def write_results(path: Path, prediction: joint.Prediction, data: joint.Data, obs) -> None:
    """results.zarr: sky_vis, rfi_vis, model_vis, residual (data - model; 0 where flagged),
    each (n_bl, n_freq, n_time); gains (n_ant, n_freq, n_time); a1, a2; written atomically."""
    import zarr

    path = Path(path)
    partial_path = path.with_name("." + path.name + ".partial")
    if partial_path.exists():
        shutil.rmtree(partial_path)
    group = zarr.open_group(str(partial_path), mode="w")
    residual = jax.numpy.where(data.flags, 0, data.vis - prediction.model)
    arrays = {
        "sky_vis": prediction.sky,
        "rfi_vis": prediction.rfi,
        "model_vis": prediction.model,
        "residual": residual,
        "gains": prediction.gains,
        "flags": data.flags,
        "a1": np.asarray(obs.a1, np.int32),
        "a2": np.asarray(obs.a2, np.int32),
        "times_s": np.asarray(obs.times_s),
        "freqs_hz": np.asarray(obs.freqs_hz),
    }
    for name, value in arrays.items():
        value = np.asarray(value)
        group.create_array(name, shape=value.shape, dtype=value.dtype)[...] = value
    group.attrs["format"] = "tabascal.results"
    group.attrs["format_version"] = 1
    # A directory cannot be renamed over a non-empty one: move the old results aside first,
    # so that at every moment a complete results.zarr (old or new) is in place or being swapped.
    old = path.with_name("." + path.name + ".old")
    if path.exists():
        os.replace(path, old)
    os.replace(partial_path, path)
    shutil.rmtree(old, ignore_errors=True)


def _plot(out_dir: Path, history: fit.FitHistory, prediction, obs, config: dict) -> None:
    plots.plot_loss(history.loss, history.chi2, out_dir / "loss.png")
    lengths = np.linalg.norm(obs.ant_itrf[obs.a1] - obs.ant_itrf[obs.a2], axis=1)
    n_show = min(config["output"]["plot_baselines"], len(lengths))
    rows = np.argsort(lengths)[np.linspace(0, len(lengths) - 1, n_show).astype(int)]
    model = np.asarray(prediction.model)[rows, 0]
    data = np.asarray(obs.vis)[rows, 0]
    labels = [
        f"baseline {obs.a1[r]}-{obs.a2[r]} ({lengths[r]:.0f} m), {obs.freqs_hz[0] / 1e6:.2f} MHz"
        for r in rows
    ]
    plots.plot_baselines(obs.times_s, data, model, data - model, labels, out_dir / "baselines.png")


def _fit_route(model: joint.Model, shard_axis: str, reuse_plan: bool):
    """(params, inputs, loss_fn, predict_fn, unpad, info, devices) of the chosen route.

    unpad maps a prediction to the data's rows on the host; devices are those the step runs
    on (one for the unsharded route, the mesh for the others).
    """
    if shard_axis == "none":
        return (
            model.params, (model.constants, model.data), partial(joint.loss, spec=model.spec),
            partial(joint.predict, spec=model.spec), lambda p: jax.tree.map(np.asarray, p),
            model.info, [jax.devices()[0]],
        )  # fmt: skip
    route = {"baseline": sharding, "source": source_sharding}[shard_axis]
    mesh = route.make_mesh()
    if shard_axis == "baseline":
        sharded = sharding.shard_model(model, mesh, reuse=reuse_plan)
    else:
        sharded = route.shard_model(model, mesh)
    spec = sharded.spec
    return (
        sharded.params, (sharded.constants, sharded.data), partial(route.loss, spec=spec),
        partial(route.predict, spec=spec), partial(route.unpad, spec=spec), sharded.info,
        list(mesh.devices.flat),
    )  # fmt: skip


def run(
    obs,
    out_dir: Path,
    config: dict,
    *,
    resume: bool = False,
    overwrite: bool = False,
    shard_axis: str = "none",
    reuse_plan: bool = False,
    progress: bool = True,
) -> dict:
    """Fit ``obs`` (a ``tabascal.store.Observation``) with the validated ``config``; write the
    outputs to ``out_dir`` and return the summary.

    shard_axis: none, baseline or source (``run_config.shard_axis``); reuse_plan: permute the
    baselines by the antenna-reuse plan (baseline axis only, ``run_config.reuse_plan``).
    """
    if shard_axis not in run_config.SHARD_AXES:
        raise ValueError(f"shard axis {shard_axis!r} is not known; use none, baseline or source")
    if reuse_plan and shard_axis != "baseline":
        raise ValueError(
            f"the antenna-reuse plan needs the baseline axis, not {shard_axis!r}; pass "
            "--shard-axis baseline or drop --reuse-plan"
        )
    out_dir = Path(out_dir)
    prepare_output(out_dir, resume=resume, overwrite=overwrite)
    fit_cfg = run_config.fit_config(config)
    model = joint.build(obs, run_config.model_config(config), init=config["fit"]["init"],
                        seed=config["fit"]["seed"])  # fmt: skip
    _write_atomically(out_dir / "config.yaml", dump_yaml(config))
    params, inputs, loss_fn, predict_fn, unpad, info, devices = _fit_route(
        model, shard_axis, reuse_plan
    )
    # The data stay on the host for the final figures; a sharded route drops the unsharded
    # model's device arrays, so that device 0 holds only its own block during the fit.
    data = jax.tree.map(np.asarray, model.data)
    del model
    optimizer = fit.make_optimizer(fit_cfg)
    state = fit.init_state(params, optimizer)
    history = None
    if resume:
        template = state
        state, history = fit.load_checkpoint(out_dir / CHECKPOINTS, state)
        if shard_axis != "none":
            state = jax.device_put(state, jax.tree.map(lambda x: x.sharding, template))
        logger.info("resuming at step %d", int(state.step))
    compiled = fit.make_step(loss_fn, optimizer).lower(state, inputs).compile()
    stages = [memory.stage_memory(compiled)]
    start = time.perf_counter()
    state, history = fit.run(
        compiled, state, inputs, fit_cfg, history=history,
        checkpoint_dir=out_dir / CHECKPOINTS, progress=progress,
    )  # fmt: skip
    seconds_fit = time.perf_counter() - start
    per_device_peak = memory.peak_bytes_per_device(stages, devices)
    # Each step reports the loss at the parameters it starts from, so the first step's figure
    # (kept in the history, across resumes) is the initial chi-squared; only a fit of zero
    # steps needs its own evaluation.
    if len(history.chi2):
        chi2_init = float(history.chi2[0])
    else:
        chi2_init = float(jax.jit(loss_fn)(params, inputs)[1]["chi2"])

    # Padded rows dropped and any permutation undone: the rows are in the data's order.
    prediction = unpad(jax.jit(predict_fn)(state.params, inputs[0]))
    chi2_final = float(
        likelihood.reduced_chi2(prediction.model, data.vis, data.flags, data.noise,
                                data.n_points)
    )  # fmt: skip
    summary = {
        "chi2_init": chi2_init,
        "chi2_final": chi2_final,
        "steps": int(state.step),
        "seconds_fit": seconds_fit,
        "n_devices": len(devices),
        "shard_axis": shard_axis,
        "reuse_plan": reuse_plan,
        "per_device_peak_bytes": per_device_peak,
        "step_memory": stages[0].as_dict(),
        "collectives": memory.count_collectives(compiled),
        "model": info,
    }
    if obs.truth is not None:
        summary["truth"] = truth_metrics(prediction, obs, float(np.mean(data.noise)))
    write_results(out_dir / RESULTS, prediction, data, obs)
    if config["output"]["plots"]:
        _plot(out_dir, history, prediction, obs, config)
    _write_atomically(out_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return summary
